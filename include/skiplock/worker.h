/*
 * SPDX-License-Identifier: MIT
 * skiplock/worker.h — a process that runs jobs.
 *
 * A worker claims only kinds it has a handler for, runs up to `concurrency`
 * jobs at once on its own threads, and talks to the database through one
 * connection whatever the concurrency (claims, batched fenced outcomes,
 * heartbeats, rescue of expired leases), or through `connections` of them
 * when one connection's backend is the bottleneck.  No transaction or row
 * lock is held while a handler runs.
 *
 * Handlers:
 *  - C: int fn(const skl_job *job, void *ctx), run on a worker thread;
 *    returns SKL_JOB_OK (0), SKL_JOB_RETRY (75), SKL_JOB_DISCARD (65), or
 *    anything else for a failed attempt.  skl_job_set_result /
 *    skl_job_set_error may be called from the handler.
 *  - command: /bin/sh -c COMMAND with the payload on stdin and
 *    SKIPLOCK_JOB_ID, SKIPLOCK_JOB_KIND, SKIPLOCK_QUEUE, SKIPLOCK_ATTEMPT,
 *    SKIPLOCK_FENCING in its environment; exit 0 completed (stdout kept as
 *    the result when it is JSON, up to 64 KiB), 75 retry, 65 discard, any
 *    other exit, a signal or the timeout a failed attempt; the last 4 KiB of
 *    stderr is kept as the attempt's error.  On timeout or a lost lease the
 *    command's process group gets SIGTERM, then SIGKILL after a grace.
 *    Its environment is the process's minus skiplock's own settings and
 *    secrets: every SKIPLOCK_* variable, DATABASE_URL, DIRECT_DATABASE_URL,
 *    PGPASSWORD and the secret variable of every webhook handler
 *    (skl_webhook_opts.secret_env), except the names in handler_env.
 *    The command and its process group never outlive the process: when it
 *    dies, by any signal (SIGKILL too), a small reaper process started
 *    with the first command kills every group still running (SIGKILL), and
 *    the shell itself has PR_SET_PDEATHSIG SIGKILL.
 *  - stream: one long-lived process (or a few) gets jobs as JSON lines on
 *    its stdin and answers with JSON lines (skl_worker_handle_stream).
 *  - webhook: an HTTP POST of the payload per attempt, the answer mapped to
 *    the outcome; registered with skl_worker_handle_webhook
 *    (skiplock/webhook.h).
 *    With exit 75, a stderr line "retry-after: SECONDS" asks for that delay
 *    before the next attempt (as skl_job_retry_after).
 *
 * Retries (docs/retry.md): the delay before the next attempt comes from the
 * job's backoff strategy, base and cap if it has them, else its kind's
 * (skl_worker_retry_policy), else the worker's.  A retry budget per kind
 * and per worker process allows retries up to retry_budget_pct % of the
 * first attempts of the last 10 s plus SKL_RETRY_BUDGET_MIN_PER_S a
 * second; a failed job over the budget is not dropped but rescheduled at
 * the cap, and that is logged once per window.  A delay the handler asks
 * for (skl_job_retry_after, "retry-after:", a webhook's Retry-After) is
 * used instead of the strategy's, never shortened, and counts against the
 * budget like any retry: over the budget the job waits max(asked, cap).
 *
 * Idle cost and wake-ups: a worker that has claimed nothing for 10 x
 * poll_max_ms is idle and sends one statement (the idle poll) every
 * poll_idle_ms, sooner when a delayed job, a cron fire time or a lease
 * expiry is due earlier.  On a direct connection (the pooler mode is
 * "none") it LISTENs on channel skiplock_jobs (sql/0009_notify.sql) and
 * claims as soon as a job is enqueued or made available again; through a
 * pooler it never LISTENs and relies on polling.  A lost notification only
 * costs latency: polling always finds the job.
 *
 * Observability: skl_worker_metrics renders the worker's counters (per
 * queue and kind), handler durations and gauges in the Prometheus text
 * format (docs/metrics.md); the log_record callback receives each message
 * with its context (worker, job id, queue, kind, attempt, fencing) as
 * fields instead of a prefix.  Payloads are never logged unless
 * log_payloads is set.
 *
 * Thread-safety: skl_worker_stop may be called from any thread or a signal
 * handler, skl_worker_metrics and skl_worker_get_stats from any thread;
 * every other call from one thread.
 */
