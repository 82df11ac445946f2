//! Seed scenario: another tool's migrator (sqlx) takes its session-scoped
//! advisory lock through the transaction pooler and never releases it; the
//! pooler hands that server connection to everyone else with the lock still
//! held, and the next sqlx boot waits on it.  Neither the Rust worker
//! (through the same pooler) nor `skiplock migrate up` (direct) may be
//! stopped by it: neither takes an advisory lock.

mod common;
use common::*;
use serde_json::json;
use skiplock::Worker;
use std::process::Command;
use std::time::{Duration, Instant};

/// CRC-32 (ISO-HDLC, as sqlx and zlib compute it).
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for b in data {
        crc ^= u32::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// sqlx's migration lock key for a database (generate_lock_id).
fn sqlx_lock_id(database: &str) -> i64 {
    0x3d32_ad9e_i64 * i64::from(crc32(database.as_bytes()))
}

fn migrate_up(dir: &std::path::Path) -> std::process::ExitStatus {
    let bin = std::env::var("SKL_BIN").expect("SKL_BIN is not set: run the tests with test.sh");
    let mut child = Command::new(bin)
        .args(["migrate", "up", "--url", &direct_url(), "--dir"]).arg(dir)
        .args(["--max-wait", "20s"])
        .spawn().expect("skiplock migrate");
    let end = Instant::now() + Duration::from_secs(40);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("skiplock migrate up did not finish within 40 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_sqlx_migration_lock_stops_neither_the_worker_nor_migrate() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926, "the CRC-32 check value");
    let check = connect(&direct_url()).await;
    let key = sqlx_lock_id(&one(&check, "SELECT current_database()").await);
    let leaker = connect(&url()).await; /* stays open for the whole test */
    one(&leaker, &format!("SELECT pg_advisory_lock({})", key)).await;
    let held = format!("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted \
                        AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                        AND ((classid::bigint << 32) | objid::bigint) = {}", key);
    assert_eq!(one(&check, &held).await, "1", "the leaked lock is held");
    assert_eq!(one(&check, &format!("SELECT pg_try_advisory_lock({})", key)).await, "f",
               "a sqlx migrator would wait on it");

    let kind = "t.seed.leak";
    for i in 0..20 {
        enqueue_sql(&check, kind, &format!("{{\"i\": {}}}", i)).await;
    }
    let w = Worker::builder(url()).owner("t-seed").concurrency(4)
        .poll_interval(Duration::from_millis(100))
        .handler(kind, |job, _| async move { Ok(json!({"i": job.payload["i"]})) })
        .build().unwrap().start().await.unwrap();

    let dir = std::env::temp_dir().join(format!("skl-seed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("0001_after_leak.sql"), "CREATE TABLE seed_after_leak (id int);\n")
        .unwrap();
    let t = Instant::now();
    let st = tokio::task::spawn_blocking(move || migrate_up(&dir)).await.unwrap();
    assert!(st.success(), "skiplock migrate up: {}", st);
    assert!(t.elapsed() < Duration::from_secs(15), "migrate took {:?}", t.elapsed());
    assert_eq!(one(&check, "SELECT to_regclass('seed_after_leak') IS NOT NULL").await, "t");

    let done = format!("SELECT count(*) FROM skiplock.all_jobs WHERE kind = '{}' AND state = 'completed'",
                       kind);
    assert!(wait_for(&check, &done, "20", 20).await, "the worker did not drain its jobs");
    w.shutdown().await.unwrap();
    assert_eq!(one(&check, &held).await, "1", "the lock was still leaked throughout");
    drop(leaker);
}
