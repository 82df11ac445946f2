//! Periodic jobs declared in code: a worker that declares its schedule at
//! start and runs the jobs the schedule enqueues.  Run it on every replica:
//! the database fires each fire time once for the fleet.
//!
//!   cron --url URL [--name nightly-report] [--expression "0 3 * * *"]
//!        [--zone Europe/Berlin] [--run-ms 0]
//!
//! `--run-ms N` stops gracefully after N ms (0: at Ctrl-C).  Prints `ran
//! JOB_ID fired_for NAME` for each job it runs.

use serde_json::json;
use skiplock::{CatchUp, Job, Schedule, Worker};
use std::time::Duration;

struct Args {
    url: String,
    name: String,
    expression: String,
    zone: String,
    run: Duration,
}

fn args() -> Result<Args, String> {
    let mut a = Args { url: std::env::var("DATABASE_URL").unwrap_or_default(),
                       name: "nightly-report".into(), expression: "0 3 * * *".into(),
                       zone: "Europe/Berlin".into(), run: Duration::ZERO };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{} needs a value", flag))?;
        match flag.as_str() {
            "--url" => a.url = v,
            "--name" => a.name = v,
            "--expression" => a.expression = v,
            "--zone" => a.zone = v,
            "--run-ms" => a.run = Duration::from_millis(v.parse().map_err(|e| format!("--run-ms: {}", e))?),
            _ => return Err(format!("unknown option {}", flag)),
        }
    }
    Ok(a)
}

/// The job each fire time enqueues (its payload is the schedule's).
async fn report(job: Job) -> skiplock::HandlerResult {
    println!("ran {} fired_for {}", job.id, job.payload["schedule"]);
    Ok(json!({ "format": job.payload["format"] }))
}

async fn run(a: Args) -> Result<(), skiplock::Error> {
    let nightly = Schedule::new(&a.name, &a.expression, "report.build")
        .zone(&a.zone)
        .payload(json!({ "schedule": a.name, "format": "pdf" }))
        .catch_up(CatchUp::Latest)
        .max_attempts(3);
    let worker = Worker::builder(&a.url)
        .handler("report.build", |job, _cancel| report(job))
        .schedule(nightly) // applied at start(); cron is on by default
        .build()?
        .start()
        .await?;
    if a.run.is_zero() {
        let _ = tokio::signal::ctrl_c().await;
    } else {
        tokio::time::sleep(a.run).await;
    }
    worker.shutdown().await
}

#[tokio::main]
async fn main() {
    let a = args().unwrap_or_else(|e| {
        eprintln!("cron: {}", e);
        std::process::exit(2);
    });
    if let Err(e) = run(a).await {
        eprintln!("cron: {}", e);
        std::process::exit(1);
    }
}
