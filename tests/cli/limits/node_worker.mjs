// node_worker.mjs — a Node client worker for tests/cli/test_limits.sh: runs
// jobs of the kinds given in LIMITS_KINDS (comma-separated) with a handler
// that sleeps payload.ms (0 by default), at LIMITS_CONCURRENCY, until
// SIGTERM.  The limits are the claim's: the worker has no code for them.
import { Worker } from '../../../clients/node/src/index.js';

const handler = async (job) => {
  const ms = Number(job.payload.ms ?? 0);
  if (ms > 0) await new Promise((resolve) => setTimeout(resolve, ms));
  return { by: process.env.LIMITS_OWNER };
};
const worker = new Worker({
  connectionString: process.env.DATABASE_URL,
  concurrency: Number(process.env.LIMITS_CONCURRENCY ?? 8),
  lease: '4s',
  handlers: Object.fromEntries(process.env.LIMITS_KINDS.split(',').map((k) => [k, handler])),
});
await worker.start();
process.once('SIGTERM', async () => {
  await worker.stop();
  process.exit(0);
});
