// enqueue: one job, on the connection the caller gives (a pg.Client inside
// the caller's transaction, a pool client, or a pg.Pool for a job of its
// own).  The job commits or rolls back with the caller's transaction.
import { classify, FencedError } from './errors.js';
import { toInterval } from './duration.js';
import { checkDb } from './db.js';

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

/** The statement and its parameters for enqueue(kind, payload, opts). */
export function enqueueStatement(kind, payload, opts = {}) {
  if (typeof kind !== 'string' || kind === '') throw new TypeError('kind: expected a non-empty string');
  const text = JSON.stringify(payload === undefined ? {} : payload);
  if (text === undefined) throw new TypeError('payload: expected a JSON value');
  const values = [kind, text];
  const named = ['kind => $1', 'payload => $2::jsonb'];
  for (const [key, v] of Object.entries(opts)) {
    const arg = ARGS[key];
    if (arg === undefined) throw new TypeError(`enqueue: unknown option ${JSON.stringify(key)}`);
    if (v === undefined || v === null) continue;
    values.push(arg[2](v));
    named.push(`${arg[0]} => $${values.length}::${arg[1]}`);
  }
  return { text: `SELECT skiplock.enqueue(${named.join(', ')}) AS id`, values };
}

/** Enqueues one job; resolves to its id (a string: PostgreSQL bigint).
 * With uniqueKey, the id of the pending or running job holding the key. */
export async function enqueue(db, kind, payload, opts) {
  checkDb(db);
  const stmt = enqueueStatement(kind, payload, opts);
  try {
    const { rows } = await db.query(stmt);
    return rows[0].id;
  } catch (err) {
    throw classify(err);
  }
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
    await db.query('SELECT skiplock.job_fence($1, $2, $3::text)', [job.id, job.fencing, job.queue ?? null]);
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
    await db.query('SELECT skiplock.job_complete($1, $2, $3::jsonb, $4::text)',
      [job.id, job.fencing, text, job.queue ?? null]);
  } catch (err) {
    throw fencedFor(err, job);
  }
}
