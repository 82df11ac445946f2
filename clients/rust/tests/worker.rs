//! The worker against the real database: concurrency, heartbeats, lease
//! loss, fenced outcomes, graceful stop, LISTEN only where it is direct.

mod common;
use common::*;
use serde_json::json;
use skiplock::{HandlerError, Worker, WorkerBuilder};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Wakes its Notify when dropped: tells that a handler's future was dropped.
struct OnDrop(Arc<Notify>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

fn builder(owner: &str) -> WorkerBuilder {
    Worker::builder(url()).owner(owner).poll_interval(Duration::from_millis(100))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_at_most_concurrency_handlers_at_once() {
    let check = connect(&direct_url()).await;
    let kind = "t.w.conc";
    for i in 0..40 {
        enqueue_sql(&check, kind, &format!("{{\"i\": {}}}", i)).await;
    }
    let (now, max) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (n, m) = (now.clone(), max.clone());
    let w = builder("t-conc").concurrency(8)
        .handler(kind, move |job, _| {
            let (n, m) = (n.clone(), m.clone());
            async move {
                let cur = n.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(cur, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(150)).await;
                n.fetch_sub(1, Ordering::SeqCst);
                Ok(json!({"i": job.payload["i"]}))
            }
        })
        .build().unwrap().start().await.unwrap();
    let sql = format!("SELECT count(*) FROM skiplock.all_jobs WHERE kind = '{}' AND state = 'completed' \
                       AND result = jsonb_build_object('i', payload->'i')", kind);
    assert!(wait_for(&check, &sql, "40", 30).await, "not all 40 completed");
    w.shutdown().await.unwrap();
    assert_eq!(max.load(Ordering::SeqCst), 8, "the most handlers at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_a_job_longer_than_its_lease() {
    let check = connect(&direct_url()).await;
    let kind = "t.w.heartbeat";
    let id = enqueue_sql(&check, kind, "{}").await;
    let start = |owner: &'static str| {
        builder(owner).lease(Duration::from_millis(600)).rescue_every(Duration::from_millis(100))
            .handler(kind, |_, cancel| async move {
                tokio::time::sleep(Duration::from_millis(2500)).await;
                if cancel.is_cancelled() {
                    return Err(HandlerError::retry("cancelled"));
                }
                Ok(json!("slow"))
            })
            .build().unwrap().start()
    };
    let (a, b) = (start("t-hb-a").await.unwrap(), start("t-hb-b").await.unwrap());
    assert!(wait_for(&check, &format!("SELECT state FROM skiplock.all_jobs WHERE id = {}", id),
                     "completed", 15).await);
    assert_eq!(job(&check, id).await, "completed/1/1", "four leases long, one attempt");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_cancels_the_handler_and_drops_its_outcome() {
    let check = connect(&direct_url()).await;
    let kind = "t.w.lost";
    let id = enqueue_sql(&check, kind, "{}").await;
    let cancelled = Arc::new(Notify::new());
    let (events, on_event) = event_log();
    let c2 = cancelled.clone();
    let w = builder("t-lost").lease(Duration::from_millis(900)).rescue_every(Duration::from_secs(60))
        .on_event(on_event)
        .handler(kind, move |job, cancel| {
            let c2 = c2.clone();
            async move {
                if job.attempt > 1 {
                    return Ok(json!({"attempt": job.attempt}));
                }
                let _dropped = OnDrop(c2); /* the worker drops the future */
                cancel.cancelled().await;
                Ok(json!("stale"))
            }
        })
        .build().unwrap().start().await.unwrap();
    assert!(wait_for(&check, &format!("SELECT state FROM skiplock.all_jobs WHERE id = {}", id),
                     "running", 5).await);
    // Another worker's rescue takes the job back, as after a long pause.
    one(&check, &format!("UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 second' \
                          WHERE id = {}; SELECT count(*) FROM skiplock.rescue()", id)).await;
    let t = Instant::now();
    tokio::time::timeout(Duration::from_secs(3), cancelled.notified()).await
        .expect("the handler was not cancelled after the lease was lost");
    assert!(t.elapsed() < Duration::from_millis(1500), "cancelled after {:?}", t.elapsed());
    assert!(wait_for(&check, &format!("SELECT state FROM skiplock.all_jobs WHERE id = {}", id),
                     "completed", 10).await);
    w.shutdown().await.unwrap();
    assert_eq!(job(&check, id).await, "completed/2/2");
    assert_eq!(one(&check, &format!("SELECT result FROM skiplock.all_jobs WHERE id = {}", id)).await,
               "{\"attempt\": 2}", "the stale attempt's outcome was dropped");
    let ev = events.lock().unwrap().join("\n");
    assert!(ev.contains(&format!("LeaseLost {{ id: {}, fencing: 1 }}", id)), "{}", ev);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_out_outcome_changes_nothing_and_is_reported() {
    let check = connect(&direct_url()).await;
    let kind = "t.w.fenced";
    let id = enqueue_sql(&check, kind, "{}").await;
    let go = Arc::new(Notify::new());
    let (events, on_event) = event_log();
    let g = go.clone();
    let w = builder("t-fenced").lease(Duration::from_secs(60)).on_event(on_event)
        .handler(kind, move |_, _| {
            let g = g.clone();
            async move {
                g.notified().await;
                Ok(json!("late"))
            }
        })
        .build().unwrap().start().await.unwrap();
    assert!(wait_for(&check, &format!("SELECT state FROM skiplock.all_jobs WHERE id = {}", id),
                     "running", 5).await);
    one(&check, &format!("UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 second' \
                          WHERE id = {}; SELECT count(*) FROM skiplock.rescue(); \
                          SELECT count(*) FROM skiplock.claim('thief', ARRAY['{}'])", id, kind)).await;
    go.notify_one();
    // Reported either way: the outcome refused by record (Fenced), or, on a
    // machine slow enough for a heartbeat to come first, the claim found
    // lost and the outcome dropped (LeaseLost).
    let fenced = format!("Fenced(Fenced {{ id: {}, fencing: 1 }})", id);
    let lost = format!("LeaseLost {{ id: {}, fencing: 1 }}", id);
    let seen = || events.lock().unwrap().iter().any(|e| *e == fenced || e.contains(&lost));
    let end = Instant::now() + Duration::from_secs(15);
    while !seen() && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    w.shutdown().await.unwrap();
    assert!(seen(), "{:?}", events.lock().unwrap());
    assert_eq!(job(&check, id).await, "running/2/2");
    assert_eq!(one(&check, &format!("SELECT lease_owner FROM skiplock.all_jobs WHERE id = {}", id)).await,
               "thief");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_running_handlers_and_claims_nothing_more() {
    let check = connect(&direct_url()).await;
    let kind = "t.w.drain";
    let first: Vec<i64> = vec![enqueue_sql(&check, kind, "{}").await,
                               enqueue_sql(&check, kind, "{}").await];
    let w = builder("t-drain").concurrency(4)
        .handler(kind, |_, _| async {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            Ok(json!("drained"))
        })
        .build().unwrap().start().await.unwrap();
    let sql = format!("SELECT count(*) FROM skiplock.all_jobs WHERE kind = '{}' AND state = 'running'", kind);
    assert!(wait_for(&check, &sql, "2", 5).await);
    let stop = w.stop_token();
    let t = Instant::now();
    let drained = tokio::spawn(w.shutdown());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(stop.is_cancelled());
    let late = enqueue_sql(&check, kind, "{}").await;
    drained.await.unwrap().unwrap();
    assert!(t.elapsed() >= Duration::from_millis(1000), "returned before the handlers ended");
    for id in first {
        assert_eq!(job(&check, id).await, "completed/1/1");
    }
    assert_eq!(job(&check, late).await, "available/0/0", "claimed after the stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_timeout_cancels_and_retries() {
    let check = connect(&direct_url()).await;
    let kind = "t.w.timeout";
    let id: i64 = one(&check, &format!("SELECT skiplock.enqueue('{}', timeout => '300 ms', \
                                        max_attempts => 1)", kind)).await.parse().unwrap();
    let w = builder("t-timeout")
        .handler(kind, |_, cancel| async move {
            cancel.cancelled().await;
            Ok(json!("never"))
        })
        .build().unwrap().start().await.unwrap();
    assert!(wait_for(&check, &format!("SELECT state FROM skiplock.all_jobs WHERE id = {}", id),
                     "discarded", 5).await);
    w.shutdown().await.unwrap();
    let err = one(&check, &format!("SELECT errors->0->>'error' FROM skiplock.all_jobs WHERE id = {}", id)).await;
    assert_eq!(err, "timed out after 300 ms");
}

/// An error with a cause, and that cause's own cause.
#[derive(Debug)]
struct Layered(&'static str, Option<Box<Layered>>);

impl std::fmt::Display for Layered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Layered {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.1.as_deref().map(|e| e as _)
    }
}

fn charge() -> Result<serde_json::Value, Layered> {
    let root = Layered("connection refused", None);
    Err(Layered("charge failed", Some(Box::new(Layered("payment gateway unreachable",
                                                       Some(Box::new(root)))))))
}

/// `?` on an error with causes: the history keeps its message first, then
/// each cause on its own line; `message()` is still the message alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempt_keeps_the_error_and_its_causes() {
    let e: HandlerError = charge().unwrap_err().into();
    assert_eq!(e.message(), "charge failed");
    let check = connect(&direct_url()).await;
    let kind = "t.w.causes";
    let id: i64 = one(&check, &format!("SELECT skiplock.enqueue('{}', max_attempts => 1)", kind))
        .await.parse().unwrap();
    let w = builder("t-causes")
        .handler(kind, |_, _| async { Ok(charge()?) })
        .build().unwrap().start().await.unwrap();
    assert!(wait_for(&check, &format!("SELECT state FROM skiplock.all_jobs WHERE id = {}", id),
                     "discarded", 5).await);
    w.shutdown().await.unwrap();
    let err = one(&check, &format!("SELECT errors->0->>'error' FROM skiplock.all_jobs WHERE id = {}", id)).await;
    assert_eq!(err, "charge failed\ncaused by: payment gateway unreachable\ncaused by: connection refused");
}

/// Direct: LISTEN on the worker's connection, a job starts at once though
/// the poll interval is long.  Pooled: never LISTEN through the pooler (the
/// job waits for the poll); with the direct endpoint given, a side
/// connection listens there and the job starts at once again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listens_only_on_a_direct_connection() {
    let check = connect(&direct_url()).await;
    let kind = "t.w.listen";
    let started = Arc::new(Notify::new());
    let run = |b: WorkerBuilder, on_event| {
        let s = started.clone();
        b.poll_interval(Duration::from_secs(30)).on_event(on_event).handler(kind, move |_, _| {
            let s = s.clone();
            async move {
                s.notify_one();
                Ok(json!(null))
            }
        })
    };
    let (events, on_event) = event_log();
    let w = run(builder("t-listen"), on_event).build().unwrap().start().await.unwrap();
    let woke = wakes_within(&check, kind, &started, Duration::from_secs(2)).await;
    w.shutdown().await.unwrap();
    let listened: Vec<String> = events.lock().unwrap().iter()
        .filter(|e| e.starts_with("Listening")).cloned().collect();
    if !pooled() {
        assert_eq!(listened, vec!["Listening { side: false }"]);
        assert!(woke, "the notification did not wake the worker");
        return;
    }
    assert!(listened.is_empty(), "listened through the pooler: {:?}", listened);
    assert!(!woke, "woke at once without a LISTEN");
    let (events, on_event) = event_log();
    let w = run(builder("t-listen-side").direct_url(direct_url()), on_event).build().unwrap()
        .start().await.unwrap();
    let listeners = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                     AND query = 'LISTEN skiplock_jobs'";
    assert!(wait_for(&check, listeners, "1", 5).await, "no LISTEN on the direct endpoint");
    assert!(wakes_within(&check, kind, &started, Duration::from_secs(2)).await,
            "the side connection's notification did not wake the worker");
    w.shutdown().await.unwrap();
    assert!(events.lock().unwrap().iter().any(|e| e == "Listening { side: true }"));
}

/// Enqueues a job once the worker is idle; true when its handler started
/// within `limit`.
async fn wakes_within(check: &tokio_postgres::Client, kind: &str, started: &Notify,
                      limit: Duration) -> bool {
    tokio::time::sleep(Duration::from_millis(1000)).await; /* past the first claim */
    enqueue_sql(check, kind, "{}").await;
    tokio::time::timeout(limit, started.notified()).await.is_ok()
}

#[derive(serde::Deserialize)]
struct Receipt {
    order: i64,
    to: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typed_handler_gets_its_payload_type_and_discards_one_that_is_not() {
    let check = connect(&direct_url()).await;
    let kind = "t.w.typed";
    let good = enqueue_sql(&check, kind, r#"{"order": 42, "to": "a@example.com"}"#).await;
    let bad = enqueue_sql(&check, kind, r#"{"order": "forty-two"}"#).await;
    let w = builder("t-typed")
        .typed_handler(kind, |r: Receipt, _job, _| async move {
            Ok(json!({ "order": r.order, "to": r.to }))
        })
        .build().unwrap().start().await.unwrap();
    let done = format!("SELECT count(*) FROM skiplock.all_jobs WHERE kind = '{}' \
                        AND state IN ('completed', 'discarded')", kind);
    assert!(wait_for(&check, &done, "2", 20).await, "the typed jobs did not end");
    w.shutdown().await.unwrap();
    assert_eq!(one(&check, &format!("SELECT state || ' ' || result::text FROM skiplock.all_jobs \
                                     WHERE id = {}", good)).await,
               "completed {\"to\": \"a@example.com\", \"order\": 42}");
    let why = one(&check, &format!("SELECT state || ' ' || attempt || ' ' || (errors->0->>'error') \
                                    FROM skiplock.all_jobs WHERE id = {}", bad)).await;
    assert!(why.starts_with(&format!("discarded 1 the payload of job {} is not a ", bad)), "{}", why);
    assert!(why.contains("Receipt"), "{}", why);
}
