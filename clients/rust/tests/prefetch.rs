//! Prefetch: claims held beyond the handlers wait in the worker, leased and
//! heartbeated like running ones; a graceful stop runs them, and past the
//! shutdown timeout gives back at once those never started.

mod common;
use common::*;
use serde_json::json;
use skiplock::{HandlerError, Worker, WorkerBuilder};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

fn builder(owner: &str) -> WorkerBuilder {
    Worker::builder(url()).owner(owner).poll_interval(Duration::from_millis(100))
        .concurrency(1).prefetch(3)
}

async fn enqueue_n(check: &tokio_postgres::Client, kind: &str, n: usize) -> Vec<i64> {
    let mut ids = vec![];
    for _ in 0..n {
        ids.push(enqueue_sql(check, kind, "{}").await);
    }
    ids
}

fn running(kind: &str, owner: &str) -> String {
    format!("SELECT count(*) FROM skiplock.jobs WHERE kind = '{}' AND state = 'running' \
             AND lease_owner = '{}'", kind, owner)
}

/// One claim takes concurrency + prefetch jobs; one handler runs at a time;
/// jobs that wait four leases are renewed meanwhile: none is rescued (the
/// worker rescues every 100 ms) or run twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetched_jobs_are_held_and_heartbeated_until_they_run() {
    let check = connect(&direct_url()).await;
    let kind = "t.pf.held";
    let ids = enqueue_n(&check, kind, 4).await;
    let (now, max, runs) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)),
                            Arc::new(AtomicUsize::new(0)));
    let (n, m, r) = (now.clone(), max.clone(), runs.clone());
    let w = builder("t-pf-held").lease(Duration::from_millis(600))
        .rescue_every(Duration::from_millis(100))
        .handler(kind, move |_, _| {
            let (n, m, r) = (n.clone(), m.clone(), r.clone());
            async move {
                m.fetch_max(n.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                let first = r.fetch_add(1, Ordering::SeqCst) == 0;
                tokio::time::sleep(Duration::from_millis(if first { 2400 } else { 10 })).await;
                n.fetch_sub(1, Ordering::SeqCst);
                Ok(json!("done"))
            }
        })
        .build().unwrap().start().await.unwrap();
    assert!(wait_for(&check, &running(kind, "t-pf-held"), "4", 5).await, "one claim of 4");
    let sql = format!("SELECT count(*) FROM skiplock.all_jobs WHERE kind = '{}' AND state = 'completed'", kind);
    assert!(wait_for(&check, &sql, "4", 15).await, "not all 4 completed");
    w.shutdown().await.unwrap();
    for id in ids {
        assert_eq!(job(&check, id).await, "completed/1/1", "job {} was rescued or run twice", id);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    assert_eq!(max.load(Ordering::SeqCst), 1, "the most handlers at once");
}

/// A graceful stop runs the prefetched jobs and claims nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_runs_the_prefetched_jobs() {
    let check = connect(&direct_url()).await;
    let kind = "t.pf.drain";
    let ids = enqueue_n(&check, kind, 4).await;
    let w = builder("t-pf-drain")
        .handler(kind, |_, _| async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(json!("drained"))
        })
        .build().unwrap().start().await.unwrap();
    assert!(wait_for(&check, &running(kind, "t-pf-drain"), "4", 5).await, "one claim of 4");
    let drained = tokio::spawn(w.shutdown());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let late = enqueue_sql(&check, kind, "{}").await;
    drained.await.unwrap().unwrap();
    for id in ids {
        assert_eq!(job(&check, id).await, "completed/1/1");
    }
    assert_eq!(job(&check, late).await, "available/0/0", "claimed after the stop");
}

