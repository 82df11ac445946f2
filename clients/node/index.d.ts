// Types for skiplock (hand-written; the package is plain ESM, which
// require() loads too).  `npm pack` copies this file to index.d.cts, the
// types of require('skiplock').
import type { EventEmitter } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';

/** Anything with pg's query(): a pg.Client (inside your transaction), a
 * pg.PoolClient, or a pg.Pool (a job committed on its own). */
export interface Queryable {
  query(config: { text: string; values?: unknown[] } | string, values?: unknown[]): Promise<{ rows: any[] }>;
}

/** Milliseconds, or "500ms", "2s", "1.5m", "1h", "1d". */
export type Duration = number | string;

export type Backoff = 'full' | 'equal' | 'decorrelated' | 'exponential' | 'fixed';

/** A job id: PostgreSQL bigint, as enqueue returns it (a string), or an integer or a BigInt. */
export type JobId = string | number | bigint;

/** Parents: the job waits, available with its attempts untouched, until
 * they all finished (skiplock.enqueue_after, docs/flow-control.md).  Each
 * must exist when the job is enqueued (live, or finished and kept by
 * retention), else enqueue rejects with a PermanentError, code 23503, and
 * nothing is written. */
export interface DependencyOptions {
  /** Parents by id. */
  dependsOn?: JobId[];
  /** Parents by unique key (a job enqueued with that uniqueKey). */
  dependsOnKeys?: string[];
  /** A discarded or cancelled parent: 'cancel' (default) cancels this job, 'run' counts it as finished. */
  onParentFailure?: 'cancel' | 'run';
}

export interface EnqueueOptions extends DependencyOptions {
  queue?: string;
  runAt?: Date | string;
  priority?: number;
  /** While a job with this key is available or running, its id is returned and nothing is added. */
  uniqueKey?: string;
  maxAttempts?: number;
  timeout?: Duration;
  backoff?: Backoff;
  backoffBase?: Duration;
  backoffCap?: Duration;
}

/** Enqueues one job on db (in its transaction, if one is open); resolves to the job's id. */
export function enqueue(db: Queryable, kind: string, payload?: unknown, opts?: EnqueueOptions): Promise<string>;
export function enqueueStatement(kind: string, payload?: unknown, opts?: EnqueueOptions): { text: string; values: unknown[] };
/** One job of a batch: its kind and payload, and enqueue's options but dependencies. */
export interface JobSpec extends Omit<EnqueueOptions, keyof DependencyOptions> {
  kind: string;
  payload?: unknown;
}
export interface EnqueueManyOptions {
  /** A retried call with the same token returns the first call's ids and enqueues nothing. */
  token?: string;
}
/** Enqueues the jobs in one statement (skiplock.enqueue_many), all or none, in db's transaction
 * if one is open; resolves to their ids in order. */
export function enqueueMany(db: Queryable, jobs: JobSpec[], opts?: EnqueueManyOptions): Promise<string[]>;
export function enqueueManyStatement(jobs: JobSpec[], opts?: EnqueueManyOptions): { text: string; values: unknown[] };
export interface EnqueueBatchOptions {
  /** The callback's payload (a JSON object, default {}); {"batch": {size, completed, discarded, cancelled}} is merged in. */
  callbackPayload?: object;
  /** The queue, priority and maxAttempts of every job of the batch and of the callback. */
  queue?: string;
  priority?: number;
  maxAttempts?: number;
}
/** Enqueues one job of kind per payload (1 to 1000) and a callback job of callbackKind that runs
 * once after all of them finished (skiplock.enqueue_batch), in db's transaction if one is open;
 * resolves to their ids, the callback's last. */
export function enqueueBatch(db: Queryable, kind: string, payloads: unknown[], callbackKind: string,
  opts?: EnqueueBatchOptions): Promise<string[]>;
/** Why the available job id is not running now (e.g. "dependencies: 2 of 2 parent(s) not
 * finished", a due time, a pause, a breaker, a limit); null when it is not available. */
