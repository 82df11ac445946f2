// init() and `npx skiplock init` (bin/skiplock.js): the schema installer
// the package bundles (sql/install.sql), on empty databases of their own,
// through the mode's URL (PgBouncer, pool 2, when pooled):
//   * three installers at once (a pg.Pool, a pg.Client, a connection
//     string): none fails, each answers the newest step, which
//     installed_version() says, and schema_version has one row per step of
//     the bundled script, with its name and checksum;
//   * run again: nothing applied;
//   * a step installed from another text: a PermanentError (55000) naming
//     it, nothing applied, the caller's client usable (not left in the
//     failed transaction), no idle-in-transaction session, no advisory lock;
//   * unreachable: TransientError; bad arguments: TypeError;
//   * the command: --help; exit 2 and one line for bad usage; exit 1 and
//     one line for a failure; the URL from --url or DATABASE_URL.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import pg from 'pg';
import { init, PermanentError, TransientError } from '../src/index.js';
import { admin, scratchDatabase } from './helpers.js';

after(() => admin.end());

const BIN = new globalThis.URL('../bin/skiplock.js', import.meta.url).pathname;
const UNREACHABLE = 'postgresql://skiplock@127.0.0.1:1/nothing';

/** The steps the bundled script installs: [version, name, checksum]. */
async function bundledSteps() {
  const text = await readFile(new globalThis.URL('../sql/install.sql', import.meta.url), 'utf8');
  const steps = [...text.matchAll(/^ {4}\((\d+), '(\d{4}_\w+)', '([0-9a-f]{64})'\)/gm)]
    .map(([, v, name, sum]) => [Number(v), name, sum]);
  assert.ok(steps.length > 0);
  assert.equal(steps.length, text.match(/^-- step \d{4}_\w+$/gm).length, 'each step once in the drift check');
  return steps;
}

async function inDb(url, sql) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query(sql)).rows;
  } finally {
    await c.end();
  }
}

const stepRows = (url) => inDb(url, 'SELECT version, name, checksum FROM skiplock.schema_version ORDER BY version');
const lastApplied = async (url) =>
  (await inDb(url, 'SELECT count(*)::int AS n, max(applied_at)::text AS at FROM skiplock.schema_version'))[0];

async function noLeftovers(directUrl) {
  const [{ idle, locks }] = await inDb(directUrl, `SELECT
    (SELECT count(*)::int FROM pg_stat_activity WHERE datname = current_database()
        AND state LIKE 'idle in transaction%') AS idle,
    (SELECT count(*)::int FROM pg_locks l JOIN pg_database d ON d.oid = l.database
      WHERE l.locktype = 'advisory' AND d.datname = current_database()) AS locks`);
  assert.deepEqual({ idle, locks }, { idle: 0, locks: 0 }, 'no idle-in-transaction session, no advisory lock');
}

test('init: three at once on an empty database, then again, then a drifted step', { timeout: 60000 }, async () => {
  const steps = await bundledSteps();
  const newest = Math.max(...steps.map(([v]) => v));
  const db = await scratchDatabase('init');
  const pool = new pg.Pool({ connectionString: db.url, max: 2 });
  const client = new pg.Client({ connectionString: db.url });
  try {
    await client.connect();
    assert.deepEqual(await Promise.all([init(pool), init(client), init(db.url)]), [newest, newest, newest]);
    assert.deepEqual((await stepRows(db.directUrl)).map((r) => [r.version, r.name, r.checksum]), steps);
    assert.equal((await inDb(db.url, 'SELECT skiplock.installed_version() AS v'))[0].v, newest);

    const before = await lastApplied(db.directUrl);
    assert.equal(await init(pool), newest);
    assert.deepEqual(await lastApplied(db.directUrl), before, 'run again: nothing applied');

    await inDb(db.directUrl, `UPDATE skiplock.schema_version SET checksum = repeat('0', 64) WHERE version = 3;
      DELETE FROM skiplock.schema_version WHERE version = ${newest}`);
    const drifted = await lastApplied(db.directUrl);
    for (const target of [client, pool, db.url]) {
      await assert.rejects(init(target), (e) => e instanceof PermanentError && e.code === '55000' &&
        e.message.startsWith('schema step 0003_leases is installed from a text this installer does not know'));
    }
    assert.deepEqual(await lastApplied(db.directUrl), drifted, 'a drifted step: nothing applied');
    assert.equal((await client.query('SELECT 1 AS one')).rows[0].one, 1, "the caller's client is usable");
    assert.equal((await pool.query('SELECT 1 AS one')).rows[0].one, 1, "the caller's pool is usable");
    await noLeftovers(db.directUrl);
  } finally {
    await Promise.all([client.end().catch(() => {}), pool.end()]);
    await db.drop();
  }
});

