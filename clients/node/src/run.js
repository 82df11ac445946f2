// One claimed job while its handler runs: its AbortController, its local
// lease deadline and timeout, and the outcome it ends with.  The outcome
// is queued once: when the handler settles, or at once when the job times
// out or the worker gives up waiting for it.  A job whose lease was lost
// queues nothing (its outcome would be fenced out).
import { FencedError, JobTimeoutError, PermanentError, ShutdownError } from './errors.js';

function failure(job, err) {
  const error = err instanceof Error ? err.message || err.name : String(err);
  const outcome = err instanceof PermanentError ? 'discard' : 'retry';
  return { job, outcome, error, retryAfterMs: err?.retryAfterMs };
}

export class Run {
  constructor(job, deadline, queue) {
    this.job = job;
    this.deadline = deadline; // local clock: the lease is known to hold until then
    this.controller = new AbortController();
    this.queue = queue; // (outcome) => void
    this.done = false; // the outcome is queued, or the job was lost
    this.timer = null;
  }

  get signal() {
    return this.controller.signal;
  }

  /** Runs handler; resolves when it settles (the slot is held until then). */
  async execute(handler) {
    const { job } = this;
    if (job.timeoutMs > 0) this.timer = setTimeout(() => this.timeout(), job.timeoutMs);
    try {
      const result = await handler(job, { signal: this.signal });
      this.#end({ job, outcome: 'ok', result });
    } catch (err) {
      this.#end(failure(job, err));
    } finally {
      clearTimeout(this.timer);
    }
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
    this.#abort(err, failure(this.job, err));
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
    this.#abort(err, failure(this.job, err));
  }
}