export function waitsFor(db: Queryable, id: JobId): Promise<string | null>;
/** The handle of a claim: queue (protocol 2; the job's queue as claimed), id and fencing token. */
export type JobHandle = Pick<Job, 'id' | 'fencing'> & Partial<Pick<Job, 'queue'>>;
/** In your transaction, before the job's effect: throws FencedError unless the claim is current. */
export function jobFence(db: Queryable, job: JobHandle): Promise<void>;
/** In the transaction of the job's effect, last before COMMIT: throws FencedError unless the
 * claim is current (or already completed it), then completes the job there, so the effect
 * and the completion commit together (exactly once).  In a handler, use ctx.complete. */
export function jobComplete(db: Queryable, job: JobHandle, result?: unknown): Promise<void>;

export interface Job<P = any> {
  /** PostgreSQL bigint, as a string. */
  id: string;
  queue: string;
  kind: string;
  payload: P;
  /** 1 on the first run. */
  attempt: number;
  maxAttempts: number;
  /** This claim's fencing token (bigint, as a string). */
  fencing: string;
  leaseExpiresAt: Date;
  /** The job's own timeout; 0 when it has none. */
  timeoutMs: number;
  priority: number;
  runAt: Date;
}

export interface HandlerContext {
  /** Aborts when the lease is lost (reason: FencedError), the job times out
   * (JobTimeoutError) or the worker stops waiting for it (ShutdownError). */
  signal: AbortSignal;
  /** Completes the job in your transaction on db, the one that makes the job's effect
   * (skiplock.job_complete; call it last, just before COMMIT): the effect and the completion
   * commit together or not at all, so the effect happens exactly once, even when the worker
   * dies right after the COMMIT (the fence alone cannot prevent the next attempt from applying
   * it again).  Throws FencedError unless the claim is current: roll back.  Resolve only once
   * that transaction committed: the worker then records nothing (the handler's value is
   * ignored) and takes the job's end for no lost lease.  If the COMMIT fails, throw: the
   * worker records a failed attempt, refused harmlessly when the COMMIT did go through. */
  complete(db: Queryable, result?: unknown): Promise<void>;
}

export type Handler<P = any> = (job: Job<P>, ctx: HandlerContext) => Promise<unknown>;

/** Payload types by kind, e.g. `{ 'email.receipt': Receipt }`: a handler
 * for each kind, whose job.payload has its kind's type.  The database does
 * not check payloads: the type is what the enqueuing code promises. */
export type PayloadMap = Record<string, unknown>;
export type Handlers<M extends PayloadMap> = { [K in keyof M & string]: Handler<M[K]> };

export interface WorkerOptions<M extends PayloadMap = Record<string, any>> {
  connectionString: string;
  /** kind -> handler.  Resolve: completed with the value as result.  Throw
   * PermanentError: discarded.  Throw anything else: a retryable failure
   * (after err.retryAfterMs when set).  With `new Worker<M>(...)`, one
   * handler per kind of M, each given its kind's payload type. */
  handlers: Handlers<M>;
  /** Handlers at once (default 10). */
  concurrency?: number;
  /** Claims held beyond the handlers (0 to 1000, default 0): up to
   * concurrency + prefetch jobs are claimed; those no handler runs yet wait
   * in the worker, leased and heartbeated, and start as handlers end.  Each
   * round trip then carries more outcomes and claims: worth it for jobs much
   * shorter than a round trip.  A prefetched job is invisible to other
   * workers and its attempt starts at the claim; a graceful stop runs it
   * too, and past shutdownTimeout one never started is given back (due
   * again in 1 ms, the attempt spent). */
  prefetch?: number;
  /** Queues to claim from (default: every queue). */
  queues?: string[] | null;
  /** Lease of a claim (default "30s"); heartbeats every lease/3. */
  lease?: Duration;
  /** "auto" (default): LISTEN only when the connection is known to be
   * direct; "none": it is direct; "transaction"/"session": a pooler, poll. */
  pooler?: 'auto' | 'none' | 'transaction' | 'session';
  /** A direct endpoint for LISTEN when connectionString is pooled (default: $DIRECT_DATABASE_URL). */
  directConnectionString?: string | null;
  /** Longest idle poll (default "1s"), jittered over [poll/2, poll]. */
  poll?: Duration;
  /** How often expired leases are rescued (default "5s"). */
  rescueEvery?: Duration;
  /** How long stop() waits for running handlers (default "30s"). */
  shutdownTimeout?: Duration;
  /** Fire the due schedules (default true): one skiplock.cron_tick() when
   * the earliest schedule is due, at least 1 s apart; at most 5 s apart
   * while jobs are in hand, at most about 5 minutes apart when idle (or
   * sooner on a notification, where the worker LISTENs). */
  cron?: boolean;
  /** Schedules declared in code, applied at start() (skiplock.schedules_declare):
   * created, updated or left unchanged; one superseded by a newer
   * definition is not applied (a warning says so).  A bad one makes
   * start() reject with a PermanentError (code 22023), nothing written. */
  schedules?: ScheduleSpec[] | null;
  /** Apply the declared schedules even when superseded (a deliberate rollback). */
  schedulesForce?: boolean;
  /** Lease owner (default host:pid:random). */
  owner?: string;
  applicationName?: string;
}

