// The quick start as CommonJS (docs/clients/node.md): require('skiplock')
// loads the same module as import (Node 20.19+ or 22.12+).  This app also
// installs the schema itself as it starts, with init() (safe on every
// start, and from many replicas at once).
//
//   DATABASE_URL=postgres://… node quick-start.cjs      (SIGINT or SIGTERM stops it)
const pg = require('pg');
const { enqueue, init, Worker } = require('skiplock');

async function main() {
  const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
  console.log(`schema at step ${await init(pool)}`);
  const worker = new Worker({
    connectionString: process.env.DATABASE_URL,
    handlers: {
      'email.welcome': async (job) => {
        console.log(`welcome mail to ${job.payload.to}`);
        return { sent: true };
      },
      'report.build': async () => {
        throw new Error('the report service is down');
      },
    },
  });
  await worker.start();
  await enqueue(pool, 'email.welcome', { to: 'grace@example.com' });
  await enqueue(pool, 'report.build', { day: '2026-12-02' }, { maxAttempts: 1 });
  const stop = async () => {
    await worker.stop();
    await pool.end();
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
