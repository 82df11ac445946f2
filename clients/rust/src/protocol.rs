//! The SQL protocol's calls (docs/protocol.md), each one simple query.
//! Fenced out is a result for the worker's calls: `record` leaves the row
//! out, `heartbeat` says `extended = false`; `complete` and `fail` return
//! [`Error::Fenced`] here, and so do `job_fence` and `job_complete` (SQLSTATE
//! SK001).

use crate::conn::select;
use crate::error::Error;
use crate::job::{Finished, Job, Outcome, TxCompletion};
use crate::sql;
use std::time::Duration;
use tokio_postgres::{GenericClient, SimpleQueryRow};

/// What one claim asks for.
pub struct ClaimArgs<'a> {
    pub owner: &'a str,
    pub kinds: &'a [String],
    pub queues: Option<&'a [String]>,
    pub n: usize,
    pub lease: Duration,
}

/// An accepted outcome: the job's new state.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub id: i64,
    pub state: String,
}

const COLUMNS: &str = "row_type, id, state, queue, kind, payload::text, attempt, max_attempts, \
                       fencing, timeout_ms, priority, delay_ms";

fn claim_args(c: &ClaimArgs<'_>) -> Result<String, Error> {
    let queues = match c.queues {
        Some(q) => sql::text_array(q)?,
        None => "NULL".to_string(),
    };
    Ok(format!("owner => {}, kinds => {}, queues => {}, n => {}, lease => {}", sql::text(c.owner)?,
               sql::text_array(c.kinds)?, queues, c.n, sql::interval(c.lease)))
}

/// The most characters of an attempt's error the job's history keeps
/// (`skiplock_internal.errors_append`, schema step 26).
const ERROR_CHARS: usize = 8192;

/// An attempt's error as it is recorded: without NUL characters (no
/// PostgreSQL text holds one) and cut at [`ERROR_CHARS`] characters.
fn error_text(error: &str) -> String {
    let mut text = error.replace('\0', "");
    if let Some((end, _)) = text.char_indices().nth(ERROR_CHARS) {
        text.truncate(end);
    }
    text
}

/// One outcome as a `skiplock.outcome` object (protocol 3, schema step
/// 0033): the handle (queue, id, fencing), the outcome, and only the
/// fields it sets.
fn outcome_record(f: &Finished) -> serde_json::Value {
    let mut o = serde_json::json!({"queue": f.queue, "id": f.id, "fencing": f.fencing});
    let (outcome, result, error, ms) = match &f.outcome {
        Outcome::Ok(v) => ("ok", Some(v.clone()), None, 0),
        Outcome::Retry { error, after } => {
            ("retry", None, Some(error_text(error)), after.map_or(0, |d| d.as_millis()))
        }
        Outcome::Discard { error } => ("discard", None, Some(error_text(error)), 0),
    };
    o["outcome"] = outcome.into();
    if let Some(r) = result {
        o["result"] = r;
    }
    if let Some(e) = error {
        o["error"] = e.into();
    }
    if ms > 0 {
        o["retry_after_ms"] = (ms.min(i64::MAX as u128) as i64).into();
    }
    o
}

/// The outcomes as one JSON array of records, the one argument of
/// `record` and the first of `record_claim`.
fn outcome_records(done: &[Finished]) -> Result<String, Error> {
    let records: Vec<serde_json::Value> = done.iter().map(outcome_record).collect();
    Ok(format!("outcomes => {}", sql::jsonb(&serde_json::Value::Array(records))?))
}

fn int<T: std::str::FromStr>(r: &SimpleQueryRow, i: usize) -> Result<T, Error> {
    r.get(i)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| Error::protocol(format!("column {} is not a number", i)))
}

fn string(r: &SimpleQueryRow, i: usize) -> String {
    r.get(i).unwrap_or("").to_string()
}

