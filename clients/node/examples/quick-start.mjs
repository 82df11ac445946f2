// Quick start (docs/clients/node.md): enqueue jobs, and a worker runs them.
// Install the schema first, once per database:
//
//   npx skiplock init --url "$DATABASE_URL"
//   DATABASE_URL=postgres://… node quick-start.mjs      (SIGINT or SIGTERM stops it)
import pg from 'pg';
import { enqueue, Worker } from 'skiplock';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const worker = new Worker({
  connectionString: process.env.DATABASE_URL,
  handlers: {
    'email.welcome': async (job) => {
      console.log(`welcome mail to ${job.payload.to}`);
      return { sent: true }; // the job's result
    },
    'report.build': async () => {
      // a failed attempt: retried while attempts are left; its stack goes to stderr
      throw new Error('the report service is down');
    },
  },
});
await worker.start();

await enqueue(pool, 'email.welcome', { to: 'ada@example.com' });
await enqueue(pool, 'report.build', { day: '2026-12-01' }, { maxAttempts: 1 });

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.once(signal, async () => {
    await worker.stop(); // waits for running handlers, records their outcomes
    await pool.end();
  });
}
