// No database: the SQLSTATE table, URL rules, enqueue's statements, option
// checks, and when the cron tick comes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  classify, isTransientSqlstate, urlPooler, enqueueStatement, enqueueManyStatement, Worker, declareSchedules,
  MIN_SCHEMA,
  TransientError, PermanentError, FencedError,
} from '../src/index.js';
import { tickDelay, MIN_MS, BUSY_MAX_MS, IDLE_MAX_MS } from '../src/cron.js';
import { schedulesJson } from '../src/schedules.js';
import { enqueueBatchStatement } from '../src/deps.js';

test('SQLSTATE table is the C library\'s', () => {
  for (const c of ['08000', '08006', '08P01', '57P01', '57P02', '57P03', '40001', '40P01', '55P03', '53300', '', undefined]) {
    assert.equal(isTransientSqlstate(c), true, `${c} transient`);
  }
  for (const c of ['22023', '23505', '42501', '42883', '57014', '53200', '40002', 'SK001', 'XX000']) {
    assert.equal(isTransientSqlstate(c), false, `${c} permanent`);
  }
});

test('classify maps pg errors to typed errors, keeping the SQLSTATE and cause', () => {
  const mk = (code) => Object.assign(new Error(`e ${code}`), { code });
  const t = classify(mk('40P01'));
  assert.ok(t instanceof TransientError);
  assert.equal(t.code, '40P01');
  assert.equal(t.cause.message, 'e 40P01');
  assert.ok(classify(mk('23505')) instanceof PermanentError);
  assert.ok(classify(mk('SK001')) instanceof FencedError);
  assert.equal(classify(mk('SK002')).code, 'SK002', 'idem_complete for a claim taken over');
  assert.ok(classify(mk('SK002')) instanceof FencedError);
  assert.ok(classify(mk('ECONNREFUSED')) instanceof TransientError, 'no SQLSTATE: transient');
  assert.ok(classify(new Error('Connection terminated unexpectedly')) instanceof TransientError);
});

test('pooled URLs: -pooler host, ports 6432 and 6543, Supabase pooler', () => {
  assert.equal(urlPooler('postgresql://u@ep-cool-1-pooler.eu-central-1.aws.neon.tech/db'), 'transaction');
  assert.equal(urlPooler('postgresql://u@ep-cool-1.eu-central-1.aws.neon.tech/db'), 'none');
  assert.equal(urlPooler('postgres://u@db:6432/app'), 'transaction');
  assert.equal(urlPooler('postgres://u@db:6543/app'), 'transaction');
  assert.equal(urlPooler('postgres://u@aws-0-eu.pooler.supabase.com:5432/app'), 'session');
  assert.equal(urlPooler('postgres://u@db:5432/app'), 'none');
});

test('enqueue statement: named arguments only for the options given', () => {
  const s = enqueueStatement('mail', { to: 'a' }, { uniqueKey: 'k', timeout: '2s', runAt: new Date(0), queue: undefined });
  assert.equal(s.text, 'SELECT skiplock.enqueue(kind => $1, payload => $2::jsonb, unique_key => $3::text, '
    + 'timeout => $4::interval, run_at => $5::timestamptz) AS id');
  assert.equal(enqueueStatement('k', [1, 2]).values[1], '[1,2]', 'an array payload stays JSON');
  assert.throws(() => enqueueStatement('', {}), TypeError);
  assert.throws(() => enqueueStatement('k', {}, { unique: 'x' }), /unknown option "unique"/);
  assert.throws(() => enqueueStatement('k', {}, { timeout: 'soon' }), /timeout: expected/);
});

test('enqueueMany statement: every array by name', () => {
  const s = enqueueManyStatement([{ kind: 'mail', payload: { to: 'a' }, priority: 2 }], { token: 't' });
  assert.equal(s.text, 'SELECT skiplock.enqueue_many(p_token => $1::text, p_kinds => $2::text[], '
    + 'p_payloads => $3::jsonb[], p_queues => $4::text[], p_run_ats => $5::timestamptz[], '
    + 'p_delays_ms => $6::bigint[], p_priorities => $7::int[], p_unique_keys => $8::text[], '
    + 'p_max_attempts => $9::int[], p_timeouts => $10::int[], p_backoff_bases => $11::int[], '
    + 'p_backoff_caps => $12::int[], p_backoffs => $13::text[])::text[] AS ids');
  assert.deepEqual(s.values.slice(0, 3), ['t', ['mail'], ['{"to":"a"}']]);
  assert.deepEqual(s.values[6], [2]);
});

