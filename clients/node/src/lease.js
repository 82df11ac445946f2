// Leases (docs/leases.md) from Node: withLease takes one, renews it in the
// background and releases it when the body ends.
//
// Every call is one autocommit statement (skiplock.lease_acquire,
// lease_renew, lease_release) on whatever connection the pool hands out,
// with no session state: acquire and release may run on different
// backends, through PgBouncer in transaction mode, and a cut connection
// costs one failed call.  The lease is a row; a holder that vanishes
// leaves it to expire after its ttl.
//
// Timing, as `skiplock lease run` (src/cli/lease/lease_run.c): heldFrom is
// when the last successful renewal (or the acquisition) was sent, so the
// server's expiry is at least heldFrom + ttl.  Renewals go every
// renewEvery (default ttl/3); a failed one is retried with jittered
// backoff.  Each call is bounded by ttl/10; when no renewal succeeded by
// heldFrom + ttl - ttl/10 the lease counts as lost, and a renewal that
// matches no row loses it at once.  Either way lease.signal aborts (its
// reason a LeaseLostError) before another holder can take the lease.
import { classify, LeaseLostError, TransientError } from './errors.js';
import { checkDb, jitter, now, sleep, timedQuery } from './db.js';
import { leaseOptions } from './lease-options.js';

const ACQUIRE = 'SELECT skiplock.lease_acquire(name => $1, owner => $2, ttl => $3::interval)::text AS fencing';
const HOLDER = `SELECT owner, greatest(0, ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000))::float8 AS ms
                  FROM skiplock.leases WHERE name = $1 AND expires_at > clock_timestamp()`;
const RENEW = 'SELECT skiplock.lease_renew(name => $1, owner => $2, fencing => $3::bigint, ttl => $4::interval) AS renewed';
const RELEASE = 'SELECT skiplock.lease_release(name => $1, owner => $2, fencing => $3::bigint) AS released';
const FENCE = 'SELECT skiplock.lease_fence(name => $1, fencing => $2::bigint)';
const RELEASE_TRIES = 3;

export class Lease {
  #db;
  #o;
  #ctl = new AbortController();
  #heldFrom;
  #timer = null;
  #deadline = null;
  #failures = 0;
  #inflight = null;
  #ended = false;
  #onStop = null;

