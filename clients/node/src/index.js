// skiplock for Node: enqueue in your transaction, and a Worker on the SQL
// protocol (docs/protocol.md).  Depends only on pg.
export { enqueue, enqueueStatement, jobComplete, jobFence } from './enqueue.js';
export { Worker } from './worker.js';
export {
  SkiplockError, TransientError, PermanentError, FencedError, JobTimeoutError, ShutdownError,
  classify, isTransientSqlstate,
} from './errors.js';
export { urlPooler } from './pooler.js';
export { MIN_SCHEMA } from './protocol.js';
