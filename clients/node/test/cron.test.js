// Periodic jobs: workers fire the schedules (skiplock.cron_tick) and apply
// those declared in code (skiplock.schedules_declare), through the mode's
// URL.  Each test removes its schedules, so the other files' workers (cron
// is on by default) find nothing due.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Worker, declareSchedules, PermanentError } from '../src/index.js';
import { admin, kind, q, sleep, waitFor, fast, MODE } from './helpers.js';

after(() => admin.end());

let seq = 0;
const scheduleName = (what) => `t.${what}.${process.pid}.${++seq}`;

async function removeSchedules(...names) {
  await q('DELETE FROM skiplock.schedules WHERE name = ANY ($1)', [names]);
  await q('DELETE FROM skiplock.schedule_declarations WHERE name = ANY ($1)', [names]);
}

/** Workers started at once, run for ms, stopped; their errors and ticks. */
async function runWorkers(count, opts, ms, during = async () => {}) {
  const ws = Array.from({ length: count }, () => new Worker({ ...fast, ...opts }));
  const seen = ws.map((w) => {
    const s = { errors: [], ticks: [] };
    w.on('error', (e) => s.errors.push(e));
    w.on('cron', (t) => s.ticks.push(t));
    return s;
  });
  await Promise.all(ws.map((w) => w.start()));
  try {
    await Promise.all([sleep(ms), during()]);
  } finally {
    await Promise.all(ws.map((w) => w.stop()));
  }
  return seen;
}

/** Schedule name's jobs, one row per unique key, by fire time. */
const fires = (name) => q(`
  SELECT unique_key, count(*)::int AS n, min(run_at) AS run_at, bool_and(state = 'completed') AS done,
         bool_and(unique_key = 'cron:' || $1 || ':' || to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')) AS keyed
    FROM skiplock.all_jobs WHERE starts_with(unique_key, 'cron:' || $1 || ':')
   GROUP BY unique_key ORDER BY min(run_at)`, [name]);

/** One job per fire time of an @every 1s schedule, none missing between
 * the first and the last; at least min of them.  Returns the rows. */
async function oneJobPerSecond(name, min) {
  const rows = await fires(name);
  assert.ok(rows.length >= min, `${rows.length} fire times, want at least ${min}`);
  for (const [i, r] of rows.entries()) {
    assert.equal(r.n, 1, `one job for ${r.unique_key}`);
    assert.equal(r.keyed, true, `${r.unique_key} names its run_at`);
    if (i > 0) assert.equal(r.run_at - rows[i - 1].run_at, 1000, `no gap before ${r.unique_key}`);
  }
  return rows;
}

const idleInTransaction = async () => (await q(`SELECT count(*)::int AS n FROM pg_stat_activity
  WHERE datname = current_database() AND state LIKE 'idle in transaction%'`))[0].n;

test('three workers with @every 1s declared in code: one job per fire time, no gap, the jobs done', async () => {
  const k = kind('every');
  const name = scheduleName('every');
  const handled = [];
  const seen = await runWorkers(3, {
    schedules: [{ name, expression: '@every 1s', kind: k, payload: { from: 'code' } }],
    handlers: { [k]: async (j) => { handled.push(j.id); return j.payload; } },
  }, 6000);
  try {
    const rows = await oneJobPerSecond(name, 4);
    const enqueued = seen.flatMap((s) => s.ticks).reduce((n, t) => n + t.enqueued, 0);
    assert.equal(enqueued, rows.length, 'each job enqueued by exactly one tick of the fleet');
    for (const s of seen) assert.ok(s.ticks.length >= 3, `each worker ticked (${s.ticks.length})`);
    const done = rows.filter((r) => r.done).length;
    assert.ok(done >= rows.length - 2, `${done} of ${rows.length} completed while they ran`);
    assert.equal(handled.length, new Set(handled).size, 'no job handled twice');
    assert.equal(await idleInTransaction(), 0);
  } finally {
    await removeSchedules(name);
  }
});

test('cron: false fires nothing (the schedules it declares are still applied)', async () => {
  const k = kind('off');
  const name = scheduleName('off');
  const seen = await runWorkers(1, {
    cron: false,
    schedules: [{ name, expression: '@every 1s', kind: k }],
    handlers: { [k]: async () => 'ok' },
  }, 3000);
  try {
    assert.equal(seen[0].ticks.length, 0);
    const [s] = await q('SELECT last_fire, next_fire < now() AS overdue FROM skiplock.schedules WHERE name = $1', [name]);
    assert.deepEqual(s, { last_fire: null, overdue: true }, 'declared, due, never fired');
    assert.deepEqual(await fires(name), []);
  } finally {
    await removeSchedules(name);
  }
});

