//! The conformance suite's worker (tests/conformance/README.md): handlers
//! for the six conf.* kinds, configured from the suite's environment; stops
//! gracefully on SIGTERM and exits 0.  PREFETCH (default 0) sets the
//! worker's prefetch, to run the suite with prefetched jobs;
//! CONFORMANCE_CRON=1 makes it fire schedules (cron_languages.sh).

use serde_json::{json, Value};
use skiplock::{CancellationToken, HandlerError, HandlerResult, Job, Worker};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;
use tokio_postgres::{Client, NoTls};

struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Info
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!("{} {}", r.level(), r.args());
        }
    }
    fn flush(&self) {}
}

/// The handlers' own connection, for their effects (reopened when lost).
struct Effects {
    url: String,
    owner: String,
    client: Mutex<Option<Client>>,
}

impl Effects {
    async fn effect(&self, job: &Job) -> Result<(), skiplock::Error> {
        let mut guard = self.client.lock().await;
        if guard.as_ref().map_or(true, |c| c.is_closed()) {
            let (c, conn) = tokio_postgres::connect(&self.url, NoTls).await?;
            tokio::spawn(conn);
            *guard = Some(c);
        }
        let c = guard.as_ref().expect("connected above");
        let q = format!("SELECT conformance.effect({}, {}, {}, {})", job.id, job.fencing,
                        skiplock::sql::text(&self.owner)?, skiplock::sql::jsonb(&job.payload)?);
        skiplock::protocol::fenced(c.simple_query(&q).await.map_err(Into::into), job).map(|_| ())
    }

    /// conf.ok: the effect, then the result.
    async fn ok(&self, job: &Job) -> HandlerResult {
        self.effect(job).await?;
        Ok(json!({"kind": job.kind, "attempt": job.attempt}))
    }
}

fn ms(v: &Value) -> Duration {
    Duration::from_millis(v["ms"].as_u64().unwrap_or(0))
}

async fn handle(fx: Arc<Effects>, job: Job, _cancel: CancellationToken) -> HandlerResult {
    let a = job.attempt;
    match job.kind.as_str() {
        "conf.retry" if i64::from(a) < job.payload["until"].as_i64().unwrap_or(0) => {
            Err(HandlerError::retry(format!("conf.retry attempt {}", a)))
        }
        "conf.fail" => Err(HandlerError::retry(format!("conf.fail attempt {}", a))),
        "conf.discard" => Err(HandlerError::discard(format!("conf.discard attempt {}", a))),
        "conf.sleep" => {
            tokio::time::sleep(ms(&job.payload)).await;
            fx.ok(&job).await
        }
        "conf.hang" if a == 1 => {
            tokio::time::sleep(ms(&job.payload)).await;
            Ok(json!({"kind": job.kind, "attempt": a}))
        }
        _ => fx.ok(&job).await,
    }
}

fn duration(s: &str) -> Duration {
    let (n, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = n.parse().expect("a duration like 2s or 500ms");
    match unit {
        "ms" => Duration::from_millis(n),
        "s" | "" => Duration::from_secs(n),
        _ => panic!("unknown duration unit in {}", s),
    }
}

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    if log::set_logger(&StderrLog).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
    let url = std::env::var("DATABASE_URL")?;
    let owner = env("CONFORMANCE_OWNER", "conformance-rust");
    let fx = Arc::new(Effects { url: url.clone(), owner: owner.clone(), client: Mutex::new(None) });
    let mut b = Worker::builder(&url)
        .owner(owner)
        .concurrency(env("CONFORMANCE_CONCURRENCY", "4").parse()?)
        .prefetch(env("PREFETCH", "0").parse()?)
        .lease(duration(&env("CONFORMANCE_LEASE", "2s")))
        .poll_interval(Duration::from_millis(200))
        .rescue_every(Duration::from_millis(250))
        .shutdown_timeout(Duration::from_secs(20))
        // as the C adapters: no cron unless cron_languages.sh asks
        .cron(env("CONFORMANCE_CRON", "0") == "1")
        .on_event(|e| log::info!("{:?}", e));
    if let Ok(d) = std::env::var("DIRECT_DATABASE_URL") {
        b = b.direct_url(d);
    }
    for kind in ["conf.ok", "conf.retry", "conf.fail", "conf.discard", "conf.sleep", "conf.hang"] {
        let fx = fx.clone();
        b = b.handler(kind, move |job, cancel| handle(fx.clone(), job, cancel));
    }
    let worker = b.build()?.start().await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    term.recv().await;
    log::info!("SIGTERM: draining");
    worker.shutdown().await?;
    Ok(())
}
