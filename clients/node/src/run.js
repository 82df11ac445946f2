// One claimed job while its handler runs: its AbortController, its local
// lease deadline and timeout, and the outcome it ends with.  The outcome
// is queued once: when the handler settles, or at once when the job times
// out or the worker gives up waiting for it.  A job whose lease was lost
// queues nothing (its outcome would be fenced out).  A handler that
// completed its job in its own transaction (ctx.complete) and returned
// queues nothing either: the job is finished.
import { jobComplete } from './enqueue.js';
import { FencedError, JobTimeoutError, PermanentError, ShutdownError } from './errors.js';

// The error a failed attempt stores: the message and, for an Error, its
// stack (Node's stack starts with "Name: message"), so the job's history
// shows where the handler failed; the database keeps 8,192 characters.
function errorOf(err) {
  if (!(err instanceof Error)) return String(err);
  const message = err.message || err.name;
  return typeof err.stack === 'string' && err.stack.includes(message) ? err.stack : message;
}

function failure(job, err) {
  const error = errorOf(err);
  const outcome = err instanceof PermanentError ? 'discard' : 'retry';
  return { job, outcome, error, retryAfterMs: err?.retryAfterMs, cause: err };
}

export class Run {
  constructor(job, deadline, queue) {
    this.job = job;
    this.deadline = deadline; // local clock: the lease is known to hold until then
    this.controller = new AbortController();
    this.queue = queue; // (outcome) => void
    this.done = false; // the outcome is queued, or the job was lost
    this.timer = null;
    // ctx.complete succeeded: the job is finished once the handler's
    // transaction commits (a heartbeat may then find it gone)
    this.completedInTx = false;
  }

  /** The handler's context: its signal, and complete(db, result). */
  #context() {
    return {
      signal: this.signal,
      complete: async (db, result) => {
        await jobComplete(db, this.job, result);
        this.completedInTx = true;
      },
    };
  }

  get signal() {
    return this.controller.signal;
  }

  /** Runs handler; resolves when it settles (the slot is held until then). */
  async execute(handler) {
    const { job } = this;
    if (job.timeoutMs > 0) this.timer = setTimeout(() => this.timeout(), job.timeoutMs);
    try {
      const result = await handler(job, this.#context());
      this.#end(this.completedInTx ? null : { job, outcome: 'ok', result });
    } catch (err) {
      this.#end(this.#failure(err));
    } finally {
      clearTimeout(this.timer);
    }
  }

  // A failed attempt; after ctx.complete it is refused when the handler's
  // transaction committed, and that is no lost claim.
  #failure(err) {
    return { ...failure(this.job, err), inTx: this.completedInTx };
  }

  #end(outcome) {
    if (this.done) return;
    this.done = true;
    clearTimeout(this.timer);
    if (outcome !== null) this.queue(outcome);
  }

  #abort(reason, outcome) {
    if (this.done) return;
    this.#end(outcome);
    this.controller.abort(reason);
  }

  timeout() {
    const ms = this.job.timeoutMs;
    const err = new JobTimeoutError(`job ${this.job.id} timed out after ${ms} ms`);
    this.#abort(err, this.#failure(err));
  }

  /** The lease is gone: abort the handler, and send nothing for it. */
  lose(why) {
    const { id, fencing } = this.job;
    const err = new FencedError(`job ${id} lost its lease (fencing ${fencing}): ${why}`, { jobId: id, fencing });
    this.#abort(err, null);
    return err;
  }

  /** A prefetched claim the worker never started: give it back, due again
   * in 1 ms (the attempt is spent, as for any claim). */
  giveBack() {
    this.#end({ job: this.job, outcome: 'retry', error: 'the worker stopped before starting it', retryAfterMs: 1 });
  }

  shutdown(ms) {
    const err = new ShutdownError(`the worker stopped before the handler finished (waited ${ms} ms)`);
    this.#abort(err, this.#failure(err));
  }
}