#ifndef SKIPLOCK_WORKER_H
#define SKIPLOCK_WORKER_H

#include "skiplock/queue.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { SKL_JOB_OK = 0, SKL_JOB_DISCARD = 65, SKL_JOB_RETRY = 75 };

typedef int (*skl_handler_fn)(const skl_job *job, void *ctx);

typedef struct skl_worker skl_worker;

/* What a log message is about.  Unset fields are NULL or 0. */
typedef struct skl_log_context {
	const char *worker;    /* the worker's lease owner name */
	int64_t job_id;
	const char *queue;
	const char *kind;
	int attempt;
	int64_t fencing;
	const char *payload;   /* the job's JSON payload, only with log_payloads */
} skl_log_context;

/* A structured log callback: msg carries no context prefix.  msg and the
 * context's strings are raw: a kind, a queue or a handler's stderr may put
 * any byte in them, newlines and carriage returns included, so a sink that
 * writes lines must escape them (the command does). */
typedef void (*skl_log_record_fn)(void *ctx, skl_log_level level, const skl_log_context *lc,
                                  const char *msg);

typedef struct skl_worker_options {
	const char *const *queues;   /* NULL: every queue */
	size_t nqueues;
	int concurrency;             /* jobs at once; default 8 */
	int64_t lease_ms;            /* default 30000; heartbeat every lease/3 */
	int64_t poll_ms;             /* first poll interval when idle; default 200 */
	int64_t poll_max_ms;         /* idle polling backs off up to this; default 5000 */
	int64_t shutdown_timeout_ms; /* drain bound after stop; default 30000 */
	int64_t job_timeout_ms;      /* default handler timeout; default 300000 */
	int64_t kill_grace_ms;       /* SIGTERM to SIGKILL; default 5000 */
	int64_t backoff_base_ms;     /* retry backoff (full jitter); default 1000 */
	int64_t backoff_cap_ms;      /* default 3600000 */
	int64_t rescue_every_ms;     /* default 5000 */
	const char *owner;           /* lease owner name; default host:pid */
	skl_log_fn log;              /* optional; called from the worker's threads */
	void *log_ctx;
	bool no_cron;                /* do not evaluate cron schedules (skiplock/cron.h);
	                              * by default every worker does */
	int64_t cron_every_ms;       /* how often to look for due schedules; default 1000 */
	skl_backoff backoff;         /* default strategy; DEFAULT means full jitter */
	int retry_budget_pct;        /* retries per 100 first attempts; default 10;
	                              * 0 or less: no budget */
	skl_log_record_fn log_record;/* optional; used instead of log when set (same
	                              * log_ctx); called from the worker's threads */
	bool log_payloads;           /* put job payloads in log contexts (off: never) */
	int64_t queue_stats_every_ms;/* > 0: read the queue gauges of
	                              * skl_worker_metrics this often (one bounded
	                              * statement on the worker's connection); 0: off */
	int64_t poll_idle_ms;        /* once idle (nothing claimed for 10 x poll_max_ms)
	                              * one statement every [poll_idle, 1.25 x poll_idle)
	                              * ms at most; default 600000 (docs/performance.md) */
	int prefetch;                /* jobs claimed beyond concurrency, leased and
	                              * waiting in the worker for a free handler
	                              * thread; default 0 (docs/performance.md) */
	const char *const *handler_env; /* names of variables command handlers get
	                              * although the rule below withholds them
	                              * (e.g. "DATABASE_URL"); never SKIPLOCK_* */
	size_t nhandler_env;
	int connections;             /* database connections for claims, outcomes and
	                              * heartbeats, each driven by its own thread
	                              * with an equal share of concurrency and
	                              * prefetch; default 1 (docs/performance.md) */
} skl_worker_options;

