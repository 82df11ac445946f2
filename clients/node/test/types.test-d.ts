// The type test of index.d.ts: what a TypeScript app writes against the
// package type-checks, and what it must not write does not: each expected
// error below fails the check when the line under it compiles.
// Checked by `tsc -p tsconfig.json` (scripts/lint node); never run.
import http from 'node:http';
import {
  classify, enqueue, enqueueMany, enqueueStatement, FencedError, isTransientSqlstate, jobFence, PermanentError,
  SkiplockError, TransientError, urlPooler, Worker, withLease, runSingleton, LeaseLostError,
  idempotent, idemClaim, idemComplete, idemRelease, fingerprint, idempotentHandler, idempotency,
  declareSchedules, init, enqueueBatch, waitsFor,
  type Handler, type Job, type Queryable, type Lease, type IdempotentRequest, type ScheduleSpec, type CronTick,
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
  const ids: string[] = await enqueueMany(db, [{ kind: 'email', payload: { to: 'b' }, queue: 'mail' }],
    { token: 'import-42' });
  // @ts-expect-error each job needs its kind
  await enqueueMany(db, [{ payload: {} }]);

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
  // typed payloads: a handler per kind, each with its kind's payload type
  interface Receipt { order: number; to: string }
  const typed = new Worker<{ 'email.receipt': Receipt; 'report.build': { day: string } }>({
    connectionString: 'x',
    handlers: {
      'email.receipt': async (job) => job.payload.order + job.payload.to.length,
      'report.build': async (job) => job.payload.day.toUpperCase(),
    },
  });
  void typed;
  new Worker<{ 'email.receipt': Receipt }>({
    // @ts-expect-error a payload field its type does not have
    connectionString: 'x', handlers: { 'email.receipt': async (job) => job.payload.nope },
  });
  // @ts-expect-error a kind of the map without its handler
  new Worker<{ a: Receipt; b: number }>({ connectionString: 'x', handlers: { a: async () => 1 } });
  // @ts-expect-error pooler is one of four names
  new Worker({ connectionString: 'x', handlers: {}, pooler: 'pgbouncer' });

  const e: SkiplockError = classify(new Error('x'));
  const t: boolean = isTransientSqlstate('40001');
  const p: 'transaction' | 'session' | 'none' = urlPooler('postgresql://h:6432/db');
  void [id, text, mode, e, t, p];
}
void app;

async function dependencies(): Promise<void> {
  const a: string = await enqueue(db, 'extract', {});
  const b = await enqueue(db, 'transform', { part: 1 }, { dependsOn: [a] });
  const c = await enqueue(db, 'transform', { part: 2 }, { dependsOn: [a, 42, 7n], queue: 'etl' });
  await enqueue(db, 'load', {}, { dependsOn: [b, c], dependsOnKeys: ['day-2026-12-01'], onParentFailure: 'run' });
  // @ts-expect-error the policy is 'cancel' or 'run'
  await enqueue(db, 'load', {}, { dependsOn: [a], onParentFailure: 'skip' });
  // @ts-expect-error parents are a list
  await enqueue(db, 'load', {}, { dependsOn: a });
  // @ts-expect-error a batch of enqueueMany has no dependencies
  await enqueueMany(db, [{ kind: 'load', dependsOn: [a] }]);
  const ids: string[] = await enqueueBatch(db, 'line_item', [{ n: 1 }, { n: 2 }], 'invoice.build', {
    callbackPayload: { invoice: 7 }, queue: 'billing', priority: 1, maxAttempts: 3,
  });
  // @ts-expect-error the callback's kind is required
  await enqueueBatch(db, 'line_item', [{ n: 1 }]);
  // @ts-expect-error payloads are a list
  await enqueueBatch(db, 'line_item', { n: 1 }, 'invoice.build');
  const why: string | null = await waitsFor(db, ids[ids.length - 1]);
  // @ts-expect-error it may be null
  const sure: string = await waitsFor(db, 1);
  void [why, sure];
}
void dependencies;