/** One tick's answer: the 'cron' event. */
export interface CronTick {
  /** Schedules that were due, that fired, that were behind (a catch-up). */
  due: number;
  fired: number;
  behind: number;
  /** Jobs enqueued. */
  enqueued: number;
  /** Schedules that could not be evaluated, and the first one's error. */
  failed: number;
  failure: string | null;
  /** When the earliest schedule is next due (null: none), and the database's now. */
  nextDue: Date | null;
  dbNow: Date;
}

export class Worker<M extends PayloadMap = Record<string, any>> extends EventEmitter {
  constructor(options: WorkerOptions<M>);
  readonly owner: string;
  /** "listen" while a LISTEN is active on a direct connection, else "poll". */
  readonly wakeups: 'listen' | 'poll';
  /** Handlers running now. */
  readonly running: number;
  /** Connects and checks the schema (rejects with a typed error), then works in the background. */
  start(): Promise<void>;
  /** Claims nothing more, waits for running handlers, records their outcomes, closes. */
  stop(): Promise<void>;
  on(event: 'fenced', listener: (err: FencedError) => void): this;
  on(event: 'error', listener: (err: SkiplockError) => void): this;
  /** A failed attempt (the handler threw, timed out or was stopped): with a
   * listener, this event; without one, a line on stderr with the stack. */
  on(event: 'failed', listener: (err: unknown, job: Job, outcome: 'retry' | 'discard') => void): this;
  /** Each successful cron tick of this worker. */
  on(event: 'cron', listener: (tick: CronTick) => void): this;
  on(event: string | symbol, listener: (...args: any[]) => void): this;
}

// ---- periodic jobs (docs/cron.md) ----

/** A schedule declared in code: each fire time of expression (five cron
 * fields, a macro such as "@daily", or "@every 30s"), read in zone,
 * becomes one job of kind with payload, under the unique key
 * cron:NAME:<fire time>. */
export interface ScheduleSpec {
  /** 1 to 128 bytes. */
  name: string;
  expression: string;
  kind: string;
  /** An IANA zone (default "UTC"). */
  zone?: string;
  /** Default "default". */
  queue?: string;
  /** A JSON value (default {}). */
  payload?: unknown;
  /** Default 0. */
  priority?: number;
  /** Default 25. */
  maxAttempts?: number;
  /** After an outage: "none", "latest" (default) or "all". */
  catchUp?: 'none' | 'latest' | 'all';
}

export interface ScheduleDeclared {
  name: string;
  action: 'created' | 'updated' | 'unchanged' | 'superseded';
  /** Why, when superseded; else null. */
  detail: string | null;
}

/** Applies schedules declared in code in one autocommit statement on db,
 * as the worker's `schedules` option does at start (a superseded one is
 * also a process warning).  A bad one rejects with a PermanentError (code
 * 22023, the database's message) and nothing is written. */
export function declareSchedules(db: Queryable, schedules: ScheduleSpec[], opts?: { force?: boolean }): Promise<ScheduleDeclared[]>;

export interface SkiplockErrorOptions { cause?: unknown; code?: string }

