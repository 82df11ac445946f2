//! enqueue: one `SELECT skiplock.enqueue(...)` on the connection the caller
//! gives, so the job commits or rolls back with the caller's transaction.

use crate::error::Error;
use crate::sql;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_postgres::GenericClient;

/// The retry strategy of a job (docs/protocol.md, "The retry decision").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backoff {
    Full,
    Equal,
    Decorrelated,
    Exponential,
    Fixed,
}

impl Backoff {
    pub fn as_str(self) -> &'static str {
        match self {
            Backoff::Full => "full",
            Backoff::Equal => "equal",
            Backoff::Decorrelated => "decorrelated",
            Backoff::Exponential => "exponential",
            Backoff::Fixed => "fixed",
        }
    }
}

/// What `enqueue` may set besides kind and payload; every field is optional
/// and defaults to the SQL function's default.
#[derive(Clone, Debug, Default)]
pub struct EnqueueOptions {
    /// The queue (default `default`).
    pub queue: Option<String>,
    /// When the job is due (default now).  Exclusive with `delay`.
    pub run_at: Option<SystemTime>,
    /// Due this long after the transaction's `now()`.  Exclusive with `run_at`.
    pub delay: Option<Duration>,
    /// Higher runs first (default 0).
    pub priority: Option<i32>,
    /// At most one available or running job holds this key; enqueue returns
    /// the holder's id when it is taken.
    pub unique_key: Option<String>,
    /// Attempts before the job is discarded (default 25).
    pub max_attempts: Option<i32>,
    /// The handler's time limit (default none).
    pub timeout: Option<Duration>,
    pub backoff: Option<Backoff>,
    pub backoff_base: Option<Duration>,
    pub backoff_cap: Option<Duration>,
}

/// Enqueues one job on `client` (a `Client` or a `Transaction`, or whatever
/// derefs to one, like a pooled connection) and returns its id.  Inside a
/// transaction the job exists only if that transaction commits.
pub async fn enqueue<C: GenericClient + Sync>(
    client: &C,
    kind: &str,
    payload: &serde_json::Value,
    opts: &EnqueueOptions,
) -> Result<i64, Error> {
    let q = enqueue_sql(kind, payload, opts)?;
    let rows = crate::conn::select(client.client(), &q).await?;
    rows.first()
        .and_then(|r| r.get(0))
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Error::protocol("skiplock.enqueue returned no id"))
}

/// The statement `enqueue` sends.
pub fn enqueue_sql(
    kind: &str,
    payload: &serde_json::Value,
    o: &EnqueueOptions,
) -> Result<String, Error> {
    let mut args = vec![format!("kind => {}", sql::text(kind)?)];
    args.push(format!("payload => {}", sql::jsonb(payload)?));
    if let Some(q) = &o.queue {
        args.push(format!("queue => {}", sql::text(q)?));
    }
    if let Some(at) = run_at(o)? {
        args.push(format!("run_at => {}", at));
    }
    if let Some(p) = o.priority {
        args.push(format!("priority => {}", p));
    }
    if let Some(k) = &o.unique_key {
        args.push(format!("unique_key => {}", sql::text(k)?));
    }
    if let Some(m) = o.max_attempts {
        args.push(format!("max_attempts => {}", m));
    }
    let durations = [("timeout", o.timeout), ("backoff_base", o.backoff_base),
                     ("backoff_cap", o.backoff_cap)];
    for (name, d) in durations {
        if let Some(d) = d {
            args.push(format!("{} => {}", name, sql::interval(d)));
        }
    }
    if let Some(b) = o.backoff {
        args.push(format!("backoff => '{}'", b.as_str()));
    }
    Ok(format!("SELECT skiplock.enqueue({named})", named = args.join(", ")))
}

fn run_at(o: &EnqueueOptions) -> Result<Option<String>, Error> {
    match (o.run_at, o.delay) {
        (Some(_), Some(_)) => Err(Error::invalid("run_at and delay are exclusive")),
        (Some(t), None) => {
            let us = t
                .duration_since(UNIX_EPOCH)
                .map_err(|_| Error::invalid("run_at is before 1970"))?
                .as_micros();
            Ok(Some(format!("timestamptz 'epoch' + '{} microseconds'::interval", us)))
        }
        (None, Some(d)) => Ok(Some(format!("now() + {}", sql::interval(d)))),
        (None, None) => Ok(None),
    }
}
