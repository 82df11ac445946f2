//! An idempotent HTTP endpoint on hyper 0.14: POST /charges with an
//! `Idempotency-Key` header and `{"amount": 1250, "currency": "usd"}` writes
//! one row to `charges`, in the same transaction as the stored response.
//!
//!   idempotent_hyper --url URL [--listen 127.0.0.1:8080] [--recovery-ms 60000]
//!                    [--pause-after-claim-ms 0]
//!
//!   201  the first time, and the same status and bytes on every retry
//!        (with `Idempotent-Replayed: true`)
//!   409  another attempt with the key is in progress (`Retry-After`)
//!   422  the key was used for another request (method, path or body)
//!   400  no key, an empty key or one over 255 bytes, or not a charge
//!   413  a body over 64 KiB
//!   503  the database failed or the outcome is unknown: retry (`Retry-After`)
//!
//! Prints `listening on http://ADDR` once it accepts requests (port 0 picks
//! a free one); SIGTERM or SIGINT stops it.  `--pause-after-claim-ms`
//! sleeps after claiming, so a test can kill the server there.

use hyper::body::HttpBody;
use hyper::service::{make_service_fn, service_fn};
use hyper::{Body, Method, Request, Response, Server};
use serde_json::{json, Value};
use skiplock::{idempotent, sql, Error, Fingerprint, IdemOptions, Idempotent};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::{NoTls, SimpleQueryMessage, Transaction};

const BODY_MAX: usize = 64 * 1024;

struct Config {
    url: String,
    listen: SocketAddr,
    opts: IdemOptions,
    pause: Duration,
}

fn config() -> Result<Config, String> {
    let mut c = Config { url: std::env::var("DATABASE_URL").unwrap_or_default(),
                         listen: ([127, 0, 0, 1], 8080).into(), opts: IdemOptions::default(),
                         pause: Duration::ZERO };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{} needs a value", flag))?;
        let ms = || v.parse().map(Duration::from_millis).map_err(|e| format!("{}: {}", flag, e));
        match flag.as_str() {
            "--url" => c.url = v.clone(),
            "--listen" => c.listen = v.parse().map_err(|e| format!("--listen: {}", e))?,
            "--recovery-ms" => c.opts.recovery = ms()?,
            "--pause-after-claim-ms" => c.pause = ms()?,
            _ => return Err(format!("unknown option {}", flag)),
        }
    }
    Ok(c)
}

fn reply(status: u16, body: String, headers: &[(&str, String)]) -> Response<Body> {
    let mut r = Response::builder().status(status).header("Content-Type", "application/json");
    for (name, value) in headers {
        r = r.header(*name, value.as_str());
    }
    r.body(Body::from(body)).expect("a valid response")
}

fn error(status: u16, message: &str) -> Response<Body> {
    let retry = if status == 503 { vec![("Retry-After", "1".to_string())] } else { vec![] };
    reply(status, json!({ "error": message }).to_string(), &retry)
}

