// Periodic jobs (docs/clients/node.md): run this on every replica.  The
// schedules are declared in code and applied when the worker starts; every
// replica's worker fires them, and each fire time becomes exactly one job,
// however many replicas are up (the database decides the fire times).
//
//   DATABASE_URL=postgres://… node examples/periodic-jobs.js   (SIGTERM or SIGINT stops it)
//
// Its table comes from the application's migrations:
//   CREATE TABLE sessions (id bigserial PRIMARY KEY, expires_at timestamptz NOT NULL);
import pg from 'pg';
import { Worker } from 'skiplock';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });

const worker = new Worker({
  connectionString: process.env.DATABASE_URL,
  schedules: [
    // 02:30 in Berlin, whatever the servers' zone; once a day across DST changes
    { name: 'sessions-cleanup', expression: '30 2 * * *', zone: 'Europe/Berlin', kind: 'sessions.cleanup',
      payload: { graceDays: 7 } },
    // every 2 s; after an outage, no catch-up of the missed ones
    { name: 'heartbeat', expression: '@every 2s', kind: 'heartbeat', catchUp: 'none' },
  ],
  handlers: {
    'sessions.cleanup': async (job) => {
      const { rowCount } = await pool.query(
        'DELETE FROM sessions WHERE expires_at < now() - make_interval(days => $1)', [job.payload.graceDays]);
      return { deleted: rowCount };
    },
    // job.runAt is the fire time
    heartbeat: async (job) => console.log(`heartbeat for ${job.runAt.toISOString()} by ${process.pid}`),
  },
});

await worker.start(); // a bad schedule rejects here, with the database's message
console.log('up: firing sessions-cleanup and heartbeat');
async function shutdown() {
  await worker.stop(); // waits for running handlers
  await pool.end();
}
process.once('SIGTERM', shutdown);
process.once('SIGINT', shutdown);
