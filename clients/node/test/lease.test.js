// withLease: acquisition, renewal, release (also when the body throws),
// "not acquired" while another holder has it, bad input, fenced writes of
// a stale holder, a lost lease aborting the body's signal, and acquire and
// release on different connections leaving nothing behind.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { withLease, LeaseLostError, FencedError } from '../src/index.js';
import { admin, appPool, kind, q, sleep, waitFor, URL } from './helpers.js';

const pool = appPool();
pool.on('error', () => {}); // idle connections terminated by a test below
before(() => q('CREATE TABLE IF NOT EXISTS public.t_fenced (name text, fencing bigint, note text)'));
after(async () => { await q('DROP TABLE public.t_fenced'); await Promise.all([pool.end(), admin.end()]); });

const row = async (name) => (await q(`SELECT owner, fencing::text AS fencing, expires_at > clock_timestamp() AS live
                                        FROM skiplock.leases WHERE name = $1`, [name]))[0];
const written = async (name) => (await q('SELECT count(*)::int AS n FROM public.t_fenced WHERE name = $1', [name]))[0].n;

// One fenced write in a transaction of the app's pool.
async function fencedWrite(lease, note) {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    await lease.fence(c);
    await c.query('INSERT INTO public.t_fenced VALUES ($1, $2, $3)', [lease.name, lease.fencing, note]);
    await c.query('COMMIT');
  } catch (err) {
    await c.query('ROLLBACK');
    throw err;
  } finally {
    c.release();
  }
}

test('a lease is renewed past its ttl, released on exit; meanwhile others are told who holds it', async () => {
  const name = kind('lease');
  const r = await withLease(pool, name, { ttl: 1000, owner: 'a' }, async (lease) => {
    assert.equal(typeof lease.fencing, 'string');
    assert.equal(lease.signal.aborted, false);
    await sleep(2200); // over two ttls: renewed every 333 ms
    assert.equal(lease.signal.aborted, false, 'renewals kept it');
    assert.deepEqual(await row(name), { owner: 'a', fencing: lease.fencing, live: true });
    const other = await withLease(pool, name, { ttl: 1000, owner: 'b' }, async () => assert.fail('ran while held'));
    assert.equal(other.acquired, false);
    assert.equal(other.holder.owner, 'a');
    assert.ok(other.holder.expiresInMs > 0 && other.holder.expiresInMs <= 1000, `${other.holder.expiresInMs}`);
    await fencedWrite(lease, 'ok');
    return 42;
  });
  assert.deepEqual(r, { acquired: true, value: 42, fencing: '1', lost: false });
  assert.equal((await row(name)).live, false, 'released at once');
  assert.equal(await written(name), 1);
  const next = await withLease(pool, name, { ttl: 600, owner: 'b' }, async (l) => l.fencing);
  assert.deepEqual(next, { acquired: true, value: '2', fencing: '2', lost: false }, 'the token grows');
});

test('released when the body throws; the error comes out', async () => {
  const name = kind('lease');
  await assert.rejects(withLease(pool, name, { ttl: '10s' }, async () => { throw new Error('boom'); }), /boom/);
  assert.equal((await row(name)).live, false);
});

test('bad input is refused before any database call', async () => {
  const name = kind('lease');
  const fn = async () => assert.fail('ran');
  await assert.rejects(withLease(pool, 'x'.repeat(257), { ttl: '1s' }, fn), RangeError);
  await assert.rejects(withLease(pool, '', { ttl: '1s' }, fn), RangeError);
  await assert.rejects(withLease(pool, name, { ttl: 0 }, fn), RangeError);
  await assert.rejects(withLease(pool, name, { ttl: -5 }, fn), TypeError);
  await assert.rejects(withLease(pool, name, { ttl: 'soon' }, fn), TypeError);
  await assert.rejects(withLease(pool, name, {}, fn), TypeError);
  await assert.rejects(withLease(pool, name, { ttl: '1s', owner: 'o'.repeat(257) }, fn), RangeError);
  await assert.rejects(withLease(pool, name, { ttl: '1s', renewEvery: '1s' }, fn), RangeError);
  await assert.rejects(withLease(null, name, { ttl: '1s' }, fn), TypeError);
  assert.equal(await row(name), undefined, 'nothing written');
});

test('wait: takes the lease once the holder releases it', async () => {
  const name = kind('lease');
  let releaseAt = 0;
  const holder = withLease(pool, name, { ttl: '5s' }, async () => { await sleep(700); releaseAt = Date.now(); });
  await waitFor('held', 3000, async () => (await row(name))?.live);
  const r = await withLease(pool, name, { ttl: '5s', wait: '5s', retryEvery: 100 }, async () => Date.now());
  await holder;
  assert.equal(r.acquired, true);
  assert.ok(r.value >= releaseAt, 'after the release');
  const short = await withLease(pool, name, { ttl: '5s', wait: 1 }, async () => 1);
  assert.equal(short.acquired, true, 'free again');
});