test('enqueue with dependencies: skiplock.enqueue_after, every argument by name, depends_on always', () => {
  const s = enqueueStatement('load', {}, { dependsOn: ['7', 8, 9n], onParentFailure: 'run', queue: 'etl' });
  assert.equal(s.text, 'SELECT skiplock.enqueue_after(kind => $1, payload => $2::jsonb, queue => $3::text, '
    + 'depends_on => $4::bigint[], on_parent_failure => $5::text) AS id');
  assert.deepEqual(s.values, ['load', '{}', 'etl', ['7', '8', '9'], 'run']);
  const byKey = enqueueStatement('load', {}, { dependsOnKeys: ['day-1'] });
  assert.equal(byKey.text, 'SELECT skiplock.enqueue_after(kind => $1, payload => $2::jsonb, '
    + 'depends_on => $3::bigint[], depends_on_keys => $4::text[]) AS id');
  assert.deepEqual(byKey.values.slice(2), [null, ['day-1']]);
  assert.match(enqueueStatement('load', {}, { dependsOn: null, onParentFailure: undefined }).text, /skiplock\.enqueue\(/);
});

test('enqueueBatch statement: every argument by name, the ids as text', () => {
  const s = enqueueBatchStatement('line', [{ n: 1 }, undefined, null], 'invoice',
    { callbackPayload: { invoice: 7 }, queue: 'billing', priority: 2, maxAttempts: 3 });
  assert.equal(s.text, 'SELECT skiplock.enqueue_batch(kind => $1, payloads => $2::jsonb[], callback_kind => $3, '
    + 'callback_payload => $4::jsonb, queue => $5::text, priority => $6::int, max_attempts => $7::int)::text[] AS ids');
  assert.deepEqual(s.values, ['line', ['{"n":1}', '{}', 'null'], 'invoice', '{"invoice":7}', 'billing', 2, 3]);
});

test('Worker options are checked in the constructor', () => {
  const h = { k: async () => {} };
  assert.throws(() => new Worker({ handlers: h }), /connectionString/);
  assert.throws(() => new Worker({ connectionString: 'postgres://x/y', handlers: {} }), /handlers/);
  assert.throws(() => new Worker({ connectionString: 'postgres://x/y', handlers: h, concurrency: 0 }), /concurrency/);
  assert.throws(() => new Worker({ connectionString: 'postgres://x/y', handlers: h, lease: '50ms' }), /lease/);
  assert.throws(() => new Worker({ connectionString: 'postgres://x/y', handlers: h, pooler: 'yes' }), /pooler/);
  assert.throws(() => new Worker({ connectionString: 'postgres://x/y', handlers: h, queues: [] }), /queues/);
});

test('Worker cron options are checked in the constructor', async () => {
  const base = { connectionString: 'postgres://x/y', handlers: { k: async () => {} } };
  assert.throws(() => new Worker({ ...base, cron: 'no' }), /cron: expected true or false/);
  assert.throws(() => new Worker({ ...base, schedulesForce: 1 }), /schedulesForce: expected true or false/);
  assert.throws(() => new Worker({ ...base, schedules: { name: 'x' } }), /schedules: expected an array/);
  assert.throws(() => new Worker({ ...base, schedules: [null] }), /schedules\[0\]: expected an object/);
  new Worker({ ...base, cron: false, schedules: [] });
  await assert.rejects(declareSchedules({}, []), /expected a pg.Client/);
  await assert.rejects(declareSchedules({ query: async () => assert.fail('sent') }, 'x'), TypeError);
  await assert.rejects(declareSchedules({ query: async () => assert.fail('sent') }, [], { force: 'yes' }), /force/);
  await assert.rejects(declareSchedules({ query: async () => assert.fail('sent') }, [{ payload: 1n }]), TypeError);
});

test('declared schedules: maxAttempts and catchUp in SQL\'s names, other fields as given', () => {
  assert.deepEqual(JSON.parse(schedulesJson([{ name: 'n', expression: '@daily', kind: 'k', maxAttempts: 3,
    catchUp: 'all', zone: 'Europe/Berlin', payload: [1], nope: true }])),
  [{ name: 'n', expression: '@daily', kind: 'k', max_attempts: 3, catch_up: 'all', zone: 'Europe/Berlin',
    payload: [1], nope: true }]);
  assert.equal(MIN_SCHEMA, 33, 'outcomes as one JSON array of records (step 33: protocol 3)');
});

test('cron tick timing: by the next fire time, 1 s apart at least, 5 s (busy) or 5 min (idle) at most', () => {
  for (const rand of [() => 0, () => 0.5, () => 0.999]) {
    for (const busy of [true, false]) {
      const cap = busy ? BUSY_MAX_MS : IDLE_MAX_MS;
      const d = (ms) => tickDelay(ms, busy, rand);
      assert.ok(d(-3000) >= MIN_MS && d(0) >= MIN_MS && d(0) <= MIN_MS + 250, 'overdue: 1 s after the last tick');
      assert.ok(d(2500) >= 2500 && d(2500) <= 2750, 'at the fire time, never before, jitter at most 250 ms');
      assert.ok(d(null) >= cap && d(null) < cap * 1.1, 'nothing due: the cap, never sooner');
      assert.ok(d(3600000) >= cap && d(3600000) < cap * 1.1);
    }
  }
  assert.equal(tickDelay(4000, true, () => 0), 4000);
  assert.ok(tickDelay(60000, true, () => 0) === BUSY_MAX_MS, 'busy: a schedule added meanwhile is seen within 5 s');
  assert.ok(3600000 / tickDelay(null, false, () => 0) <= 12, 'idle: 12 ticks an hour at most');
});