/* Bounds skl_worker_new checks (0 still means the default where the field
 * says so): SKL_INVALID names the first option outside them. */
#define SKL_WORKER_LEASE_MIN_MS 1000            /* lease_ms: 1 s ... */
#define SKL_WORKER_LEASE_MAX_MS 86400000        /* ... to 24 h; also shutdown_timeout_ms */
#define SKL_WORKER_POLL_MIN_MS 10               /* poll_ms, poll_max_ms, poll_idle_ms,
                                                 * rescue_every_ms, cron_every_ms,
                                                 * queue_stats_every_ms: 10 ms ... */
#define SKL_WORKER_POLL_MAX_MS 3600000          /* ... to 1 h (poll_idle_ms: 24 h);
                                                 * also kill_grace_ms */
#define SKL_WORKER_IDLE_MAX_MS 86400000
#define SKL_WORKER_TIMEOUT_MAX_MS 2592000000LL  /* job_timeout_ms, backoff_base_ms,
                                                 * backoff_cap_ms: 30 days */
#define SKL_WORKER_CONCURRENCY_MAX 4096         /* concurrency, prefetch */
#define SKL_WORKER_CONNECTIONS_MAX 64           /* connections; also at most
                                                 * concurrency + prefetch */
#define SKL_WORKER_QUEUES_MAX 64                /* nqueues */
/* Queue names: valid UTF-8, 1 to SKL_KIND_MAX bytes (as enqueue takes them);
 * owner: valid UTF-8, 1 to SKL_LEASE_NAME_MAX characters; kinds given to
 * the skl_worker_handle* calls: valid UTF-8, 1 to SKL_KIND_MAX bytes. */

/* The budget's floor: retries a second each kind may always make. */
#define SKL_RETRY_BUDGET_MIN_PER_S 3
/* The budget's sliding window. */
#define SKL_RETRY_BUDGET_WINDOW_MS 10000
/* Fills o with the defaults above. */
SKL_API void skl_worker_options_init(skl_worker_options *o);

/* Creates a worker that will connect with client options co.  Copies both
 * option structs and their strings; either may be NULL (the defaults).
 * Does not connect and does not block.  SKL_NOMEM, SKL_IO (no wake-up pipe)
 * or skl_client_open's SKL_INVALID for a bad URL; *out is NULL on failure,
 * else free it with skl_worker_free. */
SKL_API skl_rc skl_worker_new(const skl_client_options *co, const skl_worker_options *wo,
                              skl_worker **out, skl_error *err);

/* Registers a C handler or a shell command for a kind (1..128 bytes).
 * SKL_CONFLICT when the kind already has a handler. */
SKL_API skl_rc skl_worker_handle(skl_worker *w, const char *kind, skl_handler_fn fn, void *ctx,
                                 skl_error *err);
/* As skl_worker_handle, for a shell command (run by /bin/sh -c);
 * SKL_INVALID for an empty command. */
SKL_API skl_rc skl_worker_handle_command(skl_worker *w, const char *kind, const char *command,
                                         skl_error *err);

