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

// Results as JSON text, so that arrays and strings stay JSON values.
function resultText(r) {
  return r === undefined ? null : JSON.stringify(r) ?? null;
}

function outcomeArrays(outs) {
  return [
    outs.map((o) => o.job.id),
    outs.map((o) => o.job.fencing),
    outs.map((o) => o.outcome),
    outs.map((o) => (o.outcome === 'ok' ? resultText(o.result) : null)),
    outs.map((o) => errorText(o.error)),
    outs.map((o) => (o.retryAfterMs > 0 ? Math.round(o.retryAfterMs) : null)),
    outs.map((o) => o.job.queue ?? null),
  ];
}

// Every argument goes by name, so that an argument added to a function
// shifts nothing.  The handle is (queue, id, fencing) since protocol 2
// (schema step 0027): job_queues lets each outcome find its job where it
// lives.
const RECORD_ARGS = 'ids => $1::bigint[], fencings => $2::bigint[], outcomes => $3::text[], ' +
  'results => $4::text[]::jsonb[], errors => $5::text[], retry_after_ms => $6::bigint[]';
const RECORD_QUEUES = 'job_queues => $7::text[]';

/** Records outs; resolves to the set of ids whose outcome was accepted. */
export async function record(db, outs) {
  const { rows } = await db.query(
    `SELECT id FROM skiplock.record(${RECORD_ARGS}, ${RECORD_QUEUES})`, outcomeArrays(outs));
  return new Set(rows.map((r) => r.id));
}

/** Records outs (none is fine), then claims up to n: { accepted, jobs,
 * waitMs }.  waitMs: how soon a limit that held due jobs back may have room
 * (the claim's 'wait' row, docs/flow-control.md), else null. */
export async function recordClaim(db, outs, c, n) {
  const { rows } = await db.query(
    `SELECT row_type, delay_ms, ${CLAIM_COLS} FROM skiplock.record_claim(${RECORD_ARGS},
       deferred => NULL, backoffs => NULL, backoff_bases_ms => NULL, backoff_caps_ms => NULL,
       owner => $8, kinds => $9::text[], queues => $10::text[], n => $11, lease => $12::interval,
       after_priority => NULL, after_run_at_us => NULL, after_id => NULL,
       ${RECORD_QUEUES}, wait_hints => true)`,
    [...outcomeArrays(outs), c.owner, c.kinds, c.queues, n, c.leaseInterval]);
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
 * (0025) and the queue in the job handle (0027, protocol 2). */
export const MIN_SCHEMA = 29;
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
