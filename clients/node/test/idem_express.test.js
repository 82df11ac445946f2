// The idempotency middleware in an Express service, over real HTTP
// (test/fixtures/charges-server.js, a child process): first request runs,
// a retry replays, a concurrent duplicate gets 409 + Retry-After, a new
// body with the same key 422, bad input 4xx with nothing written, a killed
// holder's key usable again after the recovery window, and a charge whose
// answer was lost (HTTP or the database's COMMIT) charged once.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import { createInterface } from 'node:readline';
import { admin, kind, q, waitFor, URL } from './helpers.js';
import { startProxy } from './cutproxy.js';

const procs = new Set();
before(() => q('CREATE TABLE IF NOT EXISTS t_charges (id serial PRIMARY KEY, key text NOT NULL, amount int NOT NULL, currency text NOT NULL)'));
after(async () => {
  for (const p of procs) p.kill('SIGKILL');
  await admin.end();
});

async function server(env = {}) {
  const p = spawn(process.execPath, [new globalThis.URL('./fixtures/charges-server.js', import.meta.url).pathname], {
    env: { ...process.env, DATABASE_URL: URL, ...env }, stdio: ['ignore', 'pipe', 'inherit'],
  });
  procs.add(p);
  const [port] = await once(createInterface({ input: p.stdout }), 'line');
  return { p, base: `http://127.0.0.1:${port}` };
}

async function stop(s) {
  procs.delete(s.p);
  const exited = once(s.p, 'exit');
  s.p.kill('SIGTERM');
  await exited;
}

async function post(base, key, body, headers = {}) {
  const res = await fetch(`${base}/charges`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...(key === null ? {} : { 'Idempotency-Key': key }), ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, text: await res.text(), replayed: res.headers.get('idempotent-replayed'), retryAfter: res.headers.get('retry-after') };
}

const charges = async (key) => (await q('SELECT count(*)::int AS n FROM t_charges WHERE key = $1', [key]))[0].n;
const keyState = async (key) => (await q('SELECT state FROM skiplock.idempotency_keys WHERE key = $1', [key]))[0]?.state;

test('first runs, the retry replays the same status and bytes, a new body is 422, a duplicate in flight 409', { timeout: 30000 }, async () => {
  const s = await server();
  try {
    const key = kind('charge');
    const first = await post(s.base, key, { amount: 1250, currency: 'usd' });
    assert.equal(first.status, 201);
    assert.match(first.text, /^\{"id": \d+, "amount": 1250, "currency": "usd"\}$/);
    assert.equal(first.replayed, null);
    const again = await post(s.base, key, { amount: 1250, currency: 'usd' });
    assert.deepEqual(again, { ...first, replayed: 'true' }, 'same status, same bytes');
    const other = await post(s.base, key, { amount: 9999, currency: 'usd' });
    assert.equal(other.status, 422);
    assert.equal(await charges(key), 1);

    const k2 = kind('charge');
    const slow = post(s.base, k2, { amount: 5, currency: 'eur', delay: 800 });
    await waitFor('the first attempt holds the key', 5000, async () => (await keyState(k2)) === 'in_progress');
    const dup = await post(s.base, k2, { amount: 5, currency: 'eur', delay: 800 });
    assert.equal(dup.status, 409);
    assert.equal(dup.retryAfter, '1');
    assert.equal((await slow).status, 201);
    assert.equal((await post(s.base, k2, { amount: 5, currency: 'eur', delay: 800 })).replayed, 'true');
    assert.equal(await charges(k2), 1);
  } finally {
    await stop(s);
  }
});

