// Worker: a thin loop around the SQL protocol (docs/protocol.md).
//
//   claim (or record_claim: the outcomes so far, then a claim, one call)
//   -> handlers run concurrently, outside any transaction, each with an
//      AbortSignal that fires when its lease is lost or it times out;
//      with prefetch, claimed jobs beyond the handlers wait here (leased
//      and heartbeated) and start as handlers end, without a round trip
//   -> heartbeat every lease/3 -> outcomes batched into the next call
//   -> rescue every rescueEvery -> when idle, poll with jitter (or wake on
//      a notification, on a connection known to be direct)
//   -> fire the due schedules (cron.js) when the earliest is due, on the
//      same connection; the schedules declared in code are applied at start
//      (schedules.js).
//
// Bound: one database connection for every protocol call, whatever the
// concurrency (plus, through a pooler, one LISTEN-only connection to a
// direct endpoint when directConnectionString is given).  Handlers use
// the application's own pool for their own queries.
import { EventEmitter } from 'node:events';
import { classify, FencedError, TransientError } from './errors.js';
import { Connection } from './connection.js';
import { Cron } from './cron.js';
import { declareSchedules } from './schedules.js';
import { workerOptions } from './options.js';
import { Run } from './run.js';
import * as proto from './protocol.js';

const LISTEN_RETRY_MS = 5000;
const GIVE_UP_AFTER_DRAIN_MS = 5000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export class Worker extends EventEmitter {
  #o;
  #conn;
  #side = null; // LISTEN-only connection to a direct endpoint
  #cron = null; // when schedules are fired (null: cron: false)
  #runs = new Set(); // running handlers (a job lost and claimed again may have two)
  #waiting = []; // prefetched claims no handler runs yet, oldest first
  #pending = []; // outcomes not yet recorded
  #wake = null;
  #woken = false;
  #loop = null;
  #beat = null;
  #beating = false;
  #stopping = false;
  #drainAt = Infinity;
  #nextRescue = 0;
  #nextListen = 0;
  #limitWaitMs = null; // the last claim's wait row: when a limit may have room

  constructor(options) {
    super();
    this.#o = workerOptions(options);
    if (this.#o.cron) this.#cron = new Cron((err) => this.#report(err));
    const notify = () => {
      this.#cron?.hint(); // a schedule may have changed
      this.#signal();
    };
    const onError = (err) => this.#report(err);
    const base = { applicationName: this.#o.applicationName, onError };
    this.#conn = new Connection(this.#o.url, { ...base, pooler: this.#o.pooler, onNotify: notify });
    if (this.#o.directUrl && this.#o.directUrl !== this.#o.url) {
      this.#side = new Connection(this.#o.directUrl, { ...base, pooler: 'auto', onNotify: notify });
    }
  }

  get owner() { return this.#o.owner; }
  /** 'listen' while a LISTEN is active on a direct connection, else 'poll'. */
  get wakeups() {
    return this.#conn.listening || this.#side?.listening ? 'listen' : 'poll';
  }
  /** Jobs whose handlers are running now. */
  get running() { return this.#runs.size; }

  /** Connects (rejecting with a typed error when it cannot), then runs the
   * loop in the background until stop(). */
  async start() {
    if (this.#loop !== null) throw new Error('Worker.start: already started');
    try {
      const db = await this.#conn.get();
      await proto.checkSchema(db); // installed, and new enough
      await proto.rescue(db); // and we may call it
      if (this.#o.schedules !== null) {
        await declareSchedules(db, this.#o.schedules, { force: this.#o.schedulesForce });
      }
    } catch (err) {
      await this.#conn.close();
      throw classify(err);
    }
    this.#nextRescue = Date.now() + this.#o.rescueEveryMs;
    this.#ensureListen();
    this.#beat = setInterval(() => this.#heartbeat(), Math.max(this.#o.leaseMs / 3, 10));
    this.#loop = this.#run();
  }

  /** Claims nothing more, waits for running handlers (up to
   * shutdownTimeout: then their signals abort and they are recorded as
   * retryable failures), records every outcome and closes. */
  async stop() {
    if (this.#loop === null) return;
    if (!this.#stopping) {
      this.#stopping = true;
      this.#drainAt = Date.now() + this.#o.shutdownTimeoutMs;
      this.#signal();
    }
    await this.#loop;
  }

  async #run() {
    let backoff = 0;
    while (!this.#finished()) {
      try {
        const more = await this.#turn();
        backoff = 0;
        if (!more) await this.#idle();
      } catch (err) {
        backoff = this.#failed(err, backoff);
        await sleep(backoff);
      }
    }
    clearInterval(this.#beat);
    await Promise.all([this.#conn.close(), this.#side?.close()]);
  }

  #finished() {
    if (!this.#stopping) return false;
    const now = Date.now();
    if (now >= this.#drainAt) for (const r of this.#runs) r.shutdown(this.#o.shutdownTimeoutMs);
    if (now >= this.#drainAt + GIVE_UP_AFTER_DRAIN_MS) return true; // the database is gone
    if (now >= this.#drainAt) this.#giveBack();
    const handlersDone = (this.#runs.size === 0 && this.#waiting.length === 0) || now >= this.#drainAt;
    return handlersDone && this.#pending.length === 0;
  }

  // One round trip: outcomes so far and/or a claim.  True when the claim
  // was full (more jobs are probably due).
  async #turn() {
    await this.#maybeRescue();
    await this.#maybeTick();
    const outs = this.#takeOutcomes();
    const held = this.#runs.size + this.#waiting.length;
    const n = this.#stopping ? 0 : Math.min(this.#o.concurrency + this.#o.prefetch - held, 1000);
    if (outs.length === 0 && n <= 0) return false;
    const sentAt = Date.now();
    let got;
    try {
      got = await this.#exchange(outs, n);
    } catch (err) {
      this.#pending.unshift(...outs);
      throw err;
    }
    this.#fencedOut(outs, got.accepted);
    this.#limitWaitMs = got.waitMs ?? null;
    if (got.jobs.length > 0) this.#cron?.busy();
    for (const job of got.jobs) this.#start(job, sentAt + this.#o.leaseMs);
    return n > 0 && got.jobs.length === n;
  }

  // The pending outcomes, at most one per job: record's answer names only
  // the job, so a stale attempt's outcome and its successor's go in
  // different calls.
  #takeOutcomes() {
    const ids = new Set();
    const outs = [];
    const later = [];
    for (const o of this.#pending) {
      if (ids.has(o.job.id)) later.push(o);
      else outs.push(o);
      ids.add(o.job.id);
    }
    this.#pending = later;
    return outs;
  }

  async #exchange(outs, n) {
    const db = await this.#conn.get();
    if (n > 0) return proto.recordClaim(db, outs, this.#o, n);
    return { accepted: await proto.record(db, outs), jobs: [] };
  }

  #fencedOut(outs, accepted) {
    for (const o of outs) {
      if (accepted.has(o.job.id) || o.inTx) continue; // inTx: the handler's transaction completed it
      const { id, fencing } = o.job;
      this.emit('fenced', new FencedError(
        `job ${id}: outcome '${o.outcome}' refused, the claim (fencing ${fencing}) is no longer current`,
        { jobId: id, fencing }));
    }
  }

  /** A failed attempt: the 'failed' event (err, job, outcome) when the app
   * listens for it, else one line on stderr with the error's stack. */
  #attemptFailed({ job, outcome, error, cause }) {
    if (this.listenerCount('failed') > 0) {
      this.emit('failed', cause, job, outcome);
      return;
    }
    const what = outcome === 'discard' ? 'discarded'
      : job.attempt < job.maxAttempts ? 'retried' : 'its last attempt';
    // error is the stack already when the handler threw an Error (run.js)
    console.warn(`skiplock worker: job ${job.id} (${job.kind}) attempt ${job.attempt} of ` +
      `${job.maxAttempts} failed (${what}): ${error}`);
  }

  #start(job, deadline) {
    const run = new Run(job, deadline, (out) => {
      if (out.cause !== undefined) this.#attemptFailed(out);
      this.#pending.push(out);
      this.#signal();
    });
    if (this.#runs.size < this.#o.concurrency) this.#execute(run);
    else this.#waiting.push(run);
  }

  #execute(run) {
    this.#runs.add(run);
    run.execute(this.#o.handlers[run.job.kind]).finally(() => {
      this.#runs.delete(run);
      this.#startWaiting();
      this.#signal();
    });
  }

  // Starts prefetched claims while a handler slot is free; a claim lost
  // while it waited is dropped (its lease is gone, nothing is recorded).
  #startWaiting() {
    while (this.#runs.size < this.#o.concurrency && this.#waiting.length > 0) {
      const run = this.#waiting.shift();
      if (!run.done) this.#execute(run);
    }
  }

  // Past the shutdown timeout: the prefetched claims never started go back
  // with the next record, due again at once for any worker.
  #giveBack() {
    for (const run of this.#waiting.splice(0)) run.giveBack();
  }

  async #maybeRescue() {
    if (this.#stopping || Date.now() < this.#nextRescue) return;
    this.#nextRescue = Date.now() + this.#o.rescueEveryMs;
    if (await proto.rescue(await this.#conn.get()) > 0) this.#woken = true;
  }

  // Fires the due schedules when the next tick is due; a failure is
  // reported by Cron (at most once a minute) and never ends the turn.
  async #maybeTick() {
    if (this.#cron === null || this.#stopping || this.#cron.waitMs > 0) return;
    const busy = this.#runs.size + this.#waiting.length > 0;
    try {
      this.emit('cron', await this.#cron.tick(() => this.#conn.get(), busy));
    } catch (err) {
      if (classify(err) instanceof TransientError) this.#conn.reset();
    }
  }

  async #heartbeat() {
    if (this.#beating) return;
    const now = Date.now();
    // A job its handler completed in its own transaction is gone, not lost.
    const live = [...this.#runs, ...this.#waiting].filter((r) => !r.done && !r.completedInTx);
    for (const r of live) if (now > r.deadline) this.emit('fenced', r.lose('no heartbeat succeeded within the lease'));
    const runs = live.filter((r) => !r.done);
    if (runs.length === 0) return;
    this.#beating = true;
    try {
      const extended = await proto.heartbeat(await this.#conn.get(), runs.map((r) => r.job), this.#o.leaseInterval);
      for (const [i, r] of runs.entries()) {
        if (!extended[i] && r.completedInTx) continue; // committed while we asked
        if (!extended[i]) this.emit('fenced', r.lose('the database did not extend it'));
        else r.deadline = now + this.#o.leaseMs;
      }
    } catch (err) {
      this.#failed(err, 0);
    } finally {
      this.#beating = false;
    }
  }

  // Reports err; drops the connection when it may be the cause.  Returns
  // the next backoff: 100 ms doubling to 5 s, with jitter.
  #failed(err, backoff) {
    const e = classify(err);
    this.#report(e);
    if (e instanceof TransientError) this.#conn.reset();
    const next = Math.min(Math.max(backoff * 2, 100), 5000);
    return next / 2 + Math.random() * (next / 2);
  }

  #report(err) {
    const e = classify(err);
    if (this.listenerCount('error') > 0) this.emit('error', e);
    else process.emitWarning(`skiplock worker ${this.#o.owner}: ${e.message}`, { code: e.code ?? 'SKIPLOCK' });
  }

  #ensureListen() {
    const side = this.#side;
    if (side === null || side.client !== null || side.connecting || Date.now() < this.#nextListen) return;
    this.#nextListen = Date.now() + LISTEN_RETRY_MS;
    side.get().catch((err) => this.#report(err));
  }

  #signal() {
    this.#woken = true;
    if (this.#wake !== null) this.#wake();
  }

  #waitWake() {
    if (this.#woken) return Promise.resolve();
    return new Promise((r) => { this.#wake = r; });
  }

  // Sleeps until woken, the poll interval (jittered over [poll/2, poll]),
  // the next rescue or the next cron tick, whichever comes first.
  async #idle() {
    this.#ensureListen();
    if (!this.#woken) {
      let poll = this.#o.pollMs * (0.5 + Math.random() / 2);
      // a limit held due jobs back: claim again when it may have room
      if (this.#limitWaitMs !== null) poll = Math.min(poll, this.#limitWaitMs + Math.random() * 20);
      const tick = this.#cron?.waitMs ?? Infinity;
      const wait = Math.max(Math.min(poll, tick, this.#nextRescue - Date.now(), this.#drainAt - Date.now()), 0);
      let t;
      await Promise.race([this.#waitWake(), new Promise((r) => { t = setTimeout(r, wait); })]);
      clearTimeout(t);
    }
    this.#woken = false;
    this.#wake = null;
  }
}
