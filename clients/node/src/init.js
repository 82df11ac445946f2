// init(): the schema installer this package bundles (sql/install.sql, the
// tree's, made by scripts/install-sql from the schema steps) — what the C
// binary's `skiplock init` does, with no C binary.
//
// The script goes whole as one simple-protocol query (no parameters).  It
// refuses a database whose installed steps came from a text it does not
// know (SQLSTATE 55000, naming the step), then applies each missing step
// in its own transaction under a transaction-scoped advisory lock: any
// number of installers (this one, the C binary, the other clients) may run
// at once, direct or through PgBouncer in transaction mode, and each step
// is applied once.  A failure inside a step leaves the session in that
// step's failed transaction: it is rolled back before the connection goes
// back to its owner.
import { readFile } from 'node:fs/promises';
import pg from 'pg';
import { classify } from './errors.js';
import { checkDb, isPool } from './db.js';

const SCRIPT = new URL('../sql/install.sql', import.meta.url);
const VERSION = 'SELECT skiplock.installed_version() AS version';
const ignore = () => {}; // a socket error: the query in flight rejects with it too

/** Installs the schema, or upgrades it to the newest step this package
 * knows, on db: a pg.Pool, a pg.Client or pg.PoolClient (not inside a
 * transaction), or a connection string.  Resolves to
 * skiplock.installed_version(); rejects with a typed error. */
export async function init(db) {
  const own = typeof db === 'string' ? clientFor(db) : null;
  if (own === null) checkDb(db, 'a pg.Pool, pg.Client or pg.PoolClient, or a connection string');
  const text = await readFile(SCRIPT, 'utf8');
  try {
    if (own !== null) return await onOwnClient(own, text);
    if (isPool(db)) return await onPool(db, text);
    return await install(db, text);
  } catch (err) {
    throw classify(err);
  }
}

// A client of its own for a connection string; a malformed one is a
// TypeError (the string is not repeated: it may hold a password).
function clientFor(url) {
  try {
    return new pg.Client({ connectionString: url, application_name: 'skiplock init' });
  } catch (err) {
    throw new TypeError(`not a connection string (${err.message})`, { cause: err });
  }
}

async function install(c, text) {
  try {
    await c.query(text);
  } catch (err) {
    await c.query('ROLLBACK').catch(ignore); // the failed step's transaction, if any
    throw err;
  }
  const { rows } = await c.query(VERSION);
  return rows[0].version;
}

async function onPool(pool, text) {
  const c = await pool.connect();
  c.on('error', ignore);
  let failure;
  try {
    return await install(c, text);
  } catch (err) {
    failure = err;
    throw err;
  } finally {
    c.off('error', ignore);
    c.release(failure); // a connection that failed is not reused
  }
}

async function onOwnClient(c, text) {
  c.on('error', ignore);
  try {
    await c.connect();
    return await install(c, text);
  } finally {
    await c.end().catch(ignore);
  }
}
