// Worker options: checked once, in the constructor, with one clear
// TypeError per bad value.
import os from 'node:os';
import { randomBytes } from 'node:crypto';
import { toMs, toInterval } from './duration.js';
import { checkPoolerMode } from './pooler.js';
import { checkSchedules } from './schedules.js';

/** A lease or claim owner naming this process: host:pid:random. */
export const defaultOwner = () => `${os.hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;

function positiveInt(v, what, max) {
  if (!Number.isInteger(v) || v < 1 || v > max) throw new TypeError(`${what}: expected an integer from 1 to ${max}, got ${v}`);
  return v;
}

function count(v, what, max) {
  if (!Number.isInteger(v) || v < 0 || v > max) throw new TypeError(`${what}: expected an integer from 0 to ${max}, got ${v}`);
  return v;
}

function checkHandlers(handlers) {
  const kinds = Object.keys(handlers ?? {});
  if (kinds.length === 0) throw new TypeError('handlers: expected { kind: async (job, { signal }) => result, ... }');
  for (const k of kinds) {
    if (typeof handlers[k] !== 'function') throw new TypeError(`handlers.${k}: expected a function`);
  }
  return kinds;
}

function bool(v, what, dflt) {
  if (v === undefined) return dflt;
  if (typeof v !== 'boolean') throw new TypeError(`${what}: expected true or false, got ${JSON.stringify(v)}`);
  return v;
}

function checkQueues(queues) {
  if (queues === undefined || queues === null) return null;
  if (!Array.isArray(queues) || queues.length === 0 || queues.some((q) => typeof q !== 'string')) {
    throw new TypeError('queues: expected a non-empty array of queue names (or null for every queue)');
  }
  return queues;
}

export function workerOptions(o = {}) {
  if (typeof o.connectionString !== 'string' || o.connectionString === '') {
    throw new TypeError('connectionString: expected a PostgreSQL URL');
  }
  const leaseMs = toMs(o.lease ?? '30s', 'lease');
  if (leaseMs < 100 || leaseMs > 86400000) throw new TypeError('lease: expected 100 ms to 1 day');
  return {
    url: o.connectionString,
    directUrl: o.directConnectionString ?? process.env.DIRECT_DATABASE_URL ?? null,
    handlers: o.handlers,
    kinds: checkHandlers(o.handlers),
    queues: checkQueues(o.queues),
    concurrency: positiveInt(o.concurrency ?? 10, 'concurrency', 100000),
    prefetch: count(o.prefetch ?? 0, 'prefetch', 1000),
    leaseMs,
    leaseInterval: toInterval(leaseMs, 'lease'),
    pooler: checkPoolerMode(o.pooler ?? 'auto'),
    pollMs: Math.max(toMs(o.poll ?? '1s', 'poll'), 10),
    rescueEveryMs: Math.max(toMs(o.rescueEvery ?? '5s', 'rescueEvery'), 10),
    shutdownTimeoutMs: toMs(o.shutdownTimeout ?? '30s', 'shutdownTimeout'),
    cron: bool(o.cron, 'cron', true),
    schedules: o.schedules === undefined || o.schedules === null ? null : checkSchedules(o.schedules),
    schedulesForce: bool(o.schedulesForce, 'schedulesForce', false),
    owner: o.owner ?? defaultOwner(),
    applicationName: o.applicationName ?? 'skiplock-node',
  };
}
