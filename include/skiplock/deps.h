/*
 * SPDX-License-Identifier: MIT
 * skiplock/deps.h — dependencies between jobs (sql/0030_dependencies.sql):
 * a batch of jobs with a callback that runs once after all of them, and
 * why an available job is not running.
 *
 * One job with parents is enqueued with skl_enqueue (the depends_on
 * fields of skl_enqueue_opts, skiplock/queue.h).  A job waiting for its
 * parents is available with its attempts untouched and its run_at held at
 * 2199-12-31 until the last parent finishes; the transaction that ends a
 * parent frees or cancels its children, so a child runs once, after the
 * last of them, whatever dies in between.  Not supported on the
 * distributed layout yet (SKL_DB, SQLSTATE 0A000).
 *
 * Memory: strings passed in are used only during the call; the reason of
 * skl_job_waits_for belongs to the caller (skl_free).  Out-parameters are
 * set first (NULL / 0) and assigned on success.  Thread-safety: as
 * skl_client (one thread at a time per client).
 */
#ifndef SKIPLOCK_DEPS_H
#define SKIPLOCK_DEPS_H

#include <stddef.h>
#include <stdint.h>

#include "skiplock/client.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SKL_BATCH_MAX 1000        /* jobs of one batch, its callback aside */

/* A batch: n jobs of one kind and a callback job that waits for all of
 * them, whatever their outcomes, and then finds {"batch": {"size",
 * "completed", "discarded", "cancelled"}} merged into its payload. */
typedef struct skl_batch_spec {
	const char *kind;              /* the jobs' kind, 1 to SKL_KIND_MAX bytes */
	const char *const *payloads;   /* n JSON texts; a NULL entry: {} */
	size_t n;                      /* 1 to SKL_BATCH_MAX */
	const char *callback_kind;     /* 1 to SKL_KIND_MAX bytes */
	const char *callback_payload;  /* JSON text; NULL: {} */
	const char *queue;             /* of every job and the callback; NULL: "default" */
	int priority;                  /* of every job and the callback; default 0 */
	int max_attempts;              /* of every job and the callback; 0: 25 */
} skl_batch_spec;

/* Enqueues a batch in one statement of skiplock.enqueue_batch, all or
 * nothing: ids[i] (caller-allocated, b->n entries) receives the id of the
 * job of payloads[i], *callback_id (may be NULL) the callback's.
 * SKL_INVALID, before any statement, for a kind, callback kind or queue of
 * the wrong length, n of 0 or over SKL_BATCH_MAX, negative max_attempts;
 * SKL_INVALID with the database's SQLSTATE (22xxx) for a value it refuses,
 * such as a payload that is not JSON.  Not re-sent after a lost answer
 * (the batch has no retry token): SKL_INDETERMINATE then.  Blocks up to the
 * client's retry bound. */
SKL_API skl_rc skl_enqueue_batch(skl_client *c, const skl_batch_spec *b, int64_t *ids,
                                 int64_t *callback_id, skl_error *err);

/* Why job id, available, is not running now, in words from
 * skiplock.job_waits_for: "dependencies: 1 of 2 parent(s) not finished",
 * "due at …", "paused", "breaker not closed", "limit: …" or "due:
 * waiting for a worker".  *reason (free with skl_free) is NULL, with
 * SKL_OK, when the job is not available or does not exist.  The worker
 * and operator roles may call it; another role gets SKL_DB (42501).  One
 * read-only statement, retried like any read. */
SKL_API skl_rc skl_job_waits_for(skl_client *c, int64_t id, char **reason, skl_error *err);

/* Available jobs that are not running, per queue and reason. */
typedef struct skl_wait_count {
	const char *queue;
	const char *reason;   /* "dependency", "scheduled", "paused", "breaker",
	                       * "limit" (a limit decides when they start) or
	                       * "worker" (due, nothing holds them) */
	int64_t jobs;         /* at most cap per queue for the due ones, and
	                       * for the later ones */
	void *internal;       /* owned by the library */
} skl_wait_count;

/* Counts the available jobs that are not running, by what holds them
 * (skiplock.waits_summary): of queues[0..nqueues) or, with nqueues 0, of
 * every queue with jobs (at most 1000); rows in queue, then reason order,
 * only reasons with jobs.  cap (1 to 1000000, 0: 10000) bounds the jobs
 * read per queue.  Every role may call it.  One read-only statement,
 * retried like any read. */
SKL_API skl_rc skl_waits_count(skl_client *c, const char *const *queues, size_t nqueues,
                               int cap, skl_wait_count **rows, size_t *n, skl_error *err);
/* Frees the rows of skl_waits_count (NULL is fine). */
SKL_API void skl_wait_counts_free(skl_wait_count *rows, size_t n);

#ifdef __cplusplus
}
#endif
#endif
