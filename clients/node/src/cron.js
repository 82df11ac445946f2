// Periodic jobs: the worker's share of firing the fleet's schedules
// (docs/cron.md; schema step 0024).  One autocommit statement,
// skiplock.cron_tick(), fires every due schedule once for the fleet (each
// due row locked SKIP LOCKED, moved on, its jobs enqueued under the unique
// key cron:NAME:<fire time>), so any number of workers may tick at once.
// The database decides the fire times and answers when the earliest
// schedule is next due (next_due) on its own clock (db_now): the wait is
// next_due - db_now, never computed from the local clock.
//
// When the next tick comes, as the C worker (worker_loop.c, cron_tick):
//   - at least MIN_MS after the last one;
//   - a busy worker (jobs in hand): when the earliest schedule is due, at
//     most BUSY_MAX_MS later (a schedule added meanwhile is seen within it);
//   - an idle one: when the earliest schedule is due, at most IDLE_MAX_MS
//     later (12 ticks an hour when nothing is due), or earlier when a
//     notification on skiplock_jobs says a schedule (or a job) changed;
//   - plus a little jitter, so a fleet started at once spreads out;
//   - after a failure: 1 s doubling to 5 s.  A failed tick, or a tick
//     whose answer names schedules it could not evaluate, is reported at
//     most once a minute and never stops the worker.
import { now } from './db.js';
import { classify, PermanentError } from './errors.js';

export const MIN_MS = 1000;
export const BUSY_MAX_MS = 5000;
export const IDLE_MAX_MS = 300000;
const JITTER_MS = 250;
const FAIL_MAX_MS = 5000;
const WARN_EVERY_MS = 60000;

/** One tick: { due, fired, behind, enqueued, failed, failure, nextDue, dbNow }. */
export async function cronTick(db) {
  const { rows: [r] } = await db.query(
    'SELECT due, fired, behind, enqueued, failed, failure, next_due, db_now FROM skiplock.cron_tick()');
  return {
    due: r.due,
    fired: r.fired,
    behind: r.behind,
    enqueued: Number(r.enqueued),
    failed: r.failed,
    failure: r.failure,
    nextDue: r.next_due,
    dbNow: r.db_now,
  };
}

/** Milliseconds from one tick to the next: dueInMs (null: no schedule
 * fires again) clamped to [MIN_MS, cap] (cap: BUSY_MAX_MS when busy,
 * else IDLE_MAX_MS), plus up to JITTER_MS (a quarter of it at most) when
 * it waits for a fire time, or up to a tenth more when it waits for the
 * cap, never less: a re-check is never more frequent than the cap says. */
export function tickDelay(dueInMs, busy, rand = Math.random) {
  const cap = busy ? BUSY_MAX_MS : IDLE_MAX_MS;
  if (dueInMs === null || dueInMs >= cap) return cap * (1 + rand() / 10);
  const base = Math.max(dueInMs, MIN_MS);
  return base + rand() * Math.min(JITTER_MS, base / 4);
}

/** When this worker ticks next, and what it reports.  report(err) is the
 * worker's own (its 'error' event, or a process warning). */
export class Cron {
  #report;
  #nextAt = 0; // on the monotonic clock of now(): 0 ticks at once
  #lastAt = -Infinity;
  #failures = 0;
  #warnedAt = -Infinity;

  constructor(report) {
    this.#report = report;
  }

  /** Milliseconds until the next tick is due (0: now). */
  get waitMs() {
    return Math.max(this.#nextAt - now(), 0);
  }

  /** A notification: a schedule (or a job) changed; tick soon. */
  hint() {
    const at = Math.max(now(), this.#lastAt + MIN_MS) + Math.random() * JITTER_MS;
    this.#nextAt = Math.min(this.#nextAt, at);
  }

  /** Jobs are in hand: tick within BUSY_MAX_MS of the last tick. */
  busy() {
    this.#nextAt = Math.min(this.#nextAt, this.#lastAt + BUSY_MAX_MS);
  }

  /** Fires the due schedules on the connection getDb() resolves to;
   * resolves to the tick's answer.  A failure (to connect, too) is
   * reported (at most once a minute) and rethrown, typed. */
  async tick(getDb, busy) {
    this.#lastAt = now();
    let r;
    try {
      r = await cronTick(await getDb());
    } catch (err) {
      const c = classify(err);
      const e = new c.constructor(`cron: the tick failed: ${c.message}`, { cause: c, code: c.code });
      this.#failures += 1;
      this.#nextAt = this.#lastAt + Math.min(MIN_MS * 2 ** (this.#failures - 1), FAIL_MAX_MS);
      this.#warn(e);
      throw e;
    }
    this.#failures = 0;
    const dueIn = r.nextDue === null ? null : r.nextDue.getTime() - r.dbNow.getTime();
    this.#nextAt = this.#lastAt + tickDelay(dueIn, busy);
    if (r.failed > 0) {
      this.#warn(new PermanentError(`cron: ${r.failed} schedule(s) could not be evaluated; ${r.failure}`));
    }
    return r;
  }

  #warn(err) {
    const t = now();
    if (t - this.#warnedAt < WARN_EVERY_MS) return;
    this.#warnedAt = t;
    this.#report(err);
  }
}
