// bench/peers/drain.mjs — one drain of no-op jobs by a peer job queue, for
// bench/run's peers step (bench/peers/run).
//
//   node bench/peers/drain.mjs --peer pgboss10|pgboss12|graphile17|graphile18
//                              --config fast|delete --url URL --jobs N [--timeout S]
//
// Drops the peer's schema and lets the library create it again (migrations),
// enqueues N jobs of one queue/task with the library's bulk call (pg-boss
// insert(), graphile-worker addJobs(), 10,000 per call; not timed), runs
// VACUUM ANALYZE and CHECKPOINT (as skl-bench-drain does), then starts the
// library's workers with a handler that does nothing.  The time runs from
// just before the start call until a check in SQL finds no unfinished job
// (checked every 10 ms once the handlers have seen N jobs: pg-boss sends
// its completions without waiting for them).  Prints "key<TAB>value" lines:
//   rate      jobs/s, N / that time
//   seconds   that time
//   jobs      N, the handler calls (the run fails unless it is exactly N)
//   enqueue   jobs/s of the bulk enqueue (for the record; not the peer's best)
//   kept      rows of the peer's job tables at the end (finished jobs kept)
//   rss_kb    the driver process's peak RSS (KiB)
//
// The configurations (docs/performance.md, "The peers in one run", says why):
//   pgboss10 fast    2 work() loops x batchSize 5000, pollingIntervalSeconds
//                    0.5, the second loop started half an interval after the
//                    first; completed jobs kept (archived after 12 h)
//   pgboss10 delete  the same, completed jobs archived after 1 s and deleted
//                    from the archive after 1 s, maintenance every second
//   pgboss12 fast    4 work() loops x batchSize 1000, burstWhenBatchFull,
//                    pollingIntervalSeconds 0.5; the queue's default
//                    deleteAfterSeconds (7 days)
//   pgboss12 delete  the same, the queue's deleteAfterSeconds 1, supervision
//                    every second
//   graphile17/18    concurrency 24, localQueue size 500,
//                    completeJobBatchDelay 0, failJobBatchDelay 0, a silent
//                    logger; graphile-worker deletes a job when it completes
//                    (there is no other retention), so "fast" and "delete"
//                    are the same configuration
import pg from 'pg';

const args = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = args.indexOf(name);
  if (i < 0) return dflt;
  if (i + 1 >= args.length) die(`${name} needs a value`);
  return args[i + 1];
};
function die(msg) { process.stderr.write(`peers/drain: ${msg}\n`); process.exit(2); }

const PEER = opt('--peer');
const CONFIG = opt('--config', 'fast');
const URL = opt('--url');
const N = Number(opt('--jobs', '20000'));
const TIMEOUT_S = Number(opt('--timeout', '600'));
const CHUNK = 10000;
const QUEUE = 'bench_noop';
if (!['pgboss10', 'pgboss12', 'graphile17', 'graphile18'].includes(PEER)) die('--peer: pgboss10, pgboss12, graphile17 or graphile18');
if (!['fast', 'delete'].includes(CONFIG)) die('--config: fast or delete');
if (!URL) die('--url is needed');
if (!Number.isInteger(N) || N < 1) die('--jobs needs a whole number >= 1');

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const ctl = new pg.Client({ connectionString: URL, application_name: 'peers-bench-control' });
const one = async (sql, params) => (await ctl.query(sql, params)).rows[0];

let handled = 0;
let enqueueRate = 0;

// waitDone(unfinished): the moment (ms, performance.now) the SQL check first finds no unfinished job.
async function waitDone(unfinished, t0) {
  const deadline = t0 + TIMEOUT_S * 1000;
  for (;;) {
    if (performance.now() > deadline) die(`the drain of ${N} jobs did not end within ${TIMEOUT_S} s (${handled} handled)`);
    if (handled >= N && !(await one(unfinished)).left) return performance.now();
    await sleep(10);
  }
}

async function settle(table) {
  await ctl.query(`VACUUM ANALYZE ${table}`);
  await ctl.query('CHECKPOINT');
}

async function enqueue(insertChunk) {
  const t = performance.now();
  for (let done = 0; done < N; done += CHUNK) await insertChunk(Math.min(CHUNK, N - done));
  enqueueRate = N / ((performance.now() - t) / 1000);
}

