/*
 * SPDX-License-Identifier: MIT
 * skiplock/cron.h — periodic jobs: cron expressions in IANA time zones,
 * schedules kept in skiplock.schedules, and the scheduler that every
 * worker runs.
 *
 * No leader: every worker may evaluate every schedule.  A due fire time
 * becomes a job with the unique key "cron:NAME:<fire time, UTC, ISO 8601>"
 * in the same statement that advances the schedule's last fire time with a
 * compare-and-set on its previous value; of several workers evaluating the
 * same fire time, exactly one advances it and enqueues, the others change
 * nothing.  Due-ness is judged by the database clock.  docs/cron.md has
 * the expression syntax, the DST rule and the catch-up policies.
 *
 * Expressions and zones are pure computation: no database, no process-wide
 * TZ, safe from any thread.  Calls taking an skl_client are as
 * thread-safe as the client (one thread at a time per client) and block up
 * to the client's retry bound.
 *
 * Instants are Unix seconds (UTC).  Memory: strings passed in are copied
 * or used only during the call; what the library returns is freed with
 * the matching *_free call.  Out-parameters are set first (NULL / 0) and
 * assigned only on success.
 */
#ifndef SKIPLOCK_CRON_H
#define SKIPLOCK_CRON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "skiplock/client.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SKL_CRON_EXPR_MAX 256        /* bytes in an expression */
#define SKL_SCHEDULE_NAME_MAX 128    /* bytes in a schedule name */
#define SKL_CRON_TIME_LEN 21         /* "2026-03-29T01:00:00Z" and NUL */
#define SKL_CRON_LOCAL_LEN 26        /* "2026-03-29T03:00:00+02:00" and NUL */

/* ---- expressions ---- */

typedef struct skl_cron_expr skl_cron_expr;

/* Parses a cron expression: five fields (minute hour day-of-month month
 * day-of-week) with lists, ranges, steps and names (jan…dec, sun…sat;
 * day-of-week 7 is Sunday too), day-of-month and day-of-week OR-ed when
 * neither field begins with '*' (Vixie cron's rule); or @yearly
 * (@annually), @monthly, @weekly, @daily (@midnight), @hourly; or
 * "@every DUR" (whole seconds, at least 1s, counted from the Unix epoch).
 * SKL_INVALID with a message naming the field and the character position
 * (1-based) of the problem.  The result is immutable: any thread may use
 * it.  Free with skl_cron_expr_free. */
SKL_API skl_rc skl_cron_parse(const char *text, skl_cron_expr **out, skl_error *err);

/* Frees a parsed expression.  Accepts NULL. */
SKL_API void skl_cron_expr_free(skl_cron_expr *e);

/* SKL_OK when zone names an IANA zone in the system tz database ("UTC"
 * needs none); SKL_INVALID otherwise.  Zone files are read once per
 * process and kept. */
SKL_API skl_rc skl_cron_zone_check(const char *zone, skl_error *err);

/* The first fire time strictly after `after`, in zone (NULL: UTC).  A
 * local time skipped by a spring-forward fires once, at the first instant
 * after the gap; a local time that occurs twice fires once, at its first
 * occurrence.  SKL_EMPTY when the expression does not fire within 100
 * years; SKL_INVALID for an unknown zone or an instant outside years
 * 1..9999. */
SKL_API skl_rc skl_cron_next(const skl_cron_expr *e, const char *zone, int64_t after,
                             int64_t *next, skl_error *err);

/* t as ISO 8601 UTC, "2026-03-29T01:00:00Z", into buf (SKL_CRON_TIME_LEN). */
SKL_API void skl_cron_format_utc(int64_t t, char *buf);

/* t as local time in zone with its offset, "2026-03-29T03:00:00+02:00",
 * into buf (SKL_CRON_LOCAL_LEN).  SKL_INVALID for an unknown zone. */
SKL_API skl_rc skl_cron_format_local(int64_t t, const char *zone, char *buf, skl_error *err);

/* ---- schedules ---- */

/* What a tick does when it finds it is behind (see skl_cron_tick_opts). */
typedef enum skl_catch_up {
	SKL_CATCH_UP_LATEST = 0,  /* enqueue only the newest missed fire time */
	SKL_CATCH_UP_NONE = 1,    /* enqueue none of them */
	SKL_CATCH_UP_ALL = 2      /* enqueue each, the newest catch_up_bound at most */
} skl_catch_up;

