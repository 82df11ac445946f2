// enqueue: one job, on the connection the caller gives (a pg.Client inside
// the caller's transaction, a pool client, or a pg.Pool for a job of its
// own).  The job commits or rolls back with the caller's transaction.
import { classify, FencedError } from './errors.js';
import { toInterval, toMs } from './duration.js';
import { checkDb, queryValue } from './db.js';
import { DEP_OPTIONS, dependencyArgs } from './deps.js';

// opts field -> [skiplock.enqueue argument, SQL cast, value conversion]
const ARGS = {
  queue: ['queue', 'text', String],
  runAt: ['run_at', 'timestamptz', (v) => (v instanceof Date ? v.toISOString() : String(v))],
  priority: ['priority', 'int', Number],
  uniqueKey: ['unique_key', 'text', String],
  maxAttempts: ['max_attempts', 'int', Number],
  timeout: ['timeout', 'interval', (v) => toInterval(v, 'timeout')],
  backoff: ['backoff', 'text', String],
  backoffBase: ['backoff_base', 'interval', (v) => toInterval(v, 'backoffBase')],
  backoffCap: ['backoff_cap', 'interval', (v) => toInterval(v, 'backoffCap')],
};

/** The statement and its parameters for enqueue(kind, payload, opts):
 * skiplock.enqueue, or skiplock.enqueue_after when opts has dependsOn,
 * dependsOnKeys or onParentFailure. */
export function enqueueStatement(kind, payload, opts = {}) {
  if (typeof kind !== 'string' || kind === '') throw new TypeError('kind: expected a non-empty string');
  const text = JSON.stringify(payload === undefined ? {} : payload);
  if (text === undefined) throw new TypeError('payload: expected a JSON value');
  const values = [kind, text];
  const named = ['kind => $1', 'payload => $2::jsonb'];
  for (const [key, v] of Object.entries(opts)) {
    const arg = ARGS[key];
    if (arg === undefined && !DEP_OPTIONS.includes(key)) throw new TypeError(`enqueue: unknown option ${JSON.stringify(key)}`);
    if (arg === undefined || v === undefined || v === null) continue;
    values.push(arg[2](v));
    named.push(`${arg[0]} => $${values.length}::${arg[1]}`);
  }
  const deps = dependencyArgs(opts, values);
  const fn = deps.length > 0 ? 'enqueue_after' : 'enqueue';
  return { text: `SELECT skiplock.${fn}(${[...named, ...deps].join(', ')}) AS id`, values };
}

// A batch: skiplock.enqueue_many's arrays, one element per job, each
// [job field, argument, element type, value]; the durations in milliseconds.
const MANY = [
  ['kind', 'p_kinds', 'text', (j) => j.kind],
  ['payload', 'p_payloads', 'jsonb', (j) => JSON.stringify(j.payload === undefined ? {} : j.payload)],
  ['queue', 'p_queues', 'text', (j) => j.queue],
  ['runAt', 'p_run_ats', 'timestamptz', (j) => ARGS.runAt[2](j.runAt)],
  [null, 'p_delays_ms', 'bigint', () => null], // delays: runAt says when
  ['priority', 'p_priorities', 'int', (j) => Number(j.priority)],
  ['uniqueKey', 'p_unique_keys', 'text', (j) => String(j.uniqueKey)],
  ['maxAttempts', 'p_max_attempts', 'int', (j) => Number(j.maxAttempts)],
  ['timeout', 'p_timeouts', 'int', (j) => Math.round(toMs(j.timeout, 'timeout'))],
  ['backoffBase', 'p_backoff_bases', 'int', (j) => Math.round(toMs(j.backoffBase, 'backoffBase'))],
  ['backoffCap', 'p_backoff_caps', 'int', (j) => Math.round(toMs(j.backoffCap, 'backoffCap'))],
  ['backoff', 'p_backoffs', 'text', (j) => String(j.backoff)],
];

