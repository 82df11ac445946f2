// Test helpers: the harness's database (run.sh passes the URLs), a direct
// pool for checks, scratch databases, unique kinds per test, and bounded
// waits.
import pg from 'pg';

export const URL = process.env.SKL_TEST_URL;
export const DIRECT_URL = process.env.SKL_TEST_DIRECT_URL;
export const MODE = process.env.SKL_TEST_MODE;
if (!URL || !DIRECT_URL || !MODE) throw new Error('run under clients/node/test/run.sh (SKL_TEST_URL, SKL_TEST_DIRECT_URL, SKL_TEST_MODE)');

/** Checks go to the database directly, whatever the mode. */
export const admin = new pg.Pool({ connectionString: DIRECT_URL, max: 2 });
/** What an application would use: the mode's URL (PgBouncer when pooled). */
export const appPool = () => new pg.Pool({ connectionString: URL, max: 4 });

/** An empty database of its own (PgBouncer serves any database name):
 * its URL in the mode (url) and direct (directUrl); drop() removes it. */
export async function scratchDatabase(tag) {
  const name = `node_${tag}_${process.pid}`;
  await admin.query(`DROP DATABASE IF EXISTS ${name}`);
  await admin.query(`CREATE DATABASE ${name}`);
  const at = (u) => u.replace(/\/[^/?]+(\?|$)/, `/${name}$1`);
  return {
    name, url: at(URL), directUrl: at(DIRECT_URL),
    drop: () => admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`),
  };
}

let seq = 0;
export const kind = (name) => `t.${name}.${process.pid}.${++seq}`;
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function q(sql, params) {
  return (await admin.query(sql, params)).rows;
}

/** fn(client) in a transaction on a client of pool, committed when commit
 * is true, else rolled back (as it is when fn throws: a client in a failed
 * transaction never goes back to the pool). */
export async function inTxOn(pool, fn, commit) {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    const v = await fn(c);
    await c.query(commit ? 'COMMIT' : 'ROLLBACK');
    return v;
  } catch (err) {
    await c.query('ROLLBACK');
    throw err;
  } finally {
    c.release();
  }
}

export async function job(id) {
  return (await q('SELECT * FROM skiplock.all_jobs WHERE id = $1', [id]))[0];
}

/** Polls fn until it returns a truthy value; throws after ms. */
export async function waitFor(what, ms, fn) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for: ${what}`);
    await sleep(25);
  }
}

/** Options every test worker shares: fast polls and rescues. */
export const fast = { connectionString: URL, poll: '200ms', rescueEvery: '250ms' };
