// Dependencies (enqueue's dependsOn, dependsOnKeys, onParentFailure),
// enqueueBatch and waitsFor, run by the client's Worker through the mode's
// URL; and a rate limit that only a worker claiming again at the claim's
// wait hint keeps up with.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Worker, enqueue, enqueueBatch, enqueueMany, waitsFor, PermanentError } from '../src/index.js';
import { admin, appPool, inTxOn, kind, job, q, sleep, waitFor, fast } from './helpers.js';

const pool = appPool();
after(() => Promise.all([pool.end(), admin.end()]));

/** Runs fn while n workers with opts run; stops them after. */
async function withWorkers(n, opts, fn) {
  const ws = Array.from({ length: n }, () => new Worker({ ...fast, ...opts }));
  for (const w of ws) w.on('failed', () => {}); // the failures a test plans are not news
  await Promise.all(ws.map((w) => w.start()));
  try {
    return await fn(ws);
  } finally {
    await Promise.all(ws.map((w) => w.stop()));
  }
}

const inTx = (fn, commit = true) => inTxOn(pool, fn, commit);

const states = async (ids) => Object.fromEntries(
  (await q('SELECT id::text, state FROM skiplock.all_jobs WHERE id = ANY($1)', [ids])).map((r) => [r.id, r.state]));
const count = async (k) => (await q('SELECT count(*)::int AS n FROM skiplock.all_jobs WHERE kind = $1', [k]))[0].n;
const before = (log, a, b) => log.indexOf(a) >= 0 && log.indexOf(a) < log.indexOf(b);

test('a diamond A -> B, C -> D enqueued in one transaction: D runs once, after B and C finished', async () => {
  const k = kind('diamond');
  const ids = await inTx(async (c) => {
    const a = await enqueue(c, k, { name: 'A' });
    const b = await enqueue(c, k, { name: 'B' }, { dependsOn: [a] });
    const cc = await enqueue(c, k, { name: 'C' }, { dependsOn: [a] });
    const d = await enqueue(c, k, { name: 'D' }, { dependsOn: [b, cc] });
    return { A: a, B: b, C: cc, D: d };
  });
  assert.equal(await waitsFor(pool, ids.D), 'dependencies: 2 of 2 parent(s) not finished');
  assert.equal(await waitsFor(pool, ids.B), 'dependencies: 1 of 1 parent(s) not finished');
  const log = [];
  const pause = { A: 50, B: 400, C: 100, D: 10 };
  await withWorkers(1, { concurrency: 4, handlers: { [k]: async (j) => {
    log.push(`start ${j.payload.name}`);
    await sleep(pause[j.payload.name]);
    log.push(`end ${j.payload.name}`);
    return j.payload.name;
  } } }, () => waitFor('D completed', 15000, async () => (await job(ids.D)).state === 'completed'));
  assert.deepEqual(log.filter((e) => e === 'start D'), ['start D'], `D ran once: ${log}`);
  for (const p of ['end B', 'end C']) assert.ok(before(log, p, 'start D'), `${p} before start D: ${log}`);
  for (const p of ['start B', 'start C']) assert.ok(before(log, 'end A', p), `end A before ${p}: ${log}`);
  const d = await job(ids.D);
  assert.deepEqual([d.attempt, d.result], [1, 'D']);
  assert.equal(await waitsFor(pool, ids.D), null, 'a finished job waits for nothing');
});

test('enqueueBatch of 30 on two workers, one child discarded: the callback runs once, after every child, with the counts', async () => {
  const [k, kcb] = [kind('batch'), kind('batch-done')];
  const ids = await enqueueBatch(pool, k, Array.from({ length: 30 }, (_, n) => ({ n })), kcb,
    { callbackPayload: { invoice: 7 }, priority: 1 });
  assert.equal(ids.length, 31);
  const cb = ids[30];
  assert.deepEqual([(await job(cb)).kind, (await job(ids[0])).priority], [kcb, 1], 'the callback last; options on all');
  assert.equal(await waitsFor(pool, cb), 'dependencies: 30 of 30 parent(s) not finished');
  const log = [];
  const payloads = [];
  await withWorkers(2, { concurrency: 4, handlers: {
    [k]: async (j) => {
      log.push(`start ${j.payload.n}`);
      await sleep(20);
      log.push(`end ${j.payload.n}`);
      if (j.payload.n === 17) throw new PermanentError('line 17 is broken');
    },
    [kcb]: async (j) => {
      log.push('callback');
      payloads.push(j.payload);
    },
  } }, async () => {
    await waitFor('the callback completed', 20000, async () => (await job(cb)).state === 'completed');
    await sleep(300); // a second run would show now
  });
  assert.equal(payloads.length, 1, 'the callback ran once');
  assert.deepEqual(payloads[0], { invoice: 7, batch: { size: 30, completed: 29, discarded: 1, cancelled: 0 } });
  for (let n = 0; n < 30; n++) assert.ok(before(log, `end ${n}`, 'callback'), `child ${n} ended before the callback`);
  const s = await states(ids);
  assert.equal(s[ids[17]], 'discarded');
  assert.equal(Object.values(s).filter((x) => x === 'completed').length, 30);
});

