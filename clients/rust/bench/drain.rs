//! The Rust client's benchmark.
//!
//!   DATABASE_URL=... N=100000 CONCURRENCY=64 PREFETCH=448 cargo.sh bench --bench drain
//!       enqueues N no-op jobs (batches of 5,000 in one statement each),
//!       VACUUM ANALYZE and CHECKPOINT (as bench/drain.c), then
//!       drains them with one Worker (prefetch: PREFETCH, default 448, as
//!       the C worker's best drain), and prints one JSON line:
//!       {"jobs_per_s":..., "rss_kib":..., "concurrency":..., "prefetch":...}
//!       jobs_per_s: N over the time from the worker's start until its
//!       graceful stop has recorded the last outcome; rss_kib: peak RSS.
//!   LATENCY=1: enqueues one job at a time at a steady 500 jobs/s for 10 s
//!       (each carrying its enqueue time) while the worker runs, and prints
//!       {"p50_ms":..., "p99_ms":..., "jobs":...}, enqueue -> handler start.

use serde_json::json;
use skiplock::{enqueue, EnqueueOptions, Worker};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;
use tokio_postgres::NoTls;

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros() as u64
}

fn peak_rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines().find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok()).unwrap_or(0)
}

async fn drain(url: &str, n: usize, conc: usize, prefetch: usize)
               -> Result<(), Box<dyn std::error::Error>> {
    let (c, conn) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(conn);
    let kind = format!("bench.noop.{}", std::process::id());
    let mut left = n;
    while left > 0 {
        let b = left.min(5000);
        c.simple_query(&format!("SELECT count(skiplock.enqueue('{}')) FROM generate_series(1, {})",
                                kind, b)).await?;
        left -= b;
    }
    // As bench/drain.c: every drain starts from the same state.
    c.simple_query("VACUUM ANALYZE skiplock.jobs").await?;
    c.simple_query("CHECKPOINT").await?;
    let done = Arc::new(AtomicUsize::new(0));
    let all = Arc::new(Notify::new());
    let (d, a) = (done.clone(), all.clone());
    let t = Instant::now();
    let w = Worker::builder(url).concurrency(conc).prefetch(prefetch)
        .handler(kind.as_str(), move |_, _| {
            let (d, a) = (d.clone(), a.clone());
            async move {
                if d.fetch_add(1, Ordering::Relaxed) + 1 == n {
                    a.notify_one();
                }
                Ok(serde_json::Value::Null)
            }
        })
        .build()?.start().await?;
    all.notified().await;
    w.shutdown().await?;
    let secs = t.elapsed().as_secs_f64();
    let completed = c.simple_query(&format!(
        "SELECT count(*) FROM skiplock.all_jobs WHERE kind = '{}' AND state = 'completed'", kind)).await?;
    let ok = matches!(completed.first(), Some(tokio_postgres::SimpleQueryMessage::Row(r))
                      if r.get(0) == Some(n.to_string().as_str()));
    if !ok {
        return Err("not every job was completed".into());
    }
    println!("{}", json!({"jobs_per_s": (n as f64 / secs).round(), "rss_kib": peak_rss_kib(),
                          "concurrency": conc, "prefetch": prefetch}));
    Ok(())
}

async fn latency(url: &str, conc: usize) -> Result<(), Box<dyn std::error::Error>> {
    let (c, conn) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(conn);
    let kind = format!("bench.latency.{}", std::process::id());
    let samples = Arc::new(Mutex::new(Vec::new()));
    let s = samples.clone();
    let w = Worker::builder(url).concurrency(conc)
        .handler(kind.as_str(), move |job, _| {
            let s = s.clone();
            async move {
                let t0 = job.payload["t"].as_u64().unwrap_or(0);
                s.lock().unwrap().push(now_us().saturating_sub(t0));
                Ok(serde_json::Value::Null)
            }
        })
        .build()?.start().await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut tick = tokio::time::interval(Duration::from_millis(2));
    let opts = EnqueueOptions::default();
    for _ in 0..5000 {
        tick.tick().await;
        enqueue(&c, &kind, &json!({"t": now_us()}), &opts).await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    w.shutdown().await?;
    let mut v = samples.lock().unwrap().clone();
    v.sort_unstable();
    let pct = |p: f64| v.get(((v.len() as f64 * p) as usize).min(v.len().saturating_sub(1)))
        .map_or(0.0, |us| *us as f64 / 1000.0);
    println!("{}", json!({"p50_ms": pct(0.50), "p99_ms": pct(0.99), "jobs": v.len(),
                          "concurrency": conc}));
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL")?;
    let conc = env_num("CONCURRENCY", 64);
    if std::env::var("LATENCY").map_or(false, |v| v == "1") {
        latency(&url, conc).await
    } else {
        drain(&url, env_num("N", 100_000), conc, env_num("PREFETCH", 448)).await
    }
}
