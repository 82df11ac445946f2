/*
 * SPDX-License-Identifier: MIT
 * skiplock/control.h — an operator's actions on the whole fleet: pause and
 * resume a queue or a kind, retry, cancel or discard every job matching a
 * filter (or a list of ids), run a schedule now, open or close a breaker,
 * and the action log that records each of them (sql/0014_control.sql).
 *
 * Every action here needs the operator role (docs/security.md): the worker
 * role can neither act nor write the log.  Each one writes exactly one row
 * of skiplock.actions, in the transaction that acts (a bulk action: the
 * row is written before the first batch and its counts are raised by each
 * batch's own transaction, so an interrupted action's row tells what was
 * done).  The actor (who) and the role are recorded as given: they name
 * the person or process on whose behalf the caller acts ("alice@host",
 * role "cli"; the dashboard passes its token's role).  The database adds
 * the role the session logged in as (db_user), which the caller cannot
 * choose.
 *
 * Filters are those of skl_jobs_list (skiplock/inspect.h), read by the
 * same SQL function (skiplock.jobs_matching), so a list and a bulk action
 * with the same filter see the same jobs.
 *
 * Memory: strings passed in are used only during the call; arrays returned
 * belong to the caller and are freed with the matching *_free call.
 * Out-parameters are set first (NULL / 0 / false) and assigned on success.
 * Thread-safety: as skl_client (one thread at a time per client).
 */
#ifndef SKIPLOCK_CONTROL_H
#define SKIPLOCK_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "skiplock/client.h"
#include "skiplock/inspect.h"

