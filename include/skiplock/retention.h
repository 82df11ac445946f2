/*
 * SPDX-License-Identifier: MIT
 * skiplock/retention.h — how long finished jobs are kept, and the
 * maintenance that keeps the finished-jobs storage to that.
 *
 * Finished jobs live in skiplock.finished_jobs, partitioned by the time
 * each one expires (sql/0013_finished.sql; docs/retention.md).
 * Maintenance creates partitions ahead of need, drops expired ones and
 * moves finished jobs an older installation left in skiplock.jobs.  It is
 * leaderless: whoever takes the lease "skiplock.maintenance" does its steps
 * (workers do, about every SKL_MAINTENANCE_EVERY_MS while busy; so does
 * `skiplock init` after an upgrade).  The lease name is reserved: only
 * skl_maintain takes it (the lease functions refuse it to worker roles).
 *
 * Memory: strings passed in are used only during the call.
 * Thread-safety: as skl_client (one thread at a time per client).
 */
#ifndef SKIPLOCK_RETENTION_H
#define SKIPLOCK_RETENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "skiplock/client.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SKL_MAINTENANCE_LEASE "skiplock.maintenance"

/* How often a busy worker offers to do maintenance (jittered by half);
 * skl_maintenance_check's finding is three of these without a run. */
#define SKL_MAINTENANCE_EVERY_MS 60000

/* What steps of maintenance did (sums over the steps). */
typedef struct skl_maintenance {
	int64_t created;    /* partitions attached */
	int64_t dropped;    /* partitions detached: expired, or reshaped to a new width */
	int64_t deleted;    /* expired rows deleted from the default partition */
	int64_t moved;      /* finished jobs moved out of skiplock.jobs */
	int64_t remaining;  /* finished jobs still in skiplock.jobs after the last step */
	int rounds;         /* steps done */
	bool more;          /* the last step did something (call again) */
} skl_maintenance;

/* Called after each step with the sums so far; return false to stop. */
typedef bool (*skl_maintenance_cb)(const skl_maintenance *sofar, void *ctx);

/* Takes the lease "skiplock.maintenance" for owner (15 seconds) and does up
 * to max_rounds steps of skiplock.maintain_step while work is left, then
 * releases the lease.  Each step is one statement sent outside any
 * transaction block, bounded by a statement_timeout of 10 seconds, and
 * renews the lease; a lock outcomes conflict with is waited for at most
 * 50 ms and held for catalog work only.  Blocks for the steps' time on c.
 * SKL_OK with *ran true when it did; SKL_OK with *ran false when another
 * holder has the lease (nothing done); SKL_OK also when the lease was lost
 * between steps (the new holder goes on).  progress may be NULL. */
SKL_API skl_rc skl_maintain(skl_client *c, const char *owner, int max_rounds,
                            skl_maintenance_cb progress, void *ctx, skl_maintenance *done,
                            bool *ran, skl_error *err);

/* When maintenance last ran, who holds its lease, and whether jobs ran
 * while it did not: read by `skiplock doctor maintenance` and the
 * dashboard.  Times are by the database clock. */
typedef struct skl_maintenance_status {
	int installed;            /* skiplock's schema (step 0013 or later) is there;
	                           * 0: nothing else is set */
	const char *last_run_at;  /* ISO 8601 UTC, or NULL: never */
	int64_t last_run_age_ms;  /* -1: never */
	const char *last_owner;   /* or NULL */
	const char *last_summary; /* what its last step did, or NULL */
	const char *lease_owner;  /* the live maintenance lease's holder, or NULL */
	int64_t lease_left_ms;    /* until that lease expires; -1: none is live */
	int64_t busy_age_ms;      /* since a job last finished; 0 while one runs;
	                           * -1: none ever did */
	int64_t expected_ms;      /* 3 * SKL_MAINTENANCE_EVERY_MS */
	int overdue;              /* the finding: never run, or jobs ran more than
	                           * expected_ms after its last run */
	void *internal;
} skl_maintenance_status;

/* Reads the maintenance's status into *st (read-only statements, one
 * transaction; works on a database without skiplock: installed 0).  Free
 * with skl_maintenance_status_free.  Blocks for one round trip or two. */
SKL_API skl_rc skl_maintenance_check(skl_client *c, skl_maintenance_status *st,
                                     skl_error *err);
/* Frees what skl_maintenance_check filled in (st itself is the caller's). */
SKL_API void skl_maintenance_status_free(skl_maintenance_status *st);

/* Keeps finished jobs of queue (NULL or "*": the default for every queue
 * without its own setting) in state ("completed", "discarded",
 * "cancelled"; NULL: all three) for keep_ms milliseconds (0: not kept;
 * -1: forever), counted from when each finishes.  Applies to jobs that
 * finish from now on.  SKL_INVALID for a bad value (nothing written). */
SKL_API skl_rc skl_retention_set(skl_client *c, const char *queue, const char *state,
                                 int64_t keep_ms, skl_error *err);

/* One retention setting: queue ("*": the default) and state. */
typedef struct skl_retention {
	const char *queue;
	const char *state;
	int64_t keep_ms;          /* -1: forever; 0: not kept */
	void *internal;
} skl_retention;

/* The maintenance's own state. */
typedef struct skl_retention_info {
	int64_t partition_width_ms; /* of the partitions created from now on */
	int width_auto;           /* 1: chosen from the retention (not set) */
	int partitions;           /* range partitions of skiplock.finished_jobs */
	const char *last_run_at;  /* ISO 8601, or NULL: never */
	const char *last_owner;   /* or NULL */
	const char *last_summary; /* or NULL */
	int64_t unmoved;          /* finished jobs still in skiplock.jobs (an upgrade) */
	void *internal;
} skl_retention_info;

/* Every setting, '*' first then by queue and state, and the maintenance's
 * state.  Free with skl_retention_free. */
SKL_API skl_rc skl_retention_list(skl_client *c, skl_retention **rows, size_t *n,
                                  skl_retention_info *info, skl_error *err);
/* Frees what skl_retention_list returned (rows and/or info; either NULL). */
SKL_API void skl_retention_free(skl_retention *rows, size_t n, skl_retention_info *info);

/* The width of the partitions maintenance creates from now on: 1 second
 * to 1 day, or 0: chosen by maintenance (the default), a quarter of the
 * shortest finite retention, at least the longest / 100, rounded up to a
 * minute, 1 minute to 6 hours.  SKL_INVALID otherwise (nothing written). */
SKL_API skl_rc skl_retention_set_width(skl_client *c, int64_t width_ms, skl_error *err);

/* queue follows the default again ("*": the defaults are restored). */
SKL_API skl_rc skl_retention_reset(skl_client *c, const char *queue, skl_error *err);

#ifdef __cplusplus
}
#endif

#endif /* SKIPLOCK_RETENTION_H */
