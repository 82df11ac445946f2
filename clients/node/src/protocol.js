// The SQL protocol calls (docs/protocol.md), one statement each, with no
// session state and no prepared statement, so they work through a
// transaction pooler.  Outcomes are { job, outcome, result, error,
// retryAfterMs }, outcome one of 'ok', 'retry', 'discard'.

import { PermanentError } from './errors.js';

const CLAIM_COLS = 'id, queue, kind, payload, attempt, max_attempts, fencing, lease_expires_at, timeout_ms, priority, run_at';

export function toJob(r) {
  return {
    id: r.id,
    queue: r.queue,
    kind: r.kind,
    payload: r.payload,
    attempt: r.attempt,
    maxAttempts: r.max_attempts,
    fencing: r.fencing,
    leaseExpiresAt: r.lease_expires_at,
    timeoutMs: r.timeout_ms,
    priority: r.priority,
    runAt: r.run_at,
  };
}

// Error text without NUL (PostgreSQL text cannot hold it), at most 8 KiB
// (what the job's history keeps of it, schema step 0026).
function errorText(e) {
  return e === null || e === undefined ? null : String(e).replaceAll('\u0000', '').slice(0, 8192);
}

// One outcome as a skiplock.outcome object (protocol 3, schema step
// 0033): the handle (queue, id, fencing), the outcome, and only the fields
// it sets.  The result is a JSON value of the object, so that arrays and
// strings stay JSON values.
function outcomeRecord(o) {
  const r = { queue: o.job.queue ?? null, id: o.job.id, fencing: o.job.fencing, outcome: o.outcome };
  if (o.outcome === 'ok' && o.result !== undefined) r.result = o.result;
  const error = errorText(o.error);
  if (error !== null) r.error = error;
  if (o.retryAfterMs > 0) r.retry_after_ms = Math.round(o.retryAfterMs);
  return r;
}

// The outcomes as one JSON array, the one value of record and record_claim.
function outcomesJson(outs) {
  return JSON.stringify(outs.map(outcomeRecord));
}

/** Records outs; resolves to the set of ids whose outcome was accepted. */
export async function record(db, outs) {
  const { rows } = await db.query('SELECT id FROM skiplock.record(outcomes => $1::jsonb)',
    [outcomesJson(outs)]);
  return new Set(rows.map((r) => r.id));
}

/** Records outs (none is fine), then claims up to n: { accepted, jobs,
 * waitMs }.  waitMs: how soon a limit that held due jobs back may have room
 * (the claim's 'wait' row, docs/flow-control.md), else null.  Every
 * argument goes by name, so that an argument added to the function shifts
 * nothing. */
export async function recordClaim(db, outs, c, n) {
  const { rows } = await db.query(
    `SELECT row_type, delay_ms, ${CLAIM_COLS} FROM skiplock.record_claim(outcomes => $1::jsonb,
       owner => $2, kinds => $3::text[], queues => $4::text[], n => $5, lease => $6::interval,
       after_priority => NULL, after_run_at_us => NULL, after_id => NULL, wait_hints => true)`,
    [outcomesJson(outs), c.owner, c.kinds, c.queues, n, c.leaseInterval]);
  const accepted = new Set(rows.filter((r) => r.row_type === 'recorded').map((r) => r.id));
  const jobs = rows.filter((r) => r.row_type === 'claimed').map(toJob);
  const wait = rows.find((r) => r.row_type === 'wait');
  return { accepted, jobs, waitMs: wait ? Number(wait.delay_ms) : null };
}

/** Extends the leases of jobs; resolves to one boolean per job, in order
 * (false: that claim was lost). */
export async function heartbeat(db, jobs, leaseInterval) {
  const { rows } = await db.query(
    'SELECT extended FROM skiplock.heartbeat(ids => $1::bigint[], fencings => $2::bigint[], ' +
      'lease => $3::interval, job_queues => $4::text[])',
    [jobs.map((j) => j.id), jobs.map((j) => j.fencing), leaseInterval, jobs.map((j) => j.queue ?? null)]);
  if (rows.length !== jobs.length) throw new Error(`heartbeat: ${rows.length} rows for ${jobs.length} jobs`);
  return rows.map((r) => r.extended);
}

/** The oldest schema step this client works with: job_complete (0019),
 * the heartbeat's held rows (0020), cron_tick (0024), schedules_declare
 * (0025), the queue in the job handle (0027, protocol 2), limits (0029)
 * and the outcomes as one JSON array of records (0033, protocol 3). */
export const MIN_SCHEMA = 33;
const NO_SCHEMA = new Set(['3F000', '42883']); // no schema skiplock; no installed_version()

const INSTALL = '`skiplock init` (npx skiplock init --url URL, or init() from this package)';

/** Rejects with a PermanentError naming `skiplock init` unless the schema
 * is installed, at MIN_SCHEMA or later. */
export async function checkSchema(db) {
  let version;
  try {
    ({ rows: [{ version }] } = await db.query('SELECT skiplock.installed_version() AS version'));
  } catch (err) {
    if (!NO_SCHEMA.has(err.code)) throw err;
    throw new PermanentError(`the database has no skiplock schema: install it with ${INSTALL}; ` +
      `this client needs step ${MIN_SCHEMA} or later`, { cause: err });
  }
  if (version < MIN_SCHEMA) {
    throw new PermanentError(`the skiplock schema is at step ${version}; this client needs ` +
      `step ${MIN_SCHEMA} or later: upgrade it with ${INSTALL}`);
  }
}

/** Ends expired leases; resolves to how many jobs were given back. */
export async function rescue(db) {
  const { rows } = await db.query('SELECT count(*)::int AS n FROM skiplock.rescue(n => 1000)');
  return rows[0].n;
}