#ifdef __cplusplus
extern "C" {
#endif

/* On whose behalf an action is taken; both required, 1 to 200 bytes of
 * UTF-8 (SKL_INVALID otherwise, before any statement). */
typedef struct skl_actor {
	const char *name;          /* "alice@host"; the CLI's default: user@host */
	const char *role;          /* "cli", "operator", "viewer", "sql", ... */
} skl_actor;

/* ---- pause and resume, fleet-wide ---- */

/* Pauses a queue (kind NULL) or a kind (queue NULL), never both: exactly
 * one of them is given, 1 to 128 bytes (SKL_INVALID otherwise).  A paused
 * queue's or kind's jobs are not claimed by any worker (nor admitted as
 * breaker probes): they wait without using attempts, as behind an open
 * breaker; running jobs run on and rescue of expired leases goes on.
 * *changed (may be NULL) is false when it was paused already.  Takes
 * effect at the next claim.  Retry-safe. */
SKL_API skl_rc skl_pause(skl_client *c, const char *queue, const char *kind,
                         const skl_actor *who, bool *changed, skl_error *err);
/* Undoes skl_pause (same arguments); *changed false when it was not
 * paused. */
SKL_API skl_rc skl_resume(skl_client *c, const char *queue, const char *kind,
                          const skl_actor *who, bool *changed, skl_error *err);

/* One pause as stored: queue is "*" for a kind's pause, kind "*" for a
 * queue's. */
typedef struct skl_pause_info {
	const char *queue;
	const char *kind;
	const char *paused_at;     /* ISO 8601 UTC with milliseconds */
	const char *paused_by;     /* the actor's name */
	const char *role;          /* the actor's role */
	void *internal;            /* owned by the library */
} skl_pause_info;

/* Every pause, by queue then kind.  *rows (free with skl_pauses_free) is
 * NULL and *n 0 when nothing is paused.  Readable by every role. */
SKL_API skl_rc skl_pauses_list(skl_client *c, skl_pause_info **rows, size_t *n,
                               skl_error *err);
/* Frees n rows returned by skl_pauses_list.  Accepts NULL. */
SKL_API void skl_pauses_free(skl_pause_info *rows, size_t n);

/* ---- bulk actions ---- */

/* How many jobs match o (o->limit is ignored): the count a bulk action
 * shows first.  SKL_INVALID, before any statement, for the filters
 * skl_jobs_list refuses.  One read-only statement. */
SKL_API skl_rc skl_jobs_count(skl_client *c, const skl_list_opts *o, int64_t *n,
                              skl_error *err);
/* skl_jobs_count with the count's mark: *mark gets the highest id among
 * the jobs counted (0 when none).  A bulk action given the mark and the
 * count (skl_bulk_opts.up_to and .expect) acts on at most those jobs: none
 * that came after the count, and never more than were counted. */
SKL_API skl_rc skl_jobs_count_mark(skl_client *c, const skl_list_opts *o, int64_t *n,
                                   int64_t *mark, skl_error *err);

/* Whether the filter o names a subset of the jobs.  False when it matches
 * every job whatever they hold: o NULL or without a term, or only terms
 * that narrow nothing: a time field without a bound (from or to), a
 * payload filter of {} or [] (contained in every object, every array).  A
 * bulk action refuses such a filter unless asked for every job
 * (skl_bulk_opts.all).  *why (may be NULL) gets what makes it so, a static
 * string: "no filter", "a time field without a bound", "an empty payload
 * filter", or the last two joined by ", ".  Pure (no statement); the
 * terms are not checked for errors here. */
SKL_API bool skl_list_opts_narrows(const skl_list_opts *o, const char **why);

typedef enum skl_bulk_action {
	SKL_BULK_RETRY = 0,        /* as skl_job_retry: discarded, cancelled or
	                            * available jobs become available now */
	SKL_BULK_CANCEL = 1,       /* as skl_job_cancel: available or running */
	SKL_BULK_DISCARD = 2       /* available or running jobs become discarded
	                            * (finished storage, like a cancel); a running
	                            * worker's outcome is refused (fenced) */
} skl_bulk_action;

/* "retry", "cancel", "discard"; NULL for a value outside the enum. */
SKL_API const char *skl_bulk_action_name(skl_bulk_action a);
/* The other way; SKL_INVALID for another name. */
SKL_API skl_rc skl_bulk_action_parse(const char *name, skl_bulk_action *a, skl_error *err);

/* What a bulk action did.  matched is the count taken first (the jobs
 * that matched then, up to o->up_to when given).  changed: jobs the
 * action was applied to, never more than matched (a job that enters the
 * filter after the count may take the place of one that left it, never
 * add to it).  skipped: matched jobs it was not applied to because a
 * worker or another operator got there first (finished, claimed, or no
 * longer matching): matched - changed.  Each job is acted on at most
 * once, and none with an id above mark. */
typedef struct skl_bulk_result {
	int64_t action_id;         /* its row in skiplock.actions; 0 on a dry run */
	int64_t matched;
	int64_t changed;
	int64_t skipped;
	int batches;               /* transactions that acted */
	int64_t mark;              /* the highest id counted (0: none): a dry
	                            * run's mark, for o->up_to of the action */
	int64_t newer;             /* with o->up_to: jobs matching now with ids
	                            * above it, left alone */
} skl_bulk_result;

/* Called after each batch with the counts so far; return false to stop
 * (the action log keeps what was done, SKL_OK is returned). */
typedef bool (*skl_bulk_progress_cb)(const skl_bulk_result *sofar, void *ctx);

typedef struct skl_bulk_opts {
	skl_bulk_action action;
	/* Either a filter (as skl_jobs_list; limit ignored; NULL: every job)
	 * or ids (nids > 0: exactly those jobs, the filter is then ignored;
	 * ids that do not exist are skipped). */
	const skl_list_opts *filter;
	const int64_t *ids;
	size_t nids;               /* at most 100000 */
	int batch;                 /* jobs per transaction, 1 to 10000; 0: 500 */
	bool dry_run;              /* count only: nothing written, not logged */
	skl_bulk_progress_cb progress; /* may be NULL */
	void *ctx;
	/* A filter that matches every job (skl_list_opts_narrows false, NULL
	 * included) is refused (SKL_INVALID) unless all is true: acting on
	 * every job is asked for by name.  Logged in the target as "all". */
	bool all;
	/* The count the operator confirmed (skl_jobs_count_mark or a dry
	 * run's mark and matched), with a filter only; 0: none.  up_to: only
	 * jobs with ids up to it are acted on (logged as "up_to"); later jobs
	 * are left alone and counted in res->newer.  expect: when more than
	 * expect jobs match up to up_to now (jobs entered the filter since the
	 * count), the action is refused with SKL_CONFLICT and nothing is
	 * written. */
	int64_t up_to;
	int64_t expect;
} skl_bulk_opts;

/* Counts the matching jobs (up to o->up_to), refuses when more than
 * o->expect match, writes the action's row in the log, then acts on them
 * newest first in batches of o->batch, each its own transaction,
 * each job through the same fenced per-job function as skl_job_retry /
 * skl_job_cancel (skiplock.job_retry, job_cancel, job_discard): safe with
 * workers running — a job a worker finished, claimed or changed since the
 * count is skipped, never acted on twice.  A retry of a job whose unique
 * key another unfinished job holds is skipped.  At most res->matched jobs
 * are changed.  SKL_INVALID, before any statement, for a bad filter, a
 * filter that matches every job without o->all (not on a dry run), a bad
 * batch size, too many ids, up_to or expect with ids, or a bad actor.
 * *res (may be NULL) receives the counts, also on an error after some
 * batches committed.  Blocks for the whole action. */
SKL_API skl_rc skl_jobs_bulk(skl_client *c, const skl_bulk_opts *o, const skl_actor *who,
                             skl_bulk_result *res, skl_error *err);

/* ---- schedules and breakers, logged ---- */

/* Enqueues one job of schedule name now, as its tick would (its kind,
 * payload, queue and settings) but without moving its next fire time, and
 * whether it is paused or not; *job_id (may be NULL) gets the job's id.
 * SKL_EMPTY when there is no schedule of that name.  Logged.  Not
 * retry-safe (a retry after a lost COMMIT may enqueue a second job). */
SKL_API skl_rc skl_schedule_run_now(skl_client *c, const char *name, const skl_actor *who,
                                    int64_t *job_id, skl_error *err);

/* Pauses or resumes a schedule with the action logged, in one statement
 * (skiplock.schedule_set_paused); *changed (may be NULL) false when it was
 * so already.  A resumed schedule is due at once with its fire times
 * handled up to now: the next tick (any worker) skips what passed while it
 * was paused and sets its next fire time, as skl_cron_resume does at once.
 * SKL_EMPTY when there is no schedule of that name. */
SKL_API skl_rc skl_schedule_set_paused(skl_client *c, const char *name, bool paused,
                                       const skl_actor *who, bool *changed, skl_error *err);

/* skl_breaker_force with the action logged. */
SKL_API skl_rc skl_breaker_set(skl_client *c, const char *kind, bool open,
                               const skl_actor *who, skl_error *err);

/* ---- the action log ---- */

/* One row of skiplock.actions. */
typedef struct skl_action_info {
	int64_t id;
	const char *at;            /* ISO 8601 UTC with milliseconds */
	const char *actor;
	const char *role;
	const char *action;        /* "retry", "cancel", "discard", "pause",
	                            * "resume", "breaker_open", "breaker_close",
	                            * "schedule_pause", "schedule_resume",
	                            * "schedule_run" */
	const char *target;        /* JSON: the filter, {"ids": [...]}, or
	                            * {"queue"|"kind"|"breaker"|"schedule": ...} */
	int64_t matched;           /* jobs matched (1 or 0 for the others) */
	int64_t changed;           /* jobs changed (1 or 0: whether it changed anything) */
	const char *db_user;       /* the role the acting session logged in as
	                            * (session_user), recorded by the database
	                            * whatever actor and role say; NULL for
	                            * actions logged before schema step 0017 */
	void *internal;            /* owned by the library */
} skl_action_info;

/* The newest limit actions (1 to 10000; 0: 50) with id < before_id
 * (0: no bound), newest first.  *rows (free with skl_actions_free) is NULL
 * and *n 0 when there are none.  Readable by the operator and reader
 * roles. */
SKL_API skl_rc skl_actions_list(skl_client *c, int limit, int64_t before_id,
                                skl_action_info **rows, size_t *n, skl_error *err);
/* Frees n rows returned by skl_actions_list.  Accepts NULL. */
SKL_API void skl_actions_free(skl_action_info *rows, size_t n);

#ifdef __cplusplus
}
#endif
#endif
