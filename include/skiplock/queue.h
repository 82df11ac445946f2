/*
 * SPDX-License-Identifier: MIT
 * skiplock/queue.h — the job queue: enqueue, claim, outcomes, heartbeat,
 * rescue, and operator actions.
 *
 * Ownership of a claimed job is a row, not a session: a claim sets the job
 * running with a lease (expiry by the database clock) and adds 1 to its
 * fencing token.  Every call that ends or extends a claim is conditional on
 * (id, fencing, state = running); a caller whose lease was lost is told so
 * (accepted = false) and must drop its outcome.
 *
 * Memory: strings passed in are copied or used only during the call.
 * Arrays of skl_job returned by skl_claim belong to the caller and are
 * freed with skl_jobs_free.  Thread-safety: as skl_client (one thread at a
 * time per client).  Blocking: every call with an skl_client is one short
 * transaction (or one statement) and blocks up to the client's retry bound,
 * with the connection's result codes (client.h); the comments name the
 * others.
 */
#ifndef SKIPLOCK_QUEUE_H
#define SKIPLOCK_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "skiplock/client.h"
#include "skiplock/retry.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SKL_KIND_MAX 128          /* bytes in a kind or queue name */
#define SKL_UNIQUE_KEY_MAX 512    /* bytes in a unique key */
/* bytes of JSON payload: the database's limit, skiplock.payload_max()
 * (sql/0017_guards.sql), which an integration test compares with this */
#define SKL_PAYLOAD_MAX_DEFAULT (1024 * 1024)

#define SKL_PARENTS_MAX 1000        /* parents of one job, by id and key together */

/* What a job with parents does when one of them is discarded or
 * cancelled (skiplock.enqueue_after's on_parent_failure). */
typedef enum skl_parent_failure {
	SKL_PARENT_FAILURE_CANCEL = 0, /* it is cancelled too, and so is every job that
	                                * waits for it, however long the chain (default) */
	SKL_PARENT_FAILURE_RUN = 1     /* the parent counts as finished */
} skl_parent_failure;

typedef struct skl_enqueue_opts {
	const char *queue;        /* NULL: "default" */
	int priority;             /* higher runs first; default 0 */
	const char *run_at;       /* timestamptz text ("2026-12-01 08:00Z"); NULL: now */
	int64_t delay_ms;         /* when run_at is NULL: run at now() + delay */
	const char *unique_key;   /* at most one unfinished job per key; NULL: none */
	int max_attempts;         /* 0: 25 */
	int64_t timeout_ms;       /* handler timeout; 0: the worker's default */
	int64_t backoff_base_ms;  /* retry backoff for this job; 0: the worker's */
	int64_t backoff_cap_ms;
	skl_backoff backoff;      /* strategy for this job; DEFAULT: the worker's */
	/* Parents (schema step 0030): with any, the job is enqueued waiting,
	 * available but never due, until every parent has finished; it is then
	 * due at run_at (or delay_ms after the enqueue), at once when that has
	 * passed.  A parent is named by id or by unique key (the unfinished job
	 * holding it, else the newest finished one still kept); it must exist.
	 * At most SKL_PARENTS_MAX of both together.  None: enqueued as before. */
	const int64_t *depends_on;          /* ndepends_on parent ids */
	size_t ndepends_on;
	const char *const *depends_on_keys; /* ndepends_on_keys unique keys */
	size_t ndepends_on_keys;
	skl_parent_failure on_parent_failure; /* ignored without parents */
} skl_enqueue_opts;
/* Fills o with the defaults above (every field 0 or NULL). */
SKL_API void skl_enqueue_opts_init(skl_enqueue_opts *o);

typedef struct skl_job_spec {
	const char *kind;         /* 1..128 bytes */
	const char *payload;      /* JSON text; NULL: {} */
	skl_enqueue_opts opts;
} skl_job_spec;