/* Parses "latest", "none", "all"; SKL_INVALID for any other. */
SKL_API skl_rc skl_catch_up_parse(const char *s, skl_catch_up *out, skl_error *err);
/* The name of a policy, a static string; "?" out of range. */
SKL_API const char *skl_catch_up_name(skl_catch_up c);

typedef struct skl_schedule_spec {
	const char *name;         /* 1..128 bytes, no control characters */
	const char *expression;   /* as skl_cron_parse accepts */
	const char *zone;         /* IANA zone; NULL: "UTC" */
	const char *kind;         /* job kind, 1..128 bytes */
	const char *payload;      /* JSON text; NULL: {} */
	const char *queue;        /* NULL: "default" */
	int priority;
	int max_attempts;         /* 0: 25 */
	skl_catch_up catch_up;
} skl_schedule_spec;

/* Writes and the action log.  Every change below is made by one of the
 * schema's functions (skiplock.schedule_add, schedule_remove,
 * schedule_set_paused, schedules_apply), which checks it, writes it and
 * logs it in skiplock.actions: the same as a change made from SQL.  The
 * *_as calls log it as who (an actor and a role, 1 to 200 bytes each;
 * SKL_INVALID otherwise, before any statement; skiplock/control.h); the
 * others as the database user with the role "library".  The worker role
 * may not call those functions (docs/security.md). */
struct skl_actor;

/* Adds a schedule that fires after `at` (NULL: now() by the database
 * clock; otherwise timestamptz text, for tests and simulations).
 * Everything is checked before anything is written: SKL_INVALID for a bad
 * name, expression, zone, kind or queue, SKL_CONFLICT when a schedule of
 * that name exists.  *next_fire (may be NULL) receives its first fire
 * time.  Retry-safe. */
SKL_API skl_rc skl_cron_add(skl_client *c, const skl_schedule_spec *s, const char *at,
                            int64_t *next_fire, skl_error *err);
/* skl_cron_add, logged as who (NULL: as skl_cron_add). */
SKL_API skl_rc skl_cron_add_as(skl_client *c, const skl_schedule_spec *s, const char *at,
                               const struct skl_actor *who, int64_t *next_fire,
                               skl_error *err);

/* Deletes a schedule (jobs it already enqueued stay; the action log keeps
 * its definition).  SKL_EMPTY when there is none of that name. */
SKL_API skl_rc skl_cron_remove(skl_client *c, const char *name, skl_error *err);
/* skl_cron_remove, logged as who (NULL: as skl_cron_remove). */
SKL_API skl_rc skl_cron_remove_as(skl_client *c, const char *name,
                                  const struct skl_actor *who, skl_error *err);

/* Pausing stops a schedule from firing.  Resuming skips every fire time
 * that passed before `at` (NULL: now()), whatever the catch-up policy, so
 * a pause never causes a burst: last_fire moves to the newest fire time at
 * or before `at` and next_fire to the first after it, at once
 * (skiplock.schedule_set_paused; skl_schedule_set_paused does the same).
 * SKL_EMPTY when there is no schedule of that name; pausing a paused or
 * resuming an enabled schedule changes nothing. */
SKL_API skl_rc skl_cron_pause(skl_client *c, const char *name, skl_error *err);
/* The other half of skl_cron_pause (above); at may be NULL. */
SKL_API skl_rc skl_cron_resume(skl_client *c, const char *name, const char *at,
                               skl_error *err);

typedef struct skl_schedule_info {
	const char *name;
	const char *expression;
	const char *zone;
	const char *kind;
	const char *payload;      /* JSON text */
	const char *queue;
	int priority;
	int max_attempts;
	skl_catch_up catch_up;
	bool enabled;
	int64_t created_at;       /* fire times after this instant count */
	bool has_last_fire;
	int64_t last_fire;        /* the newest fire time handled (enqueued or
	                           * skipped by the catch-up policy) */
	bool has_next_fire;
	int64_t next_fire;        /* the next fire time to handle; in the past
	                           * when no worker has run it yet */
	void *internal;           /* owned by the library */
} skl_schedule_info;

/* Reads every schedule, ordered by name.  *out is NULL and *n 0 when there
 * are none (SKL_OK).  Free with skl_schedule_info_free. */
SKL_API skl_rc skl_cron_list(skl_client *c, skl_schedule_info **out, size_t *n,
                             skl_error *err);
/* Frees what skl_cron_list returned (n entries).  Accepts NULL. */
SKL_API void skl_schedule_info_free(skl_schedule_info *s, size_t n);

/* ---- declarative schedules ---- */

