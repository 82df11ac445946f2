/*
 * cron_int.h — what cron.c (expressions, fire times, plans) offers
 * schedule.c (the schedules table and the tick) and the unit tests.
 */
#ifndef SKL_CRON_INT_H
#define SKL_CRON_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/internal.h"
#include "queue/control_int.h"
#include "skiplock/cron.h"

/* What one evaluation of a schedule does, computed from its cursor (the
 * last fire time handled, or its creation instant) and "now". */
typedef struct skl_cron_plan {
	bool any_due;        /* some fire time lies in (cursor, now] */
	bool behind;         /* the oldest of them is older than the grace */
	int64_t newest;      /* the newest due fire time (when any_due) */
	int64_t *fires;      /* the fire times to enqueue, ascending (free) */
	size_t nfires;
	bool has_next;
	int64_t next;        /* the first fire time after max(cursor, newest) */
} skl_cron_plan;

/* Plans one evaluation: not behind, every due fire time runs (the newest
 * `bound` at most); behind, the policy decides: none runs nothing, latest
 * the newest, all the newest `bound`.  Work is bounded by `bound` however
 * far behind the cursor is. */
skl_rc skl__cron_plan(const skl_cron_expr *e, const char *zone, int64_t cursor, int64_t now,
                      skl_catch_up policy, int bound, int64_t grace_s, skl_cron_plan *out,
                      skl_error *err);
void skl__cron_plan_free(skl_cron_plan *p);

/* schedule.c: checks a spec as skl_cron_add does; on SKL_OK *e is its
 * parsed expression (skl_cron_expr_free). */
skl_rc skl__schedule_check(const skl_schedule_spec *s, skl_cron_expr **e, skl_error *err);

/* The schema's refusals as the C checks report them: 22023 and 22004 bad
 * input (SKL_INVALID), 23505 a taken name (SKL_CONFLICT); rc otherwise. */
skl_rc skl__cron_refusal(skl_rc rc, skl_error *err);
/* who's name and role for the action log (NULL, NULL when who is NULL:
 * the functions' defaults); SKL_INVALID for a bad actor. */
skl_rc skl__cron_who(const skl_actor *who, const char **name, const char **role,
                     skl_error *err);

/* Parses "YYYY-MM-DD[T ]HH:MM[:SS](Z|±HH:MM)"; false when malformed. */
bool skl__cron_time_parse(const char *s, int64_t *t);

/* What the database stores of a schedule: times from 1970-01-01 to before
 * 2200-01-01 (UTC), as a job's run_at (sql/0017_guards.sql).  A next fire
 * time at or after the end is stored as none. */
#define SKL_SCHEDULE_T_END INT64_C(7258118400)
/* A stored time clamped into that range (NULL stays NULL), as SQL: no
 * value read from the table (one planted around the checks, say
 * 'infinity') can make a conversion to seconds fail. */
#define SKL_SQL_IN_RANGE(x)                                                                  \
	"CASE WHEN (" x ") < timestamptz '1970-01-01 00:00+00' THEN timestamptz '1970-01-01 00:00+00'" \
	" WHEN (" x ") > timestamptz '2199-12-31 23:59:59+00'"                                   \
	" THEN timestamptz '2199-12-31 23:59:59+00' ELSE (" x ") END"

/* Earliest and latest instants an expression is evaluated at: years 1..9999. */
#define SKL_CRON_T_MIN INT64_C(-62135596800)
#define SKL_CRON_T_MAX INT64_C(253402300799)

#endif
