// Dependencies between jobs (docs/flow-control.md): enqueue's dependsOn,
// dependsOnKeys and onParentFailure (skiplock.enqueue_after), a batch with
// a callback (skiplock.enqueue_batch), and why a job waits
// (skiplock.job_waits_for).  Each is one statement on the caller's
// connection, so it commits or rolls back with the caller's transaction.
import { checkDb, queryValue } from './db.js';

/** The options that make enqueue call skiplock.enqueue_after. */
export const DEP_OPTIONS = ['dependsOn', 'dependsOnKeys', 'onParentFailure'];

// A bad value, for a TypeError's message.
const shown = (v) => (typeof v === 'string' ? JSON.stringify(v)
  : v === null || typeof v !== 'object' ? String(v) : Array.isArray(v) ? 'an array' : 'an object');

/** A job id (a PostgreSQL bigint: a decimal string, an integer or a
 * BigInt) as the decimal string the database reads. */
export function jobId(v, what) {
  if (typeof v === 'string' && /^-?\d{1,19}$/.test(v)) return v;
  if (typeof v === 'bigint' || Number.isSafeInteger(v)) return String(v);
  throw new TypeError(`${what}: expected a job id (a string of digits, an integer or a BigInt), got ${shown(v)}`);
}

function arrayOf(v, what, each) {
  if (!Array.isArray(v)) throw new TypeError(`${what}: expected an array, got ${shown(v)}`);
  return v.map((x, i) => each(x, `${what}[${i}]`));
}

function text(v, what) {
  if (typeof v !== 'string') throw new TypeError(`${what}: expected a string, got ${shown(v)}`);
  return v;
}

function nonEmpty(v, what) {
  if (typeof v !== 'string' || v === '') throw new TypeError(`${what}: expected a non-empty string`);
  return v;
}

function json(v, what) {
  const s = JSON.stringify(v === undefined ? {} : v);
  if (s === undefined) throw new TypeError(`${what}: expected a JSON value`);
  return s;
}

/** enqueue_after's arguments for the dependency options in opts, appended
 * to values and named: [] when opts has none of them (then enqueue is
 * called as before).  depends_on has no default, so it is always named. */
export function dependencyArgs(opts, values) {
  if (DEP_OPTIONS.every((k) => opts[k] === undefined || opts[k] === null)) return [];
  const arg = (name, cast, v) => {
    values.push(v);
    return `${name} => $${values.length}::${cast}`;
  };
  const ids = opts.dependsOn ?? null;
  const named = [arg('depends_on', 'bigint[]', ids === null ? null : arrayOf(ids, 'dependsOn', jobId))];
  if (opts.dependsOnKeys != null) named.push(arg('depends_on_keys', 'text[]', arrayOf(opts.dependsOnKeys, 'dependsOnKeys', text)));
  if (opts.onParentFailure != null) named.push(arg('on_parent_failure', 'text', text(opts.onParentFailure, 'onParentFailure')));
  return named;
}

// enqueueBatch's options: [skiplock.enqueue_batch argument, SQL cast, check]
const BATCH = {
  callbackPayload: ['callback_payload', 'jsonb', json],
  queue: ['queue', 'text', text],
  priority: ['priority', 'int', checkInt],
  maxAttempts: ['max_attempts', 'int', checkInt],
};

function checkInt(v, what) {
  if (!Number.isInteger(v)) throw new TypeError(`${what}: expected an integer, got ${shown(v)}`);
  return v;
}

/** The statement and its parameters for enqueueBatch. */
export function enqueueBatchStatement(kind, payloads, callbackKind, opts = {}) {
  const values = [
    nonEmpty(kind, 'enqueueBatch: kind'),
    arrayOf(payloads, 'enqueueBatch: payloads', json),
    nonEmpty(callbackKind, 'enqueueBatch: callbackKind'),
  ];
  const named = ['kind => $1', 'payloads => $2::jsonb[]', 'callback_kind => $3'];
  for (const [key, v] of Object.entries(opts ?? {})) {
    const arg = BATCH[key];
    if (arg === undefined) throw new TypeError(`enqueueBatch: unknown option ${JSON.stringify(key)}`);
    if (v === undefined || v === null) continue;
    values.push(arg[2](v, `enqueueBatch: ${key}`));
    named.push(`${arg[0]} => $${values.length}::${arg[1]}`);
  }
  return { text: `SELECT skiplock.enqueue_batch(${named.join(', ')})::text[] AS ids`, values };
}

/** Enqueues one job per payload (1 to 1000) and a callback job of
 * callbackKind that runs once after all of them finished, its payload
 * (callbackPayload, default {}) with {"batch": {size, completed,
 * discarded, cancelled}} merged in; resolves to their ids, the callback's
 * last. */
export async function enqueueBatch(db, kind, payloads, callbackKind, opts) {
  checkDb(db);
  return queryValue(db, enqueueBatchStatement(kind, payloads, callbackKind, opts), 'ids');
}

/** Why the available job id is not running now (its dependencies, its due
 * time, a pause, a breaker, a limit, no free worker), or null when it is
 * not available (running, finished, unknown). */
export async function waitsFor(db, id) {
  checkDb(db);
  const stmt = { text: 'SELECT skiplock.job_waits_for(id => $1::bigint) AS waits', values: [jobId(id, 'waitsFor: id')] };
  return queryValue(db, stmt, 'waits');
}
