// idempotentHandler on Node's http module: the same pipeline without
// Express.  First runs, retry replays, a new body 422; a handler that
// throws answers 500, reports the error and releases the key; the key
// and the body are checked before any claim.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { once } from 'node:events';
import { idempotentHandler } from '../src/index.js';
import { admin, appPool, kind, q } from './helpers.js';

const pool = appPool();
after(async () => { await Promise.all([pool.end(), admin.end()]); });

const keyState = async (key) => (await q('SELECT state FROM skiplock.idempotency_keys WHERE key = $1', [key]))[0]?.state;

async function serve(handler, opts = {}) {
  const reported = [];
  const server = http.createServer(idempotentHandler({ db: pool, onError: (e) => reported.push(e), ...opts }, handler));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const send = async (key, body, path = '/orders') => {
    const res = await fetch(`http://127.0.0.1:${server.address().port}${path}`, {
      method: 'POST', headers: key ? { 'Idempotency-Key': key } : {}, body,
    });
    return { status: res.status, text: await res.text(), replayed: res.headers.get('idempotent-replayed') };
  };
  return { send, reported, close: () => new Promise((r) => server.close(r)) };
}

test('http: runs once, replays, 422 on a new body or path, 500 and released when the handler throws', async () => {
  let runs = 0;
  const s = await serve(async (req, { body, key }) => {
    runs += 1;
    if (body.toString() === 'fail') throw new Error('downstream is down');
    return { status: 201, body: { key, got: body.toString(), url: req.url } };
  });
  try {
    const key = kind('http');
    const first = await s.send(key, 'abc');
    assert.equal(first.status, 201);
    assert.deepEqual(JSON.parse(first.text), { key, got: 'abc', url: '/orders' });
    assert.deepEqual(await s.send(key, 'abc'), { ...first, replayed: 'true' });
    assert.equal((await s.send(key, 'abd')).status, 422);
    assert.equal((await s.send(key, 'abc', '/orders?again=1')).status, 422, 'the URL is part of the request');
    assert.equal(runs, 1);

    const k2 = kind('http');
    const failed = await s.send(k2, 'fail');
    assert.equal(failed.status, 500);
    assert.match(s.reported[0].message, /downstream is down/);
    assert.equal(await keyState(k2), undefined, 'released');
    assert.equal((await s.send(k2, 'fail')).status, 500, 'and a retry runs again');
    assert.equal(runs, 3);
  } finally {
    await s.close();
  }
});

test('http: bad key or body over the cap: 4xx before any claim', async () => {
  let runs = 0;
  const s = await serve(async () => { runs += 1; return { status: 200, body: null }; }, { maxBodyBytes: 10 });
  try {
    assert.equal((await s.send(null, 'x')).status, 400);
    assert.equal((await s.send('é'.repeat(128), 'x')).status, 400);
    const key = kind('http');
    const big = await s.send(key, 'x'.repeat(11));
    assert.equal(big.status, 413);
    assert.match(big.text, /over 10 bytes/);
    assert.equal(await keyState(key), undefined);
    assert.equal(runs, 0);
    assert.equal((await s.send(key, 'x'.repeat(10))).status, 200, 'at the cap');
  } finally {
    await s.close();
  }
  assert.throws(() => idempotentHandler({ db: pool, ttl: 0 }, async () => ({ status: 200 })), RangeError);
  assert.throws(() => idempotentHandler({ db: pool }), TypeError);
  assert.throws(() => idempotentHandler({}, async () => ({ status: 200 })), TypeError);
});