async function pgboss(major) {
  const mod = await import(major === 10 ? 'pg-boss-10' : 'pg-boss-12');
  const PgBoss = mod.PgBoss ?? mod.default; // 12 exports the class by name, 10 as the default
  await ctl.query('DROP SCHEMA IF EXISTS pgboss CASCADE');
  const del = CONFIG === 'delete';
  const config = { connectionString: URL, application_name: 'peers-bench-pgboss', max: 10 };
  if (major === 10 && del) Object.assign(config, { archiveCompletedAfterSeconds: 1, deleteAfterSeconds: 1, maintenanceIntervalSeconds: 1 });
  if (major === 12 && del) Object.assign(config, { superviseIntervalSeconds: 1 });
  const boss = new PgBoss(config);
  boss.on('error', (e) => die(`pg-boss: ${e.message}`));
  await boss.start();
  await boss.createQueue(QUEUE, major === 12 && del ? { deleteAfterSeconds: 1 } : {});
  await enqueue((k) => {
    const jobs = Array.from({ length: k }, () => (major === 10 ? { name: QUEUE, data: {} } : { data: {} }));
    return major === 10 ? boss.insert(jobs) : boss.insert(QUEUE, jobs);
  });
  await settle('pgboss.job');
  const handler = async (jobs) => { handled += jobs.length; };
  const t0 = performance.now();
  if (major === 10) {
    // pg-boss 10 sleeps pollingIntervalSeconds after every fetch, even a full one:
    // two loops half an interval apart keep a fetch going every 0.25 s.
    await boss.work(QUEUE, { batchSize: 5000, pollingIntervalSeconds: 0.5 }, handler);
    await sleep(250);
    await boss.work(QUEUE, { batchSize: 5000, pollingIntervalSeconds: 0.5 }, handler);
  } else {
    for (let i = 0; i < 4; i++) {
      await boss.work(QUEUE, { batchSize: 1000, pollingIntervalSeconds: 0.5, burstWhenBatchFull: true }, handler);
    }
  }
  const t1 = await waitDone(`SELECT EXISTS (SELECT 1 FROM pgboss.job WHERE name = '${QUEUE}' AND state < 'completed') AS left`, t0);
  const bad = (await one(`SELECT count(*)::int AS n FROM pgboss.job WHERE state > 'completed'`)).n;
  if (bad) die(`${bad} jobs ended cancelled or failed`);
  const kept = (await one(major === 10
    ? `SELECT (SELECT count(*) FROM pgboss.job) + (SELECT count(*) FROM pgboss.archive) AS n`
    : 'SELECT count(*) AS n FROM pgboss.job')).n;
  await boss.stop({ graceful: false, wait: true, timeout: 5000 }).catch(() => {});
  return { t0, t1, kept };
}

async function graphile(minor) {
  const gw = await import(minor === 17 ? 'graphile-worker-17' : 'graphile-worker-18');
  const { run, makeWorkerUtils, Logger } = gw.default?.run ? gw.default : gw;
  await ctl.query('DROP SCHEMA IF EXISTS graphile_worker CASCADE');
  const logger = new Logger(() => () => {});
  const utils = await makeWorkerUtils({ connectionString: URL, logger });
  await utils.migrate();
  await enqueue((k) => utils.addJobs(Array.from({ length: k }, () => ({ identifier: QUEUE, payload: {} }))));
  await utils.release();
  await settle('graphile_worker._private_jobs');
  const t0 = performance.now();
  const runner = await run({
    connectionString: URL,
    concurrency: 24,
    noHandleSignals: true,
    logger,
    taskList: { [QUEUE]: async () => { handled++; } },
    preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
  });
  // a completed job is deleted; a failed one stays (to be retried), so an empty table is a success
  const t1 = await waitDone('SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs) AS left', t0);
  const kept = (await one('SELECT count(*) AS n FROM graphile_worker._private_jobs')).n;
  await runner.stop();
  return { t0, t1, kept };
}

await ctl.connect();
const r = PEER.startsWith('pgboss') ? await pgboss(Number(PEER.slice(6))) : await graphile(Number(PEER.slice(8)));
if (handled !== N) die(`${handled} handler calls for ${N} jobs`);
const secs = (r.t1 - r.t0) / 1000;
await ctl.end();
const out = {
  rate: (N / secs).toFixed(1), seconds: secs.toFixed(3), jobs: handled, enqueue: enqueueRate.toFixed(0),
  kept: r.kept, rss_kb: process.resourceUsage().maxRSS,
};
for (const [k, v] of Object.entries(out)) process.stdout.write(`${k}\t${v}\n`);
process.exit(0);
