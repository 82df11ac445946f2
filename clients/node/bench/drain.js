// DATABASE_URL=... N=100000 CONCURRENCY=64 PREFETCH=448 node bench/drain.js
//   enqueues N no-op jobs (skiplock.enqueue in batches of 5,000, one
//   INSERT ... SELECT each), VACUUM ANALYZE and CHECKPOINT (as bench/drain.c),
//   drains them with the Worker (prefetch: PREFETCH, default 448, as the C
//   worker's best drain), and prints one
//   JSON line {"jobs_per_s", "rss_kib", "concurrency", "prefetch", "n"}.
// LATENCY=1: enqueues at a steady 500 jobs/s for 10 s while a worker runs
//   and prints p50/p99 of enqueue -> handler start in ms (the database
//   clock on both ends).
import pg from 'pg';
import { Worker } from '../src/index.js';

const env = process.env;
const url = env.DATABASE_URL;
const N = Number(env.N ?? 100000);
const CONCURRENCY = Number(env.CONCURRENCY ?? 64);
const PREFETCH = Number(env.PREFETCH ?? 448);
const KIND = `bench.noop.${process.pid}`;
const pool = new pg.Pool({ connectionString: url, max: 2 });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function enqueueMany(n) {
  for (let done = 0; done < n; done += 5000) {
    await pool.query(`SELECT count(skiplock.enqueue($1, '{}'::jsonb)) FROM generate_series(1, $2)`,
      [KIND, Math.min(5000, n - done)]);
  }
  // As bench/drain.c: every drain starts from the same state.
  await pool.query('VACUUM ANALYZE skiplock.jobs');
  await pool.query('CHECKPOINT');
}

const quantile = (xs, p) => xs[Math.min(xs.length - 1, Math.floor(p * xs.length))];

async function drain() {
  await enqueueMany(N);
  let done = 0;
  let finish;
  const all = new Promise((r) => { finish = r; });
  const w = new Worker({ connectionString: url, concurrency: CONCURRENCY, prefetch: PREFETCH, handlers: {
    [KIND]: async () => { if (++done === N) finish(); },
  } });
  const t0 = process.hrtime.bigint();
  await w.start();
  await all;
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  const rss = Math.round(process.memoryUsage().rss / 1024);
  await w.stop();
  console.log(JSON.stringify({ jobs_per_s: Math.round(N / s), rss_kib: rss, concurrency: CONCURRENCY, prefetch: PREFETCH, n: N }));
}

async function latency() {
  const starts = [];
  const w = new Worker({ connectionString: url, concurrency: CONCURRENCY, handlers: {
    [KIND]: async (job) => { starts.push([job.id, Date.now()]); },
  } });
  await w.start();
  const t0 = Date.now();
  for (let i = 0; i < 5000; i++) {
    const due = t0 + i * 2;
    if (due > Date.now()) await sleep(due - Date.now());
    pool.query("SELECT skiplock.enqueue($1, '{}'::jsonb)", [KIND]);
  }
  while (starts.length < 5000) await sleep(50);
  const wakeups = w.wakeups;
  await w.stop();
  // enqueue time: the job's created_at (database clock); start: this clock,
  // corrected by the offset between the two measured now.
  const { rows: [{ off }] } = await pool.query("SELECT extract(epoch FROM now()) * 1000 - $1::float8 AS off", [Date.now()]);
  const { rows } = await pool.query('SELECT id, extract(epoch FROM created_at) * 1000 AS c FROM skiplock.all_jobs WHERE kind = $1', [KIND]);
  const created = new Map(rows.map((r) => [r.id, Number(r.c)]));
  const lat = starts.map(([id, t]) => t + off - created.get(id)).sort((a, b) => a - b);
  console.log(JSON.stringify({ p50_ms: +quantile(lat, 0.5).toFixed(2), p99_ms: +quantile(lat, 0.99).toFixed(2),
    jobs: lat.length, wakeups, concurrency: CONCURRENCY }));
}

try {
  await (env.LATENCY === '1' ? latency() : drain());
} finally {
  await pool.query('DELETE FROM skiplock.jobs WHERE kind = $1', [KIND]).catch(() => {});
  await pool.end();
}
