//! Periodic jobs, direct and pooled: workers fire the database's schedules
//! (skiplock.cron_tick) exactly once per fire time, declare schedules at
//! start (skiplock.schedules_declare), survive terminated backends, and
//! cost one tick per five minutes when idle.  One test at a time (every
//! worker fires every schedule of the database, and one test terminates
//! backends); its own binary, as the logger is process-wide.

mod common;
use common::*;
use serde_json::json;
use skiplock::{declare_schedules, DeclareAction, Error, Event, Schedule, Worker, WorkerBuilder,
               WorkerHandle};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};
use tokio_postgres::Client;

static BUSY: AtomicBool = AtomicBool::new(false);

/// Held by the test that runs; released when dropped, even by a panic.
struct Serial;

/// Waits for the other tests, then returns the turn and a direct
/// connection for checks (opened now: a test that terminates backends
/// ends those of the tests that wait), with no schedule of the tests left.
async fn serial() -> (Serial, Client) {
    while BUSY.swap(true, Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let turn = Serial;
    let check = connect(&direct_url()).await;
    one(&check, "DELETE FROM skiplock.schedules WHERE name LIKE 't.cron.%'").await;
    (turn, check)
}

impl Drop for Serial {
    fn drop(&mut self) {
        BUSY.store(false, Ordering::SeqCst);
    }
}

static LINES: Mutex<Vec<(log::Level, String)>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, r: &log::Record) {
        LINES.lock().unwrap().push((r.level(), r.args().to_string()));
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture;
static LOGGER: Once = Once::new();

/// The warnings logged so far that contain `what`.
fn warnings(what: &str) -> usize {
    LOGGER.call_once(|| {
        log::set_logger(&CAPTURE).unwrap();
        log::set_max_level(log::LevelFilter::Info);
    });
    LINES.lock().unwrap().iter().filter(|(l, m)| *l == log::Level::Warn && m.contains(what)).count()
}

/// The ticks a worker reported (Event::CronTicked) and the jobs they enqueued.
#[derive(Clone, Default)]
struct Ticks {
    ticks: Arc<AtomicI64>,
    enqueued: Arc<AtomicI64>,
}

impl Ticks {
    fn hook(&self) -> impl Fn(&Event) + Send + Sync + 'static {
        let t = self.clone();
        move |e| {
            if let Event::CronTicked { enqueued, .. } = e {
                t.ticks.fetch_add(1, Ordering::SeqCst);
                t.enqueued.fetch_add(*enqueued, Ordering::SeqCst);
            }
        }
    }
    fn ticks(&self) -> i64 {
        self.ticks.load(Ordering::SeqCst)
    }
}

fn worker(owner: &str, kind: &str, ticks: &Ticks) -> WorkerBuilder {
    warnings(""); /* the logger is installed */
    Worker::builder(url()).owner(owner).poll_interval(Duration::from_millis(100))
        .handler(kind, |job, _| async move { Ok(json!({ "job": job.id })) })
        .on_event(ticks.hook())
}

async fn stop(workers: Vec<WorkerHandle>) {
    for w in workers {
        w.shutdown().await.unwrap();
    }
}

/// Stops firing `name` and waits until its jobs are all completed.
async fn disable_and_drain(check: &Client, name: &str) {
    one(check, &format!("UPDATE skiplock.schedules SET enabled = false WHERE name = '{}'", name)).await;
    let open = format!("SELECT count(*) FROM skiplock.all_jobs WHERE starts_with(unique_key, \
                        'cron:{}:') AND state <> 'completed'", name);
    assert!(wait_for(check, &open, "0", 15).await, "{}: jobs left unfinished", name);
}