fn job(r: &SimpleQueryRow) -> Result<Job, Error> {
    let payload = serde_json::from_str(r.get(5).unwrap_or("null"))
        .map_err(|e| Error::protocol(format!("payload: {}", e)))?;
    let timeout_ms: u64 = int(r, 9)?;
    Ok(Job {
        id: int(r, 1)?,
        queue: string(r, 3),
        kind: string(r, 4),
        payload,
        attempt: int(r, 6)?,
        max_attempts: int(r, 7)?,
        fencing: int(r, 8)?,
        timeout: if timeout_ms > 0 { Some(Duration::from_millis(timeout_ms)) } else { None },
        priority: int(r, 10)?,
        completed_in_tx: TxCompletion::default(),
    })
}

/// What one round trip of the worker returned: the accepted outcomes, the
/// claimed jobs, and the claim's wait hint.
#[derive(Debug, Default)]
pub struct Exchanged {
    pub recorded: Vec<Recorded>,
    pub jobs: Vec<Job>,
    /// A limit held due jobs back (docs/flow-control.md): it may have room
    /// this long from now, so claim again then rather than at the next poll.
    pub wait: Option<Duration>,
}

/// The statement of one round trip: `record_claim` with wait hints when
/// claiming (no outcomes is fine), `record` when only recording.
fn exchange_sql(done: &[Finished], claim: Option<&ClaimArgs<'_>>) -> Result<String, Error> {
    Ok(match claim {
        None => format!("SELECT 'recorded', id, state FROM skiplock.record({outcomes})",
                        outcomes = outcome_records(done)?),
        Some(a) => format!("SELECT {} FROM skiplock.record_claim({outcomes}, {claim}, \
                            after_priority => NULL, after_run_at_us => NULL, after_id => NULL, \
                            wait_hints => true)", COLUMNS,
                           outcomes = outcome_records(done)?, claim = claim_args(a)?),
    })
}

/// Records `done` (may be empty) and claims (when `claim` is given), in one
/// round trip (`record_claim` or `record`), with the claim's wait hint.
pub async fn exchange_hinted<C: GenericClient + Sync>(
    c: &C,
    done: &[Finished],
    claim: Option<&ClaimArgs<'_>>,
) -> Result<Exchanged, Error> {
    let mut x = Exchanged::default();
    if done.is_empty() && claim.is_none() {
        return Ok(x);
    }
    for r in select(c.client(), &exchange_sql(done, claim)?).await? {
        match r.get(0) {
            Some("claimed") => x.jobs.push(job(&r)?),
            Some("wait") => x.wait = Some(Duration::from_millis(int(&r, 11)?)),
            _ => x.recorded.push(Recorded { id: int(&r, 1)?, state: string(&r, 2) }),
        }
    }
    Ok(x)
}

/// [`exchange_hinted`] without the hint: the accepted outcomes and the
/// claimed jobs.
pub async fn exchange<C: GenericClient + Sync>(
    c: &C,
    done: &[Finished],
    claim: Option<&ClaimArgs<'_>>,
) -> Result<(Vec<Recorded>, Vec<Job>), Error> {
    let x = exchange_hinted(c, done, claim).await?;
    Ok((x.recorded, x.jobs))
}

/// Claims up to `a.n` jobs.
pub async fn claim<C: GenericClient + Sync>(c: &C, a: &ClaimArgs<'_>) -> Result<Vec<Job>, Error> {
    Ok(exchange(c, &[], Some(a)).await?.1)
}

/// Extends the leases of running claims `(id, fencing, queue)`; one
/// `(id, extended)` per input.
pub async fn heartbeat<C: GenericClient + Sync>(
    c: &C,
    claims: &[(i64, i64, String)],
    lease: Duration,
) -> Result<Vec<(i64, bool)>, Error> {
    let ids: Vec<i64> = claims.iter().map(|x| x.0).collect();
    let fencings: Vec<i64> = claims.iter().map(|x| x.1).collect();
    let queues: Vec<Option<String>> = claims.iter().map(|x| Some(x.2.clone())).collect();
    let q = format!("SELECT id, extended FROM skiplock.heartbeat(ids => {}, fencings => {}, \
                     lease => {}, job_queues => {})",
                    sql::bigint_array(&ids), sql::bigint_array(&fencings), sql::interval(lease),
                    sql::literal_array(&queues, "text")?);
    let rows = select(c.client(), &q).await?;
    rows.iter().map(|r| Ok((int(r, 0)?, r.get(1) == Some("t")))).collect()
}

