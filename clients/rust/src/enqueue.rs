//! enqueue: one `SELECT skiplock.enqueue(...)` on the connection the caller
//! gives, so the job commits or rolls back with the caller's transaction;
//! `skiplock.enqueue_after(...)` instead when the job has parents.

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

/// What happens to a job when one of its parents is discarded or cancelled
/// (docs/flow-control.md, "Dependencies").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnParentFailure {
    /// The child is cancelled at once, and the jobs waiting for it follow
    /// (the default).
    #[default]
    Cancel,
    /// The failed parent counts as finished: the child runs anyway.
    Run,
}

impl OnParentFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            OnParentFailure::Cancel => "cancel",
            OnParentFailure::Run => "run",
        }
    }
}

/// `"cancel"` or `"run"`, as in the SQL API; anything else is
/// [`Error::Invalid`].
impl std::str::FromStr for OnParentFailure {
    type Err = Error;

    fn from_str(s: &str) -> Result<OnParentFailure, Error> {
        match s {
            "cancel" => Ok(OnParentFailure::Cancel),
            "run" => Ok(OnParentFailure::Run),
            _ => Err(Error::invalid(format!("on_parent_failure must be \"cancel\" or \"run\", \
                                             not {:?}", s))),
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
    /// Parents by id: the job waits, available with its attempts untouched,
    /// until every parent has finished, then becomes due at its `run_at`
    /// or `delay`.  A parent must exist (live, or finished and still kept):
    /// an unknown one is refused with SQLSTATE 23503 and nothing is written.
    pub depends_on: Vec<i64>,
    /// Parents by unique key (the job holding the key, live or the newest
    /// finished one kept), as `depends_on`.
    pub depends_on_keys: Vec<String>,
    /// When a parent is discarded or cancelled (default
    /// [`OnParentFailure::Cancel`]).
    pub on_parent_failure: Option<OnParentFailure>,
}

impl EnqueueOptions {
    /// True when the job names parents or a policy for them: `enqueue`
    /// then calls `skiplock.enqueue_after`.
    pub fn has_dependencies(&self) -> bool {
        !self.depends_on.is_empty() || !self.depends_on_keys.is_empty()
            || self.on_parent_failure.is_some()
    }
}

/// Enqueues one job on `client` (a `Client` or a `Transaction`, or whatever
/// derefs to one, like a pooled connection) and returns its id.  Inside a
/// transaction the job exists only if that transaction commits.  With
/// parents (`depends_on`, `depends_on_keys`) or `on_parent_failure` it
/// calls `skiplock.enqueue_after`, else `skiplock.enqueue`; an unknown
/// parent is [`Error::Permanent`] with SQLSTATE 23503, and nothing is
/// written.
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
        .ok_or_else(|| Error::protocol("the enqueue returned no id"))
}

/// The statement `enqueue` sends.
pub fn enqueue_sql(
    kind: &str,
    payload: &serde_json::Value,
    o: &EnqueueOptions,
) -> Result<String, Error> {
    let mut args = vec![];
    if o.has_dependencies() {
        let ids = if o.depends_on.is_empty() {
            "NULL::bigint[]".to_string()
        } else {
            sql::bigint_array(&o.depends_on)
        };
        args.push(format!("depends_on => {}", ids));
    }
    args.push(format!("kind => {}", sql::text(kind)?));
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
    if !o.depends_on_keys.is_empty() {
        args.push(format!("depends_on_keys => {}", sql::text_array(&o.depends_on_keys)?));
    }
    if let Some(p) = o.on_parent_failure {
        args.push(format!("on_parent_failure => '{}'", p.as_str()));
    }
    Ok(if o.has_dependencies() {
        format!("SELECT skiplock.enqueue_after({named})", named = args.join(", "))
    } else {
        format!("SELECT skiplock.enqueue({named})", named = args.join(", "))
    })
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
