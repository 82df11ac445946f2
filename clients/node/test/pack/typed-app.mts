// The types of import 'skiplock' (index.d.ts), as an ES module TypeScript
// app sees them: type-checked by tsc in the app that test/pack.sh installs
// the tarball into; never run.
import * as skiplock from 'skiplock';
import { init, PermanentError, Worker, type Job } from 'skiplock';

declare const db: skiplock.Queryable;

export async function start(): Promise<number> {
  const step: number = await init('postgresql://localhost/app');
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
  // @ts-expect-error init takes a db or a connection string
  await init(5432);
  return step + (await skiplock.init(db));
}
