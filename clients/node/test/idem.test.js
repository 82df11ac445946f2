// idempotent(): the handler runs once per key, its effect and the stored
// response commit together; replay, in_progress, conflict; a failed
// handler rolls back and releases; bad input writes nothing; a COMMIT
// whose answer was lost (the cut proxy's drop-commit-reply) is settled.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { idempotent, idemClaim, idemComplete, fingerprint, FencedError, TransientError } from '../src/index.js';
import { admin, appPool, kind, q, sleep, URL } from './helpers.js';
import { startProxy } from './cutproxy.js';

const pool = appPool();
before(() => q('CREATE TABLE IF NOT EXISTS public.t_effect (key text, n int)'));
after(async () => { await q('DROP TABLE public.t_effect'); await Promise.all([pool.end(), admin.end()]); });

const effects = async (key) => (await q('SELECT count(*)::int AS n FROM public.t_effect WHERE key = $1', [key]))[0].n;
const keyRow = async (key) => (await q('SELECT state, response_code FROM skiplock.idempotency_keys WHERE key = $1', [key]))[0];

// A handler whose effect is one row, in the transaction of the response.
const charge = (status, body, { wait = 0, fail = false } = {}) => async (ctx) => {
  const c = await ctx.transaction();
  await c.query('INSERT INTO public.t_effect VALUES ($1, 1)', [ctx.key]);
  await sleep(wait);
  if (fail) throw new Error('the card network said no');
  return { status, body };
};

test('the fingerprint is the C library\'s: SHA-256 of method NUL path NUL body', async () => {
  const [{ h }] = await q(`SELECT encode(sha256(convert_to('POST', 'UTF8') || '\\x00'::bytea || convert_to('/charges?x=1', 'UTF8')
                                  || '\\x00'::bytea || convert_to('{"amount": 5}', 'UTF8')), 'hex') AS h`);
  assert.equal(fingerprint('POST', '/charges?x=1', Buffer.from('{"amount": 5}')), h);
  assert.equal(fingerprint('GET', '/'), fingerprint('GET', '/', Buffer.alloc(0)));
});

test('runs once: the retry replays the same status and bytes; a different request is a conflict', async () => {
  const key = kind('idem');
  const first = await idempotent(pool, key, 'h1', charge(201, { id: 7, note: 'é' }));
  assert.deepEqual(first, { outcome: 'completed', status: 201, body: { id: 7, note: 'é' }, bodyText: '{"id": 7, "note": "é"}' });
  const again = await idempotent(pool, key, 'h1', charge(500, 'must not run'));
  assert.deepEqual(again, { ...first, outcome: 'replay' });
  assert.deepEqual(await idempotent(pool, key, 'h2', charge(500, 'x')), { outcome: 'conflict' });
  assert.equal(await effects(key), 1);
});

test('a concurrent duplicate is in progress; the holder still completes', async () => {
  const key = kind('idem');
  const slow = idempotent(pool, key, 'h', charge(200, { ok: true }, { wait: 500 }));
  await sleep(150);
  assert.deepEqual(await idempotent(pool, key, 'h', charge(200, 'dup')), { outcome: 'in_progress' });
  assert.equal((await slow).outcome, 'completed');
  assert.equal(await effects(key), 1);
});

test('a handler that throws rolls its effect back and releases the key at once', async () => {
  const key = kind('idem');
  await assert.rejects(idempotent(pool, key, 'h', charge(201, {}, { fail: true })), /said no/);
  assert.equal(await effects(key), 0);
  assert.equal(await keyRow(key), undefined, 'released');
  assert.equal((await idempotent(pool, key, 'h', charge(201, { ok: 1 }))).outcome, 'completed', 'a retry runs at once');
});

test('without a transaction the response is stored on its own', async () => {
  const key = kind('idem');
  const r = await idempotent(pool, key, 'h', async () => ({ status: 202, body: ['queued'] }));
  assert.equal(r.bodyText, '["queued"]');
  assert.deepEqual(await keyRow(key), { state: 'completed', response_code: 202 });
});

test('bad input is refused and writes nothing', async () => {
  const key = kind('idem');
  const ran = async () => assert.fail('ran');
  await assert.rejects(idempotent(pool, 'k'.repeat(256), 'h', ran), RangeError);
  await assert.rejects(idempotent(pool, 'é'.repeat(128), 'h', ran), RangeError, '256 bytes in UTF-8');
  await assert.rejects(idempotent(pool, '', 'h', ran), RangeError);
  await assert.rejects(idempotent(pool, key, 'h'.repeat(256), ran), RangeError);
  await assert.rejects(idempotent(pool, key, 'h', ran, { ttl: 0 }), RangeError);
  await assert.rejects(idempotent(pool, key, 'h', ran, { recovery: -1 }), TypeError);
  assert.equal(await keyRow(key), undefined);
  // a response over the stored-response cap: the effect rolls back, the key is released
  await assert.rejects(idempotent(pool, key, 'h', charge(200, 'x'.repeat(100)), { maxResponseBytes: 64 }),
    (e) => e instanceof RangeError && /over the stored-response cap of 64 bytes/.test(e.message));
  await assert.rejects(idempotent(pool, key, 'h', charge(99, {})), TypeError);
  await assert.rejects(idempotent(pool, key, 'h', charge(200, 10n)), TypeError);
  assert.equal(await effects(key), 0);
  assert.equal(await keyRow(key), undefined);
});

test('a claim taken over after its recovery window: the old holder\'s completion is fenced', async () => {
  const key = kind('idem');
  const old = await idemClaim(pool, key, 'h', { recovery: 200 });
  await sleep(300);
  const next = await idemClaim(pool, key, 'h', { recovery: 200 });
  assert.equal(next.outcome, 'acquired');
  await assert.rejects(idemComplete(pool, key, old.holder, { status: 200, body: 'stale' }), (e) => e instanceof FencedError && e.code === 'SK002');
  await idemComplete(pool, key, next.holder, { status: 200, body: 'fresh' });
  assert.deepEqual((await idemClaim(pool, key, 'h')).body, 'fresh');
});

test('a COMMIT whose answer was lost: settled by claiming again, one effect, the stored response', { timeout: 30000 }, async () => {
  const proxy = await startProxy(URL);
  const cut = new pg.Pool({ connectionString: proxy.url, max: 2 });
  cut.on('error', () => {});
  try {
    const key = kind('idem');
    await proxy.ctl('drop-commit-reply');
    const r = await idempotent(cut, key, 'h', charge(201, { id: 1 }));
    assert.match(await proxy.ctl('stats'), /commit_drops=1/, 'the COMMIT\'s answer was dropped');
    assert.deepEqual(r, { outcome: 'completed', status: 201, body: { id: 1 }, bodyText: '{"id": 1}' });
    assert.equal(await effects(key), 1);

    // The same when the COMMIT did not land: the claim is given up.
    const key2 = kind('idem');
    const err = await idempotent(cut, key2, 'h', async (ctx) => {
      const c = await ctx.transaction();
      await c.query('INSERT INTO public.t_effect VALUES ($1, 1)', [ctx.key]);
      await proxy.ctl('reset'); // the connection dies before COMMIT
      return { status: 201, body: {} };
    }).then(() => assert.fail('completed'), (e) => e);
    assert.ok(err instanceof TransientError, String(err));
    assert.equal(await effects(key2), 0);
    assert.equal(await keyRow(key2), undefined, 'released: a retry runs at once');
  } finally {
    proxy.stop();
    await cut.end();
  }
});
