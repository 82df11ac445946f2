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