test('a stale holder\'s fenced write fails with SK001 and writes nothing; its signal aborts', async () => {
  const name = kind('lease');
  await withLease(pool, name, { ttl: '30s', owner: 'old' }, async (lease) => {
    // an operator releases it and another holder takes it, before the old
    // holder's next renewal (in 10 s) could notice
    await q('SELECT skiplock.lease_release($1, $2, $3::bigint)', [name, 'old', lease.fencing]);
    const [{ f }] = await q("SELECT skiplock.lease_acquire($1, 'new', '30 s')::text AS f", [name]);
    assert.equal(f, String(Number(lease.fencing) + 1));
    const err = await fencedWrite(lease, 'stale').then(() => assert.fail('wrote'), (e) => e);
    assert.ok(err instanceof LeaseLostError && err instanceof FencedError, String(err));
    assert.equal(err.code, 'SK001');
    assert.equal(err.lease, name);
    assert.equal(lease.signal.aborted, true);
    assert.equal(lease.signal.reason, err);
    await assert.rejects(fencedWrite(lease, 'again'), LeaseLostError, 'refused at once afterwards');
  });
  assert.equal(await written(name), 0, 'nothing written');
  assert.deepEqual(await row(name), { owner: 'new', fencing: '2', live: true }, 'the new holder keeps it');
});

test('a holder frozen past its ttl: its fenced write fails with SK001, then it knows it lost the lease', async () => {
  const name = kind('lease');
  await withLease(pool, name, { ttl: 500 }, async (lease) => {
    const c = await pool.connect();
    try {
      await c.query('BEGIN');
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 900); // frozen: no timer, no renewal
      const fenced = lease.fence(c); // sent before any timer could run
      await assert.rejects(fenced, (e) => e instanceof LeaseLostError && e.code === 'SK001' && /expired/.test(e.message));
      await assert.rejects(c.query('INSERT INTO public.t_fenced VALUES ($1, 0, $2)', [name, 'late']), /aborted/);
      await c.query('ROLLBACK');
    } finally {
      c.release();
    }
    assert.equal(lease.lost, true);
    await assert.rejects(fencedWrite(lease, 'later'), LeaseLostError, 'refused without asking');
  });
  assert.equal(await written(name), 0);
});

test('a renewal that finds the lease taken aborts the signal at once', async () => {
  const name = kind('lease');
  const r = await withLease(pool, name, { ttl: '3s', renewEvery: 200 }, async (lease) => {
    await q('SELECT skiplock.lease_release($1, $2, $3::bigint)', [name, lease.owner, lease.fencing]);
    await q("SELECT skiplock.lease_acquire($1, 'thief', '30 s')", [name]);
    const t0 = Date.now();
    await new Promise((resolve) => lease.signal.addEventListener('abort', resolve));
    assert.ok(Date.now() - t0 < 1000, 'at the next renewal');
    assert.ok(lease.signal.reason instanceof LeaseLostError);
    assert.match(lease.signal.reason.message, /did not renew/);
  });
  assert.equal(r.lost, true);
  assert.equal((await row(name)).owner, 'thief', 'the release at exit did not touch the new holder');
});

test('acquire, renewals and release on different connections, one of them terminated: nothing leaks', async () => {
  const name = kind('lease');
  const clients = [new pg.Client({ connectionString: URL }), new pg.Client({ connectionString: URL })];
  await Promise.all(clients.map((c) => c.connect()));
  for (const c of clients) c.on('error', () => {});
  let i = 0;
  const roundRobin = { query: (...args) => clients[i++ % 2].query(...args) }; // a pool that never hands out the same one twice
  const before = i;
  const r = await withLease(roundRobin, name, { ttl: 1500, renewEvery: 300 }, async (lease) => {
    assert.equal(i - before, 1, 'acquired on clients[0]');
    await sleep(700); // two renewals, one on each
    assert.equal(lease.signal.aborted, false);
  });
  assert.equal(r.acquired, true);
  assert.ok(i - before >= 4, `acquire, renewals and release spread over both (${i - before} calls)`);
  assert.equal((await row(name)).live, false, 'released, whichever connection took it');
  await Promise.all(clients.map((c) => c.end()));

  // A pool whose connection is terminated while the lease is held.
  const name2 = kind('lease');
  const p = new pg.Pool({ connectionString: URL, max: 1, application_name: 'lease-terminated' });
  p.on('error', () => {});
  await withLease(p, name2, { ttl: 1500, renewEvery: 200, owner: 'p' }, async (lease) => {
    const killed = await q(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                             WHERE datname = current_database() AND application_name = 'lease-terminated'`);
    assert.ok(killed.length >= 1, 'the pool\'s backend was terminated');
    await sleep(1600); // a renewal fails once, the next reconnects
    assert.equal(lease.signal.aborted, false, 'kept across the terminated backend');
  });
  assert.equal((await row(name2)).live, false);
  await p.end();
  const locks = await q("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())");
  assert.equal(locks[0].n, 0, 'no session lock anywhere');
  const idle = await q(`SELECT count(*)::int AS n FROM pg_stat_activity
                         WHERE datname = current_database() AND state LIKE 'idle in transaction%'`);
  assert.equal(idle[0].n, 0, 'no idle-in-transaction session');
});