/// The request's body, up to `BODY_MAX` bytes.
async fn read_body(mut body: Body) -> Result<Vec<u8>, Response<Body>> {
    let mut out = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| error(400, &e.to_string()))?;
        if out.len() + chunk.len() > BODY_MAX {
            return Err(error(413, "the body is over 64 KiB"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// `{"amount": positive integer, "currency": three lower-case letters}`.
fn parse_charge(body: &[u8]) -> Option<(i64, String)> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let amount = v["amount"].as_i64().filter(|a| *a > 0)?;
    let currency = v["currency"].as_str().filter(|c| {
        c.len() == 3 && c.bytes().all(|b| b.is_ascii_lowercase())
    })?;
    Some((amount, currency.to_string()))
}

/// The effect, in the transaction that also stores the response.
async fn insert_charge(tx: &Transaction<'_>, key: &str, amount: i64, currency: &str)
                       -> Result<(u16, Value), Error> {
    let q = format!("INSERT INTO charges (idempotency_key, amount, currency) VALUES ({}, {}, {}) \
                     RETURNING jsonb_build_object('id', id, 'amount', amount, \
                     'currency', currency)::text", sql::text(key)?, amount, sql::text(currency)?);
    for m in tx.simple_query(&q).await? {
        if let SimpleQueryMessage::Row(r) = m {
            let body = serde_json::from_str(r.get(0).unwrap_or("null"))
                .map_err(|e| Error::Permanent { sqlstate: None, message: e.to_string() })?;
            return Ok((201, body));
        }
    }
    Err(Error::Permanent { sqlstate: None, message: "the insert returned no row".into() })
}

/// Claims the key, charges once, stores the response: see `idempotent`.
async fn charge(cfg: Arc<Config>, key: String, fp: Fingerprint, amount: i64, currency: String)
                -> Result<Idempotent, Error> {
    let (mut db, conn) = tokio_postgres::connect(&cfg.url, NoTls).await?; // or your pool
    tokio::spawn(conn);
    let (pause, k) = (cfg.pause, key.clone());
    idempotent(&mut db, &k, fp, &cfg.opts, move |tx| {
        Box::pin(async move {
            tokio::time::sleep(pause).await;
            insert_charge(tx, &key, amount, &currency).await
        })
    })
    .await
}

fn answer(outcome: Result<Idempotent, Error>) -> Response<Body> {
    match outcome {
        Ok(Idempotent::Ran(r)) => reply(r.status, r.body, &[]),
        Ok(Idempotent::Replayed(r)) => {
            reply(r.status, r.body, &[("Idempotent-Replayed", "true".to_string())])
        }
        Ok(Idempotent::InProgress { retry_after }) => {
            let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
            reply(409, json!({ "error": "a request with this key is in progress" }).to_string(),
                  &[("Retry-After", secs.max(1).to_string())])
        }
        Ok(Idempotent::Conflict) => {
            error(422, "the idempotency key was used for a different request")
        }
        Err(Error::Invalid(m)) => error(400, &m),
        Err(e) => error(503, &e.to_string()),
    }
}

async fn handle(cfg: Arc<Config>, req: Request<Body>) -> Result<Response<Body>, Infallible> {
    if req.method() != Method::POST || req.uri().path() != "/charges" {
        return Ok(error(404, "POST /charges"));
    }
    let key = req.headers().get("Idempotency-Key").and_then(|v| v.to_str().ok())
        .map(str::to_string).filter(|k| !k.is_empty() && k.len() <= 255);
    let key = match key {
        Some(k) => k,
        None => return Ok(error(400, "an Idempotency-Key header of 1 to 255 bytes is required")),
    };
    let body = match read_body(req.into_body()).await {
        Ok(b) => b,
        Err(r) => return Ok(r),
    };
    let (amount, currency) = match parse_charge(&body) {
        Some(c) => c,
        None => return Ok(error(400, "the body must be {\"amount\": N > 0, \"currency\": \"usd\"}")),
    };
    let fp = Fingerprint::request("POST", "/charges", &body);
    // A task of its own: a client that hangs up does not cut the claim short.
    let outcome = tokio::spawn(charge(cfg, key, fp, amount, currency)).await;
    Ok(match outcome {
        Ok(o) => answer(o),
        Err(e) => error(503, &e.to_string()),
    })
}

async fn stopped() {
    use tokio::signal::unix::{signal, SignalKind};
    let (mut term, mut int) = match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(t), Ok(i)) => (t, i),
        _ => return std::future::pending().await,
    };
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let cfg = Arc::new(config()?);
    let (db, conn) = tokio_postgres::connect(&cfg.url, NoTls).await?;
    tokio::spawn(conn);
    db.batch_execute("CREATE TABLE IF NOT EXISTS charges (id bigserial PRIMARY KEY, \
                      idempotency_key text NOT NULL, amount bigint NOT NULL, \
                      currency text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())")
        .await?;
    drop(db);
    let c = cfg.clone();
    let make = make_service_fn(move |_| {
        let c = c.clone();
        async move { Ok::<_, Infallible>(service_fn(move |req| handle(c.clone(), req))) }
    });
    let server = Server::try_bind(&cfg.listen)?.serve(make);
    println!("listening on http://{}", server.local_addr());
    server.with_graceful_shutdown(stopped()).await?;
    Ok(())
}
