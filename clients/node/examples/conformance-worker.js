// The conformance suite's worker (tests/conformance/README.md) on the Node
// client: the six conf.* kinds, each effect through conformance.effect on
// the application's own pool, then the result {kind, attempt}.  Runs until
// SIGTERM, then drains and exits 0.
import pg from 'pg';
import { Worker, PermanentError } from '../src/index.js';

const env = process.env;
const owner = env.CONFORMANCE_OWNER;
const pool = new pg.Pool({ connectionString: env.DATABASE_URL, max: 4 });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function complete(job) {
  await pool.query('SELECT conformance.effect($1, $2, $3, $4::jsonb)',
    [job.id, job.fencing, owner, JSON.stringify(job.payload)]);
  return { kind: job.kind, attempt: job.attempt };
}

const handlers = {
  'conf.ok': complete,
  'conf.retry': async (job) => {
    if (job.attempt >= job.payload.until) return complete(job);
    throw new Error(`conf.retry attempt ${job.attempt}`);
  },
  'conf.fail': async (job) => { throw new Error(`conf.fail attempt ${job.attempt}`); },
  'conf.discard': async (job) => { throw new PermanentError(`conf.discard attempt ${job.attempt}`); },
  'conf.sleep': async (job) => { await sleep(job.payload.ms); return complete(job); },
  'conf.hang': async (job) => {
    if (job.attempt > 1) return complete(job);
    await sleep(job.payload.ms); // a stale attempt: completes without an effect
    return { kind: job.kind, attempt: job.attempt };
  },
};

const worker = new Worker({
  connectionString: env.DATABASE_URL,
  directConnectionString: env.DIRECT_DATABASE_URL,
  owner,
  handlers,
  concurrency: Number(env.CONFORMANCE_CONCURRENCY ?? 4),
  lease: env.CONFORMANCE_LEASE ?? '2s',
  poll: '200ms',
  rescueEvery: '250ms',
  shutdownTimeout: '20s',
  cron: env.CONFORMANCE_CRON === '1', // as the C adapters: no cron unless cron_languages.sh asks
});
worker.on('error', (e) => console.error(`worker: ${e.name}: ${e.message}`));
worker.on('fenced', (e) => console.error(`fenced: ${e.message}`));

process.on('SIGTERM', async () => {
  await worker.stop();
  await pool.end();
  process.exit(0);
});
await worker.start();
console.error(`worker ${owner} started (wake-ups: ${worker.wakeups})`);
