// enqueue.js — an order and its confirmation email, in one transaction.
//
//   DATABASE_URL=postgresql://… node enqueue.js ORDER_ID [--fail]
//
// The job is enqueued with skiplock.enqueue inside the application's own
// transaction: it exists if and only if the order does.  With --fail the
// transaction fails after the enqueue and is rolled back: no order, no job.
// Works through PgBouncer in transaction mode: one transaction, unnamed
// statements (pg only names a statement when asked to).
'use strict';
const { Client } = require('pg');

async function placeOrder(client, orderId, fail) {
  await client.query('BEGIN');
  try {
    await client.query('INSERT INTO orders (id, total_cents) VALUES ($1, $2)', [orderId, 4200]);
    const { rows } = await client.query(
      "SELECT skiplock.enqueue('email', $1::jsonb, queue => 'mail', " +
      "unique_key => 'order-email:' || $2::text) AS job_id",
      [JSON.stringify({ order: orderId, template: 'confirmation' }), orderId]);
    if (fail) throw new Error('payment declined');
    await client.query('COMMIT');
    return rows[0].job_id;
  } catch (e) {
    await client.query('ROLLBACK');
    throw e;
  }
}

async function main() {
  const [orderId, flag] = process.argv.slice(2);
  if (!/^[0-9]+$/.test(orderId || '')) {
    console.error('usage: node enqueue.js ORDER_ID [--fail]');
    process.exit(2);
  }
  const client = new Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  try {
    const id = await placeOrder(client, Number(orderId), flag === '--fail');
    console.log(`order ${orderId}: email job ${id}`);
  } catch (e) {
    console.error(`order ${orderId}: rolled back: ${e.message}`);
    process.exitCode = 1;
  } finally {
    await client.end();
  }
}

main();
