//! Idempotency keys against the real database, directly and through
//! PgBouncer in transaction mode: the effect runs once and its response is
//! replayed byte for byte; a concurrent duplicate is in progress; another
//! request under the key is a conflict; a failed effect writes nothing and
//! frees the key; a holder taken over cannot complete; bad input is refused
//! before anything is written.

mod common;
use common::*;
use serde_json::{json, Value};
use skiplock::idem::{claim, Claim};
use skiplock::{idempotent, Error, Fingerprint, IdemOptions, Idempotent, StoredResponse};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::Transaction;

async fn create_table(check: &tokio_postgres::Client, t: &str) {
    one(check, &format!("CREATE TABLE IF NOT EXISTS public.{} (key text NOT NULL, n int)", t)).await;
}

/// Inserts one row for `key` into `t` and answers 201 with its count.
async fn effect(tx: &Transaction<'_>, t: &str, key: &str) -> Result<(u16, Value), Error> {
    tx.batch_execute(&format!("INSERT INTO public.{} (key) VALUES ('{}')", t, key)).await?;
    Ok((201, json!({"key": key, "nested": {"b": [1, 2], "a": "x"}})))
}

async fn rows(check: &tokio_postgres::Client, t: &str, key: &str) -> String {
    one(check, &format!("SELECT count(*) FROM public.{} WHERE key = '{}'", t, key)).await
}