/* Enqueues one job; *id receives its id, or the id of the unfinished job
 * already holding opts->unique_key (then nothing is inserted).  Retry-safe:
 * a retry after a lost COMMIT answer returns the same id and inserts
 * nothing (a client-generated token is written with the job).  payload and
 * opts may be NULL ({} and the defaults).  SKL_INVALID for a kind, queue or
 * unique key of the wrong length, a negative count or duration, an unknown
 * backoff; SKL_DB (SQLSTATE 22P02) for a payload that is not JSON.  Blocks
 * up to the client's retry bound.
 *
 * With parents (opts->depends_on, opts->depends_on_keys) the call is one
 * statement of skiplock.enqueue_after instead.  SKL_INVALID, before any
 * statement, for more than SKL_PARENTS_MAX parents, an id below 1, a key
 * that is NULL or of the wrong length, an unknown policy; SKL_INVALID with
 * SQLSTATE 23503 when a parent does not exist (neither unfinished nor kept
 * by retention): nothing is written.  SKL_DB (0A000) on the distributed
 * layout.  enqueue_after takes no retry token: the call is re-sent after a
 * lost answer only when opts->unique_key is set (a second run finds the
 * job), else SKL_INDETERMINATE.  A unique key held by an unfinished job
 * returns that job's id, its own parents unchanged. */
SKL_API skl_rc skl_enqueue(skl_client *c, const char *kind, const char *payload,
                           const skl_enqueue_opts *opts, int64_t *id, skl_error *err);

/* Enqueues n jobs in one transaction, all or nothing, in a few round trips
 * whatever n is.  ids[i] (caller-allocated, n entries) receives the id for
 * jobs[i], with the same unique-key, retry and result rules as skl_enqueue
 * (an SKL_INVALID message names the job: "job 3: …").  n = 0 does nothing.
 * A job with parents is enqueued alone (n = 1, as skl_enqueue): among
 * others it is SKL_INVALID. */
SKL_API skl_rc skl_enqueue_bulk(skl_client *c, const skl_job_spec *jobs, size_t n,
                                int64_t *ids, skl_error *err);

/* What skl_enqueue_bulk_ex reports for each job. */
typedef enum skl_enqueued {
	SKL_ENQUEUED_EXISTING = 0,  /* its unique key was held: the id is the holder's
	                             * (or an earlier job's of the same batch) */
	SKL_ENQUEUED_INSERTED = 1,  /* this call inserted the job */
	SKL_ENQUEUED_UNKNOWN = 2    /* the answer to the call's COMMIT was lost and the
	                             * retry found the first run's ids: whether that
	                             * run inserted this keyed job or found it cannot
	                             * be told (a job without a key is INSERTED) */
} skl_enqueued;

/* skl_enqueue_bulk that also says, in inserted[i] (caller-allocated, n
 * entries, or NULL), whether jobs[i] was inserted or its unique key was
 * held.  Within one batch a repeated id counts as inserted only at its
 * first occurrence.  Exact: a job counts as inserted when its row was
 * written by this call's transaction (its xmin).  Through a transaction
 * pooler too; with inserted, the call is one transaction of two
 * statements per 5,000 jobs (without it, up to 5,000 jobs are one
 * autocommit statement).  Needs SELECT on skiplock.jobs (the worker role
 * has it).  Blocks up to the client's retry bound. */
SKL_API skl_rc skl_enqueue_bulk_ex(skl_client *c, const skl_job_spec *jobs, size_t n,
                                   int64_t *ids, skl_enqueued *inserted, skl_error *err);

/* A claimed job.  Strings stay valid until skl_jobs_free. */
typedef struct skl_job {
	int64_t id;
	const char *queue;
	const char *kind;
	const char *payload;      /* JSON text */
	int attempt;              /* 1 on the first run */
	int max_attempts;
	int64_t fencing;          /* the token of this claim */
	int priority;
	int64_t timeout_ms;       /* 0: not set on the job */
	void *internal;           /* owned by the library */
	int64_t run_at_us;        /* run_at, µs since the Unix epoch: with priority
	                           * and id the job's place in the claim order */
} skl_job;