fn every_second(name: &str) -> Schedule {
    Schedule::new(name, "@every 1s", name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_fire_each_fire_time_once_and_run_the_jobs() {
    let (_turn, check) = serial().await;
    let name = "t.cron.three";
    let ticks = [Ticks::default(), Ticks::default(), Ticks::default()];
    let start = |o: &'static str, t: &Ticks| worker(o, name, t).schedule(every_second(name)).build()
        .unwrap().start();
    let (a, b, c) = tokio::join!(start("t-cron-a", &ticks[0]), start("t-cron-b", &ticks[1]),
                                 start("t-cron-c", &ticks[2]));
    let workers = vec![a.unwrap(), b.unwrap(), c.unwrap()];
    tokio::time::sleep(Duration::from_secs(6)).await;
    disable_and_drain(&check, name).await;
    stop(workers).await;
    let f = assert_once_per_second(&check, name, 5).await;
    let enqueued: i64 = ticks.iter().map(|t| t.enqueued.load(Ordering::SeqCst)).sum();
    assert_eq!(enqueued, f.jobs, "the workers' ticks enqueued them all");
    for (i, t) in ticks.iter().enumerate() {
        assert!(t.ticks() >= 3, "worker {} ticked {} times in 6 s", i, t.ticks());
    }
    assert_no_idle_in_transaction(&check).await;
    one(&check, &format!("DELETE FROM skiplock.schedules WHERE name = '{}'", name)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_cron_off_fires_nothing() {
    let (_turn, check) = serial().await;
    let name = "t.cron.off";
    let ticks = Ticks::default();
    let off = worker("t-cron-off", name, &ticks).schedule(every_second(name)).cron(false)
        .build().unwrap().start().await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(one(&check, &format!("SELECT last_fire IS NULL FROM skiplock.schedules \
                                     WHERE name = '{}'", name)).await, "t", "declared, never fired");
    assert_eq!(cron_fires(&check, name).await.jobs, 0);
    assert_eq!(ticks.ticks(), 0);
    let on = worker("t-cron-on", name, &ticks).build().unwrap().start().await.unwrap();
    let fired = format!("SELECT count(*) > 0 FROM skiplock.all_jobs \
                         WHERE starts_with(unique_key, 'cron:{}:')", name);
    assert!(wait_for(&check, &fired, "t", 5).await, "the same schedule, cron on: fired");
    disable_and_drain(&check, name).await;
    stop(vec![off, on]).await;
    one(&check, &format!("DELETE FROM skiplock.schedules WHERE name = '{}'", name)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_deploy_never_makes_a_schedule_flap_and_force_rolls_back() {
    let (_turn, check) = serial().await;
    let name = "t.cron.roll";
    let (v1, v2) = (Schedule::new(name, "0 2 * * *", name), Schedule::new(name, "0 3 * * *", name));
    let ticks = Ticks::default();
    let deploy = |s: &Schedule, force: bool| {
        worker("t-cron-roll", name, &ticks).schedule(s.clone()).schedules_force(force).build().unwrap()
            .start()
    };
    let row = format!("SELECT expression || ' ' || updated_at FROM skiplock.schedules WHERE name = '{}'",
                      name);
    let superseded = format!("schedule \"{}\" superseded, not applied: kept the definition", name);
    let warned = warnings(&superseded);
    stop(vec![deploy(&v1, false).await.unwrap()]).await;
    assert!(one(&check, &row).await.starts_with("0 2 * * * "), "v1 created it");
    stop(vec![deploy(&v2, false).await.unwrap()]).await;
    let v2_row = one(&check, &row).await;
    assert!(v2_row.starts_with("0 3 * * * "), "v2 updated it: {}", v2_row);
    for i in 0..10 {
        let v = if i % 2 == 0 { &v1 } else { &v2 };
        stop(vec![deploy(v, false).await.unwrap()]).await;
        assert_eq!(one(&check, &row).await, v2_row, "start {}: the definition moved", i);
    }
    assert_eq!(warnings(&superseded) - warned, 5, "each start of v1 logged superseded");
    let again = declare_schedules(&check, &[v1.clone(), v2.clone().queue("other")], false).await;
    assert!(matches!(again, Err(Error::Permanent { .. })), "one name twice: {:?}", again);
    let d = declare_schedules(&check, &[v1.clone()], false).await.unwrap();
    assert_eq!((d.len(), d[0].action), (1, DeclareAction::Superseded));
    assert!(d[0].detail.as_deref().unwrap_or("").starts_with("kept the definition set at"), "{:?}", d);
    stop(vec![deploy(&v1, true).await.unwrap()]).await;
    assert!(one(&check, &row).await.starts_with("0 2 * * * "), "forced: v1 again");
    one(&check, &format!("DELETE FROM skiplock.schedules WHERE name = '{}'", name)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_schedule_fails_start_with_the_database_message_and_writes_nothing() {
    let (_turn, check) = serial().await;
    let good = Schedule::new("t.cron.good", "0 4 * * *", "t.cron.good");
    let cases = [
        (vec![Schedule::new("nightly", "30 25 * * *", "report")],
         "schedule 1 (\"nightly\"): invalid cron expression \"30 25 * * *\": hour field, \
          character 4: 25 is out of range 0-23"),
        (vec![good.clone(), Schedule::new("nightly", "0 3 * * *", "report").zone("Mars/Base")],
         "schedule 2 (\"nightly\"): unknown time zone \"Mars/Base\" (not in the tz database)"),
    ];
    let ticks = Ticks::default();
    for (schedules, want) in cases {
        let t0 = Instant::now();
        let e = worker("t-cron-bad", "report", &ticks).schedules(schedules).build().unwrap().start()
            .await.err().expect("start() accepted a bad schedule");
        assert!(t0.elapsed() < Duration::from_secs(5), "start() took {:?}", t0.elapsed());
        assert!(matches!(e, Error::Permanent { .. }), "{:?}", e);
        assert_eq!(e.sqlstate(), Some("22023"));
        assert_eq!(e.to_string(), want);
        let written = "SELECT (SELECT count(*) FROM skiplock.schedules WHERE name IN ('nightly', \
                       't.cron.good')) + (SELECT count(*) FROM skiplock.schedule_declarations \
                       WHERE name IN ('nightly', 't.cron.good'))";
        assert_eq!(one(&check, written).await, "0", "nothing written");
    }
    assert_eq!(ticks.ticks(), 0, "no worker ran");
}

/// The ticks that reported schedules they could not evaluate.
fn failed_ticks(failed: &Arc<AtomicI64>) -> impl Fn(&Event) + Send + Sync + 'static {
    let f = failed.clone();
    move |e| {
        if let Event::CronTicked { failed: n, .. } = e {
            f.fetch_add(i64::from(*n > 0), Ordering::SeqCst);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_the_tick_cannot_evaluate_is_logged_once_and_the_others_fire() {
    let (_turn, check) = serial().await;
    /* written past the checks, as a stored value the tick cannot read */
    one(&check, "INSERT INTO skiplock.schedules (name, expression, zone, kind, next_fire) VALUES \
                 ('t.cron.broken', '* * * * *', 'Mars/Base', 't.cron.broken', now())").await;
    let name = "t.cron.fine";
    let failed = Arc::new(AtomicI64::new(0));
    let what = "cron: 1 schedule(s) failed: schedule \"t.cron.broken\": time zone \"Mars/Base\"";
    let warned = warnings(what);
    let w = worker("t-cron-broken", name, &Ticks::default()).on_event(failed_ticks(&failed))
        .schedule(every_second(name)).build().unwrap().start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    disable_and_drain(&check, name).await;
    w.shutdown().await.unwrap();
    assert!(failed.load(Ordering::SeqCst) >= 3, "ticks that met it: {}", failed.load(Ordering::SeqCst));
    assert_eq!(warnings(what) - warned, 1, "one warning a minute");
    assert_once_per_second(&check, name, 3).await;
    one(&check, "DELETE FROM skiplock.schedules WHERE name IN ('t.cron.broken', 't.cron.fine')").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_backends_while_ticking_cost_no_fire_time() {
    let (_turn, check) = serial().await;
    let name = "t.cron.term";
    let ticks = Ticks::default();
    let mut workers = vec![];
    for o in ["t-cron-term-a", "t-cron-term-b"] {
        workers.push(worker(o, name, &ticks).schedule(every_second(name)).build().unwrap().start()
            .await.unwrap());
    }
    let kill = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                WHERE datname = current_database() AND pid <> pg_backend_pid() \
                AND backend_type = 'client backend'";
    for round in 0..3 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_ne!(one(&check, kill).await, "0", "round {}: no backend to terminate", round);
        let at = one(&check, "SELECT clock_timestamp()").await;
        let later = format!("SELECT count(*) > 0 FROM skiplock.all_jobs WHERE starts_with(unique_key, \
                             'cron:{}:') AND created_at > '{}'", name, at);
        assert!(wait_for(&check, &later, "t", 5).await, "round {}: no fire time after it", round);
    }
    disable_and_drain(&check, name).await;
    stop(workers).await;
    assert_once_per_second(&check, name, 5).await;
    assert_no_idle_in_transaction(&check).await;
    one(&check, &format!("DELETE FROM skiplock.schedules WHERE name = '{}'", name)).await;
}

/// The cron_tick statements of this database so far (pg_stat_statements).
async fn statements(check: &Client) -> i64 {
    one(check, "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE dbid = \
                (SELECT oid FROM pg_database WHERE datname = current_database()) \
                AND query LIKE '%skiplock.cron_tick()%'").await.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_ticks_once_per_five_minutes_and_wakes_on_notify() {
    let (_turn, check) = serial().await;
    one(&check, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements").await;
    let expr = one(&check, "SELECT to_char(now() AT TIME ZONE 'UTC' + interval '1 hour', \
                            'MI HH24') || ' * * *'").await;
    let hourly = Schedule::new("t.cron.idle", &expr, "t.cron.idle");
    declare_schedules(&check, &[hourly], false).await.unwrap(); /* before: no notification later */
    let ticks = Ticks::default();
    let mut b = worker("t-cron-idle", "t.cron.idle", &ticks).handler("t.cron.wake", |_, _| async {
        Ok(json!(null))
    });
    if pooled() {
        b = b.direct_url(direct_url()); /* LISTEN beside the pooler */
    }
    let before = statements(&check).await;
    let w = b.build().unwrap().start().await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = ticks.ticks();
    assert!((1..=2).contains(&settled), "one tick at start (and one after LISTEN): {}", settled);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(ticks.ticks(), settled, "an idle worker ticked again within 10 s");
    assert_eq!(statements(&check).await - before, ticks.ticks(), "the database saw as many");
    declare_schedules(&check, &[every_second("t.cron.wake")], false).await.unwrap();
    let fired = "SELECT count(*) > 0 FROM skiplock.all_jobs WHERE starts_with(unique_key, 'cron:t.cron.wake:')";
    assert!(wait_for(&check, fired, "t", 4).await, "the notification did not wake the idle worker");
    w.shutdown().await.unwrap();
    one(&check, "DELETE FROM skiplock.schedules WHERE name IN ('t.cron.idle', 't.cron.wake')").await;
}
