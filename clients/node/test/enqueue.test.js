// enqueue in the caller's transaction, through the mode's URL.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { enqueue, enqueueMany, enqueueManyStatement, jobFence, PermanentError, FencedError } from '../src/index.js';
import { admin, appPool, inTxOn, kind, job, q } from './helpers.js';

const pool = appPool();
after(() => Promise.all([pool.end(), admin.end()]));

const inTx = (fn, commit) => inTxOn(pool, fn, commit);

test('a job enqueued in a transaction that rolls back does not exist', async () => {
  const k = kind('rollback');
  const id = await inTx((c) => enqueue(c, k, { n: 1 }), false);
  assert.match(id, /^\d+$/);
  assert.equal(await job(id), undefined);
  assert.deepEqual(await q('SELECT id FROM skiplock.all_jobs WHERE kind = $1', [k]), []);
});

test('a job enqueued in a transaction that commits is there, with its options', async () => {
  const k = kind('commit');
  const payload = { s: 'quote " backslash \\ é', a: [1, 2] };
  const id = await inTx((c) => enqueue(c, k, payload, {
    queue: 'mail', priority: 5, maxAttempts: 3, timeout: '2s', backoff: 'fixed', backoffBase: 500,
    runAt: new Date(Date.now() + 3600e3),
  }), true);
  const j = await job(id);
  assert.equal(j.state, 'available');
  assert.deepEqual(j.payload, payload);
  assert.equal(j.queue, 'mail');
  assert.equal(j.priority, 5);
  assert.equal(j.max_attempts, 3);
  assert.equal(j.timeout_ms, 2000);
  assert.equal(j.backoff, 'fixed');
  assert.equal(j.backoff_base_ms, 500);
  assert.ok(j.run_at > new Date(Date.now() + 3500e3));
});

test('a unique key gives the holder\'s id; a pool works for a job of its own', async () => {
  const k = kind('unique');
  const a = await enqueue(pool, k, {}, { uniqueKey: `${k}:2026-12-01` });
  const b = await enqueue(pool, k, {}, { uniqueKey: `${k}:2026-12-01` });
  const c = await enqueue(pool, k, {}, { uniqueKey: `${k}:2026-12-02` });
  assert.equal(a, b);
  assert.notEqual(a, c);
});

test('bad input: a PermanentError with its SQLSTATE, and nothing written', async () => {
  const k = kind('bad');
  await assert.rejects(enqueue(pool, k, {}, { runAt: '2300-01-01T00:00:00Z' }),
    (e) => e instanceof PermanentError && e.code === '22023');
  await assert.rejects(enqueue(pool, k, {}, { maxAttempts: 0 }),
    (e) => e instanceof PermanentError && /^2[23]/.test(e.code));
  await assert.rejects(enqueue(pool, 'x'.repeat(129), {}), (e) => e instanceof PermanentError);
  await assert.rejects(enqueue({}, k, {}), TypeError);
  assert.deepEqual(await q('SELECT id FROM skiplock.all_jobs WHERE kind = $1', [k]), []);
});

test('jobFence on a stale claim throws FencedError (SK001)', async () => {
  const k = kind('fence');
  const id = await enqueue(pool, k, {});
  const [c] = await q("SELECT id, fencing FROM skiplock.claim('t', ARRAY[$1], NULL, 1, '1 minute')", [k]);
  await inTx((db) => jobFence(db, c), true); // current: passes
  await assert.rejects(inTx((db) => jobFence(db, { id, fencing: Number(c.fencing) - 1 }), true),
    (e) => e instanceof FencedError && e.code === 'SK001' && e.jobId === id);
});

test('enqueueMany: all jobs in one statement, in order, in the caller\'s transaction, with their options', async () => {
  const k = kind('many');
  const ids = await inTx((c) => enqueueMany(c, [
    { kind: k, payload: { n: 1 } },
    { kind: k, payload: [2], queue: 'mail', priority: 3, maxAttempts: 2, timeout: '2s', backoff: 'fixed', backoffBase: 250 },
    { kind: k, uniqueKey: `${k}:u`, runAt: new Date(Date.now() + 3600e3) },
  ]), true);
  assert.equal(ids.length, 3);
  const [a, b, c] = await Promise.all(ids.map(job));
  assert.deepEqual([a.payload, a.queue, a.priority, a.max_attempts], [{ n: 1 }, 'default', 0, 25]);
  assert.deepEqual([b.payload, b.queue, b.priority, b.max_attempts, b.timeout_ms, b.backoff, b.backoff_base_ms],
    [[2], 'mail', 3, 2, 2000, 'fixed', 250]);
  assert.ok(c.run_at > new Date(Date.now() + 3000e3) && c.unique_key === `${k}:u`);
  // a held unique key gives the holder's id; a rolled-back batch leaves nothing
  assert.deepEqual(await enqueueMany(pool, [{ kind: k, uniqueKey: `${k}:u` }]), [c.id]);
  await inTx((cl) => enqueueMany(cl, [{ kind: k, payload: { gone: true } }]), false);
  assert.equal((await q('SELECT count(*)::int AS n FROM skiplock.all_jobs WHERE kind = $1', [k]))[0].n, 3);
  assert.deepEqual(await enqueueMany(pool, []), []);
});

test('enqueueMany: a token makes a retried batch a no-op that returns the first ids', async () => {
  const k = kind('many-token');
  const token = `${k}:batch`;
  const first = await enqueueMany(pool, [{ kind: k }, { kind: k }], { token });
  assert.deepEqual(await enqueueMany(pool, [{ kind: k }, { kind: k }], { token }), first);
  assert.equal((await q('SELECT count(*)::int AS n FROM skiplock.all_jobs WHERE kind = $1', [k]))[0].n, 2);
});

test('enqueueMany: bad input is refused before or by the database, and nothing is written', async () => {
  const k = kind('many-bad');
  assert.throws(() => enqueueManyStatement([{ kind: '' }]), /job 0: kind/);
  assert.throws(() => enqueueManyStatement([{ kind: k, nope: 1 }]), /job 0: unknown option "nope"/);
  assert.throws(() => enqueueManyStatement([{ kind: k }], { tok: 'x' }), /unknown option "tok"/);
  assert.throws(() => enqueueManyStatement({ kind: k }), /expected an array/);
  await assert.rejects(enqueueMany(pool, [{ kind: k }, { kind: k, queue: 'q'.repeat(200) }]),
    (e) => e instanceof PermanentError && e.code === '22023');
  assert.equal((await q('SELECT count(*)::int AS n FROM skiplock.all_jobs WHERE kind = $1', [k]))[0].n, 0);
});
