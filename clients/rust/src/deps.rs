//! Dependencies beyond one job's parents (docs/flow-control.md,
//! "Dependencies"): a batch of jobs with a callback that runs once after
//! all of them (`skiplock.enqueue_batch`), and why a job waits
//! (`skiplock.job_waits_for`).  Parents of one job are
//! [`EnqueueOptions`](crate::EnqueueOptions)' `depends_on`,
//! `depends_on_keys` and `on_parent_failure`.

use crate::enqueue_many::select_ids;
use crate::error::Error;
use crate::sql;
use tokio_postgres::GenericClient;

/// What [`enqueue_batch`] may set besides the jobs' kind and payloads and
/// the callback's kind; every field defaults to the SQL function's default.
#[derive(Clone, Debug, Default)]
pub struct BatchOptions {
    /// The callback's payload, a JSON object (default `{}`); it gains
    /// `{"batch": {"size", "completed", "discarded", "cancelled"}}` when
    /// the callback becomes due.
    pub callback_payload: Option<serde_json::Value>,
    /// The queue of the jobs and the callback (default `default`).
    pub queue: Option<String>,
    /// Their priority (default 0).
    pub priority: Option<i32>,
    /// Their attempts before a job is discarded (default 25).
    pub max_attempts: Option<i32>,
}

/// Enqueues one job of `kind` per payload and a job of `callback_kind` that
/// runs once after all of them finished, whatever their outcomes
/// (`skiplock.enqueue_batch`), on `client`, in its transaction, and returns
/// their ids, the callback's last.  1 to 1000 payloads, else
/// [`Error::Permanent`] with SQLSTATE 22023; a callback payload that is not
/// a JSON object is [`Error::Invalid`].
pub async fn enqueue_batch<C: GenericClient + Sync>(
    client: &C,
    kind: &str,
    payloads: &[serde_json::Value],
    callback_kind: &str,
    opts: &BatchOptions,
) -> Result<Vec<i64>, Error> {
    let q = enqueue_batch_sql(kind, payloads, callback_kind, opts)?;
    select_ids(client, &q, "skiplock.enqueue_batch").await
}

/// The statement `enqueue_batch` sends.
pub fn enqueue_batch_sql(
    kind: &str,
    payloads: &[serde_json::Value],
    callback_kind: &str,
    o: &BatchOptions,
) -> Result<String, Error> {
    let texts: Vec<Option<String>> = payloads.iter().map(|p| Some(p.to_string())).collect();
    let mut args = vec![format!("kind => {}", sql::text(kind)?),
                        format!("payloads => {}", sql::literal_array(&texts, "jsonb")?),
                        format!("callback_kind => {}", sql::text(callback_kind)?)];
    if let Some(p) = &o.callback_payload {
        if !p.is_object() {
            return Err(Error::invalid(format!("callback_payload must be a JSON object (the \
                                               batch's counts are merged into it), not {}", p)));
        }
        args.push(format!("callback_payload => {}", sql::jsonb(p)?));
    }
    if let Some(q) = &o.queue {
        args.push(format!("queue => {}", sql::text(q)?));
    }
    if let Some(p) = o.priority {
        args.push(format!("priority => {}", p));
    }
    if let Some(m) = o.max_attempts {
        args.push(format!("max_attempts => {}", m));
    }
    Ok(format!("SELECT skiplock.enqueue_batch({named})::text", named = args.join(", ")))
}

/// Why the available job `id` is not running now (`skiplock.job_waits_for`):
/// `dependencies: 1 of 2 parent(s) not finished`, `due at ...`, `paused`,
/// `breaker not closed`, `limit: ...` or `due: waiting for a worker`; `None`
/// for a job that is not available (running, finished or unknown).
pub async fn waits_for<C: GenericClient + Sync>(client: &C, id: i64)
                                                -> Result<Option<String>, Error> {
    let q = format!("SELECT skiplock.job_waits_for(id => {})", id);
    let rows = crate::conn::select(client.client(), &q).await?;
    Ok(rows.first().and_then(|r| r.get(0)).map(String::from))
}