/* A streaming handler (docs/protocol.md, "The streaming handler"):
 * /bin/sh -c COMMAND started procs times when the worker runs and kept
 * running; each job goes to one of them as a JSON line on its stdin
 * ({"id", "kind", "queue", "attempt", "fencing", "deadline" (Unix ms),
 * "payload"}), and its outcome comes back as a JSON line on its stdout
 * ({"id", "outcome": "ok"|"retry"|"fail"|"discard", "result", "error",
 * "retry_after" (seconds)}), in any order.  A process gets at most
 * inflight jobs before it answered them.  Its stderr goes to the log, a
 * line per message.  Its death fails its jobs in flight (retried) and it is
 * restarted after a backoff (100 ms doubling to 10 s, reset by an answer);
 * a job past its timeout fails and its process is killed (SIGTERM, SIGKILL
 * after kill_grace_ms) and restarted; a malformed line fails the job it
 * names (or the only job in flight) and is logged with it.  A job waits
 * for a process with room at most until its timeout.  The environment and
 * process hygiene are a command handler's (above), without the job's
 * SKIPLOCK_* variables; on the worker's stop, stdin is closed, then SIGTERM
 * and SIGKILL follow after kill_grace_ms each. */
typedef struct skl_stream_opts {
	int procs;                   /* processes; default 1, 1..SKL_STREAM_PROCS_MAX */
	int inflight;                /* jobs in flight per process; default 1,
	                              * 1..SKL_STREAM_INFLIGHT_MAX */
} skl_stream_opts;
#define SKL_STREAM_PROCS_MAX 64
#define SKL_STREAM_INFLIGHT_MAX 4096

/* Sets *o to the defaults: one process, one job in flight.  Any thread. */
SKL_API void skl_stream_opts_init(skl_stream_opts *o);

/* Registers a streaming handler for kind; opts NULL: the defaults.
 * SKL_INVALID for an empty command, a bad kind or options out of bounds;
 * SKL_CONFLICT when the kind already has a handler.  Starts nothing: the
 * processes start with skl_worker_run and end with it. */
SKL_API skl_rc skl_worker_handle_stream(skl_worker *w, const char *kind, const char *command,
                                        const skl_stream_opts *opts, skl_error *err);

/* Runs until skl_worker_stop, then drains: no new claims, running jobs get
 * shutdown_timeout_ms to finish, then commands are killed and their
 * attempts recorded as failed (retried at once).  Blocks until then, on
 * the calling thread, which must be the only one using w (skl_worker_stop,
 * skl_worker_get_stats and skl_worker_metrics excepted).  Returns SKL_OK
 * after the drain: once running, database failures are retried and logged,
 * never returned.  Before it starts: SKL_MISUSE when no handler is
 * registered, the connection's codes (client.h) when the first ping fails
 * (SKL_UNREACHABLE past the retry bound), SKL_NOMEM, SKL_IO (a thread
 * could not start). */
SKL_API skl_rc skl_worker_run(skl_worker *w, skl_error *err);

/* Asks a running worker to drain and stop.  Async-signal-safe. */
SKL_API void skl_worker_stop(skl_worker *w);
/* Frees a worker that is not running (skl_worker_run has returned), with
 * its connection.  Accepts NULL. */
SKL_API void skl_worker_free(skl_worker *w);

/* A kind's own retry settings on this worker; unset fields fall back to
 * the worker's options.  A job's own strategy, base and cap (enqueue)
 * still come first. */
typedef struct skl_retry_policy {
	skl_backoff backoff;         /* DEFAULT: the worker's */
	int64_t backoff_base_ms;     /* 0: the worker's */
	int64_t backoff_cap_ms;      /* 0: the worker's */
	int retry_budget_pct;        /* -1: the worker's; 0: no budget for this kind */
} skl_retry_policy;
/* Fills p with the defaults above (every setting the worker's). */
SKL_API void skl_retry_policy_init(skl_retry_policy *p);

/* Sets kind's retry policy (replacing an earlier one).  Call before
 * skl_worker_run.  SKL_INVALID for a bad kind or negative durations. */
SKL_API skl_rc skl_worker_retry_policy(skl_worker *w, const char *kind,
                                       const skl_retry_policy *p, skl_error *err);

/* Gives kind a fleet-wide circuit breaker (skiplock/retry.h): when the
 * worker starts it creates or updates kind's row in skiplock.breakers with
 * config (NULL: defaults).  Call before skl_worker_run. */
