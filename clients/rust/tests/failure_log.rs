//! A failed attempt is visible by default: `log::warn!` with the job's id,
//! kind and attempt and the handler's error.  Its own test binary: the
//! logger is process-wide.

mod common;
use common::*;
use skiplock::{HandlerError, Worker};
use std::sync::Mutex;
use std::time::Duration;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempt_is_logged_at_warn() {
    log::set_logger(&CAPTURE).unwrap();
    log::set_max_level(log::LevelFilter::Debug);
    let check = connect(&direct_url()).await;
    let kind = "t.logged";
    let id: i64 = one(&check, &format!("SELECT skiplock.enqueue('{}', backoff => 'fixed', \
                                        backoff_base => '10 minutes')", kind))
        .await.parse().unwrap();
    let w = Worker::builder(url()).poll_interval(Duration::from_millis(100))
        .handler(kind, |_job, _stop| async { Err(HandlerError::retry("card declined")) })
        .build().unwrap().start().await.unwrap();
    assert!(wait_for(&check, &format!("SELECT state || attempt FROM skiplock.all_jobs WHERE id = {}",
                                      id), "available1", 10).await);
    w.shutdown().await.unwrap();
    let want = format!("skiplock worker: job {} ({}) attempt 1 of 25 failed (retried): card declined",
                       id, kind);
    let lines = LINES.lock().unwrap();
    assert!(lines.iter().any(|(l, m)| *l == log::Level::Warn && *m == want), "{:?}", *lines);
}