async function coordination(): Promise<void> {
  const r = await withLease(db, 'nightly-report', { ttl: '1m', owner: 'me', renewEvery: '20s', wait: '5s' },
    async (lease: Lease) => {
      await lease.fence(db);
      const f: string = lease.fencing;
      if (lease.signal.aborted || lease.lost) return 0;
      return f.length;
    });
  if (r.acquired) {
    const n: number = r.value;
    const lost: boolean = r.lost;
    void [n, lost];
  } else {
    const who: string | undefined = r.holder?.owner;
    void who;
    // @ts-expect-error no value when the lease was not acquired
    void r.value;
  }
  // @ts-expect-error ttl is required
  await withLease(db, 'x', {}, async () => 1);
  const stop = new AbortController();
  await runSingleton(db, 'scheduler', async (lease) => lease.signal, {
    ttl: 30000, signal: stop.signal, ready: async () => true, onError: (e) => void e,
  });
  const err = new LeaseLostError('lost', { lease: 'x', fencing: '3' });
  const fe: FencedError = err;
  void fe;

  const hash: string = fingerprint('POST', '/charges', Buffer.from('{}'));
  const out = await idempotent(db, 'order-42', hash, async ({ key, transaction }) => {
    const c = await transaction();
    await c.query('INSERT INTO charges (key) VALUES ($1)', [key]);
    return { status: 201, body: { ok: true } };
  }, { ttl: '24h', recovery: '60s', maxResponseBytes: 1024 });
  if (out.outcome === 'completed' || out.outcome === 'replay') {
    const s: number = out.status;
    const t: string = out.bodyText;
    void [s, t];
  }
  // @ts-expect-error the response needs a status
  await idempotent(db, 'k', hash, async () => ({ body: 1 }));
  const claim = await idemClaim(db, 'k', hash);
  if (claim.outcome === 'acquired') {
    await idemComplete(db, 'k', claim.holder, { status: 200, body: null });
    await idemRelease(db, 'k', claim.holder);
  }
  const listener = idempotentHandler({ db, maxBodyBytes: 4096 }, async (req, { body }) =>
    ({ status: 200, body: { method: req.method, size: body.length } }));
  http.createServer(listener);
  const mw = idempotency({ db, recovery: '30s', retryAfter: 2 });
  const route = async (req: IdempotentRequest) => (await req.idempotency.transaction()).query('SELECT 1');
  void [mw, route];
}
void coordination;

async function periodic(): Promise<void> {
  const nightly: ScheduleSpec = {
    name: 'nightly-report', expression: '30 2 * * *', zone: 'Europe/Berlin', kind: 'report',
    payload: { full: true }, queue: 'reports', priority: 5, maxAttempts: 3, catchUp: 'none',
  };
  const w = new Worker({
    connectionString: 'postgresql://localhost/app',
    handlers: { report: async () => 'ok' },
    schedules: [nightly, { name: 'ping', expression: '@every 30s', kind: 'report' }],
    schedulesForce: false,
    cron: true,
  });
  w.on('cron', (t: CronTick) => void [t.fired, t.enqueued, t.nextDue?.getTime(), t.dbNow.getTime(), t.failure]);
  const declared = await declareSchedules(db, [nightly], { force: true });
  for (const d of declared) {
    const a: 'created' | 'updated' | 'unchanged' | 'superseded' = d.action;
    const why: string | null = d.detail;
    void [a, why];
  }
  // @ts-expect-error a schedule needs an expression
  await declareSchedules(db, [{ name: 'x', kind: 'k' }]);
  // @ts-expect-error catch-up is one of three policies
  new Worker({ connectionString: 'x', handlers: {}, schedules: [{ ...nightly, catchUp: 'some' }] });
  // @ts-expect-error cron is on or off
  new Worker({ connectionString: 'x', handlers: {}, cron: 'no' });
}
void periodic;

async function schema(): Promise<void> {
  const step: number = await init(db);
  const again: number = await init('postgresql://localhost/app');
  void [step, again];
  // @ts-expect-error a db or a connection string
  await init(5432);
  // @ts-expect-error init takes the database only
  await init(db, { force: true });
}
void schema;
