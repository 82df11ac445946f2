/*
 * SPDX-License-Identifier: MIT
 * skiplock/limits.h — limits on job starts across the fleet
 * (sql/0029_limits.sql): at most N jobs of a kind running at a time, and at
 * most N starts of it in any window of a given length, for the kind as a
 * whole or per key (the value of a top-level field of the payload).
 *
 * A limit is one row of skiplock.limits and is enforced by the claim
 * itself, so it holds for every worker of every language at once.  Running
 * jobs are counted from live leases: a crashed worker's slot frees when its
 * lease expires.  The rate window slides and is exact (the claim records
 * each start's time).  A job held back by a limit stays available and
 * keeps its attempts, as a paused kind's does.  Limits are not supported
 * on the distributed layout yet (skl_limit_set fails with SKL_DB, SQLSTATE
 * 0A000).
 *
 * Setting and removing a limit are an operator's actions, written to the
 * action log (skiplock/control.h: actions "limit_set" and "limit_remove")
 * with the actor and role given; the worker role may not call them.  The
 * list is readable by every role.  Neither action is re-sent after an
 * indeterminate outcome (the log would get a second row): the caller sees
 * SKL_INDETERMINATE.
 *
 * Memory: strings passed in are used only during the call; the rows of
 * skl_limits_list belong to the caller and are freed with skl_limits_free.
 * Out-parameters are set first (NULL / 0 / false) and assigned on success.
 * Thread-safety: skl_limit_spec_check may be called from any thread; the
 * others as skl_client (one thread at a time per client).
 */
#ifndef SKIPLOCK_LIMITS_H
#define SKIPLOCK_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "skiplock/client.h"
#include "skiplock/control.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SKL_LIMIT_MAX 1000000          /* max_running and rate: 1 to this */
#define SKL_LIMIT_PER_MAX_MS 86400000  /* a rate's window: 1 ms to one day */
#define SKL_LIMIT_FIELD_MAX 128        /* bytes in a key_field */

/* A limit as set.  At least one of max_running and rate is given. */
typedef struct skl_limit_spec {
	const char *kind;          /* the kind limited, 1 to SKL_KIND_MAX bytes */
	int max_running;           /* at most this many running at a time; 0: no such cap */
	int rate;                  /* at most this many starts per per_ms; 0: no rate */
	int64_t per_ms;            /* the rate's window; 0: one second (with a rate only) */
	const char *key_field;     /* the limit holds per value of this top-level field
	                            * of the payload (jobs without it share one key);
	                            * NULL: for the kind as a whole */
} skl_limit_spec;

/* Checks s against what skl_limit_set accepts, without a statement: kind
 * 1 to SKL_KIND_MAX bytes; max_running and rate 0 (not given) or 1 to
 * SKL_LIMIT_MAX, at least one of them given; per_ms 0 or 1 to
 * SKL_LIMIT_PER_MAX_MS, and only with a rate; key_field NULL or 1 to
 * SKL_LIMIT_FIELD_MAX bytes.  SKL_INVALID with one line naming the first
 * problem.  Pure. */
SKL_API skl_rc skl_limit_spec_check(const skl_limit_spec *s, skl_error *err);

/* Sets the limit of s->kind, replacing the one it had (a rate window of
 * another width or key starts empty), in one statement that also writes
 * the action log (skiplock.limit_set).  SKL_INVALID, before any statement,
 * when skl_limit_spec_check refuses s or who is not a valid actor (1 to
 * 200 bytes each); SKL_INVALID also when the database refuses a value
 * (22023).  Takes effect at the next claim of every worker; idle workers
 * on direct connections are woken.  Blocks for one round trip. */
SKL_API skl_rc skl_limit_set(skl_client *c, const skl_limit_spec *s, const skl_actor *who,
                             skl_error *err);

/* Removes the limit of kind, logged.  *removed (may be NULL) is false, and
 * nothing is logged, when kind had none.  SKL_INVALID, before any
 * statement, for a kind that is not 1 to SKL_KIND_MAX bytes or a bad
 * actor.  Blocks for one round trip. */
SKL_API skl_rc skl_limit_remove(skl_client *c, const char *kind, const skl_actor *who,
                                bool *removed, skl_error *err);

/* One limit and its use now (skiplock.limits_status). */
typedef struct skl_limit_info {
	const char *kind;
	const char *key_field;     /* NULL: the limit is for the kind as a whole */
	int max_running;           /* 0: no cap on running jobs */
	int64_t running;           /* jobs of the kind running now (live leases) */
	int rate;                  /* 0: no rate */
	int64_t per_ms;            /* the rate's window; 0 without a rate */
	int64_t started;           /* starts in the current window, every key's; -1
	                            * without a rate */
	int64_t waiting;           /* due jobs of the kind not started yet */
	int64_t keys;              /* with key_field: the distinct keys among the
	                            * kind's available and running jobs; -1 without */
	const char *changed_at;    /* ISO 8601 UTC with milliseconds */
	const char *changed_by;    /* the actor who set it */
	void *internal;            /* owned by the library */
} skl_limit_info;

/* Every limit, by kind, with its use now.  One read-only statement
 * (retried on transient failures).  *rows (free with skl_limits_free) is
 * NULL and *n 0 when there are none.  SKL_DB when the schema predates the
 * limits (run skiplock init). */
SKL_API skl_rc skl_limits_list(skl_client *c, skl_limit_info **rows, size_t *n,
                               skl_error *err);

/* Frees n rows returned by skl_limits_list.  Accepts NULL. */
SKL_API void skl_limits_free(skl_limit_info *rows, size_t n);

#ifdef __cplusplus
}
#endif
#endif