typedef struct skl_claim_opts {
	const char *const *queues;  /* NULL or empty: every queue */
	size_t nqueues;
	const char *const *kinds;   /* the kinds the caller can run; required */
	size_t nkinds;
	size_t limit;               /* at most this many jobs */
	int64_t lease_ms;           /* lease length */
	const char *owner;          /* written as lease_owner */
	/* Optional: claim only jobs placed after (after_priority,
	 * after_run_at_us, after_id) in the claim order — the place of a job
	 * claimed before (skl_job's priority, run_at_us, id).  The index scan
	 * then starts there instead of walking the entries of every job
	 * claimed since, which stay in the index while an old snapshot is
	 * held.  Jobs placed before it (a higher priority, an old run_at, a
	 * claim rolled back) are claimed only without it: a caller must also
	 * claim without it regularly (the worker: docs/performance.md). */
	bool after_set;
	int after_priority;
	int64_t after_run_at_us;
	int64_t after_id;
} skl_claim_opts;

/* Claims up to limit due, available jobs of the given queues and kinds in
 * one statement (FOR UPDATE SKIP LOCKED; priority, then run_at, then id).
 * SKL_EMPTY with *n = 0 when none is due.  *jobs is NULL when none. */
SKL_API skl_rc skl_claim(skl_client *c, const skl_claim_opts *o, skl_job **jobs, size_t *n,
                         skl_error *err);
/* Frees what skl_claim returned (n jobs, with their strings).  Accepts
 * NULL. */
SKL_API void skl_jobs_free(skl_job *jobs, size_t n);

typedef enum skl_outcome_kind {
	SKL_OUTCOME_COMPLETE = 0,  /* done; result kept */
	SKL_OUTCOME_RETRY = 1,     /* failed attempt: retried after the retry delay
	                            * unless attempts are exhausted (then discarded) */
	SKL_OUTCOME_DISCARD = 2    /* failed for good, no retry */
} skl_outcome_kind;

typedef struct skl_outcome {
	int64_t id;
	int64_t fencing;
	skl_outcome_kind kind;
	const char *result;        /* JSON text or NULL (complete only) */
	const char *error;         /* text kept in the error history, or NULL */
	/* Retry only.  The database makes the retry decision
	 * (skiplock.retry_delay_ms, docs/protocol.md); these are its inputs. */
	int64_t retry_delay_ms;    /* the handler's own delay (Retry-After), 0: none */
	bool deferred;             /* the caller's retry budget is spent: the retry
	                            * is spread over [cap/2, cap] */
	skl_backoff backoff;       /* the caller's policy for the job's kind, used */
	int64_t backoff_base_ms;   /* where the job sets none of its own; */
	int64_t backoff_cap_ms;    /* DEFAULT / 0: full jitter from 1 s to 1 h */
	/* The job's queue, as claimed: the handle's third part (protocol 2), so
	 * that the outcome finds the job where it lives (one shard on Citus).
	 * NULL: the job is found by id alone (protocol 1). */
	const char *queue;
} skl_outcome;

/* Records n outcomes in one fenced statement.  accepted[i] (caller-owned,
 * may be NULL) is false when outcome i was refused because the claim was
 * lost (lease expired and rescued, cancelled, or claimed again): a lost
 * claim is not an error, the call still returns SKL_OK.  Retry-safe (the
 * fence keeps a retried outcome from applying twice).  The outcomes go as
 * one JSON array (protocol 3), at most 10,000 per call (the schema's
 * skiplock.outcomes_max(); more: SKL_DB, SQLSTATE 22023).  SKL_NOMEM when
 * the outcomes' JSON cannot be built; SKL_DB when the server's answer has
 * unexpected columns (a schema older than the library). */
SKL_API skl_rc skl_record(skl_client *c, const skl_outcome *outs, size_t n, bool *accepted,
                          skl_error *err);

/* skl_record followed by skl_claim, in one statement and one round trip
 * (the claim cannot pick a job the record just changed).  Outcomes are
 * applied and jobs claimed together or not at all; on SKL_EMPTY the
 * outcomes were applied and no job was due.  Not retried after an
 * indeterminate answer: the caller may record the outcomes again (fenced)
 * and the jobs, if claimed, are rescued when their leases expire. */
