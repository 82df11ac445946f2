//! Shared by the integration tests: the harness's URLs, connections and
//! polling helpers.  The tests run against a real PostgreSQL, directly or
//! through PgBouncer in transaction mode (test.sh sets the variables); a
//! missing variable fails the test, it never skips.
#![allow(dead_code)]

use skiplock::Event;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{} is not set: run the tests with test.sh", name))
}

/// The URL of the mode under test (direct, or the pooler).
pub fn url() -> String {
    var("SKIPLOCK_TEST_URL")
}

/// The direct endpoint, for checks and for LISTEN.
pub fn direct_url() -> String {
    var("SKIPLOCK_TEST_DIRECT_URL")
}

pub fn pooled() -> bool {
    var("SKIPLOCK_TEST_MODE") == "pooled"
}

pub async fn connect(url: &str) -> Client {
    let (c, conn) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(conn);
    c
}

/// The first column of the first row of `sql` (direct), "" for none.
pub async fn one(c: &Client, sql: &str) -> String {
    for m in c.simple_query(sql).await.unwrap_or_else(|e| panic!("{}: {}", sql, e)) {
        if let SimpleQueryMessage::Row(r) = m {
            return r.get(0).unwrap_or("NULL").to_string();
        }
    }
    String::new()
}

/// Polls `sql` until it prints `want`; false after `secs`.
pub async fn wait_for(c: &Client, sql: &str, want: &str, secs: u64) -> bool {
    let end = tokio::time::Instant::now() + Duration::from_secs(secs);
    while tokio::time::Instant::now() < end {
        if one(c, sql).await == want {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The state, attempt and fencing of a job, as "state/attempt/fencing".
pub async fn job(c: &Client, id: i64) -> String {
    one(c, &format!("SELECT state || '/' || attempt || '/' || fencing FROM skiplock.all_jobs \
                     WHERE id = {}", id)).await
}

/// An event log a worker writes to, and the `on_event` callback that does.
pub fn event_log() -> (Arc<Mutex<Vec<String>>>, impl Fn(&Event) + Send + Sync + 'static) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    (log, move |e: &Event| l.lock().unwrap().push(format!("{:?}", e)))
}

/// A job enqueued with SQL (direct), returning its id.
pub async fn enqueue_sql(c: &Client, kind: &str, payload: &str) -> i64 {
    one(c, &format!("SELECT skiplock.enqueue('{}', '{}')", kind, payload)).await.parse().unwrap()
}

/// The path of an example binary built with the tests (`cargo test` builds
/// the examples next to the test binaries' `deps` directory).
pub fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>");
    let path = profile.join("examples").join(name);
    assert!(path.exists(), "{} is not built: run the tests with test.sh", path.display());
    path
}

/// No session of this database idles inside a transaction for long: the
/// tests that run meanwhile hold theirs for a second at most.
pub async fn assert_no_idle_in_transaction(check: &Client) {
    let idle = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                AND state LIKE 'idle in transaction%'";
    assert!(wait_for(check, idle, "0", 5).await, "a session idles in a transaction");
}

/// Child processes killed (SIGKILL) when dropped, so a failed test leaves
/// none behind.
pub struct Children(pub Vec<std::process::Child>);

impl Children {
    /// SIGKILLs the child with this pid and reaps it.
    pub fn kill(&mut self, pid: u32) {
        let i = self.0.iter().position(|c| c.id() == pid).expect("one of ours");
        let mut c = self.0.remove(i);
        c.kill().expect("SIGKILL");
        c.wait().expect("reaped");
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
