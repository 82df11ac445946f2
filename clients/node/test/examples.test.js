// The examples of docs/clients/node.md run: two replicas of
// examples/nightly-report.js write one report; examples/charges-express.js
// charges once for a retried POST and replays the response; two replicas
// of examples/periodic-jobs.js handle each heartbeat fire time once.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { admin, kind, q, waitFor, URL } from './helpers.js';

const procs = new Set();
before(() => q(`CREATE TABLE reports (day date PRIMARY KEY, body text NOT NULL, fencing bigint NOT NULL);
                CREATE TABLE charges (id bigserial PRIMARY KEY, amount int NOT NULL, currency text NOT NULL);
                CREATE TABLE sessions (id bigserial PRIMARY KEY, expires_at timestamptz NOT NULL)`));
after(async () => {
  for (const p of procs) p.kill('SIGKILL');
  await q('DROP TABLE IF EXISTS reports, charges, sessions');
  await admin.end();
});

function example(file, env = {}) {
  const p = spawn(process.execPath, [new globalThis.URL(`../examples/${file}`, import.meta.url).pathname], {
    env: { ...process.env, DATABASE_URL: URL, ...env }, stdio: ['ignore', 'pipe', 'inherit'],
  });
  procs.add(p);
  const lines = [];
  createInterface({ input: p.stdout }).on('line', (l) => lines.push(l));
  const stop = async () => {
    const exited = once(p, 'exit');
    p.kill('SIGTERM');
    const [code] = await exited;
    procs.delete(p);
    return code;
  };
  return { lines, stop };
}

test('nightly-report.js on two replicas: one report, written once', { timeout: 30000 }, async () => {
  const replicas = [example('nightly-report.js'), example('nightly-report.js')];
  await waitFor('both replicas up', 10000, () => replicas.every((r) => r.lines.some((l) => l.startsWith('up:'))));
  await waitFor('the report', 10000, async () => (await q('SELECT count(*)::int AS n FROM reports'))[0].n === 1);
  const rows = await q('SELECT fencing::int AS fencing FROM reports');
  assert.equal(rows.length, 1);
  for (const r of replicas) assert.equal(await r.stop(), 0, 'exits 0 on SIGTERM');
  const written = replicas.flatMap((r) => r.lines).filter((l) => l.startsWith('report written'));
  assert.deepEqual(written, [`report written under fencing token ${rows[0].fencing}`]);
  const [lease] = await q("SELECT expires_at > clock_timestamp() AS live FROM skiplock.leases WHERE name = 'nightly-report'");
  assert.equal(lease.live, false, 'released when stopped');
});

test('charges-express.js: a retried POST charges once and gets the same response', { timeout: 30000 }, async () => {
  const server = example('charges-express.js', { PORT: '0' });
  try {
    const line = await waitFor('listening', 10000, () => server.lines.find((l) => l.startsWith('listening on ')));
    const post = async (key, body) => {
      const res = await fetch(`http://127.0.0.1:${line.split(' ').pop()}/charges`, {
        method: 'POST', headers: { 'Idempotency-Key': key, 'Content-Type': 'application/json' }, body: JSON.stringify(body),
      });
      return [res.status, await res.text(), res.headers.get('idempotent-replayed')];
    };
    const key = kind('order');
    const first = await post(key, { amount: 1250, currency: 'usd' });
    assert.equal(first[0], 201);
    assert.deepEqual(await post(key, { amount: 1250, currency: 'usd' }), [201, first[1], 'true']);
    assert.equal((await post(key, { amount: 1, currency: 'usd' }))[0], 422);
    assert.equal((await q('SELECT count(*)::int AS n FROM charges'))[0].n, 1);
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('periodic-jobs.js on two replicas: each heartbeat fire time handled once, 2 s apart', { timeout: 30000 }, async () => {
  const names = ['sessions-cleanup', 'heartbeat'];
  const replicas = [example('periodic-jobs.js'), example('periodic-jobs.js')];
  try {
    await waitFor('both replicas up', 10000, () => replicas.every((r) => r.lines.some((l) => l.startsWith('up:'))));
    const beats = () => replicas.flatMap((r) => r.lines).filter((l) => l.startsWith('heartbeat for '));
    await waitFor('three heartbeats', 15000, () => beats().length >= 3);
    for (const r of replicas) assert.equal(await r.stop(), 0, 'exits 0 on SIGTERM');
    const times = beats().map((l) => Date.parse(l.split(' ')[2])).sort((a, b) => a - b);
    assert.equal(new Set(times).size, times.length, `each fire time once: ${beats()}`);
    for (const [i, t] of times.entries()) if (i > 0) assert.equal(t - times[i - 1], 2000, 'none missed');
    const rows = await q(`SELECT name, zone, payload FROM skiplock.schedules WHERE name = ANY ($1) ORDER BY name`, [names]);
    assert.deepEqual(rows, [{ name: 'heartbeat', zone: 'UTC', payload: {} },
      { name: 'sessions-cleanup', zone: 'Europe/Berlin', payload: { graceDays: 7 } }]);
  } finally {
    await q('DELETE FROM skiplock.schedules WHERE name = ANY ($1)', [names]);
    await q('DELETE FROM skiplock.schedule_declarations WHERE name = ANY ($1)', [names]);
    await q("DELETE FROM skiplock.jobs WHERE kind = 'heartbeat'");
  }
});
