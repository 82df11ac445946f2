// Seed scenario (issue 19, 6a): the daily job that every replica runs.
// Four replicas start at once and each enqueues the day's job with a unique
// key per day: one job per day is created, and its effect happens once.
// The replica running a day's job is SIGKILLed mid-job: the job is rescued
// after its lease (1 s) and completed by another replica, at attempt 2.  A
// replica started after the reports exist enqueues nothing.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { admin, q, waitFor, URL } from './helpers.js';

const DAYS = ['2026-12-01', '2026-12-02'];
const HANG_DAY = DAYS[0];
const procs = new Map();
after(async () => {
  for (const p of procs.values()) p.kill('SIGKILL');
  await admin.end();
});

function replica(n, startAt) {
  const p = spawn(process.execPath, [new globalThis.URL('./fixtures/replica.js', import.meta.url).pathname], {
    env: { ...process.env, DATABASE_URL: URL, REPLICA: String(n), START_AT: String(startAt), DAYS: DAYS.join(','), HANG_DAY },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  procs.set(String(n), p);
  return p;
}

async function stop(n) {
  const p = procs.get(n);
  procs.delete(n);
  const exited = once(p, 'exit');
  p.kill('SIGTERM');
  const [code] = await exited;
  assert.equal(code, 0, `replica ${n} exits 0 after SIGTERM`);
}

const jobs = () => q(`SELECT unique_key, state, attempt, id FROM skiplock.all_jobs
                      WHERE kind = 'daily.report' ORDER BY unique_key, id`);

test('four replicas, one job per day, a replica killed mid-job does not block the retry', async () => {
  await q(`CREATE TABLE daily_report (day text PRIMARY KEY, job_id bigint NOT NULL, replica text NOT NULL);
           CREATE TABLE daily_attempt (job_id bigint, attempt int, replica text, at timestamptz DEFAULT clock_timestamp())`);
  const startAt = Date.now() + 1500;
  for (let n = 1; n <= 4; n++) replica(n, startAt);

  const [hung] = await waitFor('attempt 1 of the hanging day started', 15000, () =>
    q(`SELECT a.replica, a.job_id FROM daily_attempt a JOIN skiplock.all_jobs j ON j.id = a.job_id
        WHERE j.unique_key = $1 AND a.attempt = 1`, [`report:${HANG_DAY}`]).then((r) => (r.length ? r : null)));
  procs.get(hung.replica).kill('SIGKILL');
  procs.delete(hung.replica);

  await waitFor('both reports written', 15000, async () =>
    (await q('SELECT count(*)::int AS n FROM daily_report'))[0].n === 2);
  await waitFor('both jobs completed', 5000, async () =>
    (await jobs()).every((j) => j.state === 'completed'));

  const all = await jobs();
  assert.deepEqual(all.map((j) => j.unique_key), DAYS.map((d) => `report:${d}`), 'one job per day');
  const [h, other] = all;
  assert.equal(h.attempt, 2, 'the killed attempt was rescued and retried once');
  assert.equal(other.attempt, 1);
  const reports = await q('SELECT day, job_id, replica FROM daily_report ORDER BY day');
  assert.deepEqual(reports.map((r) => [r.day, r.job_id]), [[DAYS[0], h.id], [DAYS[1], other.id]]);
  assert.notEqual(reports[0].replica, hung.replica, 'completed by another replica');
  const [{ gap }] = await q(`SELECT extract(epoch FROM max(at) - min(at)) AS gap FROM daily_attempt WHERE job_id = $1`, [h.id]);
  // the first attempt noted its start a little after its claim: the lease ran from the claim
  assert.ok(gap >= 0.9 && gap < 6, `retried after the 1 s lease, within seconds (${gap} s)`);

  // A replica deployed later: the reports exist, it enqueues nothing.
  const late = replica(5, Date.now());
  await once(late.stdout, 'data');
  assert.equal((await jobs()).length, 2);
  for (const n of [...procs.keys()]) await stop(n);
});