test('rolling deploy: v1 and v2 started alternately, the definition changes once, to v2; force rolls back', async () => {
  const k = kind('deploy');
  const name = scheduleName('deploy');
  const v1 = [{ name, expression: '0 2 * * *', kind: k }];
  const v2 = [{ name, expression: '0 3 * * *', kind: k }];
  const warnings = [];
  const onWarning = (w) => { if (w.code === 'SKIPLOCK_SCHEDULE_SUPERSEDED') warnings.push(w.message); };
  process.on('warning', onWarning);
  const start = async (schedules, extra = {}) => {
    const w = new Worker({ ...fast, schedules, handlers: { [k]: async () => 'ok' }, ...extra });
    await w.start();
    await w.stop();
    await new Promise((r) => setImmediate(r)); // warnings are emitted on the next tick
  };
  const definition = async () => (await q('SELECT expression, updated_at FROM skiplock.schedules WHERE name = $1', [name]))[0];
  try {
    await start(v1);
    assert.equal((await definition()).expression, '0 2 * * *');
    await start(v2);
    const d2 = await definition();
    assert.equal(d2.expression, '0 3 * * *');
    for (let i = 0; i < 10; i++) {
      const v = i % 2 === 0 ? 'v1' : 'v2';
      const before = warnings.length;
      await start(v === 'v1' ? v1 : v2);
      assert.deepEqual(await definition(), d2, `start ${i + 1} (${v}) changed nothing`);
      assert.equal(warnings.length - before, v === 'v1' ? 1 : 0, `start ${i + 1} (${v}): superseded warnings`);
    }
    assert.match(warnings[0], new RegExp(`^schedule "${name.replaceAll('.', '\\.')}" not applied, superseded: ` +
      'kept the definition set at \\S+Z; this one was first declared at \\S+Z and has been replaced since'));
    await start(v1, { schedulesForce: true });
    assert.equal((await definition()).expression, '0 2 * * *', 'force applied v1');
    assert.equal(warnings.length, 5);
    const [r] = await declareSchedules(admin, v2);
    assert.deepEqual([r.name, r.action], [name, 'superseded'], 'v2 is now the replaced one');
    assert.deepEqual(await declareSchedules(admin, v1), [{ name, action: 'unchanged', detail: null }]);
  } finally {
    process.off('warning', onWarning);
    await removeSchedules(name);
  }
});

