// The types of require('skiplock') (index.d.cts, made from index.d.ts by
// `npm pack`), as a CommonJS TypeScript app sees them: type-checked by tsc
// in the app that test/pack.sh installs the tarball into; never run.
import skiplock = require('skiplock');
import { init, PermanentError, Worker, type Job } from 'skiplock';

declare const db: skiplock.Queryable;

export async function start(): Promise<number> {
  const step: number = await init(db);
  const worker = new Worker({
    connectionString: 'postgresql://localhost/app',
    handlers: {
      report: async (job: Job) => {
        if (job.attempt > 1) throw new PermanentError('give up');
        return job.id;
      },
    },
  });
  await worker.start();
  const parent = await skiplock.enqueue(db, 'extract', {});
  await skiplock.enqueue(db, 'report', {}, { dependsOn: [parent], onParentFailure: 'run' });
  const batch: string[] = await skiplock.enqueueBatch(db, 'line', [{ n: 1 }], 'report', { callbackPayload: {} });
  const why: string | null = await skiplock.waitsFor(db, batch[1]);
  void why;
  // @ts-expect-error the policy is 'cancel' or 'run'
  await skiplock.enqueue(db, 'report', {}, { dependsOn: [parent], onParentFailure: 'skip' });
  const e: skiplock.SkiplockError = skiplock.classify(new Error('x'));
  void e;
  // @ts-expect-error init takes a db or a connection string
  await skiplock.init(5432);
  // @ts-expect-error handlers are required
  new skiplock.Worker({ connectionString: 'x' });
  return step + skiplock.MIN_SCHEMA;
}