async fn key_rows(check: &tokio_postgres::Client, key: &str) -> String {
    one(check, &format!("SELECT count(*) FROM skiplock.idempotency_keys WHERE key = '{}'", key))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_once_and_replays_the_same_bytes() {
    let check = connect(&direct_url()).await;
    create_table(&check, "t_idem_once").await;
    let mut c = connect(&url()).await;
    let runs = Arc::new(AtomicU32::new(0));
    let o = IdemOptions::default();
    let mut answers = vec![];
    for _ in 0..3 {
        let n = runs.clone();
        let r = idempotent(&mut c, "t.once", "fp-1", &o, move |tx| {
            Box::pin(async move {
                n.fetch_add(1, Ordering::SeqCst);
                effect(tx, "t_idem_once", "t.once").await
            })
        }).await.unwrap();
        answers.push(r);
    }
    let body = "{\"key\": \"t.once\", \"nested\": {\"a\": \"x\", \"b\": [1, 2]}}".to_string();
    let stored = StoredResponse { status: 201, body };
    assert_eq!(answers[0], Idempotent::Ran(stored.clone()), "as PostgreSQL prints the jsonb");
    assert_eq!(answers[1], Idempotent::Replayed(stored.clone()));
    assert_eq!(answers[2], Idempotent::Replayed(stored));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the effect ran once");
    let other = idempotent(&mut c, "t.once", "fp-2", &o, |tx| {
        Box::pin(effect(tx, "t_idem_once", "t.once"))
    }).await.unwrap();
    assert_eq!(other, Idempotent::Conflict);
    assert_eq!(rows(&check, "t_idem_once", "t.once").await, "1");
    assert_no_idle_in_transaction(&check).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_duplicate_is_in_progress() {
    let check = connect(&direct_url()).await;
    create_table(&check, "t_idem_conc").await;
    let o = IdemOptions { retry_after: Duration::from_secs(2), ..Default::default() };
    let slow = {
        let o = o.clone();
        tokio::spawn(async move {
            let mut c = connect(&url()).await;
            idempotent(&mut c, "t.conc", "fp", &o, |tx| Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(600)).await;
                effect(tx, "t_idem_conc", "t.conc").await
            })).await
        })
    };
    assert!(wait_for(&check, "SELECT state FROM skiplock.idempotency_keys WHERE key = 't.conc'",
                     "in_progress", 5).await);
    let mut c = connect(&url()).await;
    let dup = idempotent(&mut c, "t.conc", "fp", &o, |tx| {
        Box::pin(effect(tx, "t_idem_conc", "t.conc"))
    }).await.unwrap();
    assert_eq!(dup, Idempotent::InProgress { retry_after: Duration::from_secs(2) });
    let first = slow.await.unwrap().unwrap();
    let again = idempotent(&mut c, "t.conc", "fp", &o, |tx| {
        Box::pin(effect(tx, "t_idem_conc", "t.conc"))
    }).await.unwrap();
    match (first, again) {
        (Idempotent::Ran(a), Idempotent::Replayed(b)) => assert_eq!(a, b),
        other => panic!("{:?}", other),
    }
    assert_eq!(rows(&check, "t_idem_conc", "t.conc").await, "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_effect_writes_nothing_and_frees_the_key() {
    let check = connect(&direct_url()).await;
    create_table(&check, "t_idem_fail").await;
    let mut c = connect(&url()).await;
    let o = IdemOptions::default();
    let r = idempotent(&mut c, "t.fail", "fp", &o, |tx| Box::pin(async move {
        effect(tx, "t_idem_fail", "t.fail").await?;
        Err(Error::Permanent { sqlstate: None, message: "the card was declined".into() })
    })).await;
    assert!(matches!(r, Err(Error::Permanent { .. })), "{:?}", r);
    assert_eq!(rows(&check, "t_idem_fail", "t.fail").await, "0", "rolled back");
    assert_eq!(key_rows(&check, "t.fail").await, "0", "released");
    let r = idempotent(&mut c, "t.fail", "fp", &o, |tx| {
        Box::pin(effect(tx, "t_idem_fail", "t.fail"))
    }).await.unwrap();
    assert!(matches!(r, Idempotent::Ran(_)), "a retry runs at once: {:?}", r);
    assert_eq!(rows(&check, "t_idem_fail", "t.fail").await, "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_taken_over_cannot_complete() {
    let check = connect(&direct_url()).await;
    let mut c = connect(&url()).await;
    let o = IdemOptions { recovery: Duration::from_millis(200), ..Default::default() };
    let fp = Fingerprint::hash("fp");
    let old = match claim(&c, "t.over", &fp, &o).await.unwrap() {
        Claim::Acquired(h) => h,
        other => panic!("{:?}", other),
    };
    assert!(matches!(claim(&c, "t.over", &fp, &o).await.unwrap(), Claim::InProgress));
    assert!(matches!(claim(&c, "t.over", &Fingerprint::hash("x"), &o).await.unwrap(),
                     Claim::Conflict));
    tokio::time::sleep(Duration::from_millis(300)).await; /* the old holder "died" */
    let new = match claim(&c, "t.over", &fp, &o).await.unwrap() {
        Claim::Acquired(h) => h,
        other => panic!("not taken over: {:?}", other),
    };
    let printed = format!("{:?}", new);
    assert!(printed.contains("<secret>") && printed.matches(|c: char| c.is_ascii_hexdigit())
                .count() < 64, "the token is not printed: {}", printed);
    let tx = c.transaction().await.unwrap();
    let r = old.complete(&tx, 200, &json!({"who": "old"}), 1024).await;
    assert!(matches!(r, Err(Error::IdemNotHeld { .. })), "{:?}", r);
    assert_eq!(r.unwrap_err().sqlstate(), Some("SK002"));
    drop(tx);
    assert!(matches!(old.release(&c).await, Err(Error::IdemNotHeld { .. })));
    let tx = c.transaction().await.unwrap();
    let stored = new.complete(&tx, 200, &json!({"who": "new"}), 1024).await.unwrap();
    tx.commit().await.unwrap();
    match claim(&c, "t.over", &fp, &o).await.unwrap() {
        Claim::Replay(r) => assert_eq!(r, stored),
        other => panic!("{:?}", other),
    }
    assert_eq!(one(&check, "SELECT claims FROM skiplock.idempotency_keys WHERE key = 't.over'")
                   .await, "2");
}

#[tokio::test]
async fn the_request_fingerprint_is_the_c_librarys() {
    let check = connect(&direct_url()).await;
    let c = connect(&url()).await;
    let fp = Fingerprint::request("POST", "/charges", br#"{"amount": 1250, "currency": "usd"}"#);
    let holder = match claim(&c, "t.fp", &fp, &IdemOptions::default()).await.unwrap() {
        Claim::Acquired(h) => h,
        other => panic!("{:?}", other),
    };
    // printf 'POST\0/charges\0{"amount": 1250, "currency": "usd"}' | sha256sum
    assert_eq!(one(&check, "SELECT request_hash FROM skiplock.idempotency_keys \
                            WHERE key = 't.fp'").await,
               "5e5940ae40b8dd6d1567d9f6d2389beecc701823ef51888f72089304a5ca63fe");
    holder.release(&c).await.unwrap();
    assert_eq!(one(&check, "SELECT count(*) FROM skiplock.idempotency_keys WHERE key = 't.fp'")
                   .await, "0", "released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_nothing_is_written() {
    let check = connect(&direct_url()).await;
    create_table(&check, "t_idem_bad").await;
    let mut c = connect(&url()).await;
    let o = IdemOptions::default();
    let long_key = "t.bad.".to_string() + &"k".repeat(250);
    let long_fp = "f".repeat(256);
    let zero = IdemOptions { ttl: Duration::ZERO, ..Default::default() };
    let cases: Vec<(&str, &str, &IdemOptions, &str)> = vec![
        ("", "fp", &o, "idempotency key"),
        (&long_key, "fp", &o, "idempotency key"),
        ("t.bad.fp", &long_fp, &o, "fingerprint"),
        ("t.bad.fp0", "", &o, "fingerprint"),
        ("t.bad.ttl", "fp", &zero, "ttl"),
    ];
    for (key, fp, opts, what) in cases {
        let r = idempotent(&mut c, key, fp, opts, |tx| Box::pin(effect(tx, "t_idem_bad", "x")))
            .await;
        match r {
            Err(Error::Invalid(m)) => assert!(m.contains(what), "{}: {}", what, m),
            other => panic!("{}: {:?}", what, other),
        }
    }
    let capped = IdemOptions { max_response_bytes: 1000, ..Default::default() };
    let big = idempotent(&mut c, "t.bad.big", "fp", &capped, |tx| Box::pin(async move {
        effect(tx, "t_idem_bad", "t.bad.big").await?;
        Ok((201, json!({"blob": "b".repeat(1000)})))
    })).await;
    match big {
        Err(Error::Invalid(m)) => assert!(m.contains("over the cap of 1000 bytes"), "{}", m),
        other => panic!("{:?}", other),
    }
    let status = idempotent(&mut c, "t.bad.status", "fp", &o, |tx| Box::pin(async move {
        effect(tx, "t_idem_bad", "t.bad.status").await?;
        Ok((42, json!({})))
    })).await;
    assert!(matches!(status, Err(Error::Invalid(ref m)) if m.contains("status")), "{:?}", status);
    assert_eq!(one(&check, "SELECT count(*) FROM public.t_idem_bad").await, "0", "no effect");
    assert_eq!(one(&check, "SELECT count(*) FROM skiplock.idempotency_keys \
                            WHERE key LIKE 't.bad%'").await, "0", "no key");
    assert_no_idle_in_transaction(&check).await;
}
