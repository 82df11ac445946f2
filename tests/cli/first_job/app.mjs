// A first job: enqueued in the app's transaction, completed by a worker.
import pg from 'pg';
import { enqueue, Worker } from 'skiplock';

const url = process.env.DATABASE_URL;
const client = new pg.Client({ connectionString: url });
await client.connect();
await client.query('BEGIN');
const id = await enqueue(client, 'greet', { name: 'a new user' });
await client.query('COMMIT');
await client.end();

let handled;
const ran = new Promise((resolve) => { handled = resolve; });
const worker = new Worker({
  connectionString: url,
  concurrency: 1,
  poll: '100ms',
  handlers: {
    greet: async (job) => {
      handled(true);
      return { greeted: job.payload.name };
    },
  },
});
await worker.start();
const timer = setTimeout(() => handled(false), 30000);
const ok = await ran;
clearTimeout(timer);
await worker.stop();
console.log(`job ${id} ${ok ? 'handled' : 'not handled'}`);
process.exitCode = ok ? 0 : 1;