test('onParentFailure: a discarded parent cancels a default child and its own child; a "run" child runs', async () => {
  const k = kind('policy');
  const p = await enqueue(pool, k, { name: 'P' }, { maxAttempts: 1 });
  const cancel = await enqueue(pool, k, { name: 'cancel' }, { dependsOn: [p] });
  const grandchild = await enqueue(pool, k, { name: 'grandchild' }, { dependsOn: [cancel] });
  const run = await enqueue(pool, k, { name: 'run' }, { dependsOn: [p], onParentFailure: 'run' });
  const ran = [];
  await withWorkers(1, { handlers: { [k]: async (j) => {
    ran.push(j.payload.name);
    if (j.payload.name === 'P') throw new Error('the parent fails for good');
  } } }, () => waitFor('the "run" child completed', 15000, async () => (await job(run)).state === 'completed'));
  assert.deepEqual(await states([p, cancel, grandchild, run]),
    { [p]: 'discarded', [cancel]: 'cancelled', [grandchild]: 'cancelled', [run]: 'completed' });
  assert.deepEqual(ran.sort(), ['P', 'run'], 'the cancelled jobs never ran');
});

test('parents by unique key; the options also work with a pool, and together with ids', async () => {
  const k = kind('keys');
  const key = `${k}:day-2026-12-01`;
  const a = await enqueue(pool, k, { name: 'A' }, { uniqueKey: key });
  const b = await enqueue(pool, k, { name: 'B' });
  const child = await enqueue(pool, k, { name: 'child' }, { dependsOnKeys: [key], dependsOn: [b] });
  assert.equal(await waitsFor(pool, child), 'dependencies: 2 of 2 parent(s) not finished');
  const ran = [];
  await withWorkers(1, { handlers: { [k]: async (j) => { ran.push(j.payload.name); } } },
    () => waitFor('the child completed', 15000, async () => (await job(child)).state === 'completed'));
  assert.equal(ran.at(-1), 'child');
  assert.deepEqual(await states([a, b]), { [a]: 'completed', [b]: 'completed' });
});

