//! Dependencies and limits with the client: parents given to `enqueue`
//! (`skiplock.enqueue_after`), `enqueue_batch`, `waits_for`, the policy
//! when a parent fails, bad input, and the worker's wait hints under a rate
//! limit.  Run directly and through PgBouncer (test.sh).

mod common;
use common::*;
use serde_json::{json, Value};
use skiplock::{enqueue, enqueue_batch, enqueue_many, enqueue_sql, waits_for, BatchOptions,
               EnqueueOptions, Error, HandlerError, JobSpec, OnParentFailure, Pooler, Worker,
               WorkerBuilder, WorkerHandle};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the handlers did, in order: "start X", "end X".
type Log = Arc<Mutex<Vec<String>>>;

fn builder(owner: &str) -> WorkerBuilder {
    Worker::builder(url()).owner(owner).poll_interval(Duration::from_millis(100)).concurrency(4)
}

/// Options with these parents by id.
fn after(ids: &[i64]) -> EnqueueOptions {
    EnqueueOptions { depends_on: ids.to_vec(), ..Default::default() }
}

/// A worker for `kinds` whose handler logs "start N" and "end N" (N the
/// payload's "n"), sleeping the payload's "ms" in between, and discards
/// the job when the payload says "fail".
async fn logging_worker(owner: &str, kinds: &[&str], log: &Log) -> WorkerHandle {
    let mut b = builder(owner);
    for kind in kinds {
        let log = log.clone();
        b = b.handler(*kind, move |job, _| {
            let log = log.clone();
            async move {
                let n = match &job.payload["n"] {
                    Value::String(s) => s.clone(),
                    v => v.to_string(),
                };
                log.lock().unwrap().push(format!("start {}", n));
                tokio::time::sleep(Duration::from_millis(job.payload["ms"].as_u64().unwrap_or(0)))
                    .await;
                log.lock().unwrap().push(format!("end {}", n));
                if job.payload["fail"] == json!(true) {
                    return Err(HandlerError::discard(format!("{} fails", n)));
                }
                Ok(job.payload)
            }
        });
    }
    b.build().unwrap().start().await.unwrap()
}

/// Where `entry` is in the log; fails unless it is there exactly once.
fn once(log: &[String], entry: &str) -> usize {
    let at: Vec<usize> = log.iter().enumerate().filter(|(_, e)| *e == entry).map(|(i, _)| i).collect();
    assert_eq!(at.len(), 1, "{:?} {} times in {:?}", entry, at.len(), log);
    at[0]
}

fn sqlstate(r: Result<impl std::fmt::Debug, Error>) -> String {
    match r {
        Err(e @ Error::Permanent { .. }) => e.sqlstate().unwrap_or("none").to_string(),
        other => panic!("not a permanent database error: {:?}", other),
    }
}

