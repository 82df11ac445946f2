/*
 * SPDX-License-Identifier: MIT
 * skiplock/workers.h — the registry of workers (sql/0016_workers.sql): who
 * claimed and found nothing, when, and which due jobs it left behind.
 *
 * Every claim of every client that takes nothing from the front of the
 * queue records its owner, kinds and queues in skiplock.workers, at most
 * once per owner per 10 seconds; a claim that takes jobs writes nothing.
 * A worker "idle while work waits" had an empty claim within the window
 * and left due jobs behind: jobs still available in its queues whose
 * run_at was at least a second before that claim (their kind is not one
 * of its kinds, or their queue or kind is paused, or their breaker is
 * open).  A worker that stopped stays listed until the window has passed;
 * one that claims nothing for a long time (the C worker turns idle after
 * 10 x poll_max_ms and then claims when its own kinds are due or a
 * notification wakes it) keeps the time of its last recorded empty claim.
 *
 * Times are ISO 8601 text in UTC with milliseconds, from the database
 * clock.  Memory: the rows returned belong to the caller and are freed
 * with skl_workers_free, which frees every string and array they point
 * to.  Out-parameters are set to NULL / 0 first and assigned only on
 * success.  Thread-safety: as skl_client (one thread at a time per
 * client); the rows are plain data.
 */
#ifndef SKIPLOCK_WORKERS_H
#define SKIPLOCK_WORKERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "skiplock/client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The default window of skl_workers_list, and its bounds. */
#define SKL_WORKERS_SEEN_DEFAULT_MS (15 * 60000)
#define SKL_WORKERS_SEEN_MIN_MS 1000
#define SKL_WORKERS_SEEN_MAX_MS 86400000 /* rows older than a day are deleted */

/* One worker of the registry. */
typedef struct skl_worker_info {
	const char *owner;             /* the claims' owner, e.g. host:pid:random */
	const char *const *kinds;      /* the kinds it claims */
	size_t nkinds;
	const char *const *queues;     /* its queues; NULL (nqueues 0): every queue */
	size_t nqueues;
	const char *empty_at;          /* its last recorded claim that took nothing */
	int64_t empty_age_ms;          /* how long ago that was, by the database clock */
	const char *first_seen_at;     /* when it was first recorded */
	int64_t waiting;               /* due jobs it left behind, of 1000 read at most */
	const char *const *waiting_kinds; /* the distinct kinds of the 10 waiting longest */
	size_t nwaiting_kinds;
	void *internal;                /* owned by the library */
} skl_worker_info;

/* The workers whose last recorded empty claim is within seen_ms (0: 15
 * minutes; else SKL_WORKERS_SEEN_MIN_MS to SKL_WORKERS_SEEN_MAX_MS, or
 * SKL_INVALID before any statement), by owner; with idle_only, only those
 * that left due jobs behind (waiting > 0: skiplock.idle_workers).  One
 * read-only statement (retried on transient failures); readable by every
 * role.  The workers of one set of queues share one read of at most 1000
 * due jobs (sql/0016_workers.sql says how they are found), so the cost
 * grows with the distinct sets of queues, not with the workers.  *rows
 * (free with skl_workers_free) is NULL and *n 0 when there are none.
 * SKL_DB naming `skiplock init` when the schema predates the registry.
 * Blocks for one round trip. */
SKL_API skl_rc skl_workers_list(skl_client *c, int64_t seen_ms, bool idle_only,
                                skl_worker_info **rows, size_t *n, skl_error *err);

/* Frees n rows returned by skl_workers_list.  Accepts NULL. */
SKL_API void skl_workers_free(skl_worker_info *rows, size_t n);

#ifdef __cplusplus
}
#endif
#endif
