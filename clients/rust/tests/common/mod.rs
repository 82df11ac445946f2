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

/// The jobs a schedule fired, by their unique keys `cron:NAME:<fire time>`
/// over every job, finished or not.
pub struct Fires {
    pub jobs: i64,
    /// Distinct fire times.
    pub times: i64,
    pub completed: i64,
    /// Seconds from the first fire time to the last, plus one.
    pub span: i64,
}

pub async fn cron_fires(c: &Client, name: &str) -> Fires {
    let prefix = format!("cron:{}:", name);
    let row = one(c, &format!(
        "SELECT count(*) || '/' || count(DISTINCT unique_key) || '/' \
                || count(*) FILTER (WHERE state = 'completed') || '/' \
                || coalesce(extract(epoch FROM max(f) - min(f))::bigint + 1, 0) \
         FROM (SELECT unique_key, state, substr(unique_key, {})::timestamptz AS f \
               FROM skiplock.all_jobs WHERE starts_with(unique_key, '{}')) j",
        prefix.len() + 1, prefix)).await;
    let v: Vec<i64> = row.split('/').map(|x| x.parse().unwrap()).collect();
    Fires { jobs: v[0], times: v[1], completed: v[2], span: v[3] }
}

/// Exactly one job per fire time, every second from the first fire time
/// to the last (an `@every 1s` schedule), at least `min` of them, all
/// completed.
pub async fn assert_once_per_second(c: &Client, name: &str, min: i64) -> Fires {
    let f = cron_fires(c, name).await;
    assert!(f.jobs >= min, "{}: {} jobs, want {} or more", name, f.jobs, min);
    assert_eq!(f.jobs, f.times, "{}: two jobs for one fire time", name);
    assert_eq!(f.span, f.times, "{}: a fire time was skipped between the first and the last", name);
    assert_eq!(f.completed, f.jobs, "{}: not every job was completed", name);
    f
}

/// `url` with its database replaced by `db`.
pub fn with_db(url: &str, db: &str) -> String {
    let (base, rest) = url.rsplit_once('/').expect("a URL with a database");
    let query = rest.find('?').map(|i| &rest[i..]).unwrap_or("");
    format!("{}/{}{}", base, db, query)
}

/// A new empty database `name` (dropped first if it exists); returns the
/// connection to `postgres` that made it, to drop it with.
pub async fn scratch_db(name: &str) -> Client {
    let admin = connect(&with_db(&direct_url(), "postgres")).await;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", name)).await.unwrap();
    admin.batch_execute(&format!("CREATE DATABASE {}", name)).await.unwrap();
    admin
}