fn count(kind: &str) -> String {
    format!("SELECT count(*) FROM skiplock.all_jobs WHERE kind = '{}'", kind)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diamond_runs_its_last_job_once_after_both_branches() {
    let mut app = connect(&url()).await;
    let check = connect(&direct_url()).await;
    let k = "t.deps.diamond";
    // in the caller's transaction: a rollback leaves neither the jobs nor an edge
    let tx = app.transaction().await.unwrap();
    let a = enqueue(&tx, k, &json!({"n": "gone"}), &EnqueueOptions::default()).await.unwrap();
    enqueue(&tx, k, &json!({"n": "gone"}), &after(&[a])).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(one(&check, &count(k)).await, "0", "a rolled-back enqueue left a job");
    assert_eq!(one(&check, &format!("SELECT count(*) FROM skiplock.job_deps WHERE parent_id = {}", a))
                   .await, "0");

    let tx = app.transaction().await.unwrap();
    let a = enqueue(&tx, k, &json!({"n": "A", "ms": 100}), &EnqueueOptions::default()).await.unwrap();
    let b = enqueue(&tx, k, &json!({"n": "B", "ms": 300}), &after(&[a])).await.unwrap();
    let c = enqueue(&tx, k, &json!({"n": "C", "ms": 50}), &after(&[a])).await.unwrap();
    let d = enqueue(&tx, k, &json!({"n": "D"}), &after(&[b, c])).await.unwrap();
    assert_eq!(waits_for(&tx, d).await.unwrap().as_deref(),
               Some("dependencies: 2 of 2 parent(s) not finished"));
    tx.commit().await.unwrap();
    assert_eq!(waits_for(&app, b).await.unwrap().as_deref(),
               Some("dependencies: 1 of 1 parent(s) not finished"));
    assert_eq!(waits_for(&app, i64::MAX).await.unwrap(), None, "an unknown job waits for nothing");

    let log: Log = Arc::default();
    let w = logging_worker("t-deps-diamond", &[k], &log).await;
    let done = format!("SELECT state FROM skiplock.all_jobs WHERE id = {}", d);
    assert!(wait_for(&check, &done, "completed", 20).await, "D did not complete");
    assert_eq!(waits_for(&app, d).await.unwrap(), None, "a finished job waits for nothing");
    w.shutdown().await.unwrap();
    let log = log.lock().unwrap().clone();
    let at = |e: &str| once(&log, e);
    assert!(at("start B") > at("end A") && at("start C") > at("end A"), "{:?}", log);
    assert!(at("start D") > at("end B") && at("start D") > at("end C"), "{:?}", log);
    assert_eq!(log.len(), 8, "{:?}", log);
    for id in [a, b, c, d] {
        assert_eq!(job(&check, id).await, "completed/1/1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_calls_back_once_after_every_job_with_the_counts() {
    let app = connect(&url()).await;
    let check = connect(&direct_url()).await;
    let (k, cb) = ("t.deps.batch", "t.deps.batch.done");
    let payloads: Vec<Value> = (0..30).map(|i| json!({"n": i, "ms": 20, "fail": i == 17})).collect();
    let opts = BatchOptions { callback_payload: Some(json!({"n": "callback", "invoice": 7})),
                              max_attempts: Some(3), ..Default::default() };
    let ids = enqueue_batch(&app, k, &payloads, cb, &opts).await.unwrap();
    assert_eq!(ids.len(), 31);
    let callback = ids[30];
    assert_eq!(one(&check, &format!("SELECT kind || '/' || max_attempts FROM skiplock.all_jobs \
                                     WHERE id = {}", callback)).await, format!("{}/3", cb));
    assert_eq!(waits_for(&app, callback).await.unwrap().as_deref(),
               Some("dependencies: 30 of 30 parent(s) not finished"));

    let log: Log = Arc::default();
    let w1 = logging_worker("t-deps-batch-1", &[k, cb], &log).await;
    let w2 = logging_worker("t-deps-batch-2", &[k, cb], &log).await;
    let done = format!("SELECT state FROM skiplock.all_jobs WHERE id = {}", callback);
    assert!(wait_for(&check, &done, "completed", 30).await, "the callback did not complete");
    tokio::time::sleep(Duration::from_millis(300)).await; /* a second run would show */
    w1.shutdown().await.unwrap();
    w2.shutdown().await.unwrap();
    let log = log.lock().unwrap().clone();
    let started = once(&log, "start callback");
    for i in 0..30 {
        assert!(once(&log, &format!("end {}", i)) < started, "{:?}", log);
    }
    assert_eq!(job(&check, callback).await, "completed/1/1");
    let payload: Value = serde_json::from_str(&one(&check, &format!(
        "SELECT payload FROM skiplock.all_jobs WHERE id = {}", callback)).await).unwrap();
    assert_eq!(payload, json!({"n": "callback", "invoice": 7, "batch": {
        "size": 30, "completed": 29, "discarded": 1, "cancelled": 0}}));
    let children = ids[..30].iter().map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    assert_eq!(one(&check, &format!(
        "SELECT string_agg(state || ':' || n, ',' ORDER BY state) FROM (SELECT state, count(*) n \
         FROM skiplock.all_jobs WHERE id = ANY ('{{{}}}') AND finished_at <= \
         (SELECT attempted_at FROM skiplock.all_jobs WHERE id = {}) GROUP BY state) s",
        children, callback)).await, "completed:29,discarded:1",
               "every job finished before the callback started");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_parent_cancels_a_default_child_and_runs_a_run_child() {
    let app = connect(&url()).await;
    let check = connect(&direct_url()).await;
    let k = "t.deps.policy";
    let parent = enqueue(&app, k, &json!({"n": "P", "fail": true}), &EnqueueOptions::default())
        .await.unwrap();
    let cancel = enqueue(&app, k, &json!({"n": "cancel"}), &after(&[parent])).await.unwrap();
    let explicit = enqueue(&app, k, &json!({"n": "explicit"}), &EnqueueOptions {
        on_parent_failure: Some(OnParentFailure::Cancel), ..after(&[parent]) }).await.unwrap();
    let grandchild = enqueue(&app, k, &json!({"n": "grandchild"}), &EnqueueOptions {
        on_parent_failure: Some(OnParentFailure::Run), ..after(&[cancel]) }).await.unwrap();
    let run = enqueue(&app, k, &json!({"n": "run"}), &EnqueueOptions {
        on_parent_failure: Some("run".parse().unwrap()), ..after(&[parent]) }).await.unwrap();

    let log: Log = Arc::default();
    let w = logging_worker("t-deps-policy", &[k], &log).await;
    let state = |id: i64| format!("SELECT state FROM skiplock.all_jobs WHERE id = {}", id);
    assert!(wait_for(&check, &state(run), "completed", 20).await, "the 'run' child did not run");
    w.shutdown().await.unwrap();
    assert_eq!(one(&check, &state(parent)).await, "discarded");
    for id in [cancel, explicit] {
        assert_eq!(job(&check, id).await, "cancelled/0/0", "a default child of a failed parent");
    }
    assert_eq!(one(&check, &state(grandchild)).await, "completed",
               "a 'run' child of a cancelled job runs");
    let log = log.lock().unwrap().clone();
    assert!(!log.iter().any(|e| e.contains("cancel") || e.contains("explicit")), "{:?}", log);
    assert!(once(&log, "start run") > once(&log, "end P"), "{:?}", log);
    assert_eq!(one(&check, &format!("SELECT errors->0->>'error' FROM skiplock.all_jobs WHERE id = {}",
                                    cancel)).await,
               "cancelled: a job it depends on was discarded or cancelled");
}

#[tokio::test]
async fn bad_parents_write_nothing_and_bad_input_is_refused() {
    let mut app = connect(&url()).await;
    let check = connect(&direct_url()).await;
    let k = "t.deps.bad";
    check.batch_execute("CREATE TABLE IF NOT EXISTS t_deps_app (note text)").await.unwrap();
    let mut tx = app.transaction().await.unwrap();
    tx.batch_execute("INSERT INTO t_deps_app VALUES ('an order')").await.unwrap();
    let parent = enqueue(&tx, "t.deps.bad.parent", &json!({}), &EnqueueOptions::default())
        .await.unwrap();
    let unknown_key = EnqueueOptions { depends_on_keys: vec!["t.deps.no-such-key".into()],
                                       ..Default::default() };
    for (what, opts) in [("an unknown id", after(&[parent, i64::MAX])), ("an unknown key", unknown_key)] {
        let sp = tx.savepoint("enqueue").await.unwrap();
        assert_eq!(sqlstate(enqueue(&sp, k, &json!({}), &opts).await), "23503", "{}", what);
        sp.rollback().await.unwrap();
        // the caller's transaction goes on, and nothing of the child is in it
        assert_eq!(one_in(&tx, &count(k)).await, "0", "{}", what);
        assert_eq!(one_in(&tx, &format!("SELECT count(*) FROM skiplock.job_deps \
                                         WHERE parent_id = {}", parent)).await, "0", "{}", what);
        assert_eq!(one_in(&tx, "SELECT count(*) FROM t_deps_app").await, "1", "{}", what);
    }
    // a policy other than cancel or run: the statement the client builds, with a bad one
    let run = EnqueueOptions { on_parent_failure: Some(OnParentFailure::Run), ..after(&[parent]) };
    let bad = enqueue_sql(k, &json!({}), &run).unwrap().replace("'run'", "'sometimes'");
    assert!(bad.contains("on_parent_failure => 'sometimes'"), "{}", bad);
    let sp = tx.savepoint("policy").await.unwrap();
    assert_eq!(sqlstate(sp.simple_query(&bad).await.map(|_| ()).map_err(Error::from)), "22023");
    sp.rollback().await.unwrap();
    // a batch of no jobs, or of too many
    for n in [0, 1001] {
        let sp = tx.savepoint("batch").await.unwrap();
        let payloads = vec![json!({}); n];
        let r = enqueue_batch(&sp, k, &payloads, "t.deps.bad.cb", &BatchOptions::default()).await;
        assert_eq!(sqlstate(r), "22023", "a batch of {}", n);
        sp.rollback().await.unwrap();
    }
    assert_eq!(one_in(&tx, &count(k)).await, "0");
    tx.rollback().await.unwrap();
    assert_eq!(one(&check, "SELECT count(*) FROM t_deps_app").await, "0");
    assert_eq!(one(&check, &count(k)).await, "0");
    assert_eq!(one(&check, &count("t.deps.bad.parent")).await, "0");

    // refused before anything is sent
    let invalid = |r: Result<_, Error>| matches!(r, Err(Error::Invalid(_)));
    assert!(invalid("sometimes".parse::<OnParentFailure>().map(|_| ())));
    assert_eq!("cancel".parse::<OnParentFailure>().unwrap(), OnParentFailure::Cancel);
    let nul = EnqueueOptions { depends_on_keys: vec!["a\0b".into()], ..Default::default() };
    assert!(invalid(enqueue(&app, k, &json!({}), &nul).await.map(|_| ())));
    let both = EnqueueOptions { delay: Some(Duration::from_secs(1)),
                                run_at: Some(std::time::SystemTime::now()), ..after(&[parent]) };
    assert!(invalid(enqueue(&app, k, &json!({}), &both).await.map(|_| ())));
    let many = [JobSpec::new(k, json!({})).with(after(&[parent]))];
    assert!(invalid(enqueue_many(&app, &many, None).await.map(|_| ())), "enqueue_many with parents");
    let array = BatchOptions { callback_payload: Some(json!([1])), ..Default::default() };
    assert!(invalid(enqueue_batch(&app, k, &[json!({})], "t.deps.bad.cb", &array).await.map(|_| ())));
    assert_eq!(one(&check, &count(k)).await, "0");
}

/// The first column of the first row of `sql` on `c` (in its transaction).
async fn one_in(c: &tokio_postgres::Transaction<'_>, sql: &str) -> String {
    let rows = c.simple_query(sql).await.unwrap_or_else(|e| panic!("{}: {}", sql, e));
    rows.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(String::from),
        _ => None,
    }).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_claims_again_at_the_limits_wait_hint() {
    let app = connect(&url()).await;
    let check = connect(&direct_url()).await;
    let k = "deps.limited";
    one(&check, &format!("SELECT skiplock.limit_set('{}', rate => 5, per => '1 second')", k)).await;
    let jobs: Vec<JobSpec> = (0..15).map(|i| JobSpec::new(k, json!({"i": i}))).collect();
    enqueue_many(&app, &jobs, None).await.unwrap();
    // A poll of 6 s and no LISTEN (not even on a direct connection): only
    // the wait hint can make it claim again within the 4.5 s.
    let t = Instant::now();
    let w = Worker::builder(url()).owner("t-deps-limited").concurrency(10)
        .poll_interval(Duration::from_secs(6)).pooler(Pooler::Pooled)
        .handler(k, |job, _| async move { Ok(job.payload) })
        .build().unwrap().start().await.unwrap();
    let completed = format!("SELECT count(*) FROM skiplock.all_jobs WHERE kind = '{}' \
                             AND state = 'completed' AND attempt = 1", k);
    let all_done = wait_for(&check, &completed, "15", 10).await;
    let took = t.elapsed();
    w.shutdown().await.unwrap();
    // the most starts in any window of 1 s opening at a start
    let most = one(&check, &format!(
        "SELECT max((SELECT count(*) FROM skiplock.all_jobs b WHERE b.kind = a.kind \
                     AND b.attempted_at >= a.attempted_at \
                     AND b.attempted_at < a.attempted_at + interval '1 second')) \
         FROM skiplock.all_jobs a WHERE a.kind = '{}'", k)).await;
    one(&check, &format!("SELECT skiplock.limit_remove('{}')", k)).await;
    assert!(all_done, "not all 15 completed: {}", one(&check, &completed).await);
    assert!(took < Duration::from_millis(4500), "15 jobs at 5 a second took {:?}", took);
    assert_eq!(most, "5", "the most starts in a window of 1 s");
}
