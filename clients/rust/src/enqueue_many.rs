//! enqueue_many: a batch of jobs in one `SELECT skiplock.enqueue_many(...)`
//! on the connection the caller gives: all or none, with the caller's
//! transaction.

use crate::enqueue::EnqueueOptions;
use crate::error::Error;
use crate::sql;
use std::time::{Duration, UNIX_EPOCH};
use tokio_postgres::GenericClient;

/// One job of a batch: its kind, payload and `enqueue`'s options.
#[derive(Clone, Debug)]
pub struct JobSpec {
    pub kind: String,
    pub payload: serde_json::Value,
    pub opts: EnqueueOptions,
}

impl JobSpec {
    /// A job of `kind` with `payload` and the default options.
    pub fn new(kind: impl Into<String>, payload: serde_json::Value) -> JobSpec {
        JobSpec { kind: kind.into(), payload, opts: EnqueueOptions::default() }
    }

    /// The same job with these options.
    pub fn with(mut self, opts: EnqueueOptions) -> JobSpec {
        self.opts = opts;
        self
    }
}

/// Enqueues `jobs` on `client` in one statement (`skiplock.enqueue_many`),
/// all or none, and returns their ids in order (with a unique key, the
/// holder's id where the key is held).  With `token`, a retried call (the
/// same token) returns the first call's ids and enqueues nothing.  A job
/// with dependencies is [`Error::Invalid`]: [`crate::enqueue`] takes them,
/// and [`crate::enqueue_batch`] makes a batch with a callback.
pub async fn enqueue_many<C: GenericClient + Sync>(
    client: &C,
    jobs: &[JobSpec],
    token: Option<&str>,
) -> Result<Vec<i64>, Error> {
    if jobs.is_empty() {
        return Ok(vec![]);
    }
    select_ids(client, &enqueue_many_sql(jobs, token)?, "skiplock.enqueue_many").await
}

/// Sends `q`, whose one value is a bigint[] as text (`{1,2,3}`), and
/// returns its ids; `what` names the call in a protocol error.
pub(crate) async fn select_ids<C: GenericClient + Sync>(client: &C, q: &str, what: &str)
                                                       -> Result<Vec<i64>, Error> {
    let rows = crate::conn::select(client.client(), q).await?;
    let text = rows.first().and_then(|r| r.get(0))
        .ok_or_else(|| Error::protocol(format!("{} returned no ids", what)))?;
    text.trim_matches(|c| c == '{' || c == '}').split(',')
        .map(|v| v.parse().map_err(|_| Error::protocol(format!("{}: not an id", what))))
        .collect()
}

fn ms(d: Option<Duration>, what: &str, i: usize) -> Result<Option<String>, Error> {
    match d {
        None => Ok(None),
        Some(d) if d.as_millis() <= i32::MAX as u128 => Ok(Some(d.as_millis().to_string())),
        Some(_) => Err(Error::invalid(format!("job {}: {} is longer than {} ms", i, what,
                                              i32::MAX))),
    }
}

/// One job's elements of the arrays, in `skiplock.enqueue_many`'s order
/// after the token (run_at as microseconds since the epoch).
fn row(j: &JobSpec, i: usize) -> Result<[Option<String>; 12], Error> {
    let o = &j.opts;
    if o.run_at.is_some() && o.delay.is_some() {
        return Err(Error::invalid(format!("job {}: run_at and delay are exclusive", i)));
    }
    if o.has_dependencies() {
        return Err(Error::invalid(format!("job {}: enqueue_many takes no dependencies \
                                           (depends_on, depends_on_keys, on_parent_failure): \
                                           enqueue each such job with enqueue", i)));
    }
    let run_at = match o.run_at {
        Some(t) => Some(t.duration_since(UNIX_EPOCH)
            .map_err(|_| Error::invalid(format!("job {}: run_at is before 1970", i)))?
            .as_micros().to_string()),
        None => None,
    };
    let delay = o.delay.map(|d| d.as_millis().min(i64::MAX as u128).to_string());
    Ok([Some(j.kind.clone()), Some(j.payload.to_string()), o.queue.clone(), run_at, delay,
        o.priority.map(|p| p.to_string()), o.unique_key.clone(),
        o.max_attempts.map(|m| m.to_string()), ms(o.timeout, "timeout", i)?,
        ms(o.backoff_base, "backoff_base", i)?, ms(o.backoff_cap, "backoff_cap", i)?,
        o.backoff.map(|b| b.as_str().to_string())])
}

/// The statement `enqueue_many` sends.
pub fn enqueue_many_sql(jobs: &[JobSpec], token: Option<&str>) -> Result<String, Error> {
    const TYPES: [&str; 12] = ["text", "jsonb", "text", "bigint", "bigint", "int", "text", "int",
                               "int", "int", "int", "text"];
    const NAMES: [&str; 12] = ["p_kinds", "p_payloads", "p_queues", "p_run_ats", "p_delays_ms",
                               "p_priorities", "p_unique_keys", "p_max_attempts", "p_timeouts",
                               "p_backoff_bases", "p_backoff_caps", "p_backoffs"];
    let mut cols: Vec<Vec<Option<String>>> = vec![Vec::with_capacity(jobs.len()); 12];
    for (i, j) in jobs.iter().enumerate() {
        for (col, v) in cols.iter_mut().zip(row(j, i)?) {
            col.push(v);
        }
    }
    let mut args = vec![format!("p_token => {}", match token {
        Some(t) => sql::text(t)?,
        None => "NULL::text".to_string(),
    })];
    for (k, col) in cols.iter().enumerate() {
        let a = sql::literal_array(col, TYPES[k])?;
        args.push(if k == 3 {
            // run_at: microseconds since the epoch, as timestamptz, in order
            format!("{} => ARRAY(SELECT timestamptz 'epoch' + u * interval '1 microsecond' \
                     FROM unnest({}) WITH ORDINALITY AS t(u, o) ORDER BY o)", NAMES[k], a)
        } else {
            format!("{} => {}", NAMES[k], a)
        });
    }
    Ok(format!("SELECT skiplock.enqueue_many({named})::text", named = args.join(", ")))
}
