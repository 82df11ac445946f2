// Seed scenario (the daily job behind PgBouncer), with a singleton lease
// instead of an advisory lock (test/fixtures/singleton-replica.js):
//   #1 four replicas started at once, the holder SIGKILLed mid-run: one
//      report per day, and the killed day is retried by another replica
//      within about the ttl, not skipped;
//   #2 acquire and release on whatever pooled connection: stopped
//      replicas leave no live lease and no session lock;
//   #3 a cut TCP connection does not keep the lease beyond its ttl;
//   #4 a replica that cannot do the work never takes the lease, and one
//      whose work fails releases it at once.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import pg from 'pg';
import { withLease } from '../src/index.js';
import { admin, kind, q, sleep, waitFor, URL } from './helpers.js';
import { startProxy } from './cutproxy.js';

const DAYS = ['2026-12-01', '2026-12-02'];
const procs = new Map();
after(async () => {
  for (const p of procs.values()) p.kill('SIGKILL');
  await admin.end();
});

function replica(n, env) {
  const p = spawn(process.execPath, [new globalThis.URL('./fixtures/singleton-replica.js', import.meta.url).pathname], {
    env: { ...process.env, DATABASE_URL: URL, REPLICA: String(n), DAYS: DAYS.join(','), ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  procs.set(String(n), p);
  return p;
}

async function stopAll() {
  for (const [n, p] of [...procs]) {
    procs.delete(n);
    const exited = once(p, 'exit');
    p.kill('SIGTERM');
    const [code] = await exited;
    assert.equal(code, 0, `replica ${n} exits 0 after SIGTERM`);
  }
}

const reset = () => q(`DROP TABLE IF EXISTS daily_report, daily_attempt, lease_turn;
  CREATE TABLE daily_report (day text NOT NULL, replica text NOT NULL, fencing bigint NOT NULL);
  CREATE TABLE daily_attempt (day text, replica text, fencing bigint, at timestamptz DEFAULT clock_timestamp());
  CREATE TABLE lease_turn (replica text, fencing bigint, at timestamptz DEFAULT clock_timestamp())`);
const reports = () => q('SELECT day, replica, fencing::int AS fencing FROM daily_report ORDER BY day');
const live = async (name) => (await q('SELECT expires_at > clock_timestamp() AS live FROM skiplock.leases WHERE name = $1', [name]))[0]?.live;
const sessionState = async () => (await q(`SELECT
    (SELECT count(*)::int FROM pg_locks WHERE locktype = 'advisory'
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())) AS advisory,
    (SELECT count(*)::int FROM pg_stat_activity WHERE datname = current_database()
        AND state LIKE 'idle in transaction%') AS idle_in_tx`))[0];

test('#1 #2 #4: four replicas, the holder SIGKILLed mid-run: one report per day, the retry taken over', { timeout: 60000 }, async () => {
  await reset();
  const LEASE = kind('daily');
  const TTL = 1000;
  const startAt = Date.now() + 1500;
  for (let n = 1; n <= 4; n++) {
    replica(n, { LEASE, TTL: String(TTL), START_AT: String(startAt), HANG_DAY: DAYS[0], DEP_DOWN: n === 4 ? '1' : '0' });
  }
  const [hung] = await waitFor('the first attempt at the hanging day', 15000, () =>
    q('SELECT replica, fencing::int AS fencing, at FROM daily_attempt WHERE day = $1', [DAYS[0]]).then((r) => (r.length ? r : null)));
  procs.get(hung.replica).kill('SIGKILL');
  procs.delete(hung.replica);

  await waitFor('both reports', 15000, async () => (await reports()).length === 2);
  await sleep(1500); // more turns: nobody writes a day twice
  const rs = await reports();
  assert.deepEqual(rs.map((r) => r.day), DAYS, 'exactly one report per day');
  assert.notEqual(rs[0].replica, hung.replica, 'the killed day was done by another replica');
  assert.ok(rs[0].fencing > hung.fencing, 'under a newer token');
  const attempts = await q('SELECT replica, fencing::int AS fencing, at FROM daily_attempt WHERE day = $1 ORDER BY at', [DAYS[0]]);
  assert.equal(attempts.length, 2, 'the killed attempt and one retry');
  const gap = (attempts[1].at - attempts[0].at) / 1000;
  assert.ok(gap >= 0.8 && gap < 3.5, `taken over after the ttl expired, within about the ttl (${gap} s)`);
  const turns = await q('SELECT DISTINCT replica FROM lease_turn');
  assert.ok(!turns.some((t) => t.replica === '4'), 'the replica whose dependency is down never took the lease');

  await stopAll();
  assert.equal(await live(LEASE), false, 'no live lease once every replica stopped');
  assert.deepEqual(await sessionState(), { advisory: 0, idle_in_tx: 0 });
});

test('#4: a replica whose work fails releases the lease at once; another does the work well within the ttl', { timeout: 60000 }, async () => {
  await reset();
  const LEASE = kind('daily');
  const TTL = 20000;
  replica(1, { LEASE, TTL: String(TTL), START_AT: '0', FAIL_IN_FN: '1' });
  await waitFor('the failing replica tried', 10000, async () => (await q('SELECT 1 FROM daily_attempt')).length > 0);
  const t0 = Date.now();
  replica(2, { LEASE, TTL: String(TTL), START_AT: '0' });
  await waitFor('both reports', 12000, async () => (await reports()).length === 2);
  assert.ok(Date.now() - t0 < TTL / 2, `done in ${Date.now() - t0} ms, not after the ttl`);
  assert.ok((await reports()).every((r) => r.replica === '2'));
  await stopAll();
  assert.equal(await live(LEASE), false);
});

test('#3: a cut TCP connection does not keep the lease beyond its ttl; a reset one keeps it', { timeout: 60000 }, async () => {
  const proxy = await startProxy(URL);
  const pool = new pg.Pool({ connectionString: proxy.url, max: 2 });
  pool.on('error', () => {});
  const other = new pg.Pool({ connectionString: URL, max: 1 });
  const name = kind('cut');
  const TTL = 1500;
  try {
    const held = await withLease(pool, name, { ttl: TTL, owner: 'cut' }, async (lease) => {
      await proxy.ctl('reset'); // the connection dies; the next renewal reconnects
      await sleep(2 * TTL);
      assert.equal(lease.signal.aborted, false, 'kept across a reset connection');

      await proxy.ctl('mode', 'blackhole'); // a silent partition: nothing flows, nothing closes
      const cutAt = Date.now();
      await once(lease.signal, 'abort');
      const lostAfter = Date.now() - cutAt;
      assert.match(lease.signal.reason.message, /no renewal succeeded within the ttl/);
      assert.ok(lostAfter < TTL, `the holder knew within the ttl (${lostAfter} ms)`);
      const taken = await withLease(other, name, { ttl: TTL, owner: 'next', wait: 3 * TTL, retryEvery: 100 }, async (l) => l.fencing);
      const takenAfter = Date.now() - cutAt;
      assert.equal(taken.acquired, true);
      assert.equal(taken.value, String(Number(lease.fencing) + 1));
      assert.ok(takenAfter >= lostAfter && takenAfter < TTL + 1000, `another replica took it after ${takenAfter} ms`);
      assert.match(await proxy.ctl('stats'), /active=[1-9]/, 'while the cut connection is still open');
    });
    assert.equal(held.lost, true);
  } finally {
    await proxy.ctl('mode', 'pass').catch(() => {});
    proxy.stop();
    await Promise.all([pool.end(), other.end()]);
  }
});