SKL_API skl_rc skl_worker_breaker(skl_worker *w, const char *kind,
                                  const skl_breaker_config *config, skl_error *err);

typedef struct skl_worker_stats {
	uint64_t claimed, completed, retried, discarded, fenced_out, rescued, heartbeats;
} skl_worker_stats;

/* Counters since skl_worker_run started.  Any thread. */
SKL_API void skl_worker_get_stats(skl_worker *w, skl_worker_stats *out);

/* The worker's metrics in the Prometheus text exposition format (0.0.4):
 * counters and handler durations per queue and kind, job leases held,
 * reconnects, indeterminate outcomes, and (with queue_stats_every_ms) queue
 * depth and oldest due job age as last read.  Never touches the database.
 * On SKL_OK *text is a new string (free with skl_free); SKL_NOMEM otherwise.
 * Any thread, also while skl_worker_run runs. */
SKL_API skl_rc skl_worker_metrics(skl_worker *w, char **text, skl_error *err);

/* From inside a C handler: keep JSON text as the job's result, or text as
 * the attempt's error (copied, at most 64 KiB / 4 KiB). */
SKL_API void skl_job_set_result(const skl_job *job, const char *json);
/* See skl_job_set_result (above); text NULL clears an error set before. */
SKL_API void skl_job_set_error(const skl_job *job, const char *text);
/* From inside a C handler that returns SKL_JOB_RETRY: wait at least ms
 * before the next attempt instead of the backoff strategy's delay (a
 * server's Retry-After).  ms <= 0 withdraws the request. */
SKL_API void skl_job_retry_after(const skl_job *job, int64_t ms);
/* True once the job's lease was lost (the handler should stop). */
SKL_API bool skl_job_lost(const skl_job *job);

/* Exactly once (docs/protocol.md, "The effect pattern"): the job's effect
 * and its completion in one transaction on c: BEGIN; sql with its nparams
 * text parameters ($1…), when sql is not NULL; SELECT
 * skiplock.job_complete(job->id, job->fencing, result); COMMIT.  The
 * effect commits exactly when the job is completed, so it is never
 * applied twice: not by a stale owner, and not by the next attempt after
 * this process dies between the effect and its outcome (which the fence
 * alone, skiplock.job_fence, cannot prevent).  result: JSON text kept as
 * the job's result, or NULL.  *rows (may be NULL) gets the number of rows
 * sql affected or returned.
 *
 * c is a client of the handler's own (one per handler thread: a client is
 * used by one thread at a time), never the worker's.  Called from a C
 * handler's thread with the job it was given, it tells the worker: return
 * SKL_JOB_OK after SKL_OK, and the worker records no outcome of its own
 * (its result is the one given here) and does not take the job's end for
 * a lost lease.  On any other code return a failure (SKL_JOB_RETRY): the
 * worker records it, and that outcome is refused harmlessly when the
 * transaction did commit.  With a job from skl_claim nothing else is told.
 *
 * SKL_OK: committed.  SKL_FENCED (SQLSTATE SK001): the claim is not
 * current (lease lost, rescued, claimed again, cancelled) or this claim
 * completed the job already: rolled back, no effect.  SKL_INDETERMINATE:
 * the answer to COMMIT was lost; the effect and the completion committed
 * together or not at all.  SKL_MISUSE: no client or job, or parameters
 * without a statement.  Otherwise the statement's or the connection's
 * codes (client.h), rolled back; transient failures before COMMIT are
 * retried up to the client's retry bound.  Blocks for the transaction. */
SKL_API skl_rc skl_job_complete_with(skl_client *c, const skl_job *job, const char *result,
                                     const char *sql, int nparams,
                                     const char *const *params, int64_t *rows,
                                     skl_error *err);

#ifdef __cplusplus
}
#endif
#endif
