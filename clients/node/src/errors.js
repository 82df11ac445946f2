// Typed errors.  Transient versus permanent is decided by SQLSTATE only,
// with the same table as the C library (src/lib/core/error.c): class 08,
// 57P01-57P03, 40001, 40P01, 55P03 and 53300 are transient (a retry of the
// same call may succeed), as is an error with no SQLSTATE at all (a socket
// closed under us); everything else is permanent.  SK001 (job_fence or
// lease_fence on a stale token) and SK002 (idem_complete or idem_release
// for a claim that is no longer the caller's) are FencedErrors.

const TRANSIENT = new Set(['57P01', '57P02', '57P03', '40001', '40P01', '55P03', '53300']);

/** True when a call that failed with this SQLSTATE may succeed if sent again. */
export function isTransientSqlstate(code) {
  if (typeof code !== 'string' || code === '') return true;
  return code.startsWith('08') || TRANSIENT.has(code);
}

export class SkiplockError extends Error {
  constructor(message, options = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code ?? options.cause?.code;
  }
}

/** Retrying the same call may succeed.  From a handler: retry the job
 * (after retryAfterMs when given). */
export class TransientError extends SkiplockError {
  constructor(message, options = {}) {
    super(message, options);
    if (options.retryAfterMs !== undefined) this.retryAfterMs = options.retryAfterMs;
  }
}

/** Retrying will not help.  From a handler: discard the job now. */
export class PermanentError extends SkiplockError {}

/** The job's claim is no longer current: its lease expired and it was
 * rescued, claimed again or cancelled.  Whatever this owner sends is
 * refused. */
export class FencedError extends SkiplockError {
  constructor(message, options = {}) {
    super(message, { code: 'SK001', ...options });
    this.jobId = options.jobId;
    this.fencing = options.fencing;
  }
}

/** A lease (withLease, runSingleton) is no longer this holder's: a
 * renewal found it expired or taken, no renewal succeeded in time, or
 * lease.fence found its token stale (code SK001). */
export class LeaseLostError extends FencedError {
  constructor(message, options = {}) {
    super(message, options);
    this.lease = options.lease;
  }
}

/** The job ran longer than its own timeout (enqueue's `timeout`). */
export class JobTimeoutError extends TransientError {}

/** The worker stopped before the handler finished. */
export class ShutdownError extends TransientError {}

// Never empty: a refused connection to a name with two addresses
// (localhost: ::1 and 127.0.0.1) is an AggregateError with no message.
function messageOf(err) {
  if (err?.message) return err.message;
  if (Array.isArray(err?.errors) && err.errors.length > 0) {
    return err.errors.map((e) => e?.message ?? String(e)).join('; ');
  }
  return String(err?.code ?? err);
}

/** An error from pg (or any error) as one of the typed errors above;
 * typed errors are returned as they are. */
export function classify(err) {
  if (err instanceof SkiplockError) return err;
  const code = typeof err?.code === 'string' && /^[0-9A-Z]{5}$/.test(err.code) ? err.code : '';
  const message = messageOf(err);
  if (code === 'SK001' || code === 'SK002') return new FencedError(message, { cause: err, code });
  if (isTransientSqlstate(code)) return new TransientError(message, { cause: err, code });
  return new PermanentError(message, { cause: err, code });
}