SKL_API skl_rc skl_record_and_claim(skl_client *c, const skl_outcome *outs, size_t nouts,
                                   bool *accepted, const skl_claim_opts *o, skl_job **jobs,
                                   size_t *n, skl_error *err);

/* What a heartbeat found for one claim (skl_heartbeat_states). */
typedef enum skl_hb_state {
	SKL_HB_LOST = 0,      /* the claim was lost: stop the job, drop its outcome */
	SKL_HB_EXTENDED = 1,  /* its lease now ends lease_ms after the database's now() */
	SKL_HB_LOCKED = 2     /* still this claim, but a transaction holds the job's row
	                       * (usually the handler's own skiplock.job_fence): the
	                       * lease was not moved, and no rescue, claim or cancel
	                       * can take the job while that transaction lasts;
	                       * heartbeat it again soon */
} skl_hb_state;

/* Extends the leases of n running claims to now() + lease_ms in one fenced
 * statement that never waits for a row lock, so a claim whose row another
 * transaction holds costs the others nothing (docs/protocol.md).
 * states[i] is what it found for (ids[i], fencings[i]). */
SKL_API skl_rc skl_heartbeat_states(skl_client *c, const int64_t *ids, const int64_t *fencings,
                                    size_t n, int64_t lease_ms, skl_hb_state *states,
                                    skl_error *err);

/* skl_heartbeat_states for claims whose queues are known (protocol 2):
 * queues[i] is the queue of job ids[i] as claimed (NULL: by id alone, as
 * skl_heartbeat_states does), so each claim is found where it lives. */
SKL_API skl_rc skl_heartbeat_queued(skl_client *c, const char *const *queues,
                                    const int64_t *ids, const int64_t *fencings, size_t n,
                                    int64_t lease_ms, skl_hb_state *states, skl_error *err);

/* skl_heartbeat_states, with alive[i] false only for a claim that was
 * lost (true when extended or locked). */
SKL_API skl_rc skl_heartbeat(skl_client *c, const int64_t *ids, const int64_t *fencings,
                             size_t n, int64_t lease_ms, bool *alive, skl_error *err);

/* Returns up to limit running jobs whose lease expired to available (or to
 * discarded when attempts are exhausted), skipping rows others hold.  The
 * counts may be NULL. */
SKL_API skl_rc skl_rescue(skl_client *c, int limit, int *rescued, int *discarded,
                          skl_error *err);

/* Operator actions (need UPDATE on skiplock.jobs: an operator role, not
 * the worker role).  retry: a discarded, cancelled or available job becomes
 * available now.  A discarded or cancelled job gets a fresh budget of
 * attempts: max_attempts becomes attempt + its max_attempts (as many
 * attempts again as it had); an available job keeps its budget.  Its error
 * history and fencing token stay.  cancel: an available or running job
 * becomes cancelled (a running handler's outcome is then refused).
 * SKL_EMPTY when no such job, SKL_CONFLICT when its state does not allow
 * the action (or another unfinished job holds its unique key). */
SKL_API skl_rc skl_job_retry(skl_client *c, int64_t id, skl_error *err);
/* See skl_job_retry (above). */
SKL_API skl_rc skl_job_cancel(skl_client *c, int64_t id, skl_error *err);

/* skl_job_retry with a budget of `attempts` more attempts, whatever the
 * job's state: max_attempts becomes attempt + attempts.  attempts 0 is
 * skl_job_retry; a negative one is SKL_INVALID. */
SKL_API skl_rc skl_job_retry_attempts(skl_client *c, int64_t id, int attempts,
                                      skl_error *err);

/* Deletes finished jobs older than older_than_ms in batches of batch rows
 * (each its own transaction); *deleted (may be NULL) gets the total. */
SKL_API skl_rc skl_jobs_prune(skl_client *c, int64_t older_than_ms, int batch,
                              int64_t *deleted, skl_error *err);

#ifdef __cplusplus
}
#endif
#endif