/// Past the shutdown timeout, the prefetched jobs that never started are
/// given back at once, due again now, without waiting for their 30 s
/// lease; the one running is cancelled and retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_timeout_gives_back_the_jobs_never_started() {
    let check = connect(&direct_url()).await;
    let kind = "t.pf.giveback";
    let ids = enqueue_n(&check, kind, 4).await;
    let started = Arc::new(Mutex::new(vec![]));
    let s = started.clone();
    let w = builder("t-pf-giveback").lease(Duration::from_secs(30))
        .shutdown_timeout(Duration::from_millis(300))
        .handler(kind, move |job, cancel| {
            let s = s.clone();
            async move {
                s.lock().unwrap().push(job.id);
                cancel.cancelled().await;
                Err(HandlerError::retry("cancelled by the stop"))
            }
        })
        .build().unwrap().start().await.unwrap();
    assert!(wait_for(&check, &running(kind, "t-pf-giveback"), "4", 5).await, "one claim of 4");
    let t = Instant::now();
    w.shutdown().await.unwrap();
    assert!(t.elapsed() < Duration::from_secs(3), "stopped after {:?}", t.elapsed());
    let ran = started.lock().unwrap().clone();
    assert_eq!(ran.len(), 1, "started: {:?}", ran);
    for id in ids {
        let q = format!("SELECT state || '/' || attempt || '/' || (lease_owner IS NULL) || '/' || \
                         (errors->-1->>'error') FROM skiplock.all_jobs WHERE id = {}", id);
        let got = one(&check, &q).await;
        if id == ran[0] {
            assert!(got.starts_with("available/1/true/cancelled"), "job {}: {}", id, got);
            continue;
        }
        assert_eq!(got, "available/1/true/the worker stopped before starting it", "job {}", id);
        let due = format!("SELECT run_at <= now() + interval '1 second' FROM skiplock.jobs \
                           WHERE id = {}", id);
        assert_eq!(one(&check, &due).await, "t", "job {} is not due again at once", id);
    }
}

/// A prefetched job whose claim is lost while it waits (rescued and claimed
/// by another worker) is dropped: it never starts here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_job_whose_lease_is_lost_never_starts() {
    let check = connect(&direct_url()).await;
    let kind = "t.pf.lost";
    enqueue_n(&check, kind, 2).await;
    let (started, go) = (Arc::new(Mutex::new(vec![])), Arc::new(Notify::new()));
    let (s, g) = (started.clone(), go.clone());
    let (events, on_event) = event_log();
    let w = Worker::builder(url()).owner("t-pf-lost").poll_interval(Duration::from_secs(30))
        .concurrency(1).prefetch(1).lease(Duration::from_millis(900))
        .rescue_every(Duration::from_secs(60)).on_event(on_event)
        .handler(kind, move |job, _| {
            let (s, g) = (s.clone(), g.clone());
            async move {
                s.lock().unwrap().push(job.id);
                g.notified().await;
                Ok(json!("done"))
            }
        })
        .build().unwrap().start().await.unwrap();
    assert!(wait_for(&check, &running(kind, "t-pf-lost"), "2", 5).await, "one claim of 2");
    let end = Instant::now() + Duration::from_secs(5);
    while started.lock().unwrap().is_empty() && Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first = started.lock().unwrap()[0];
    let waiting: i64 = one(&check, &format!("SELECT id FROM skiplock.jobs WHERE kind = '{}' \
                                            AND id <> {}", kind, first)).await.parse().unwrap();
    one(&check, &format!("UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 second' \
                          WHERE id = {}; SELECT count(*) FROM skiplock.rescue(); \
                          SELECT count(*) FROM skiplock.claim('thief', ARRAY['{}'])",
                         waiting, kind)).await;
    let lost = format!("LeaseLost {{ id: {}, fencing: 1 }}", waiting);
    let seen = || events.lock().unwrap().iter().any(|e| *e == lost);
    while !seen() && Instant::now() < end + Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(seen(), "{:?}", events.lock().unwrap());
    go.notify_one();
    assert!(wait_for(&check, &format!("SELECT state FROM skiplock.all_jobs WHERE id = {}", first),
                     "completed", 5).await);
    w.shutdown().await.unwrap();
    assert_eq!(started.lock().unwrap().clone(), vec![first], "the lost job started");
    assert_eq!(job(&check, waiting).await, "running/2/2");
}