export class SkiplockError extends Error {
  constructor(message: string, options?: SkiplockErrorOptions);
  /** The SQLSTATE, when the error came from PostgreSQL. */
  code?: string;
}
export class TransientError extends SkiplockError {
  constructor(message: string, options?: SkiplockErrorOptions & { retryAfterMs?: number });
  retryAfterMs?: number;
}
export class PermanentError extends SkiplockError {}
export class FencedError extends SkiplockError {
  constructor(message: string, options?: SkiplockErrorOptions & { jobId?: string; fencing?: string });
  jobId?: string;
  fencing?: string;
}
/** A lease is no longer this holder's (code SK001): a renewal found it
 * expired or taken, no renewal succeeded within the ttl, or lease.fence
 * found the token stale. */
export class LeaseLostError extends FencedError {
  constructor(message: string, options?: SkiplockErrorOptions & { lease?: string; fencing?: string });
  lease?: string;
}
export class JobTimeoutError extends TransientError {}
export class ShutdownError extends TransientError {}

/** pg's error (or any error) as a typed error, by SQLSTATE (the C library's table). */
export function classify(err: unknown): SkiplockError;
export function isTransientSqlstate(code: string | undefined | null): boolean;
/** "transaction", "session" or "none", from the URL alone. */
export function urlPooler(url: string): 'transaction' | 'session' | 'none';

/** The oldest schema step this client works with; `start()` rejects with a
 * PermanentError naming `skiplock init` on a database without the schema
 * or with an older one. */
export const MIN_SCHEMA: number;

/** Installs the schema, or upgrades it to the newest step this package
 * knows, with the installer it bundles (sql/install.sql: what the C
 * binary's `skiplock init` does).  Safe to run again, and beside other
 * installers, direct or through PgBouncer in transaction mode.  db: a
 * pg.Pool, a pg.Client or pg.PoolClient (not inside a transaction), or a
 * connection string.  Resolves to the installed step
 * (skiplock.installed_version()).  Rejects with a PermanentError (code
 * 55000: a step was installed from a text this package does not know,
 * named in the message; nothing is applied) or a TransientError (the
 * connection). */
export function init(db: Queryable | string): Promise<number>;

// ---- leases and singletons (docs/leases.md) ----

export interface LeaseOptions {
  /** How long the lease lasts without a renewal: 100 ms to 365 days. */
  ttl: Duration;
  /** The holder's id, 1 to 256 characters (default host:pid:random). */
  owner?: string;
  /** How often it is renewed (default ttl/3; at most ttl/2). */
  renewEvery?: Duration;
  /** When another holder has it: false (default) answers at once; true asks
   * again until it is free (or signal aborts); a duration, at most that long. */
  wait?: boolean | Duration;
  /** How often a waiting acquirer asks again (default min(ttl/4, 5 s), jittered). */
  retryEvery?: Duration;
  /** Aborting it aborts lease.signal too (with its reason). */
  signal?: AbortSignal;
}

export interface Lease {
  readonly name: string;
  readonly owner: string;
  /** This holder's fencing token: a PostgreSQL bigint, as a decimal string. */
  readonly fencing: string;
  readonly ttlMs: number;
  /** Aborts when the lease is lost (reason: LeaseLostError) or the caller's signal aborts. */
  readonly signal: AbortSignal;
  /** True once the lease is known to be lost. */
  readonly lost: boolean;
  /** In your transaction on client, before its writes: skiplock.lease_fence.
   * Rejects with LeaseLostError (code SK001) unless this token is current
   * and the lease live; the transaction is then aborted: roll back. */
  fence(client: Queryable): Promise<void>;
}

export interface LeaseHolder {
  owner: string;
  expiresInMs: number;
}

export type LeaseResult<T> =
  | { acquired: true; value: T; fencing: string; lost: boolean }
  /** holder: null when it could not be read (or expired meanwhile). */
  | { acquired: false; holder: LeaseHolder | null };

/** Takes the lease on db (a pg.Pool: every call is one autocommit
 * statement, on any of its connections), runs fn while renewing it, and
 * releases it when fn settles (fn's error comes out). */
export function withLease<T>(db: Queryable, name: string, opts: LeaseOptions, fn: (lease: Lease) => Promise<T>): Promise<LeaseResult<T>>;