/* One schedule as it should be. */
typedef struct skl_schedule_want {
	skl_schedule_spec spec;
	int paused;               /* 1 paused, 0 enabled, -1 as it is now (a new
	                           * schedule is enabled) */
} skl_schedule_want;

typedef enum skl_cron_change {
	SKL_CRON_KEEP = 0,        /* already as wanted: nothing written */
	SKL_CRON_ADD = 1,
	SKL_CRON_CHANGE = 2,      /* fields differ (see skl_cron_step.fields) */
	SKL_CRON_REMOVE = 3
} skl_cron_change;

typedef struct skl_cron_step {
	char name[SKL_SCHEDULE_NAME_MAX + 1];
	skl_cron_change change;
	char fields[128];         /* SKL_CRON_CHANGE: what differs, "expression,
	                           * paused"; else "" */
} skl_cron_step;

/* Makes the schedules equal to want[0..n), in one transaction: adds the
 * missing, changes those that differ (any spec field, or paused), and,
 * with prune, removes every schedule not in want.  A schedule whose
 * expression or zone changes, or that is resumed, skips the fire times
 * that passed before now (as skl_cron_resume); one whose other fields
 * change keeps its fire times.  Every spec is checked (and names must be
 * unique) before anything is written: SKL_INVALID.  Concurrent calls are
 * serialised by a lock on skiplock.schedules held for the transaction
 * (skiplock.schedules_apply does the work, in one statement).  With
 * dry_run the same transaction is rolled back: *steps says what it would
 * do.  Idempotent: a second call with the same want keeps all.
 * *steps (may be NULL) receives one step per schedule, want's order then
 * the removed by name, *nsteps their count; free with skl_free.  Blocks up
 * to the client's retry bound. */
SKL_API skl_rc skl_cron_apply(skl_client *c, const skl_schedule_want *want, size_t n,
                              bool prune, bool dry_run, skl_cron_step **steps,
                              size_t *nsteps, skl_error *err);
/* skl_cron_apply, logged as who (NULL: as skl_cron_apply): one row of
 * the action log per call that changed anything (none on a dry run). */
SKL_API skl_rc skl_cron_apply_as(skl_client *c, const skl_schedule_want *want, size_t n,
                                 bool prune, bool dry_run, const struct skl_actor *who,
                                 skl_cron_step **steps, size_t *nsteps, skl_error *err);

/* ---- the scheduler ---- */

typedef struct skl_cron_tick_opts {
	const char *at;           /* NULL: the database's now(); otherwise
	                           * timestamptz text: evaluate at that instant */
	int catch_up_bound;       /* catch-up "all" enqueues at most this many fire
	                           * times of one schedule in one tick (the newest);
	                           * 0: 100 */
	int64_t grace_ms;         /* a schedule is behind when its oldest due fire
	                           * time is older than this: workers were down or
	                           * it was late; 0: 60000 */
	int max_schedules;        /* due schedules handled per tick; 0: 100 */
} skl_cron_tick_opts;

typedef struct skl_cron_tick_result {
	int due;                  /* due schedules read */
	int fired;                /* of those, whose due fire times this call handled */
	int lost;                 /* always 0 since schema step 24: a due row another
	                           * tick holds is skipped, not read */
	int behind;               /* of those fired, handled by their catch-up policy */
	int failed;               /* skipped: expression or zone unusable here, or
	                           * values the database refused to store */
	int64_t enqueued;         /* jobs created or found by unique key */
	char failure[512];        /* why the first failed schedule failed, or "" */
	int64_t next_in_ms;       /* from the database's now to the earliest next
	                           * fire time of an enabled schedule; -1: none */
} skl_cron_tick_result;

/* Fires every enabled, due schedule once for the fleet, in one call to
 * the database (skiplock.cron_tick; with o->at, skiplock.cron_tick_at,
 * which only the schema's owner may run): there each due row is locked
 * SKIP LOCKED, its fire times since its last fire time are computed, its
 * catch-up policy is applied when behind, last_fire moves on and one job
 * per fire time is enqueued with the unique key cron:NAME:<fire time>,
 * all in one transaction.  r (may be NULL) receives counts and the time to
 * the next fire time.  o may be NULL (defaults).  A schedule the database
 * cannot evaluate or move (SQLSTATE class 22 or 23: an unknown zone, a
 * payload over the limit) is skipped and counted in r->failed; the call
 * still succeeds. */
SKL_API skl_rc skl_cron_tick(skl_client *c, const skl_cron_tick_opts *o,
                             skl_cron_tick_result *r, skl_error *err);

#ifdef __cplusplus
}
#endif
#endif
