/*
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

/* ---- catch-up policies ---- */

/* What a tick does when it finds it is behind (see skl_cron_tick_opts). */
typedef enum skl_catch_up {
	SKL_CATCH_UP_LATEST = 0,  /* enqueue only the newest missed fire time */
	SKL_CATCH_UP_NONE = 1,    /* enqueue none of them */
	SKL_CATCH_UP_ALL = 2      /* enqueue each, the newest catch_up_bound at most */
} skl_catch_up;

/* "latest", "none", "all". */
SKL_API skl_rc skl_catch_up_parse(const char *s, skl_catch_up *out, skl_error *err);
SKL_API const char *skl_catch_up_name(skl_catch_up c);

#ifdef __cplusplus
}
#endif
#endif