/// Ends up to `n` expired leases; returns how many.
pub async fn rescue<C: GenericClient + Sync>(c: &C, n: u32) -> Result<usize, Error> {
    Ok(select(c.client(), &format!("SELECT id FROM skiplock.rescue(n => {})", n)).await?.len())
}

/// The oldest schema step this client works with: `job_complete` (step
/// 0019), the heartbeat's held rows (step 0020), `cron_tick` (step 0024),
/// `schedules_declare` (step 0025), the queue in the job handle (step
/// 0027, protocol 2), limits (step 0029) and the outcomes as one JSON array
/// of records (step 0033, protocol 3).
pub const MIN_SCHEMA: i32 = 33;

/// [`Error::Permanent`] naming [`crate::init`] unless the database has
/// skiplock's schema at [`MIN_SCHEMA`] or later; [`crate::Worker::start`]
/// calls it first.
pub async fn check_schema<C: GenericClient + Sync>(c: &C) -> Result<(), Error> {
    let rows = match select(c.client(), "SELECT skiplock.installed_version()").await {
        Ok(rows) => rows,
        // no schema skiplock, or no installed_version() in it
        Err(e) if matches!(e.sqlstate(), Some("3F000") | Some("42883")) => {
            return Err(Error::Permanent {
                sqlstate: e.sqlstate().map(String::from),
                message: format!("the database has no skiplock schema: install it with \
                                  skiplock::init or `skiplock init` (this client needs step {} \
                                  or later)",
                                 MIN_SCHEMA),
            })
        }
        Err(e) => return Err(e),
    };
    let version: i32 = rows.first().and_then(|r| r.get(0)).and_then(|v| v.parse().ok()).unwrap_or(0);
    if version < MIN_SCHEMA {
        return Err(Error::Permanent {
            sqlstate: None,
            message: format!("the skiplock schema is at step {}; this client needs step {} or \
                              later: upgrade it with skiplock::init or `skiplock init`", version,
                             MIN_SCHEMA),
        });
    }
    Ok(())
}

/// Completes one job; [`Error::Fenced`] when the claim is no longer current.
pub async fn complete<C: GenericClient + Sync>(
    c: &C,
    id: i64,
    fencing: i64,
    result: &serde_json::Value,
) -> Result<(), Error> {
    let q = format!("SELECT skiplock.complete(id => {}, fencing => {}, result => {})", id, fencing,
                    sql::jsonb(result)?);
    match select(c.client(), &q).await?.first().and_then(|r| r.get(0)) {
        Some("completed") => Ok(()),
        _ => Err(Error::Fenced { id, fencing }),
    }
}

/// Fails one attempt; returns the new state (`available` or `discarded`),
/// or [`Error::Fenced`].
pub async fn fail<C: GenericClient + Sync>(
    c: &C,
    id: i64,
    fencing: i64,
    error: &str,
    retryable: bool,
) -> Result<String, Error> {
    let q = format!("SELECT skiplock.fail(id => {}, fencing => {}, error => {}, retryable => {})",
                    id, fencing, sql::text(error)?, retryable);
    match select(c.client(), &q).await?.first().and_then(|r| r.get(0)) {
        Some("fenced_out") | None => Err(Error::Fenced { id, fencing }),
        Some(s) => Ok(s.to_string()),
    }
}

/// The effect pattern: call first in the transaction that makes the job's
/// effect.  It locks the job row until that transaction ends and returns
/// [`Error::Fenced`] (SQLSTATE SK001) unless the claim is current; the
/// transaction must then roll back.
pub async fn job_fence<C: GenericClient + Sync>(c: &C, job: &Job) -> Result<(), Error> {
    let q = format!("SELECT skiplock.job_fence(id => {}, fencing => {}, queue => {})", job.id,
                    job.fencing, sql::text(&job.queue)?);
    fenced(select(c.client(), &q).await, job).map(|_| ())
}

