// Idempotent endpoints (docs/clients/node.md): POST /charges with an
// Idempotency-Key header charges once, however often it is retried; the
// charge row and the stored response commit in one transaction.
//
//   DATABASE_URL=postgres://… PORT=8080 node examples/charges-express.js
//   curl -i -X POST localhost:8080/charges -H 'Idempotency-Key: order-42' \
//        -H 'Content-Type: application/json' -d '{"amount": 1250, "currency": "usd"}'
//
// Its table comes from the application's migrations:
//   CREATE TABLE charges (id bigserial PRIMARY KEY, amount int NOT NULL, currency text NOT NULL);
import express from 'express';
import pg from 'pg';
import { idempotency } from 'skiplock';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });

const app = express();
app.post('/charges', idempotency({ db: pool, ttl: '24h', recovery: '60s' }), async (req, res) => {
  const { amount, currency } = req.body ?? {};
  if (!Number.isInteger(amount) || amount <= 0 || typeof currency !== 'string') {
    res.status(400).json({ error: 'expected {"amount": a positive integer, "currency": "…"}' });
    return; // an error is not stored: the client may fix the body and retry with the key
  }
  const c = await req.idempotency.transaction();
  const { rows } = await c.query('INSERT INTO charges (amount, currency) VALUES ($1, $2) RETURNING id',
    [amount, currency]);
  res.status(201).json({ id: rows[0].id, amount, currency }); // stored, committed, then sent
});

const server = app.listen(Number(process.env.PORT ?? 8080), '127.0.0.1', () => {
  console.log(`listening on ${server.address().port}`);
});
process.once('SIGTERM', () => server.close(() => pool.end()));
