//! enqueue runs on the caller's connection, inside the caller's transaction.

mod common;
use common::*;
use serde_json::json;
use skiplock::{enqueue, Backoff, EnqueueOptions};
use std::time::Duration;

#[tokio::test]
async fn enqueue_follows_the_callers_transaction() {
    let mut app = connect(&url()).await;
    let check = connect(&direct_url()).await;
    let kind = "t.enqueue.tx";
    let tx = app.transaction().await.unwrap();
    let id = enqueue(&tx, kind, &json!({"n": 1}), &EnqueueOptions::default()).await.unwrap();
    assert_eq!(one(&check, &format!("SELECT count(*) FROM skiplock.all_jobs WHERE id = {}", id)).await,
               "0", "visible before commit");
    tx.rollback().await.unwrap();
    assert_eq!(one(&check, &format!("SELECT count(*) FROM skiplock.all_jobs WHERE kind = '{}'", kind))
                   .await, "0", "a rolled-back enqueue left a job");
    let tx = app.transaction().await.unwrap();
    let id = enqueue(&tx, kind, &json!({"n": 2}), &EnqueueOptions::default()).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(one(&check, &format!("SELECT payload->>'n' FROM skiplock.all_jobs WHERE id = {}", id))
                   .await, "2");
}

#[tokio::test]
async fn enqueue_sends_every_option_and_odd_text_intact() {
    let app = connect(&url()).await;
    let check = connect(&direct_url()).await;
    let payload = json!({"q": "it's \\ \"quoted\" é \u{1F600}", "nested": [1, {"a": null}]});
    let opts = EnqueueOptions {
        queue: Some("q'1\\".into()),
        delay: Some(Duration::from_secs(3600)),
        priority: Some(7),
        unique_key: Some("uk'1".into()),
        max_attempts: Some(3),
        timeout: Some(Duration::from_millis(1500)),
        backoff: Some(Backoff::Fixed),
        backoff_base: Some(Duration::from_secs(2)),
        backoff_cap: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    let id = enqueue(&app, "t.enqueue.opts", &payload, &opts).await.unwrap();
    let again = enqueue(&app, "t.enqueue.opts", &json!({}), &opts).await.unwrap();
    assert_eq!(id, again, "the unique key's holder is returned");
    let row = one(&check, &format!(
        "SELECT concat_ws('|', queue, priority, unique_key, max_attempts, timeout_ms, backoff, \
         backoff_base_ms, backoff_cap_ms, run_at > now() + interval '59 minutes', \
         payload = {}) FROM skiplock.all_jobs WHERE id = {}",
        skiplock::sql::jsonb(&payload).unwrap(), id)).await;
    assert_eq!(row, "q'1\\|7|uk'1|3|1500|fixed|2000|60000|t|t");
}

#[tokio::test]
async fn enqueue_many_is_one_statement_all_or_none_in_order() {
    use skiplock::{enqueue_many, JobSpec};
    use std::time::SystemTime;
    let mut app = connect(&url()).await;
    let check = connect(&direct_url()).await;
    let kind = "t.enqueue.many";
    let count = || format!("SELECT count(*) FROM skiplock.all_jobs WHERE kind = '{}'", kind);
    let jobs = vec![
        JobSpec::new(kind, json!({"n": 1})),
        JobSpec::new(kind, json!(["it's \\ \"q\" é"])).with(EnqueueOptions {
            queue: Some("mail".into()), priority: Some(3), max_attempts: Some(2),
            timeout: Some(Duration::from_secs(2)), backoff: Some(Backoff::Fixed),
            backoff_base: Some(Duration::from_millis(250)), ..Default::default()
        }),
        JobSpec::new(kind, json!({})).with(EnqueueOptions {
            unique_key: Some("t.many:u".into()),
            run_at: Some(SystemTime::now() + Duration::from_secs(3600)), ..Default::default()
        }),
        JobSpec::new(kind, json!({})).with(EnqueueOptions {
            delay: Some(Duration::from_secs(60)), ..Default::default()
        }),
    ];
    let tx = app.transaction().await.unwrap();
    let ids = enqueue_many(&tx, &jobs, None).await.unwrap();
    assert_eq!(one(&check, &count()).await, "0", "visible before commit");
    tx.commit().await.unwrap();
    assert_eq!(ids.len(), 4);
    let row = |id: i64| format!(
        "SELECT concat_ws('|', payload, queue, priority, max_attempts, timeout_ms, backoff, \
         backoff_base_ms, unique_key, run_at > now() + interval '50 s') \
         FROM skiplock.all_jobs WHERE id = {}", id);
    assert_eq!(one(&check, &row(ids[0])).await, "{\"n\": 1}|default|0|25|f");
    assert_eq!(one(&check, &row(ids[1])).await,
               "[\"it's \\\\ \\\"q\\\" é\"]|mail|3|2|2000|fixed|250|f");
    assert_eq!(one(&check, &row(ids[2])).await, "{}|default|0|25|t.many:u|t");
    assert_eq!(one(&check, &row(ids[3])).await, "{}|default|0|25|t");
    let held = enqueue_many(&app, &jobs[2..3], None).await.unwrap();
    assert_eq!(held, vec![ids[2]], "a held unique key gives the holder's id");
    // a token: the retried batch returns the first ids and adds nothing
    let first = enqueue_many(&app, &jobs[..2], Some("t.many:token")).await.unwrap();
    let again = enqueue_many(&app, &jobs[..2], Some("t.many:token")).await.unwrap();
    assert_eq!(first, again);
    assert_eq!(one(&check, &count()).await, "6");
    // bad input: nothing written
    let bad = vec![JobSpec::new(kind, json!({})),
                   JobSpec::new(kind, json!({})).with(EnqueueOptions {
                       queue: Some("q".repeat(200)), ..Default::default() })];
    match enqueue_many(&app, &bad, None).await {
        Err(skiplock::Error::Permanent { sqlstate, .. }) => {
            assert_eq!(sqlstate.as_deref(), Some("22023"))
        }
        other => panic!("a queue name of 200 bytes: {:?}", other),
    }
    let both = vec![JobSpec::new(kind, json!({})).with(EnqueueOptions {
        delay: Some(Duration::from_secs(1)), run_at: Some(SystemTime::now()), ..Default::default()
    })];
    assert!(matches!(enqueue_many(&app, &both, None).await, Err(skiplock::Error::Invalid(_))));
    assert_eq!(one(&check, &count()).await, "6");
}