test('init: typed errors for an unreachable database and bad arguments', async () => {
  await assert.rejects(init(UNREACHABLE), (e) => e instanceof TransientError && /ECONNREFUSED/.test(e.message));
  const pool = new pg.Pool({ connectionString: UNREACHABLE });
  await assert.rejects(init(pool), TransientError);
  await pool.end();
  for (const bad of [undefined, null, 5432, {}]) {
    await assert.rejects(init(bad), { name: 'TypeError', message: /a pg.Pool, pg.Client or pg.PoolClient, or a connection string/ });
  }
  await assert.rejects(init('postgresql://u:secret@db:99999/app'),
    (e) => e instanceof TypeError && e.message.startsWith('not a connection string') && !e.message.includes('secret'));
});

/** Runs the command: { code, stdout, stderr }. */
function command(args, env = {}) {
  const base = { ...process.env };
  delete base.DATABASE_URL;
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { env: { ...base, ...env } }, (err, stdout, stderr) =>
      resolve({ code: err ? err.code : 0, stdout, stderr }));
  });
}

function oneLine(r, code, pattern) {
  assert.equal(r.code, code, r.stderr);
  assert.equal(r.stdout, '');
  assert.match(r.stderr, /^[^\n]+\n$/, 'one line on stderr');
  assert.match(r.stderr, pattern);
}

test('npx skiplock init: usage, --url or DATABASE_URL, failures', { timeout: 60000 }, async () => {
  const help = await command(['--help']);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /^usage: npx skiplock init \[--url URL\]\n/);
  assert.match(help.stdout, /DATABASE_URL/);
  assert.equal(help.stderr, '');
  oneLine(await command([]), 2, /^skiplock: no command: the command is init/);
  oneLine(await command(['migrate']), 2, /unknown command "migrate"/);
  oneLine(await command(['init', '--force']), 2, /Unknown option '--force'/);
  oneLine(await command(['init', 'now']), 2, /init takes no argument "now"/);
  oneLine(await command(['init']), 2, /no database: give --url URL or set DATABASE_URL/);
  oneLine(await command(['init', '--url', 'postgresql://db:99999/app']), 2, /not a connection string/);
  oneLine(await command(['init', '--url', UNREACHABLE]), 1, /^skiplock init: connect ECONNREFUSED/);

  const steps = await bundledSteps();
  const db = await scratchDatabase('init_cli');
  try {
    const ok = await command(['init'], { DATABASE_URL: db.url });
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(ok.stdout, `skiplock init: the schema is at step ${steps.at(-1)[0]}\n`);
    assert.equal((await stepRows(db.directUrl)).length, steps.length);
    await inDb(db.directUrl, "UPDATE skiplock.schema_version SET checksum = repeat('0', 64) WHERE version = 5");
    oneLine(await command(['init', '--url', db.url], { DATABASE_URL: UNREACHABLE }), 1,
      /^skiplock init: schema step 0005_idempotency is installed from a text this installer does not know/);
    await noLeftovers(db.directUrl);
  } finally {
    await db.drop();
  }
});
