// The Worker against the real database, through the mode's URL.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import {
  Worker, enqueue, MIN_SCHEMA, FencedError, JobTimeoutError, PermanentError, TransientError, ShutdownError,
} from '../src/index.js';
import { admin, appPool, kind, job, q, scratchDatabase, sleep, waitFor, fast, MODE, URL, DIRECT_URL } from './helpers.js';

const pool = appPool();
after(() => Promise.all([pool.end(), admin.end()]));

async function withWorker(opts, fn) {
  const w = new Worker({ ...fast, ...opts });
  const errors = [];
  w.on('error', (e) => errors.push(e));
  await w.start();
  try {
    return await fn(w, errors);
  } finally {
    await w.stop();
  }
}

const state = async (id) => (await job(id)).state;
const expireAndRescue = (id) => q(`UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 second'
                                    WHERE id = $1 RETURNING (SELECT count(*) FROM skiplock.rescue())`, [id]);

test('concurrency: at most N handlers at once, all jobs done, one connection', async () => {
  const k = kind('conc');
  const ids = await Promise.all(Array.from({ length: 12 }, (_, i) => enqueue(pool, k, { i })));
  let now = 0;
  let max = 0;
  const app = `skl-conc-${process.pid}`;
  await withWorker({ applicationName: app, concurrency: 4, handlers: {
    [k]: async (j) => { now++; max = Math.max(max, now); await sleep(150); now--; return { i: j.payload.i }; },
  } }, async () => {
    await waitFor('12 completed', 20000, async () =>
      (await q("SELECT count(*)::int AS n FROM skiplock.all_jobs WHERE kind = $1 AND state = 'completed'", [k]))[0].n === 12);
    if (MODE === 'direct') {
      const [{ n }] = await q('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [app]);
      assert.equal(n, 1, 'one connection for claims, heartbeats and outcomes');
    }
  });
  assert.equal(max, 4);
  for (const id of ids) assert.deepEqual((await job(id)).result, { i: (await job(id)).payload.i });
});

test('heartbeats keep a job three leases long', async () => {
  const k = kind('beat');
  const id = await enqueue(pool, k, {});
  await withWorker({ lease: '600ms', handlers: { [k]: async (j, { signal }) => {
    for (let t = 0; t < 20; t++) {
      const [r] = await q('SELECT state, lease_expires_at > now() AS ahead FROM skiplock.all_jobs WHERE id = $1', [j.id]);
      assert.deepEqual(r, { state: 'running', ahead: true });
      await sleep(100);
    }
    assert.equal(signal.aborted, false);
    return 'done';
  } } }, () => waitFor('completed', 10000, async () => (await state(id)) === 'completed'));
  const j = await job(id);
  assert.equal(j.attempt, 1);
  assert.equal(Number(j.fencing), 1);
  assert.equal(j.result, 'done');
});

test('a lost lease aborts the handler\'s signal with a FencedError; its outcome is not sent', async () => {
  const k = kind('lost');
  const id = await enqueue(pool, k, {});
  const reasons = [];
  const fenced = [];
  await withWorker({ lease: '1500ms', handlers: { [k]: async (j, { signal }) => {
    if (j.attempt > 1) return { attempt: j.attempt };
    await expireAndRescue(j.id);
    await new Promise((r) => signal.addEventListener('abort', r));
    reasons.push(signal.reason);
    return { attempt: 1 }; // must not be recorded
  } } }, async (w) => {
    w.on('fenced', (e) => fenced.push(e));
    await waitFor('completed', 10000, async () => (await state(id)) === 'completed');
  });
  assert.ok(reasons[0] instanceof FencedError, String(reasons[0]));
  assert.equal(reasons[0].jobId, id);
  assert.ok(fenced.some((e) => e.jobId === id), 'reported as fenced');
  const j = await job(id);
  assert.deepEqual(j.result, { attempt: 2 });
  assert.equal(j.attempt, 2);
});

test('an outcome sent after the claim was lost is fenced out and reported', async () => {
  const k = kind('fenced');
  const id = await enqueue(pool, k, {});
  const fenced = [];
  await withWorker({ lease: '30s', handlers: { [k]: async (j) => {
    if (j.attempt === 1) await expireAndRescue(j.id); // no heartbeat comes within 10 s
    return { attempt: j.attempt };
  } } }, async (w) => {
    w.on('fenced', (e) => fenced.push(e));
    await waitFor('completed', 10000, async () => (await state(id)) === 'completed');
  });
  assert.equal(fenced.length, 1);
  assert.ok(fenced[0] instanceof FencedError);
  assert.equal(fenced[0].jobId, id);
  assert.equal(Number(fenced[0].fencing), 1);
  assert.deepEqual((await job(id)).result, { attempt: 2 }, 'the stale completion changed nothing');
});

test('a job past its timeout: signal aborts with JobTimeoutError, attempt fails', async () => {
  const k = kind('timeout');
  const id = await enqueue(pool, k, {}, { timeout: 300, maxAttempts: 1 });
  let reason;
  await withWorker({ handlers: { [k]: async (j, { signal }) => {
    await new Promise((r) => signal.addEventListener('abort', r));
    reason = signal.reason;
  } } }, () => waitFor('discarded', 10000, async () => (await state(id)) === 'discarded'));
  assert.ok(reason instanceof JobTimeoutError);
  assert.match((await job(id)).errors[0].error, /timed out after 300 ms/);
});

test('handler errors: PermanentError discards, others retry (with retryAfterMs)', async () => {
  const [kp, kr, kt] = [kind('perm'), kind('retry'), kind('after')];
  const p = await enqueue(pool, kp, {});
  const r = await enqueue(pool, kr, {});
  const t = await enqueue(pool, kt, {});
  await withWorker({ handlers: {
    [kp]: async () => { throw new PermanentError('bad payload'); },
    [kr]: async () => { throw new Error('flaky'); },
    [kt]: async () => { throw new TransientError('rate limited', { retryAfterMs: 60000 }); },
  } }, () => waitFor('all three recorded', 10000, async () =>
    (await q('SELECT count(*)::int AS n FROM skiplock.all_jobs WHERE id = ANY($1) AND attempt = 1 AND state <> $2', [[p, r, t], 'running']))[0].n === 3));
  const [jp, jr, jt] = [await job(p), await job(r), await job(t)];
  assert.equal(jp.state, 'discarded');
  // the stored error is the stack: the message first, then where it was thrown
  assert.match(jp.errors[0].error, /^PermanentError: bad payload\n\s+at .*worker\.test\.js/);
  assert.equal(jr.state, 'available');
  assert.match(jr.errors[0].error, /^Error: flaky\n\s+at /);
  assert.equal(jt.state, 'available');
  const [{ s }] = await q('SELECT extract(epoch FROM run_at - now()) AS s FROM skiplock.all_jobs WHERE id = $1', [t]);
  assert.ok(s > 50 && s < 70, `retried after about 60 s, got ${s}`);
});

test('a failed attempt is visible: a stderr line with the stack, or the failed event', async () => {
  const k = kind('visible');
  const id = await enqueue(pool, k, {}, { backoff: 'fixed', backoffBase: '10m' });
  const lines = [];
  const warn = console.warn;
  console.warn = (line) => lines.push(line);
  try {
    await withWorker({ handlers: { [k]: async function chargeCard() { throw new Error('card declined'); } } },
      () => waitFor('the failure logged', 10000, () => lines.length > 0));
  } finally {
    console.warn = warn;
  }
  assert.match(lines[0], new RegExp(`^skiplock worker: job ${id} \\(${k.replace(/\./g, '\\.')}\\) attempt 1 of 25 failed \\(retried\\): Error: card declined\\n`));
  assert.match(lines[0], /at chargeCard/);

  const k2 = kind('event');
  const id2 = await enqueue(pool, k2, {});
  const seen = [];
  const w = new Worker({ ...fast, handlers: { [k2]: async () => { throw new PermanentError('bad'); } } });
  w.on('failed', (err, job, outcome) => seen.push([err.message, job.id, outcome]));
  console.warn = (line) => lines.push(line);
  try {
    await w.start();
    await waitFor('the failed event', 10000, () => seen.length > 0);
    await w.stop();
  } finally {
    console.warn = warn;
  }
  assert.deepEqual(seen[0], ['bad', id2, 'discard']);
  assert.equal(lines.length, 1, 'with a listener, no stderr line');
});

test('stop() drains: running handlers finish and are recorded, nothing new is claimed', async () => {
  const k = kind('drain');
  const ids = [await enqueue(pool, k, {}), await enqueue(pool, k, {})];
  const w = new Worker({ ...fast, concurrency: 4, handlers: { [k]: async () => { await sleep(800); return 'ok'; } } });
  await w.start();
  await waitFor('both running', 5000, () => w.running === 2);
  const stopped = w.stop();
  const late = [await enqueue(pool, k, {}), await enqueue(pool, k, {})];
  await stopped;
  for (const id of ids) assert.equal(await state(id), 'completed');
  for (const id of late) assert.deepEqual([(await job(id)).state, (await job(id)).attempt], ['available', 0]);
  await q('DELETE FROM skiplock.jobs WHERE id = ANY($1)', [late]);
});

test('stop() after shutdownTimeout: the handler\'s signal aborts, the attempt is retried', async () => {
  const k = kind('drain-timeout');
  const id = await enqueue(pool, k, {});
  let reason;
  const w = new Worker({ ...fast, shutdownTimeout: 300, handlers: { [k]: async (j, { signal }) => {
    await new Promise((r) => signal.addEventListener('abort', r));
    reason = signal.reason;
  } } });
  await w.start();
  await waitFor('running', 5000, () => w.running === 1);
  const t0 = Date.now();
  await w.stop();
  assert.ok(Date.now() - t0 < 3000);
  assert.ok(reason instanceof ShutdownError);
  const j = await job(id);
  assert.equal(j.state, 'available');
  assert.match(j.errors[0].error, /worker stopped/);
  await q('DELETE FROM skiplock.jobs WHERE id = $1', [id]);
});

test('LISTEN only on a connection known to be direct', async () => {
  const k = kind('wake');
  await withWorker({ poll: '30s', handlers: { [k]: async () => 'ok' } }, async (w) => {
    assert.equal(w.wakeups, MODE === 'direct' ? 'listen' : 'poll');
    if (MODE !== 'direct') return;
    await sleep(300);
    const id = await enqueue(pool, k, {});
    await waitFor('woken by the notification, long before the 15-30 s poll', 2000,
      async () => (await state(id)) === 'completed');
  });
  if (MODE === 'pooled') {
    await withWorker({ directConnectionString: DIRECT_URL, handlers: { [k]: async () => 'ok' } }, async (w) => {
      await waitFor('LISTEN on the direct endpoint', 5000, () => w.wakeups === 'listen');
    });
    await withWorker({ pooler: 'none', handlers: { [k]: async () => 'ok' } }, async (w) => {
      assert.equal(w.wakeups, 'listen', 'pooler "none": the user says it is direct');
    });
  }
});

test('start() rejects with a typed error: unreachable, no schema', async () => {
  const h = { [kind('start')]: async () => {} };
  const dead = URL.replace(/:(\d+)\//, ':1/');
  await assert.rejects(new Worker({ connectionString: dead, handlers: h }).start(), TransientError);
  const noSchema = DIRECT_URL.replace(/\/[^/?]+(\?|$)/, '/postgres$1');
  await assert.rejects(new Worker({ connectionString: noSchema, handlers: h }).start(),
    (e) => e instanceof PermanentError && ['3F000', '42883'].includes(e.code) &&
      /no skiplock schema: install it with `skiplock init`/.test(e.message));
});

test('start() rejects a schema older than MIN_SCHEMA (step 26: no queue in the job handle), within 5 s, naming skiplock init', async () => {
  const scratch = await scratchDatabase('old');
  const old = new pg.Client({ connectionString: scratch.directUrl });
  await old.connect();
  await old.query(`CREATE SCHEMA skiplock; CREATE TABLE skiplock.schema_version (version int);
    INSERT INTO skiplock.schema_version VALUES (26);
    CREATE FUNCTION skiplock.installed_version() RETURNS int LANGUAGE sql
      AS 'SELECT max(version) FROM skiplock.schema_version'`);
  await old.end();
  try {
    const t0 = Date.now();
    await assert.rejects(
      new Worker({ connectionString: scratch.url, handlers: { [kind('old')]: async () => {} } }).start(),
      (e) => e instanceof PermanentError &&
        e.message.includes('at step 26; this client needs step 33 or later') && MIN_SCHEMA === 33 &&
        e.message.includes('skiplock init'));
    assert.ok(Date.now() - t0 < 5000);
  } finally {
    await scratch.drop();
  }
});
