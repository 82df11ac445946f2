//! Completing a job in the transaction of its effect (`Job::complete`,
//! `job_complete`): the effect and the completion commit together, and the
//! worker sends no outcome of its own and loses no lease over it.

mod common;
use common::*;
use serde_json::json;
use skiplock::protocol::{claim, ClaimArgs};
use skiplock::{job_complete, Error, HandlerError, Worker};
use std::time::Duration;

/// The effect: one more application of job `id` in ledger table `t` (one
/// table per test: the tests run at once).
fn effect(t: &str, id: i64) -> String {
    format!("INSERT INTO public.{t} (job_id, n) VALUES ({id}, 1) \
             ON CONFLICT (job_id) DO UPDATE SET n = {t}.n + 1", t = t, id = id)
}

async fn create_ledger(check: &tokio_postgres::Client, t: &str) {
    one(check, &format!("CREATE TABLE IF NOT EXISTS public.{} (job_id bigint PRIMARY KEY, \
                         n int NOT NULL)", t)).await;
}

/// "jobs with an effect/most applications of one".
async fn ledger(check: &tokio_postgres::Client, t: &str) -> String {
    one(check, &format!("SELECT count(*) || '/' || coalesce(max(n), 0) FROM public.{}", t)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_records_nothing_and_loses_nothing() {
    let check = connect(&direct_url()).await;
    create_ledger(&check, "t_ledger_w").await;
    let kind = "t.intx";
    for i in 0..8 {
        enqueue_sql(&check, kind, &format!("{{\"i\": {}, \"sleep\": {}}}", i,
                                           if i < 3 { 900 } else { 0 })).await;
    }
    let back = one(&check, &format!("SELECT skiplock.enqueue('{}', '{{\"rollback\": true}}', \
                                     backoff => 'fixed', backoff_base => '50 ms')", kind)).await;
    let (events, on_event) = event_log();
    let w = Worker::builder(url()).owner("t-intx").concurrency(4)
        .lease(Duration::from_millis(600)).poll_interval(Duration::from_millis(100))
        .on_event(on_event)
        .handler(kind, |job, cancel| async move {
            let mut c = connect(&url()).await;
            let tx = c.transaction().await?;
            tx.batch_execute(&effect("t_ledger_w", job.id)).await?;
            job.complete(&tx, &json!({"i": job.payload["i"]})).await
                .map_err(|e| HandlerError::retry(e.to_string()))?;
            if job.payload["rollback"] == json!(true) && job.attempt == 1 {
                return Err(HandlerError::retry("the effect failed after all")); /* tx dropped */
            }
            tx.commit().await?;
            let ms = job.payload["sleep"].as_u64().unwrap_or(0);
            tokio::time::sleep(Duration::from_millis(ms)).await; /* heartbeats meanwhile */
            if cancel.is_cancelled() {
                return Err(HandlerError::retry("cancelled"));
            }
            Ok(json!("ignored: the completion carried the result"))
        })
        .build().unwrap().start().await.unwrap();
    let done = format!("SELECT count(*) FROM skiplock.all_jobs WHERE kind = '{}' AND state = \
                        'completed'", kind);
    assert!(wait_for(&check, &done, "9", 20).await, "not all 9 completed");
    tokio::time::sleep(Duration::from_millis(700)).await;
    w.shutdown().await.unwrap();
    let ev = events.lock().unwrap().clone();
    assert!(!ev.iter().any(|e| e.starts_with("Fenced") || e.starts_with("LeaseLost")), "{:?}", ev);
    assert_eq!(ev.iter().filter(|e| e.contains("state: \"completed\"")).count(), 9, "{:?}", ev);
    assert_eq!(ledger(&check, "t_ledger_w").await, "9/1", "one effect per job");
    assert_eq!(job(&check, back.parse().unwrap()).await, "completed/2/2");
    assert_eq!(one(&check, &format!("SELECT count(*) FROM skiplock.all_jobs WHERE kind = '{}' \
                                     AND result = jsonb_build_object('i', payload->'i')", kind))
                   .await, "9");
}

#[tokio::test]
async fn job_complete_refuses_a_stale_or_repeated_claim() {
    let check = connect(&direct_url()).await;
    create_ledger(&check, "t_ledger_sql").await;
    let kinds = vec!["t.intx.sql".to_string()];
    let id = enqueue_sql(&check, &kinds[0], "{}").await;
    let app = connect(&url()).await;
    let a = ClaimArgs { owner: "t-intx", kinds: &kinds, queues: None, n: 1,
                        lease: Duration::from_secs(30) };
    let claimed = claim(&app, &a).await.unwrap().pop().expect("claimed");
    let stale = skiplock::Job { fencing: claimed.fencing + 1, ..claimed.clone() };
    let mut c = connect(&url()).await;
    for (j, want_ok) in [(&stale, false), (&claimed, true), (&claimed, false)] {
        let tx = c.transaction().await.unwrap();
        tx.batch_execute(&effect("t_ledger_sql", id)).await.unwrap();
        let r = job_complete(&tx, j, &json!({"ok": 1})).await;
        if want_ok {
            r.expect("the current claim completes");
            tx.commit().await.unwrap();
        } else {
            assert!(matches!(r, Err(Error::Fenced { .. })), "{:?}", r);
        }
    }
    assert_eq!(job(&check, id).await, "completed/1/1");
    assert_eq!(ledger(&check, "t_ledger_sql").await, "1/1");
}
