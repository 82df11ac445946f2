//! The idempotent endpoint of the docs (examples/idempotent_hyper.rs) over
//! real HTTP, directly and through PgBouncer: a retry is replayed with the
//! same status and bytes; a concurrent duplicate gets 409 + Retry-After; the
//! key with another body 422; bad requests 400 or 413 and write nothing; a
//! server SIGKILLed after claiming leaves the key to a retry after the
//! recovery window, which charges once; a client that hangs up before the
//! commit, or whose connection drops after it, retries and gets the one
//! charge's response.  One test: its steps share servers and must not
//! overlap (the pool has two server connections).

mod common;
use common::*;
use hyper::{Body, Client, Request};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use tokio::io::AsyncWriteExt;

/// A server process and the address it listens on.
struct Server {
    addr: String,
    procs: Children,
}

fn server(args: &[&str]) -> Server {
    let mut child = Command::new(example("idempotent_hyper"))
        .args(["--url", &url(), "--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("examples/idempotent_hyper");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let addr = line.trim().strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("the server said {:?}", line)).to_string();
    Server { addr, procs: Children(vec![child]) }
}

struct Reply {
    status: u16,
    retry_after: Option<String>,
    replayed: bool,
    body: String,
}

async fn post(addr: &str, key: Option<&str>, body: &str) -> Reply {
    let mut r = Request::post(format!("http://{}/charges", addr));
    if let Some(k) = key {
        r = r.header("Idempotency-Key", k);
    }
    let resp = Client::new().request(r.body(Body::from(body.to_string())).unwrap()).await
        .expect("an answer");
    let header = |n: &str| resp.headers().get(n).map(|v| v.to_str().unwrap().to_string());
    let (status, retry_after) = (resp.status().as_u16(), header("Retry-After"));
    let replayed = header("Idempotent-Replayed").as_deref() == Some("true");
    let body = hyper::body::to_bytes(resp.into_body()).await.unwrap();
    Reply { status, retry_after, replayed, body: String::from_utf8(body.to_vec()).unwrap() }
}

/// Sends a POST on a raw connection and returns it unread.
async fn send_raw(s: &Server, key: &str, body: &str) -> tokio::net::TcpStream {
    let mut tcp = tokio::net::TcpStream::connect(&s.addr).await.unwrap();
    let req = format!("POST /charges HTTP/1.1\r\nHost: {}\r\nIdempotency-Key: {}\r\n\
                       Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{}",
                      s.addr, key, body.len(), body);
    tcp.write_all(req.as_bytes()).await.unwrap();
    tcp
}

async fn charges(check: &tokio_postgres::Client, key: &str) -> String {
    one(check, &format!("SELECT count(*) FROM charges WHERE idempotency_key = '{}'", key)).await
}

async fn in_progress(check: &tokio_postgres::Client, key: &str) -> bool {
    let q = format!("SELECT state FROM skiplock.idempotency_keys WHERE key = '{}'", key);
    wait_for(check, &q, "in_progress", 10).await
}

const CHARGE: &str = r#"{"amount": 1250, "currency": "usd"}"#;

/// The first answer, then its replay: the same status and bytes.
async fn replayed(check: &tokio_postgres::Client, fast: &Server) {
    let first = post(&fast.addr, Some("h.replay"), CHARGE).await;
    assert_eq!((first.status, first.replayed), (201, false), "{}", first.body);
    assert!(first.body.contains("\"amount\": 1250"), "{}", first.body);
    let again = post(&fast.addr, Some("h.replay"), CHARGE).await;
    assert_eq!((again.status, again.replayed, &again.body), (201, true, &first.body));
    let other = post(&fast.addr, Some("h.replay"), r#"{"amount": 999, "currency": "usd"}"#).await;
    assert_eq!(other.status, 422, "{}", other.body);
    assert_eq!(charges(check, "h.replay").await, "1");
}

async fn bad_requests(check: &tokio_postgres::Client, fast: &Server) {
    let long = "h.bad.".to_string() + &"k".repeat(250);
    let big = format!(r#"{{"amount": 1, "currency": "usd", "pad": "{}"}}"#, "p".repeat(70_000));
    for (key, body, want) in [(None, CHARGE, 400), (Some(""), CHARGE, 400),
                              (Some(long.as_str()), CHARGE, 400),
                              (Some("h.bad.json"), "{\"amount\": -1}", 400),
                              (Some("h.bad.big"), big.as_str(), 413)] {
        let r = post(&fast.addr, key, body).await;
        assert_eq!(r.status, want, "{:?}: {}", key, r.body);
    }
    assert_eq!(one(check, "SELECT count(*) FROM skiplock.idempotency_keys \
                           WHERE key LIKE 'h.bad%'").await, "0");
    assert_eq!(one(check, "SELECT count(*) FROM charges WHERE idempotency_key LIKE 'h.bad%' \
                           OR idempotency_key = ''").await, "0");
}

/// A duplicate while the first holds the key: 409 + Retry-After.
async fn concurrent(check: &tokio_postgres::Client, fast: &Server, slow: &Server) {
    let first = {
        let addr = slow.addr.clone();
        tokio::spawn(async move { post(&addr, Some("h.conc"), CHARGE).await })
    };
    assert!(in_progress(check, "h.conc").await);
    let dup = post(&fast.addr, Some("h.conc"), CHARGE).await;
    assert_eq!((dup.status, dup.retry_after.as_deref()), (409, Some("1")), "{}", dup.body);
    let first = first.await.unwrap();
    assert_eq!(first.status, 201, "{}", first.body);
    let again = post(&fast.addr, Some("h.conc"), CHARGE).await;
    assert_eq!((again.status, again.replayed, &again.body), (201, true, &first.body));
    assert_eq!(charges(check, "h.conc").await, "1");
}

/// A server killed after claiming: 409 until the recovery window ends,
/// then a retry takes the claim over and charges once.
async fn crashed_holder(check: &tokio_postgres::Client, fast: &Server) {
    let mut doomed = server(&["--pause-after-claim-ms", "60000", "--recovery-ms", "1500"]);
    let _hung = send_raw(&doomed, "h.crash", CHARGE).await;
    assert!(in_progress(check, "h.crash").await);
    let pid = doomed.procs.0[0].id();
    doomed.procs.kill(pid);
    let during = post(&fast.addr, Some("h.crash"), CHARGE).await;
    assert_eq!(during.status, 409, "within the window: {}", during.body);
    let over = "SELECT locked_until < clock_timestamp() FROM skiplock.idempotency_keys \
                WHERE key = 'h.crash'";
    assert!(wait_for(check, over, "t", 5).await);
    let after = post(&fast.addr, Some("h.crash"), CHARGE).await;
    assert_eq!((after.status, after.replayed), (201, false), "taken over: {}", after.body);
    let again = post(&fast.addr, Some("h.crash"), CHARGE).await;
    assert_eq!((again.status, again.replayed, &again.body), (201, true, &after.body));
    assert_eq!(charges(check, "h.crash").await, "1");
    assert_eq!(one(check, "SELECT claims FROM skiplock.idempotency_keys WHERE key = 'h.crash'")
                   .await, "2");
}

/// A client gone before the commit, or whose answer was lost after it:
/// the retry gets the one charge's response.
async fn dropped_connections(check: &tokio_postgres::Client, fast: &Server, slow: &Server) {
    for (key, s) in [("h.hangup", slow), ("h.lost", fast)] {
        let tcp = send_raw(s, key, CHARGE).await;
        let state = format!("SELECT state FROM skiplock.idempotency_keys WHERE key = '{}'", key);
        // h.hangup: gone before the commit, the request goes on without its
        // client; h.lost: the answer is lost after the commit.
        let when = if key == "h.hangup" { "in_progress" } else { "completed" };
        assert!(wait_for(check, &state, when, 10).await, "{}", key);
        drop(tcp);
        assert!(wait_for(check, &state, "completed", 10).await, "{}", key);
        let id = one(check, &format!("SELECT id FROM charges WHERE idempotency_key = '{}'", key))
            .await;
        let retry = post(&fast.addr, Some(key), CHARGE).await;
        assert_eq!((retry.status, retry.replayed), (201, true), "{}: {}", key, retry.body);
        assert!(retry.body.starts_with(&format!("{{\"id\": {},", id)), "{}", retry.body);
        assert_eq!(charges(check, key).await, "1", "{}", key);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idempotent_endpoint_over_http() {
    let check = connect(&direct_url()).await;
    let fast = server(&[]);
    let slow = server(&["--pause-after-claim-ms", "1500"]);
    replayed(&check, &fast).await;
    bad_requests(&check, &fast).await;
    concurrent(&check, &fast, &slow).await;
    crashed_holder(&check, &fast).await;
    dropped_connections(&check, &fast, &slow).await;
    assert_eq!(one(&check, "SELECT coalesce(string_agg(key, ','), 'none') \
                            FROM skiplock.idempotency_keys WHERE state = 'in_progress' \
                            AND key LIKE 'h.%'").await,
               "none", "claims left behind");
    assert_no_idle_in_transaction(&check).await;
}