/// Exactly once: last in the transaction that makes the job's effect,
/// checks the fence and completes the job there (`skiplock.job_complete`),
/// so the effect and the completion commit together.  [`Error::Fenced`]
/// (SQLSTATE SK001) unless the claim is current or when this claim
/// completed the job already; the transaction must then roll back.  In a
/// handler use [`Job::complete`]: it also tells the worker.
pub async fn job_complete<C: GenericClient + Sync>(
    c: &C,
    job: &Job,
    result: &serde_json::Value,
) -> Result<(), Error> {
    let q = format!("SELECT skiplock.job_complete(id => {}, fencing => {}, result => {}, \
                     queue => {})",
                    job.id, job.fencing, sql::jsonb(result)?, sql::text(&job.queue)?);
    fenced(select(c.client(), &q).await, job).map(|_| ())
}

// The job's own call of job_complete: here, with the statement, so that
// the job's types (job.rs) do not depend on the protocol.
impl Job {
    /// Completes the job in your transaction `c`, the one that makes the
    /// job's effect (`skiplock.job_complete`; call it last, just before
    /// the commit).  The effect and the completion then commit together or
    /// not at all: the effect happens exactly once, even when the worker
    /// dies right after the commit (the fence alone, [`crate::job_fence`],
    /// cannot prevent the next attempt from applying it again).
    /// [`Error::Fenced`] (SQLSTATE SK001) unless the claim is current, or
    /// when this claim completed the job already: roll back.  `result` is
    /// kept as the job's result.
    ///
    /// Return `Ok` from the handler only once that transaction committed:
    /// the worker then records no outcome of its own (the handler's value
    /// is ignored) and does not take the job's end for a lost lease.  If
    /// the commit fails, return an error: the worker records a failed
    /// attempt, refused harmlessly when the commit did go through.
    pub async fn complete<C: GenericClient + Sync>(&self, c: &C, result: &serde_json::Value)
                                                   -> Result<(), Error> {
        job_complete(c, self, result).await?;
        self.completed_in_tx.set();
        Ok(())
    }
}