  constructor(db, o, fencing, sentAt) {
    this.#db = db;
    this.#o = o;
    this.fencing = fencing;
    this.#heldFrom = sentAt;
    if (o.signal) {
      this.#onStop = () => this.#ctl.abort(o.signal.reason);
      o.signal.addEventListener('abort', this.#onStop, { once: true });
    }
    this.#arm();
    this.#schedule(o.renewEveryMs);
  }

  get name() { return this.#o.name; }
  get owner() { return this.#o.owner; }
  get ttlMs() { return this.#o.ttlMs; }
  /** Aborts when the lease is lost (reason: LeaseLostError) or the
   * caller's signal aborts (its reason). */
  get signal() { return this.#ctl.signal; }
  /** True once the lease is known to be lost. */
  get lost() { return this.#ctl.signal.reason instanceof LeaseLostError; }

  /** In the caller's transaction on client, before its writes: throws
   * LeaseLostError (SQLSTATE SK001) unless this token is the current one
   * of a live lease; the transaction is then aborted.  A token that passes
   * keeps the lease row locked FOR SHARE until the transaction ends. */
  async fence(client) {
    checkDb(client);
    if (this.lost) throw this.signal.reason;
    try {
      await client.query(FENCE, [this.#o.name, this.fencing]);
    } catch (err) {
      const e = classify(err);
      if (e.code !== 'SK001') throw e;
      throw this.#lose(e.message, e);
    }
  }

  #lose(why, cause) {
    const err = new LeaseLostError(`lease "${this.#o.name}" (fencing ${this.fencing}) lost: ${why}`,
      { lease: this.#o.name, fencing: this.fencing, cause });
    if (!this.#ctl.signal.aborted) this.#ctl.abort(err);
    this.#stopTimers();
    return err;
  }

  // The local deadline: heldFrom + ttl - one call's deadline.
  #arm() {
    clearTimeout(this.#deadline);
    const at = this.#heldFrom + this.#o.ttlMs - this.#o.callMs;
    this.#deadline = setTimeout(() => this.#lose('no renewal succeeded within the ttl'), Math.max(at - now(), 0));
  }

  #schedule(ms) {
    if (this.#ended || this.lost) return;
    this.#timer = setTimeout(() => { this.#inflight = this.#renew(); }, ms);
  }

  async #renew() {
    const o = this.#o;
    const sentAt = now();
    try {
      const { rows } = await timedQuery(this.#db, RENEW, [o.name, o.owner, this.fencing, o.ttl], o.callMs);
      if (this.#ended || this.lost) return;
      if (!rows[0].renewed) {
        this.#lose('the database did not renew it (it expired and was taken, or was released)');
        return;
      }
      this.#heldFrom = sentAt;
      this.#failures = 0;
      this.#arm();
      this.#schedule(o.renewEveryMs);
    } catch {
      // transient or not, asked again until the deadline says lost
      this.#failures += 1;
      this.#schedule(jitter(Math.min(100 * 2 ** this.#failures, o.renewEveryMs)));
    }
  }

  #stopTimers() {
    clearTimeout(this.#timer);
    clearTimeout(this.#deadline);
  }

  /** Stops renewing and releases the lease (a few attempts, each bounded
   * by ttl/10; if all fail the lease expires by its ttl). */
  async end() {
    this.#ended = true;
    this.#stopTimers();
    this.#o.signal?.removeEventListener('abort', this.#onStop);
    await this.#inflight;
    const o = this.#o;
    for (let i = 0; i < RELEASE_TRIES; i++) {
      try {
        await timedQuery(this.#db, RELEASE, [o.name, o.owner, this.fencing], o.callMs);
        return;
      } catch {
        await sleep(jitter(Math.min(100 * 2 ** i, o.callMs)));
      }
    }
  }
}

async function holder(db, o) {
  try {
    const { rows } = await timedQuery(db, HOLDER, [o.name], o.callMs);
    return rows.length === 0 ? null : { owner: rows[0].owner, expiresInMs: rows[0].ms };
  } catch {
    return null; // who holds it is a courtesy: the answer stays "not acquired"
  }
}

// One acquisition attempt: { fencing, sentAt } or { fencing: null, holder }.
async function tryAcquire(db, o) {
  const sentAt = now();
  const { rows } = await timedQuery(db, ACQUIRE, [o.name, o.owner, o.ttl], o.callMs);
  const fencing = rows[0].fencing;
  return fencing === null ? { fencing, holder: await holder(db, o) } : { fencing, sentAt };
}

// With o.waitMs, asks again (jittered, every pollMs) while the lease is
// held or the database is unreachable, until waitMs passed.
async function acquire(db, o) {
  const until = now() + o.waitMs;
  for (;;) {
    o.signal?.throwIfAborted();
    try {
      const got = await tryAcquire(db, o);
      if (got.fencing !== null || now() >= until) return got;
    } catch (err) {
      const e = classify(err);
      if (!(e instanceof TransientError) || now() >= until) throw e;
    }
    await sleep(Math.min(jitter(o.pollMs), Math.max(until - now(), 0)), o.signal);
  }
}

/** Takes the lease `name`, runs fn(lease) while renewing it, releases it
 * when fn settles.  Resolves { acquired: true, value, fencing, lost } or,
 * when another holder has it, { acquired: false, holder } at once (or
 * after opts.wait). */
export async function withLease(db, name, opts, fn) {
  checkDb(db);
  const o = leaseOptions(name, opts);
  if (typeof fn !== 'function') throw new TypeError('withLease: expected a function (lease) => ... as the last argument');
  const got = await acquire(db, o);
  if (got.fencing === null) return { acquired: false, holder: got.holder };
  const lease = new Lease(db, o, got.fencing, got.sentAt);
  try {
    const value = await fn(lease);
    return { acquired: true, value, fencing: lease.fencing, lost: lease.lost };
  } finally {
    await lease.end();
  }
}
