// The options of withLease and runSingleton, checked before any database
// call, with the schema's limits (skiplock_internal.lease_check_args): a name and an
// owner of 1 to 256 characters, a ttl that is positive (here: at least
// 100 ms, so that renewals every ttl/3 make sense) and at most 365 days.
import { toMs } from './duration.js';
import { defaultOwner } from './options.js';

const TTL_MIN_MS = 100;
const TTL_MAX_MS = 365 * 86400000;
const TEXT_MAX = 256;

function text(v, what) {
  if (typeof v !== 'string') throw new TypeError(`${what}: expected a string, got ${typeof v}`);
  const n = [...v].length; // characters, as PostgreSQL's length() counts them
  if (n < 1 || n > TEXT_MAX || v.includes('\u0000')) {
    throw new RangeError(`${what}: expected 1 to ${TEXT_MAX} characters without NUL, got ${n}`);
  }
  return v;
}

function duration(v, what, min, max) {
  const ms = toMs(v, what);
  if (ms < min || ms > max) throw new RangeError(`${what}: expected ${min} ms to ${max} ms, got ${ms} ms`);
  return ms;
}

function checkSignal(signal) {
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw new TypeError('signal: expected an AbortSignal');
  return signal;
}

// wait: false (default: answer at once), true (until the signal aborts) or
// a duration (at most that long).
function waitMs(wait) {
  if (wait === undefined || wait === false) return 0;
  if (wait === true) return Infinity;
  return toMs(wait, 'wait');
}

/** The checked options: name, owner, ttlMs, ttl (an interval literal),
 * renewEveryMs, callMs (the deadline of one database call: ttl/10),
 * waitMs, pollMs (how often a waiting acquirer asks again) and signal. */
export function leaseOptions(name, o) {
  if (o === null || typeof o !== 'object') throw new TypeError('options: expected { ttl, owner?, renewEvery?, wait?, signal? }');
  if (o.ttl === undefined) throw new TypeError('ttl: required (milliseconds or a duration like "30s")');
  const ttlMs = duration(o.ttl, 'ttl', TTL_MIN_MS, TTL_MAX_MS);
  return {
    name: text(name, 'lease name'),
    owner: text(o.owner ?? defaultOwner(), 'owner'),
    ttlMs,
    ttl: `${Math.round(ttlMs)} milliseconds`,
    renewEveryMs: o.renewEvery === undefined ? ttlMs / 3 : duration(o.renewEvery, 'renewEvery', 10, ttlMs / 2),
    callMs: ttlMs / 10,
    waitMs: waitMs(o.wait),
    pollMs: o.retryEvery === undefined ? Math.min(ttlMs / 4, 5000) : duration(o.retryEvery, 'retryEvery', 10, TTL_MAX_MS),
    signal: checkSignal(o.signal),
  };
}