/// Maps SQLSTATE SK001 to [`Error::Fenced`] for `job`.
pub fn fenced<T>(r: Result<T, Error>, job: &Job) -> Result<T, Error> {
    match r {
        Err(e) if e.sqlstate() == Some("SK001") => {
            Err(Error::Fenced { id: job.id, fencing: job.fencing })
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::{claim_args, error_text, exchange_sql, outcome_records, ClaimArgs,
                ERROR_CHARS};
    use crate::job::{Finished, Outcome};
    use crate::{enqueue_batch_sql, enqueue_many_sql, enqueue_sql, BatchOptions, EnqueueOptions,
                JobSpec, OnParentFailure};
    use std::time::Duration;

    /// The top-level arguments of a list (quotes and brackets skipped).
    fn arguments(list: &str) -> Vec<String> {
        let (mut out, mut cur, mut depth, mut quoted) = (vec![], String::new(), 0, false);
        for c in list.chars() {
            match c {
                '\'' => quoted = !quoted,
                '(' | '[' if !quoted => depth += 1,
                ')' | ']' if !quoted => depth -= 1,
                ',' if !quoted && depth == 0 => {
                    out.push(cur.trim().to_string());
                    cur.clear();
                    continue;
                }
                _ => {}
            }
            cur.push(c);
        }
        out.push(cur.trim().to_string());
        out
    }

    fn assert_named(list: &str, names: &[&str]) {
        let got: Vec<String> = arguments(list).iter()
            .map(|a| a.split_once(" => ").map_or(format!("by position: {}", a), |(n, _)| n.into()))
            .collect();
        assert_eq!(got, names, "{}", list);
    }

    /// The argument list of the skiplock.* call in a statement.
    fn call_args(q: &str) -> &str {
        let open = q.find("skiplock.").and_then(|i| q[i..].find('(').map(|j| i + j + 1)).unwrap();
        let close = q.rfind(')').unwrap();
        &q[open..close]
    }

    #[test]
    fn the_lists_built_by_code_name_every_argument() {
        let kinds = vec!["k".to_string()];
        let a = ClaimArgs { owner: "w", kinds: &kinds, queues: None, n: 2, lease: Duration::from_secs(30) };
        assert_named(&claim_args(&a).unwrap(), &["owner", "kinds", "queues", "n", "lease"]);
        let done = [Finished { id: 1, fencing: 2, queue: "q".into(), outcome: Outcome::Ok(1.into()) },
                    Finished { id: 3, fencing: 4, queue: "q".into(),
                               outcome: Outcome::Retry { error: "e".into(), after: None } }];
        assert_named(&outcome_records(&done).unwrap(), &["outcomes"]);
        let o = EnqueueOptions { queue: Some("q".into()), priority: Some(1),
                                 timeout: Some(Duration::from_secs(1)), ..Default::default() };
        assert_named(call_args(&enqueue_sql("k", &serde_json::json!({"a": [1, 2]}), &o).unwrap()),
                     &["kind", "payload", "queue", "priority", "timeout"]);
        let jobs = [JobSpec::new("k", serde_json::json!({})).with(o.clone())];
        assert_named(call_args(&enqueue_many_sql(&jobs, Some("t")).unwrap()),
                     &["p_token", "p_kinds", "p_payloads", "p_queues", "p_run_ats", "p_delays_ms",
                       "p_priorities", "p_unique_keys", "p_max_attempts", "p_timeouts",
                       "p_backoff_bases", "p_backoff_caps", "p_backoffs"]);
        const RECORD_CLAIM: [&str; 10] = [
            "outcomes", "owner", "kinds", "queues", "n", "lease", "after_priority",
            "after_run_at_us", "after_id", "wait_hints"];
        for outcomes in [&done[..], &[]] {
            let q = exchange_sql(outcomes, Some(&a)).unwrap();
            assert!(q.contains("skiplock.record_claim(") && q.ends_with("wait_hints => true)"),
                    "{}", q);
            assert_named(call_args(&q), &RECORD_CLAIM);
        }
        assert_named(call_args(&exchange_sql(&done, None).unwrap()), &RECORD_CLAIM[..1]);
        let after = EnqueueOptions { depends_on_keys: vec!["k'1".into()], ..o };
        let q = enqueue_sql("k", &serde_json::json!({}), &after).unwrap();
        assert!(q.contains(" skiplock.enqueue_after("), "{}", q);
        assert_named(call_args(&q), &["depends_on", "kind", "payload", "queue", "priority",
                                      "timeout", "depends_on_keys"]);
        let after = EnqueueOptions { depends_on: vec![1, 2],
                                     on_parent_failure: Some(OnParentFailure::Run),
                                     ..Default::default() };
        assert_named(call_args(&enqueue_sql("k", &serde_json::json!({}), &after).unwrap()),
                     &["depends_on", "kind", "payload", "on_parent_failure"]);
        let b = BatchOptions { callback_payload: Some(serde_json::json!({"n": "a'b"})),
                               queue: Some("q".into()), priority: Some(1), max_attempts: Some(2) };
        assert_named(call_args(&enqueue_batch_sql("k", &[serde_json::json!({"s": "it's, \"q\""})],
                                                  "cb", &b).unwrap()),
                     &["kind", "payloads", "callback_kind", "callback_payload", "queue", "priority",
                       "max_attempts"]);
    }

    #[test]
    fn an_error_is_recorded_without_nul_and_cut_on_a_character() {
        assert_eq!(error_text("a\0b\ncaused by: c\0"), "ab\ncaused by: c");
        let long = "é".repeat(ERROR_CHARS + 5);
        let cut = error_text(&long);
        assert_eq!((cut.chars().count(), cut.len()), (ERROR_CHARS, 2 * ERROR_CHARS));
        let short = "x".repeat(ERROR_CHARS);
        assert_eq!(error_text(&short), short);
    }
}
