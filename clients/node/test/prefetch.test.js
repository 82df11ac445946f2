// Prefetch: claims held beyond the handlers wait in the worker, leased and
// heartbeated like running ones; a graceful stop runs them, and past the
// shutdown timeout gives back at once those never started.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Worker, enqueue } from '../src/index.js';
import { admin, appPool, kind, job, q, sleep, waitFor, fast } from './helpers.js';

const pool = appPool();
after(() => Promise.all([pool.end(), admin.end()]));

const enqueueN = (k, n) => Promise.all(Array.from({ length: n }, () => enqueue(pool, k, {})));
const runningFor = async (k, owner) => (await q(
  "SELECT count(*)::int AS n FROM skiplock.jobs WHERE kind = $1 AND state = 'running' AND lease_owner = $2",
  [k, owner]))[0].n;
const completed = async (k) => (await q(
  "SELECT count(*)::int AS n FROM skiplock.all_jobs WHERE kind = $1 AND state = 'completed'", [k]))[0].n;

function worker(owner, opts) {
  const w = new Worker({ ...fast, owner, concurrency: 1, prefetch: 3, ...opts });
  const errors = [];
  w.on('error', (e) => errors.push(e));
  w.on('fenced', () => {});
  return { w, errors };
}

test('prefetch: checked like the other options', () => {
  const h = { k: async () => {} };
  for (const bad of [-1, 1001, 1.5, '3']) {
    assert.throws(() => new Worker({ connectionString: 'postgres://x/y', handlers: h, prefetch: bad }), /prefetch/);
  }
});

test('one claim takes concurrency + prefetch; waiting jobs are heartbeated, none runs twice', async () => {
  const k = kind('pf.held');
  const ids = await enqueueN(k, 4);
  let now = 0;
  let max = 0;
  let runs = 0;
  const { w, errors } = worker('t-pf-held', { lease: '600ms', rescueEvery: '100ms', handlers: {
    [k]: async () => {
      max = Math.max(max, ++now);
      await sleep(runs++ === 0 ? 2400 : 10); // the first holds the slot four leases long
      now--;
      return 'done';
    },
  } });
  await w.start();
  try {
    await waitFor('one claim of 4', 5000, async () => (await runningFor(k, 't-pf-held')) === 4);
    await waitFor('4 completed', 15000, async () => (await completed(k)) === 4);
  } finally {
    await w.stop();
  }
  for (const id of ids) {
    const j = await job(id);
    assert.deepEqual([j.state, j.attempt, Number(j.fencing)], ['completed', 1, 1], `job ${id} was rescued or run twice`);
  }
  assert.equal(runs, 4);
  assert.equal(max, 1, 'the most handlers at once');
  assert.deepEqual(errors, []);
});

test('a graceful stop runs the prefetched jobs and claims nothing more', async () => {
  const k = kind('pf.drain');
  const ids = await enqueueN(k, 4);
  const { w } = worker('t-pf-drain', { handlers: { [k]: async () => { await sleep(300); return 'drained'; } } });
  await w.start();
  await waitFor('one claim of 4', 5000, async () => (await runningFor(k, 't-pf-drain')) === 4);
  const stopped = w.stop();
  await sleep(100);
  const late = await enqueue(pool, k, {});
  await stopped;
  for (const id of ids) assert.equal((await job(id)).state, 'completed');
  const l = await job(late);
  assert.deepEqual([l.state, l.attempt], ['available', 0], 'claimed after the stop');
});

test('past the shutdown timeout, jobs never started are given back at once', async () => {
  const k = kind('pf.giveback');
  const ids = await enqueueN(k, 4);
  const started = [];
  const { w } = worker('t-pf-giveback', { lease: '30s', shutdownTimeout: '300ms', handlers: {
    [k]: (j, { signal }) => new Promise((_, reject) => {
      started.push(j.id);
      signal.addEventListener('abort', () => reject(new Error('cancelled by the stop')));
    }),
  } });
  await w.start();
  await waitFor('one claim of 4', 5000, async () => (await runningFor(k, 't-pf-giveback')) === 4);
  const t = Date.now();
  await w.stop();
  assert.ok(Date.now() - t < 3000, `stopped after ${Date.now() - t} ms`);
  assert.equal(started.length, 1, `started: ${started}`);
  for (const id of ids) {
    const [r] = await q(`SELECT state, attempt, lease_owner IS NULL AS free, errors->-1->>'error' AS error,
                                run_at <= now() + interval '1 second' AS due
                           FROM skiplock.all_jobs WHERE id = $1`, [id]);
    assert.deepEqual([r.state, r.attempt, r.free, r.due], ['available', 1, true, true], `job ${id}`);
    if (id !== started[0]) assert.equal(r.error, 'the worker stopped before starting it');
  }
});

test('a waiting job whose lease is lost never starts here', async () => {
  const k = kind('pf.lost');
  const [first, second] = await enqueueN(k, 2);
  const started = [];
  let release;
  const gate = new Promise((r) => { release = r; });
  const fenced = [];
  const w = new Worker({ ...fast, owner: 't-pf-lost', concurrency: 1, prefetch: 1, lease: '900ms',
    poll: '30s', rescueEvery: '60s', handlers: { [k]: async (j) => { started.push(j.id); await gate; return 'done'; } } });
  w.on('error', () => {});
  w.on('fenced', (e) => fenced.push(e.jobId));
  await w.start();
  try {
    await waitFor('both claimed, one started', 5000, async () =>
      (await runningFor(k, 't-pf-lost')) === 2 && started.length === 1);
    const waiting = started[0] === first ? second : first;
    // Another worker takes the waiting job's claim: its fencing moves on.
    await q(`UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, [waiting]);
    await q('SELECT count(*) FROM skiplock.rescue()');
    await q("SELECT count(*) FROM skiplock.claim('t-pf-other', ARRAY[$1], NULL, 1, '30s')", [k]);
    await waitFor('the waiting claim is seen as lost', 5000, async () => fenced.includes(waiting));
    release();
    await waitFor('the started job completed', 5000, async () => (await job(started[0])).state === 'completed');
    await sleep(300);
    assert.deepEqual(started.length, 1, `started: ${started}`);
    const j = await job(waiting);
    assert.deepEqual([j.state, j.lease_owner], ['running', 't-pf-other']);
  } finally {
    release();
    await w.stop();
  }
});
