// runSingleton: the Node counterpart of `skiplock lease run` on every
// replica.  Each replica loops: when ready, it tries to take the lease;
// the one that gets it runs fn(lease) while renewing, and releases the
// lease when fn returns or throws; the others ask again every retryEvery
// (default ttl/4, jittered), so when the holder dies one of them takes
// over within about ttl + retryEvery of its last renewal.
import { checkDb, jitter, sleep } from './db.js';
import { leaseOptions } from './lease-options.js';
import { withLease } from './lease.js';

const warn = (name) => (err) => {
  console.warn(`skiplock runSingleton "${name}": ${err instanceof Error && err.stack ? err.stack : err}`);
};

// One round; true when it failed (fn or ready threw, or the database).
async function round(db, o, opts, fn) {
  try {
    if (opts.ready && !(await opts.ready())) return false;
    await withLease(db, o.name, { ...opts, owner: o.owner, wait: false }, fn);
    return false;
  } catch (err) {
    if (o.signal?.aborted) return false;
    (opts.onError ?? warn(o.name))(err);
    return true;
  }
}

/** Runs fn(lease) on one replica at a time, until opts.signal aborts
 * (then fn's lease.signal aborts too, and this resolves once fn returned
 * and the lease was released).  After fn returns, this replica contends
 * again after retryEvery; after it throws (reported to onError, default a
 * stderr line), after a growing backoff, so that another replica wins.
 * opts.ready (optional) is asked before each attempt: a replica that
 * cannot do the work now does not take the lease. */
export async function runSingleton(db, name, fn, opts = {}) {
  checkDb(db);
  const o = leaseOptions(name, opts);
  if (typeof fn !== 'function') throw new TypeError('runSingleton: expected a function (lease) => ...');
  if (opts.ready !== undefined && typeof opts.ready !== 'function') throw new TypeError('ready: expected a function');
  if (opts.onError !== undefined && typeof opts.onError !== 'function') throw new TypeError('onError: expected a function');
  let failures = 0;
  while (!o.signal?.aborted) {
    failures = (await round(db, o, opts, fn)) ? failures + 1 : 0;
    const pause = failures === 0 ? o.pollMs : Math.min(o.pollMs * 2 ** failures, Math.max(o.pollMs, o.ttlMs));
    await sleep(jitter(pause), o.signal);
  }
}
