// What the coordination calls share: the check of the db argument, one
// statement with a deadline, sleeps that a signal cuts short, and jitter.
import { setTimeout as delay } from 'node:timers/promises';
import { classify, TransientError } from './errors.js';

export function checkDb(db, expected = 'a pg.Client, pg.PoolClient or pg.Pool') {
  if (db === null || typeof db !== 'object' || typeof db.query !== 'function') {
    throw new TypeError(`expected ${expected}`);
  }
}

/** The first row's column of stmt on db; a database error as a typed
 * error (errors.js: a PermanentError keeps the SQLSTATE as its code). */
export async function queryValue(db, stmt, column) {
  try {
    const { rows } = await db.query(stmt);
    return rows[0][column];
  } catch (err) {
    throw classify(err);
  }
}

/** True for a pg.Pool (its connect() checks a client out), false for a
 * pg.Client or a checked-out pg.PoolClient. */
export const isPool = (db) => typeof db.connect === 'function' && typeof db.release !== 'function' && 'idleCount' in db;

/** One statement on db, answered within ms or rejected with a
 * TransientError.  pg's query_timeout goes with it, so a pg.Pool drops a
 * connection whose answer did not come; the race also bounds the wait for
 * a pooled connection (a partitioned network can hold a connect forever).
 * A late answer is ignored. */
export function timedQuery(db, text, values, ms) {
  const q = db.query({ text, values, query_timeout: Math.ceil(ms) });
  q.catch(() => {}); // settles after the race was lost: nothing to report
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new TransientError(`no answer from the database within ${Math.ceil(ms)} ms`)), ms);
  });
  return Promise.race([q, late]).finally(() => clearTimeout(timer));
}

/** Sleeps ms; resolves early (never rejects) when signal aborts. */
export async function sleep(ms, signal) {
  try {
    await delay(ms, undefined, { signal });
  } catch (err) {
    if (!signal?.aborted) throw err;
  }
}

/** A random duration in [ms/2, ms]. */
export const jitter = (ms) => ms / 2 + Math.random() * (ms / 2);

/** Milliseconds on a clock that only moves forward. */
export const now = () => performance.now();
