// Leases and singletons (docs/clients/node.md): run this on every replica;
// the nightly report is written by one replica at a time, and when that
// replica dies another takes over within about the lease's ttl.
//
//   DATABASE_URL=postgres://… node examples/nightly-report.js   (SIGTERM stops it)
//
// Its table comes from the application's migrations, not from each replica:
//   CREATE TABLE reports (day date PRIMARY KEY, body text NOT NULL, fencing bigint NOT NULL);
import pg from 'pg';
import { runSingleton } from 'skiplock';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const stop = new AbortController();
process.once('SIGTERM', () => stop.abort());
process.once('SIGINT', () => stop.abort());

console.log('up: the report is written by one replica at a time');

// The slow part (queries, calls to other services), outside any transaction.
async function buildReport(signal) {
  signal.throwIfAborted();
  const { rows } = await pool.query('SELECT count(*) AS n FROM pg_stat_activity');
  return `connections: ${rows[0].n}`;
}

await runSingleton(pool, 'nightly-report', async (lease) => {
  const { rowCount } = await pool.query('SELECT 1 FROM reports WHERE day = current_date');
  if (rowCount > 0) return; // done today; ask again later
  const body = await buildReport(lease.signal);
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    await lease.fence(c); // SK001 if another replica took the lease over meanwhile
    await c.query(`INSERT INTO reports (day, body, fencing) VALUES (current_date, $1, $2)
                   ON CONFLICT (day) DO NOTHING`, [body, lease.fencing]);
    await c.query('COMMIT');
    console.log(`report written under fencing token ${lease.fencing}`);
  } catch (err) {
    await c.query('ROLLBACK');
    throw err;
  } finally {
    c.release();
  }
}, { ttl: '30s', signal: stop.signal });

await pool.end();