test('bad input: unknown parents fail with 23503 and write nothing, a bad policy with 22023, wrong types before any call', async () => {
  const k = kind('deps-bad');
  await q('CREATE TABLE IF NOT EXISTS t_deps_orders (id text PRIMARY KEY)');
  const refused = (code) => (e) => e instanceof PermanentError && e.code === code;
  const unknownId = (await q('SELECT coalesce(max(id), 0) + 1000000 AS id FROM skiplock.all_jobs'))[0].id;
  await inTx(async (c) => {
    await c.query('INSERT INTO t_deps_orders VALUES ($1)', [k]);
    const parent = await enqueue(c, k, {});
    const inside = async () => (await c.query(`SELECT (SELECT count(*)::int FROM skiplock.all_jobs WHERE kind = $1) AS jobs,
      (SELECT count(*)::int FROM t_deps_orders WHERE id = $1) AS orders`, [k])).rows[0];
    const attempt = async (opts, code) => {
      await c.query('SAVEPOINT s');
      await assert.rejects(enqueue(c, k, {}, opts), refused(code));
      await c.query('ROLLBACK TO SAVEPOINT s');
      assert.deepEqual(await inside(), { jobs: 1, orders: 1 }, `nothing written by ${JSON.stringify(opts)}`);
    };
    await attempt({ dependsOn: [unknownId] }, '23503');
    await attempt({ dependsOn: [parent, unknownId] }, '23503');
    await attempt({ dependsOnKeys: [`${k}:nobody`] }, '23503');
    await attempt({ dependsOn: [parent], onParentFailure: 'skip' }, '22023');
  }, false);
  assert.equal(await count(k), 0, 'the rolled-back transaction left no job');
  assert.deepEqual(await q('SELECT id FROM t_deps_orders WHERE id = $1', [k]), [], 'nor the app\'s row');

  await assert.rejects(enqueue(pool, k, {}, { dependsOn: [unknownId] }), refused('23503'));
  await assert.rejects(enqueueBatch(pool, k, [], `${k}:cb`), refused('22023'));
  await assert.rejects(enqueueBatch(pool, k, Array(1001).fill({}), `${k}:cb`), refused('22023'));
  assert.equal(await count(k), 0);

  for (const [opts, message] of [
    [{ dependsOn: unknownId }, /^dependsOn: expected an array, got "\d+"$/],
    [{ dependsOn: ['12a'] }, /^dependsOn\[0\]: expected a job id/],
    [{ dependsOn: [1.5] }, /^dependsOn\[0\]: expected a job id/],
    [{ dependsOnKeys: 'k' }, /^dependsOnKeys: expected an array/],
    [{ dependsOnKeys: [null] }, /^dependsOnKeys\[0\]: expected a string, got null$/],
    [{ dependsOn: [1], onParentFailure: true }, /^onParentFailure: expected a string, got true$/],
  ]) await assert.rejects(enqueue(pool, k, {}, opts), { name: 'TypeError', message });
  await assert.rejects(enqueueMany(pool, [{ kind: k, dependsOn: ['1'] }]), /unknown option "dependsOn"/);
  await assert.rejects(enqueueBatch(pool, k, { n: 1 }, 'cb'), { name: 'TypeError', message: /payloads: expected an array, got an object/ });
  await assert.rejects(enqueueBatch(pool, k, [{}], ''), { name: 'TypeError', message: /callbackKind/ });
  await assert.rejects(enqueueBatch(pool, k, [{}], 'cb', { priority: '1' }), { name: 'TypeError', message: /priority: expected an integer/ });
  await assert.rejects(enqueueBatch(pool, k, [{}], 'cb', { callback: {} }), /unknown option "callback"/);
  await assert.rejects(waitsFor(pool, 'abc'), { name: 'TypeError', message: /waitsFor: id: expected a job id/ });
  await assert.rejects(waitsFor({}, '1'), TypeError);
  assert.equal(await waitsFor(pool, unknownId), null);
  assert.equal(await count(k), 0);
  await q('DROP TABLE t_deps_orders');
});

test('a rate limit of 5/s: one worker with a 6 s poll drains 15 jobs in under 4.5 s by the wait hints, never 6 in a second', async () => {
  const k = 'deps.limited';
  await q("SELECT skiplock.limit_set('deps.limited', rate => 5, per => '1 second')");
  try {
    await enqueueMany(pool, Array.from({ length: 15 }, (_, n) => ({ kind: k, payload: { n } })));
    const due = (await q("SELECT id FROM skiplock.all_jobs WHERE kind = $1 AND state = 'available'", [k])).map((r) => r.id);
    assert.equal(await waitsFor(pool, due[0]), 'limit: 5 starts per 1000 ms');
    let ms;
    // poll 6 s (idle waits 3 to 6 s), no rescue and no cron tick to wake it sooner
    await withWorkers(1, { poll: '6s', rescueEvery: '60s', cron: false, concurrency: 10,
      handlers: { [k]: async () => 'ok' } }, async () => {
      const t0 = Date.now();
      await waitFor('15 completed', 15000, async () =>
        (await q("SELECT count(*)::int AS n FROM skiplock.all_jobs WHERE kind = $1 AND state = 'completed'", [k]))[0].n === 15);
      ms = Date.now() - t0;
    });
    assert.ok(ms < 4500, `15 jobs at 5/s in ${ms} ms: the worker claimed again at the wait hint`);
    const [{ most, started }] = await q(`SELECT max((SELECT count(*) FROM skiplock.all_jobs o WHERE o.kind = j.kind
        AND o.attempted_at >= j.attempted_at AND o.attempted_at < j.attempted_at + interval '1 second'))::int AS most,
        count(attempted_at)::int AS started
      FROM skiplock.all_jobs j WHERE j.kind = $1`, [k]);
    assert.equal(started, 15);
    assert.ok(most <= 5, `at most 5 starts in any 1 s window, got ${most}`);
  } finally {
    await q("SELECT skiplock.limit_remove('deps.limited')");
  }
});

test('enqueue with no dependency option still calls skiplock.enqueue', async () => {
  const k = kind('plain');
  const id = await enqueue(pool, k, {}, { dependsOn: undefined, dependsOnKeys: null });
  assert.equal((await job(id)).state, 'available');
  assert.equal(await waitsFor(pool, id), 'due: waiting for a worker');
  await q('DELETE FROM skiplock.jobs WHERE id = $1', [id]);
});
