//! Typed errors: permanent and transient by SQLSTATE, Fenced, Invalid.

mod common;
use common::*;
use serde_json::json;
use skiplock::protocol::{claim, complete, fail, ClaimArgs};
use skiplock::{enqueue, job_fence, EnqueueOptions, Error};
use std::time::Duration;

#[tokio::test]
async fn bad_arguments_are_permanent_with_their_sqlstate() {
    let app = connect(&url()).await;
    let o = EnqueueOptions { max_attempts: Some(0), ..Default::default() };
    let e = enqueue(&app, "t.err", &json!({}), &o).await.unwrap_err();
    assert!(matches!(e, Error::Permanent { .. }), "{:?}", e);
    assert_eq!(e.sqlstate(), Some("23514"), "{:?}", e);
    let far = std::time::UNIX_EPOCH + Duration::from_secs(330 * 365 * 86400);
    let o = EnqueueOptions { run_at: Some(far), ..Default::default() };
    let e = enqueue(&app, "t.err", &json!({}), &o).await.unwrap_err();
    assert!(matches!(e, Error::Permanent { .. }) && !e.is_transient(), "{:?}", e);
    assert_eq!(e.sqlstate(), Some("22023"), "{:?}", e);
    let e = enqueue(&app, "t.err\0", &json!({}), &EnqueueOptions::default()).await.unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{:?}", e);
    let both = EnqueueOptions { delay: Some(Duration::from_secs(1)),
                                run_at: Some(std::time::SystemTime::now()), ..Default::default() };
    assert!(matches!(enqueue(&app, "t.err", &json!({}), &both).await, Err(Error::Invalid(_))));
}

#[tokio::test]
async fn a_terminated_connection_is_transient() {
    let victim = connect(&direct_url()).await;
    let admin = connect(&direct_url()).await;
    let pid = one(&victim, "SELECT pg_backend_pid()").await;
    one(&admin, &format!("SELECT pg_terminate_backend({})", pid)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let e = enqueue(&victim, "t.err", &json!({}), &EnqueueOptions::default()).await.unwrap_err();
    assert!(e.is_transient(), "{:?}", e);
}

#[tokio::test]
async fn stale_tokens_are_fenced() {
    let app = connect(&url()).await;
    let kinds = vec!["t.err.fence".to_string()];
    let id = enqueue(&app, &kinds[0], &json!({}), &EnqueueOptions::default()).await.unwrap();
    let a = ClaimArgs { owner: "t-err", kinds: &kinds, queues: None, n: 1,
                        lease: Duration::from_secs(30) };
    let job = claim(&app, &a).await.unwrap().pop().expect("claimed");
    assert_eq!((job.id, job.fencing, job.attempt), (id, 1, 1));
    let stale = skiplock::Job { fencing: 0, ..job.clone() };
    let r = complete(&app, id, 0, &json!({})).await;
    assert!(matches!(r, Err(Error::Fenced { id: i, fencing: 0 }) if i == id), "{:?}", r);
    assert!(matches!(fail(&app, id, 0, "x", true).await, Err(Error::Fenced { .. })));
    let mut c = connect(&url()).await;
    let tx = c.transaction().await.unwrap();
    let r = job_fence(&tx, &stale).await;
    assert!(matches!(r, Err(Error::Fenced { .. })), "{:?}", r);
    drop(tx);
    let tx = c.transaction().await.unwrap();
    job_fence(&tx, &job).await.expect("the current token passes the fence");
    tx.commit().await.unwrap();
    complete(&app, id, 1, &json!({"done": true})).await.expect("current token completes");
    complete(&app, id, 1, &json!({"done": true})).await.expect("complete is idempotent");
}

/// start() on `url`: the error it returned, within 5 s.
async fn start_fails(url: String) -> Error {
    let t0 = std::time::Instant::now();
    let w = skiplock::Worker::builder(url)
        .handler("t.start", |_job, _stop| async { Ok(json!(null)) })
        .build()
        .unwrap();
    let e = w.start().await.err().expect("start() succeeded on a database it cannot use");
    assert!(t0.elapsed() < Duration::from_secs(5), "start() took {:?}", t0.elapsed());
    e
}

#[tokio::test]
async fn start_refuses_a_missing_or_old_schema_naming_init() {
    let e = start_fails(with_db(&url(), "postgres")).await;
    assert!(matches!(e, Error::Permanent { .. }), "{:?}", e);
    assert!(matches!(e.sqlstate(), Some("3F000") | Some("42883")), "{:?}", e);
    assert!(e.to_string().contains("no skiplock schema: install it with skiplock::init or \
                                     `skiplock init`"), "{}", e);

    let name = format!("rust_scratch_{}", std::process::id());
    let admin = scratch_db(&name).await;
    let old = connect(&with_db(&direct_url(), &name)).await;
    old.batch_execute("CREATE SCHEMA skiplock; CREATE TABLE skiplock.schema_version (version int);
        INSERT INTO skiplock.schema_version VALUES (26);
        CREATE FUNCTION skiplock.installed_version() RETURNS int LANGUAGE sql
          AS 'SELECT max(version) FROM skiplock.schema_version'").await.unwrap();
    drop(old);
    let e = start_fails(with_db(&url(), &name)).await;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", name)).await.unwrap();
    assert!(matches!(e, Error::Permanent { .. }), "{:?}", e);
    assert_eq!(skiplock::MIN_SCHEMA, 33, "step 33: outcome records, read by every client alike");
    let want = format!("at step 26; this client needs step {} or later: upgrade it with \
                        skiplock::init or `skiplock init`", skiplock::MIN_SCHEMA);
    assert!(e.to_string().contains(&want), "{}", e);
}
