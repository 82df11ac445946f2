/*
 * tz.h — IANA time zones read from the system's tz database, and civil
 * calendar arithmetic, for cron.c.
 *
 * Nothing here touches the process-wide TZ or calls localtime/mktime: zone
 * files (TZif, RFC 8536) are parsed by tz.c itself, so any thread may use
 * any zone at any time.  Instants are Unix seconds (int64, UTC, no leap
 * seconds); a "local" value is the wall-clock time in a zone written as if
 * it were UTC seconds (local = instant + UTC offset).
 */
#ifndef SKL_TZ_H
#define SKL_TZ_H

#include <stdint.h>

#include "core/internal.h"

typedef struct skl_tz skl_tz;

/* Loads zone `name` ("Europe/Berlin"; "UTC" needs no file) from $TZDIR or
 * /usr/share/zoneinfo.  Loaded zones are cached for the life of the
 * process and never change, so *out may be kept and shared between
 * threads.  SKL_INVALID for a malformed or unknown name or a file that is
 * not TZif.  Thread-safe. */
skl_rc skl__tz_get(const char *name, const skl_tz **out, skl_error *err);

/* The UTC offset in seconds (east positive) in effect at instant t. */
int32_t skl__tz_offset(const skl_tz *z, int64_t t);

/* The first instant whose local time is at or past `local`: the instant of
 * `local` itself when that wall-clock time exists (its first occurrence
 * when it occurs twice), or the end of the gap when a spring-forward
 * skipped it.  This is the DST rule of docs/cron.md. */
int64_t skl__tz_resolve(const skl_tz *z, int64_t local);

/* Civil calendar (proleptic Gregorian): days since 1970-01-01. */
int64_t skl__days_from_civil(int64_t y, int m, int d);
void skl__civil_from_days(int64_t days, int64_t *y, int *m, int *d);
int skl__weekday(int64_t days);               /* 0 = Sunday */
int skl__days_in_month(int64_t y, int m);
int64_t skl__floordiv(int64_t a, int64_t b);  /* b > 0 */

#endif
