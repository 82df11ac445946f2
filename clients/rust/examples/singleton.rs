//! One replica of many runs the work: every replica runs this program with
//! the same lease name; one holds the lease and writes a row to
//! `lease_ticks` every `--every-ms`, each row in a fenced transaction, and
//! when it dies another takes over within about the ttl.
//!
//!   singleton --url URL [--name NAME] [--ttl-ms 2000] [--every-ms 100] [--ticks 0]
//!
//! `--ticks N` stops after N rows (0: never).  Prints `holding NAME token T
//! pid P` each time it takes the lease.

use skiplock::{sql, Error, Lease, Leases};
use std::time::Duration;
use tokio_postgres::NoTls;

struct Args {
    url: String,
    name: String,
    ttl: Duration,
    every: Duration,
    ticks: u64,
}

fn args() -> Result<Args, String> {
    let mut a = Args { url: std::env::var("DATABASE_URL").unwrap_or_default(),
                       name: "nightly-reconcile".into(), ttl: Duration::from_secs(2),
                       every: Duration::from_millis(100), ticks: 0 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{} needs a value", flag))?;
        let ms = || v.parse().map(Duration::from_millis).map_err(|e| format!("{}: {}", flag, e));
        match flag.as_str() {
            "--url" => a.url = v.clone(),
            "--name" => a.name = v.clone(),
            "--ttl-ms" => a.ttl = ms()?,
            "--every-ms" => a.every = ms()?,
            "--ticks" => a.ticks = v.parse().map_err(|e| format!("--ticks: {}", e))?,
            _ => return Err(format!("unknown option {}", flag)),
        }
    }
    Ok(a)
}

/// The work: a fenced row every `a.every`; returns how many it wrote.
async fn work(a: &Args, lease: Lease) -> Result<u64, Error> {
    println!("holding {} token {} pid {}", lease.name(), lease.fencing(), std::process::id());
    let (mut db, conn) = tokio_postgres::connect(&a.url, NoTls).await?;
    tokio::spawn(conn);
    let row = format!("INSERT INTO lease_ticks (name, fencing, pid) VALUES ({}, {}, {})",
                      sql::text(lease.name())?, lease.fencing(), std::process::id());
    let mut n = 0;
    while a.ticks == 0 || n < a.ticks {
        let tx = db.transaction().await?;
        lease.fence(&tx).await?; // Error::LeaseLost (SK001): the row is not written
        tx.batch_execute(&row).await?;
        tx.commit().await?;
        n += 1;
        tokio::time::sleep(a.every).await;
    }
    Ok(n)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let (db, conn) = tokio_postgres::connect(&a.url, NoTls).await?;
    tokio::spawn(conn);
    db.batch_execute("CREATE TABLE IF NOT EXISTS lease_ticks (at timestamptz NOT NULL DEFAULT \
                      clock_timestamp(), name text NOT NULL, fencing bigint NOT NULL, \
                      pid int NOT NULL)").await?;
    let leases = Leases::new(a.url.clone());
    let n = leases.run_singleton(&a.name, a.ttl, |lease| work(&a, lease)).await?;
    println!("done: {} rows", n);
    Ok(())
}
