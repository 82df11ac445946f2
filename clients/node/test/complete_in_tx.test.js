// Completing a job in the transaction of its effect (ctx.complete,
// jobComplete): the effect and the completion commit together, and the
// worker sends no outcome of its own and loses no lease over it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Worker, enqueue, jobComplete, FencedError } from '../src/index.js';
import { admin, appPool, kind, job, q, sleep, waitFor, fast } from './helpers.js';

const pool = appPool();
const EFFECT = `INSERT INTO public.t_ledger (job_id, n) VALUES ($1, 1)
                ON CONFLICT (job_id) DO UPDATE SET n = t_ledger.n + 1`;
before(() => q('CREATE TABLE IF NOT EXISTS public.t_ledger (job_id bigint PRIMARY KEY, n int NOT NULL)'));
after(async () => { await q('DROP TABLE public.t_ledger'); await Promise.all([pool.end(), admin.end()]); });

// The effect and ctx.complete in one transaction of the application's pool.
async function effect(j, ctx, result, { fail = false } = {}) {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    await c.query(EFFECT, [j.id]);
    await ctx.complete(c, result);
    if (fail) throw new Error('the effect failed after all');
    await c.query('COMMIT');
  } catch (err) {
    await c.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    c.release();
  }
}

async function run(opts, until) {
  const w = new Worker({ ...fast, ...opts });
  const fenced = [];
  const errors = [];
  w.on('fenced', (e) => fenced.push(e));
  w.on('error', (e) => errors.push(e));
  await w.start();
  try {
    await until();
  } finally {
    await w.stop();
  }
  return { fenced, errors };
}

const ledger = async (ids) =>
  (await q('SELECT job_id, n FROM public.t_ledger WHERE job_id = ANY($1) ORDER BY job_id', [ids]))
    .map((r) => [r.job_id, r.n]);

test('the worker records nothing and loses nothing; heartbeats find the job gone', async () => {
  const k = kind('intx');
  const ids = [];
  for (let i = 0; i < 8; i++) ids.push(await enqueue(pool, k, { i, sleep: i < 3 ? 900 : 0 }));
  const aborted = [];
  const { fenced } = await run({ concurrency: 4, lease: '600ms', handlers: { [k]: async (j, ctx) => {
    await effect(j, ctx, { i: j.payload.i });
    await sleep(j.payload.sleep); // heartbeats every 200 ms meanwhile
    if (ctx.signal.aborted) aborted.push(j.id);
    return 'ignored: the completion carried the result';
  } } }, () => waitFor('8 completed', 20000, async () =>
    (await q("SELECT count(*)::int AS n FROM skiplock.all_jobs WHERE kind = $1 AND state = 'completed'", [k]))[0].n === 8
    && (await q('SELECT count(*)::int AS n FROM skiplock.jobs WHERE kind = $1', [k]))[0].n === 0));
  await sleep(700); // a heartbeat or two after the last handler returned
  assert.deepEqual(fenced, []);
  assert.deepEqual(aborted, []);
  assert.deepEqual(await ledger(ids), ids.map((id) => [id, 1]));
  for (const id of ids) {
    const j = await job(id);
    assert.deepEqual([j.state, j.attempt, j.result], ['completed', 1, { i: j.payload.i }]);
  }
});

test('rolled back with its effect: an ordinary failed attempt; thrown after the commit: no lost claim', async () => {
  const k = kind('intx-mixed');
  const back = await enqueue(pool, k, { rollback: true }, { backoff: 'fixed', backoffBase: 50 });
  const late = await enqueue(pool, k, { throw: true });
  const { fenced } = await run({ handlers: { [k]: async (j, ctx) => {
    await effect(j, ctx, null, { fail: j.payload.rollback && j.attempt === 1 });
    if (j.payload.throw) throw new Error('after the commit');
  } } }, () => waitFor('both completed', 20000, async () =>
    (await job(back)).state === 'completed' && (await job(late)).state === 'completed'));
  assert.deepEqual(fenced, []);
  assert.equal((await job(back)).attempt, 2);
  assert.equal((await job(late)).attempt, 1);
  assert.deepEqual(await ledger([back, late]), [back, late].sort((a, b) => a - b).map((id) => [id, 1]));
});

test('jobComplete refuses a stale or repeated claim', async () => {
  const k = kind('intx-sql');
  const id = await enqueue(pool, k, {});
  const [claimed] = await q("SELECT id, fencing FROM skiplock.claim('t', ARRAY[$1])", [k]);
  const c = await pool.connect();
  const inTx = async (fencing) => {
    await c.query('BEGIN');
    try {
      await c.query(EFFECT, [id]);
      await jobComplete(c, { id, fencing }, { ok: 1 });
      await c.query('COMMIT');
    } catch (err) {
      await c.query('ROLLBACK');
      throw err;
    }
  };
  try {
    await assert.rejects(inTx(String(Number(claimed.fencing) + 1)), (e) => e instanceof FencedError && e.jobId === id);
    await inTx(claimed.fencing);
    await assert.rejects(inTx(claimed.fencing), (e) => e instanceof FencedError && /already completed/.test(e.message));
  } finally {
    c.release();
  }
  assert.deepEqual(await ledger([id]), [[id, 1]]);
  assert.deepEqual([(await job(id)).state, (await job(id)).result], ['completed', { ok: 1 }]);
});