test('bad input: 4xx with a clear error, nothing written', { timeout: 30000 }, async () => {
  const s = await server();
  try {
    const cases = [
      ['no key', null, { amount: 1, currency: 'usd' }, 400, /Idempotency-Key header is required/],
      ['key over 255 bytes', 'k'.repeat(256), { amount: 1, currency: 'usd' }, 400, /256 bytes, over 255/],
      ['body over 64 KiB', kind('charge'), { amount: 1, currency: 'usd', pad: 'x'.repeat(70000) }, 413, /over 65536 bytes/],
      ['invalid JSON', kind('charge'), '{"amount": ', 400, /not valid JSON/],
      ['not a valid charge', kind('charge'), { amount: -1, currency: 'usd' }, 400, /positive integer/],
    ];
    for (const [what, key, body, status, message] of cases) {
      const r = await post(s.base, key, body);
      assert.equal(r.status, status, what);
      assert.match(JSON.parse(r.text).error, message, what);
      if (key !== null) assert.equal(await keyState(key), undefined, `${what}: no key stored`);
    }
    assert.equal((await q('SELECT count(*)::int AS n FROM t_charges WHERE amount = 1 OR amount = -1'))[0].n, 0, 'no charge');
    const fixed = cases[4][1];
    assert.equal((await post(s.base, fixed, { amount: 1, currency: 'usd' })).status, 201, 'the fixed request runs with the same key');
  } finally {
    await stop(s);
  }
});

test('the holder SIGKILLed after its claim: 409 within the recovery window, then one charge', { timeout: 30000 }, async () => {
  const RECOVERY = 1500;
  const a = await server({ HANG: '1', RECOVERY: String(RECOVERY) });
  const b = await server({ RECOVERY: String(RECOVERY) });
  try {
    const key = kind('charge');
    const body = { amount: 700, currency: 'usd' };
    post(a.base, key, body).catch(() => {}); // never answered
    await waitFor('a holds the key', 5000, async () => (await keyState(key)) === 'in_progress');
    a.p.kill('SIGKILL');
    procs.delete(a.p);
    const early = await post(b.base, key, body);
    assert.equal(early.status, 409, 'within the recovery window');
    let r;
    await waitFor('taken over after the window', 10000, async () => (r = await post(b.base, key, body)).status !== 409);
    assert.equal(r.status, 201);
    const [row] = await q(`SELECT claims, extract(epoch FROM completed_at - created_at) * 1000 AS ms
                             FROM skiplock.idempotency_keys WHERE key = $1`, [key]);
    assert.equal(row.claims, 2, 'taken over once');
    assert.ok(row.ms >= RECOVERY, `not before the window ended (${row.ms} ms after the claim)`);
    assert.equal(await charges(key), 1);
    assert.deepEqual(await post(b.base, key, body), { ...r, replayed: 'true' });
  } finally {
    await stop(b);
  }
});

// POST, and drop the connection once the charge has committed, without
// reading the answer.
async function postAndDrop(base, key, body) {
  const req = http.request(`${base}/charges`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'Idempotency-Key': key } });
  req.on('error', () => {});
  req.end(JSON.stringify(body));
  await waitFor('the charge committed', 5000, async () => (await keyState(key)) === 'completed');
  req.destroy();
}

test('a charge whose answer was lost, retried with the same key: one charge, the same response', { timeout: 30000 }, async () => {
  const proxy = await startProxy(URL);
  const s = await server({ DATABASE_URL: proxy.url });
  try {
    // the client's connection dropped after the commit
    const key = kind('charge');
    const body = { amount: 300, currency: 'usd', delay: 100 };
    await postAndDrop(s.base, key, body);
    const retry = await post(s.base, key, body);
    assert.equal(retry.status, 201);
    assert.equal(retry.replayed, 'true');
    assert.equal(await charges(key), 1);

    // the database's answer to the COMMIT lost: the server learns the outcome by claiming again
    const k2 = kind('charge');
    await proxy.ctl('drop-commit-reply');
    const first = await post(s.base, k2, { amount: 400, currency: 'usd' });
    assert.match(await proxy.ctl('stats'), /commit_drops=1/);
    assert.equal(first.status, 201);
    const second = await post(s.base, k2, { amount: 400, currency: 'usd' });
    assert.deepEqual(second, { ...first, replayed: 'true' }, 'the same status and bytes');
    assert.equal(await charges(k2), 1);
  } finally {
    await stop(s);
    proxy.stop();
  }
  const idle = await q(`SELECT count(*)::int AS n FROM pg_stat_activity
                         WHERE datname = current_database() AND state LIKE 'idle in transaction%'`);
  assert.equal(idle[0].n, 0, 'no idle-in-transaction session');
});