export interface SingletonOptions extends Omit<LeaseOptions, 'wait'> {
  /** Asked before each attempt: a replica that cannot do the work now (a
   * dependency is down) does not take the lease. */
  ready?: () => boolean | Promise<boolean>;
  /** fn's (or ready's, or the database's) errors; default a stderr line. */
  onError?: (err: unknown) => void;
}

/** fn(lease) on one replica at a time, until opts.signal aborts; the
 * others take over within about ttl + retryEvery when the holder dies. */
export function runSingleton(db: Queryable, name: string, fn: (lease: Lease) => Promise<unknown>, opts: SingletonOptions): Promise<void>;

// ---- idempotency keys (docs/idempotency.md) ----

export interface IdempotencyOptions {
  /** How long a key lives (default "24h"). */
  ttl?: Duration;
  /** After this long a claim whose holder vanished is handed to a retry (default "60s"). */
  recovery?: Duration;
  /** The largest response body stored, in bytes of JSON (default 65536). */
  maxResponseBytes?: number;
}

export interface IdempotentResponse {
  /** 100 to 599. */
  status: number;
  /** A JSON value (undefined is stored as null). */
  body?: unknown;
}

export interface StoredResponse {
  status: number;
  body: unknown;
  /** The body as stored and sent: the same bytes on every replay. */
  bodyText: string;
}

export interface IdempotentContext {
  key: string;
  /** A client of the pool in a transaction begun on the first call (the
   * same one after): put the effect there; the response is stored in it
   * and it is committed (or rolled back when the handler throws). */
  transaction(): Promise<Queryable>;
}

export type IdemClaim =
  | { outcome: 'acquired'; holder: string }
  | ({ outcome: 'replay' } & StoredResponse)
  | { outcome: 'in_progress' }
  | { outcome: 'conflict' };

export type IdempotentResult =
  | ({ outcome: 'completed' | 'replay' } & StoredResponse)
  | { outcome: 'in_progress' }
  | { outcome: 'conflict' };

/** Runs handler at most once per key (1 to 255 bytes) and request
 * fingerprint; a handler that throws rolls back and releases the key. */
export function idempotent(db: Queryable, key: string, requestHash: string,
  handler: (ctx: IdempotentContext) => Promise<IdempotentResponse>, opts?: IdempotencyOptions): Promise<IdempotentResult>;
export function idemClaim(db: Queryable, key: string, requestHash: string, opts?: IdempotencyOptions): Promise<IdemClaim>;
/** In the effect's transaction: rejects with FencedError (code SK002) when the claim is no longer the holder's. */
export function idemComplete(db: Queryable, key: string, holder: string, response: IdempotentResponse,
  opts?: Pick<IdempotencyOptions, 'maxResponseBytes'>): Promise<StoredResponse>;
export function idemRelease(db: Queryable, key: string, holder: string): Promise<void>;
/** SHA-256 (hex) of method, NUL, path, NUL, body: the C library's fingerprint. */
export function fingerprint(method: string, path: string, body?: string | Uint8Array): string;

export interface IdempotentHttpOptions extends IdempotencyOptions {
  /** A pg.Pool. */
  db: Queryable;
  /** Larger request bodies get 413 before any claim (default 65536). */
  maxBodyBytes?: number;
  /** Retry-After on 409 and 503, in seconds (default 1). */
  retryAfter?: number;
  /** Errors answered with 500 (idempotentHandler); default console.warn. */
  onError?: (err: unknown) => void;
}

/** A request listener for http.createServer. */
export function idempotentHandler(opts: IdempotentHttpOptions,
  handler: (req: IncomingMessage, ctx: IdempotentContext & { body: Buffer }) => Promise<IdempotentResponse>,
): (req: IncomingMessage, res: ServerResponse) => void;

/** What the Express middleware adds to the request. */
export interface IdempotentRequest extends IncomingMessage {
  idempotency: IdempotentContext;
  rawBody: Buffer;
  /** Parsed when the content type is JSON, else rawBody. */
  body: unknown;
}

/** Express middleware (express itself is not needed to load it). */
export function idempotency(opts: IdempotentHttpOptions):
  (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;
