// The type test of index.d.ts: what a TypeScript app writes against the
// package type-checks, and what it must not write does not: each expected
// error below fails the check when the line under it compiles.
// Checked by `tsc -p tsconfig.json` (scripts/lint node); never run.
import {
  classify, enqueue, enqueueStatement, FencedError, isTransientSqlstate, jobFence, PermanentError,
  SkiplockError, TransientError, urlPooler, Worker,
  type Handler, type Job, type Queryable,
} from '../index.js';

declare const db: Queryable;

async function app(): Promise<void> {
  const id: string = await enqueue(db, 'email', { to: 'a@example.com' }, {
    queue: 'mail', priority: 5, uniqueKey: 'k', maxAttempts: 3, timeout: '30s', backoff: 'equal',
  });
  const stmt = enqueueStatement('email', {}, { runAt: new Date() });
  const text: string = stmt.text;
  // @ts-expect-error an unknown backoff strategy
  await enqueue(db, 'email', {}, { backoff: 'linear' });
  // @ts-expect-error the kind is required
  await enqueue(db);

  const send: Handler = async (job: Job, { signal }) => {
    await jobFence(db, job);
    if (signal.aborted) throw new TransientError('later', { retryAfterMs: 1000 });
    if (job.attempt > 3) throw new PermanentError('give up');
    return { sent: job.id, fencing: job.fencing };
  };
  const w = new Worker({
    connectionString: 'postgresql://localhost/app',
    handlers: { email: send },
    concurrency: 8, prefetch: 16, queues: ['mail'], lease: '30s', pooler: 'transaction',
  });
  w.on('fenced', (err: FencedError) => void err.jobId);
  w.on('error', (err: SkiplockError) => void err.code);
  await w.start();
  const mode: 'listen' | 'poll' = w.wakeups;
  await w.stop();
  // @ts-expect-error handlers are required
  new Worker({ connectionString: 'postgresql://localhost/app' });
  // @ts-expect-error pooler is one of four names
  new Worker({ connectionString: 'x', handlers: {}, pooler: 'pgbouncer' });

  const e: SkiplockError = classify(new Error('x'));
  const t: boolean = isTransientSqlstate('40001');
  const p: 'transaction' | 'session' | 'none' = urlPooler('postgresql://h:6432/db');
  void [id, text, mode, e, t, p];
}
void app;