const BAD = [
  ['a malformed expression', { expression: '30 25 * * *' },
    'invalid cron expression "30 25 * * *": hour field, character 4: 25 is out of range 0-23'],
  ['an unknown zone', { expression: '30 2 * * *', zone: 'Mars/Base' },
    'unknown time zone "Mars/Base" (not in the tz database)'],
];
for (const [what, spec, why] of BAD) {
  test(`${what}: start() rejects at once with the database's message, nothing written`, async () => {
    const k = kind('bad');
    const app = `skl-cron-bad-${process.pid}`;
    const good = { name: scheduleName('good'), expression: '@daily', kind: k };
    const cases = [[[{ name: 'nightly', kind: k, ...spec }], 1], [[good, { name: 'nightly', kind: k, ...spec }], 2]];
    for (const [schedules, n] of cases) {
      const message = `schedule ${n} ("nightly"): ${why}`;
      const is = (e) => e instanceof PermanentError && e.code === '22023' && e.message === message;
      const t0 = Date.now();
      const w = new Worker({ ...fast, applicationName: app, schedules, handlers: { [k]: async () => 'ok' } });
      await assert.rejects(w.start(), is);
      assert.ok(Date.now() - t0 < 5000);
      await assert.rejects(declareSchedules(admin, schedules), is);
    }
    const rows = await q('SELECT name FROM skiplock.schedules WHERE name IN ($1, $2) UNION ALL ' +
      'SELECT name FROM skiplock.schedule_declarations WHERE name IN ($1, $2)', ['nightly', good.name]);
    assert.deepEqual(rows, [], 'nothing written');
    if (MODE === 'direct') {
      const [{ n }] = await q('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [app]);
      assert.equal(n, 0, 'the worker closed its connection');
    }
  });
}

test('a schedule the database cannot evaluate: reported once a minute, the others keep firing', async () => {
  const k = kind('broken');
  const [good, broken] = [scheduleName('good'), scheduleName('broken')];
  await declareSchedules(admin, [{ name: broken, expression: '* * * * *', kind: k }]);
  // a stored value no tick can evaluate (the declaration would refuse it)
  await q("UPDATE skiplock.schedules SET expression = '30 25 * * *', next_fire = now() WHERE name = $1", [broken]);
  try {
    const seen = await runWorkers(1, {
      schedules: [{ name: good, expression: '@every 1s', kind: k }], handlers: { [k]: async () => 'ok' },
    }, 4500);
    const reported = seen[0].errors.filter((e) => e.message.startsWith('cron: '));
    assert.equal(reported.length, 1, `reported once, not at every tick: ${reported.map((e) => e.message)}`);
    assert.ok(reported[0] instanceof PermanentError);
    assert.equal(reported[0].message, `cron: 1 schedule(s) could not be evaluated; schedule "${broken}": ` +
      'invalid cron expression "30 25 * * *": hour field, character 4: 25 is out of range 0-23');
    assert.ok(seen[0].ticks.length >= 3 && seen[0].ticks.every((t) => t.failed === 1), 'every tick went on');
    await oneJobPerSecond(good, 3);
  } finally {
    await removeSchedules(good, broken);
  }
});

test('backends terminated while ticking: the workers keep firing, one job per fire time', async () => {
  const k = kind('kill');
  const name = scheduleName('kill');
  const app = `skl-cron-kill-${process.pid}`;
  let resumedAt;
  // Holds the schedules table as `cron apply` does, so that a tick blocks in
  // its UPDATE; terminates the workers' backends blocked there; lets go.
  const killTicks = async () => {
    const c = await admin.connect();
    try {
      await c.query('BEGIN; LOCK TABLE skiplock.schedules IN SHARE ROW EXCLUSIVE MODE');
      const blocked = await waitFor('a tick blocked on the lock', 5000, async () => (await q(`
        SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'
           AND query LIKE '%skiplock.cron_tick()%'`, [app])).map((r) => r.pid).filter(Boolean).join(',') || null);
      const killed = await q('SELECT pg_terminate_backend(p) AS ok FROM unnest($1::int[]) p', [blocked.split(',')]);
      assert.ok(killed.every((r) => r.ok), 'terminated');
    } finally {
      await c.query('ROLLBACK');
      c.release();
    }
  };
  const seen = await runWorkers(2, {
    applicationName: app,
    schedules: [{ name, expression: '@every 1s', kind: k }],
    handlers: { [k]: async () => 'ok' },
  }, 9000, async () => {
    await sleep(2000);
    await killTicks();
    await sleep(500);
    await killTicks();
    resumedAt = (await q('SELECT now() AS t'))[0].t;
  });
  try {
    const rows = await oneJobPerSecond(name, 6);
    const after = rows.filter((r) => r.run_at > resumedAt).length;
    assert.ok(after >= 3, `${after} fire times after the backends were terminated`);
    const cronErrors = seen.map((s) => s.errors.filter((e) => e.message.startsWith('cron: the tick failed')).length);
    assert.ok(cronErrors.some((n) => n >= 1), 'a failed tick is reported');
    assert.ok(cronErrors.every((n) => n <= 1), `at most once a minute per worker (${cronErrors})`);
    assert.equal(await idleInTransaction(), 0);
  } finally {
    await removeSchedules(name);
  }
});

test('an idle worker ticks once in 10 s when the next fire time is an hour away', async () => {
  await q('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  const calls = async () => Number((await q(`SELECT coalesce(sum(calls), 0) AS n FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND query LIKE '%skiplock.cron_tick()%'`))[0].n);
  const k = kind('idle');
  const [daily, every] = [scheduleName('daily'), scheduleName('woken')];
  const [{ h, m }] = await q(`SELECT extract(hour FROM t)::int AS h, extract(minute FROM t)::int AS m
    FROM (SELECT (now() + interval '61 minutes') AT TIME ZONE 'UTC' AS t) x`);
  await declareSchedules(admin, [{ name: daily, expression: `${m} ${h} * * *`, kind: k }]);
  try {
    const before = await calls();
    const seen = await runWorkers(1, { handlers: { [k]: async () => 'ok' } }, 10000);
    assert.equal(seen[0].ticks.length, 1, 'one tick, at start');
    assert.equal(await calls() - before, 1, 'the database ran cron_tick once');
    const { nextDue, dbNow } = seen[0].ticks[0];
    assert.ok(nextDue - dbNow > 3540000, `next due in ${nextDue - dbNow} ms`);
    // A schedule declared meanwhile: where the worker LISTENs (direct) the
    // notification wakes it at once; polling (pooled), it waits for its
    // next re-check, minutes away.
    const again = await runWorkers(1, { handlers: { [k]: async () => 'ok' } }, 4500, async () => {
      await sleep(500);
      await declareSchedules(admin, [{ name: every, expression: '@every 1s', kind: k }]);
    });
    const fired = (await fires(every)).length;
    if (MODE === 'direct') {
      assert.ok(fired >= 2, `woken by the notification: ${fired} fire times`);
    } else {
      assert.equal(fired, 0, 'no notification, no tick before the re-check');
      assert.equal(again[0].ticks.length, 1);
    }
  } finally {
    await removeSchedules(daily, every);
  }
});