function checkJob(j, i) {
  if (j === null || typeof j !== 'object') throw new TypeError(`enqueueMany: job ${i}: expected an object`);
  if (typeof j.kind !== 'string' || j.kind === '') throw new TypeError(`enqueueMany: job ${i}: kind: expected a non-empty string`);
  if (JSON.stringify(j.payload === undefined ? {} : j.payload) === undefined) {
    throw new TypeError(`enqueueMany: job ${i}: payload: expected a JSON value`);
  }
  for (const key of Object.keys(j)) {
    if (key !== 'kind' && key !== 'payload' && ARGS[key] === undefined) {
      throw new TypeError(`enqueueMany: job ${i}: unknown option ${JSON.stringify(key)}`);
    }
  }
}

/** The statement and its parameters for enqueueMany(jobs, opts). */
export function enqueueManyStatement(jobs, opts = {}) {
  if (!Array.isArray(jobs)) throw new TypeError('enqueueMany: jobs: expected an array');
  jobs.forEach(checkJob);
  for (const key of Object.keys(opts)) {
    if (key !== 'token') throw new TypeError(`enqueueMany: unknown option ${JSON.stringify(key)}`);
  }
  const values = [opts.token ?? null];
  const args = ['p_token => $1::text'];
  for (const [key, arg, type, conv] of MANY) {
    values.push(jobs.map((j) => (key !== null && j[key] !== undefined && j[key] !== null ? conv(j) : null)));
    args.push(`${arg} => $${values.length}::${type}[]`);
  }
  return { text: `SELECT skiplock.enqueue_many(${args.join(', ')})::text[] AS ids`, values };
}

/** Enqueues jobs ([{ kind, payload, ...enqueue's options }]) in one
 * statement, all or none; resolves to their ids in order (with uniqueKey,
 * the holder's id where the key is held).  With opts.token, a retried call
 * (the same token) returns the first call's ids and enqueues nothing. */
export async function enqueueMany(db, jobs, opts) {
  checkDb(db);
  const stmt = enqueueManyStatement(jobs, opts);
  if (jobs.length === 0) return [];
  return queryValue(db, stmt, 'ids');
}

/** Enqueues one job; resolves to its id (a string: PostgreSQL bigint).
 * With uniqueKey, the id of the pending or running job holding the key.
 * With dependsOn (ids) and/or dependsOnKeys (unique keys), the job waits
 * until those jobs finished; onParentFailure 'cancel' (default) or 'run'
 * says what a discarded or cancelled parent does to it.  An unknown
 * parent rejects with a PermanentError, code 23503, nothing written. */
export async function enqueue(db, kind, payload, opts) {
  checkDb(db);
  return queryValue(db, enqueueStatement(kind, payload, opts), 'id');
}

function fencedFor(err, job) {
  const e = classify(err);
  if (e instanceof FencedError) {
    e.jobId = job.id;
    e.fencing = job.fencing;
  }
  return e;
}

/** In the caller's transaction, before a job's effect: locks the job row
 * until the transaction ends and throws FencedError unless the claim
 * (job.id, job.fencing) is still current (docs/protocol.md, the effect
 * pattern). */
export async function jobFence(db, job) {
  checkDb(db);
  try {
    await db.query('SELECT skiplock.job_fence(id => $1, fencing => $2, queue => $3::text)', [job.id, job.fencing, job.queue ?? null]);
  } catch (err) {
    throw fencedFor(err, job);
  }
}

/** In the transaction that makes a job's effect, last before COMMIT:
 * throws FencedError unless the claim (job.id, job.fencing) is current (or
 * when this claim completed the job already), then completes the job with
 * result in that transaction, so the effect and the completion commit
 * together: the effect happens exactly once (docs/protocol.md, the effect
 * pattern).  In a handler use ctx.complete(db, result): it also tells the
 * worker to send no outcome of its own. */
export async function jobComplete(db, job, result) {
  checkDb(db);
  const text = result === undefined ? null : JSON.stringify(result) ?? null;
  try {
    await db.query('SELECT skiplock.job_complete(id => $1, fencing => $2, result => $3::jsonb, queue => $4::text)',
      [job.id, job.fencing, text, job.queue ?? null]);
  } catch (err) {
    throw fencedFor(err, job);
  }
}
