// skiplock for Node: enqueue in your transaction, a Worker on the SQL
// protocol (docs/protocol.md) that also fires the schedules (docs/cron.md),
// leases and singletons (docs/leases.md) and idempotent endpoints
// (docs/idempotency.md), and dependencies between jobs (docs/flow-control.md);
// init() installs the schema.  Depends only on pg.
export { enqueue, enqueueMany, enqueueManyStatement, enqueueStatement, jobComplete, jobFence } from './enqueue.js';
export { enqueueBatch, waitsFor } from './deps.js';
export { Worker } from './worker.js';
export { declareSchedules } from './schedules.js';
export { withLease } from './lease.js';
export { runSingleton } from './singleton.js';
export { fingerprint, idemClaim, idemComplete, idemRelease } from './idem.js';
export { idempotent } from './idem-run.js';
export { idempotentHandler } from './idem-http.js';
export { idempotency } from './idem-express.js';
export {
  SkiplockError, TransientError, PermanentError, FencedError, LeaseLostError, JobTimeoutError, ShutdownError,
  classify, isTransientSqlstate,
} from './errors.js';
export { urlPooler } from './pooler.js';
export { MIN_SCHEMA } from './protocol.js';
export { init } from './init.js';
