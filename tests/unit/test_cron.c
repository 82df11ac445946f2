/* Unit tests of cron expressions and zones (no database): a table of
 * expressions with their next five fire times (computed independently by
 * brute force over local minutes), the DST rule on spring-forward and
 * fall-back days in New York and Berlin, rejections naming the field and
 * the character, zone offsets against the C library's own reading of the
 * same tz database, catch-up plans, and concurrent use from threads. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "coord/cron_int.h"
#include "coord/tz.h"
#include "skiplock.h"

static int64_t T(const char *iso)
{
	int64_t t = 0;
	if (!skl__cron_time_parse(iso, &t))
		fail_msg("test bug: cannot parse time \"%s\"", iso);
	return t;
}

static const char *iso(int64_t t, char *buf)
{
	skl_cron_format_utc(t, buf);
	return buf;
}

static skl_cron_expr *parse_ok(const char *text)
{
	skl_cron_expr *e = NULL;
	skl_error err;
	if (skl_cron_parse(text, &e, &err) != SKL_OK)
		fail_msg("\"%s\" rejected: %s", text, err.message);
	return e;
}

/* Checks the next n fire times of text in zone after `after`. */
static void expect_fires(const char *text, const char *zone, const char *after,
                         const char *const *want, int n)
{
	skl_cron_expr *e = parse_ok(text);
	int64_t t = T(after);
	for (int i = 0; i < n; i++) {
		int64_t next = 0;
		skl_error err;
		char got[SKL_CRON_TIME_LEN], w[SKL_CRON_TIME_LEN];
		if (skl_cron_next(e, zone, t, &next, &err) != SKL_OK)
			fail_msg("\"%s\" in %s after %s: fire %d: %s", text, zone, iso(t, got), i + 1,
			         err.message);
		if (next != T(want[i]))
			fail_msg("\"%s\" in %s after %s: fire %d is %s, want %s", text, zone, after, i + 1,
			         iso(next, got), iso(T(want[i]), w));
		t = next;
	}
	skl_cron_expr_free(e);
}

/* ---- the table ---- */

static const struct table_row {
	const char *expr, *zone, *after;
	const char *fires[5];
} table[] = {
	{"* * * * *", "UTC", "2024-01-01T00:00:00Z",
	 {"2024-01-01T00:01:00Z", "2024-01-01T00:02:00Z", "2024-01-01T00:03:00Z", "2024-01-01T00:04:00Z", "2024-01-01T00:05:00Z"}},
	{"*/7 * * * *", "UTC", "2024-01-01T00:50:00Z",
	 {"2024-01-01T00:56:00Z", "2024-01-01T01:00:00Z", "2024-01-01T01:07:00Z", "2024-01-01T01:14:00Z", "2024-01-01T01:21:00Z"}},
	{"5/15 * * * *", "UTC", "2024-01-01T00:50:00Z",
	 {"2024-01-01T01:05:00Z", "2024-01-01T01:20:00Z", "2024-01-01T01:35:00Z", "2024-01-01T01:50:00Z", "2024-01-01T02:05:00Z"}},
	{"0 */7 * * *", "UTC", "2024-01-01T15:00:00Z",
	 {"2024-01-01T21:00:00Z", "2024-01-02T00:00:00Z", "2024-01-02T07:00:00Z", "2024-01-02T14:00:00Z", "2024-01-02T21:00:00Z"}},
	{"0 0 */7 * *", "UTC", "2024-02-20T00:00:00Z",
	 {"2024-02-22T00:00:00Z", "2024-02-29T00:00:00Z", "2024-03-01T00:00:00Z", "2024-03-08T00:00:00Z", "2024-03-15T00:00:00Z"}},
	{"0 0 29 2 *", "UTC", "2024-03-01T00:00:00Z",
	 {"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z", "2036-02-29T00:00:00Z", "2040-02-29T00:00:00Z", "2044-02-29T00:00:00Z"}},
	{"0 0 29 2 *", "UTC", "2092-03-01T00:00:00Z",
	 {"2096-02-29T00:00:00Z", "2104-02-29T00:00:00Z", "2108-02-29T00:00:00Z", "2112-02-29T00:00:00Z", "2116-02-29T00:00:00Z"}},
	{"0 12 29 2 mon", "UTC", "2023-01-01T00:00:00Z",
	 {"2023-02-06T12:00:00Z", "2023-02-13T12:00:00Z", "2023-02-20T12:00:00Z", "2023-02-27T12:00:00Z", "2024-02-05T12:00:00Z"}},
	{"0 0 1,15 * mon", "UTC", "2024-01-01T00:00:00Z",
	 {"2024-01-08T00:00:00Z", "2024-01-15T00:00:00Z", "2024-01-22T00:00:00Z", "2024-01-29T00:00:00Z", "2024-02-01T00:00:00Z"}},
	{"0 0 */2 * mon", "UTC", "2024-01-01T00:00:00Z",
	 {"2024-01-15T00:00:00Z", "2024-01-29T00:00:00Z", "2024-02-05T00:00:00Z", "2024-02-19T00:00:00Z", "2024-03-11T00:00:00Z"}},
	{"0 0 * * mon", "UTC", "2024-02-27T00:00:00Z",
	 {"2024-03-04T00:00:00Z", "2024-03-11T00:00:00Z", "2024-03-18T00:00:00Z", "2024-03-25T00:00:00Z", "2024-04-01T00:00:00Z"}},
	{"0 0 13 * fri", "UTC", "2024-09-01T00:00:00Z",
	 {"2024-09-06T00:00:00Z", "2024-09-13T00:00:00Z", "2024-09-20T00:00:00Z", "2024-09-27T00:00:00Z", "2024-10-04T00:00:00Z"}},
	{"30 9 * jan-mar mon-fri", "UTC", "2024-03-27T12:00:00Z",
	 {"2024-03-28T09:30:00Z", "2024-03-29T09:30:00Z", "2025-01-01T09:30:00Z", "2025-01-02T09:30:00Z", "2025-01-03T09:30:00Z"}},
	{"0 9 * * MON-FRI", "UTC", "2024-06-06T10:00:00Z",
	 {"2024-06-07T09:00:00Z", "2024-06-10T09:00:00Z", "2024-06-11T09:00:00Z", "2024-06-12T09:00:00Z", "2024-06-13T09:00:00Z"}},
	{"0 0 1 jan *", "UTC", "2024-01-01T00:00:00Z",
	 {"2025-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z"}},
	{"@yearly", "UTC", "2023-06-15T00:00:00Z",
	 {"2024-01-01T00:00:00Z", "2025-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z"}},
	{"@annually", "UTC", "2099-12-31T23:59:59Z",
	 {"2100-01-01T00:00:00Z", "2101-01-01T00:00:00Z", "2102-01-01T00:00:00Z", "2103-01-01T00:00:00Z", "2104-01-01T00:00:00Z"}},
	{"@monthly", "UTC", "2024-01-31T00:00:00Z",
	 {"2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z", "2024-04-01T00:00:00Z", "2024-05-01T00:00:00Z", "2024-06-01T00:00:00Z"}},
	{"@weekly", "UTC", "2024-02-28T00:00:00Z",
	 {"2024-03-03T00:00:00Z", "2024-03-10T00:00:00Z", "2024-03-17T00:00:00Z", "2024-03-24T00:00:00Z", "2024-03-31T00:00:00Z"}},
	{"@daily", "UTC", "2024-02-27T12:00:00Z",
	 {"2024-02-28T00:00:00Z", "2024-02-29T00:00:00Z", "2024-03-01T00:00:00Z", "2024-03-02T00:00:00Z", "2024-03-03T00:00:00Z"}},
	{"@midnight", "UTC", "2023-12-30T00:00:00Z",
	 {"2023-12-31T00:00:00Z", "2024-01-01T00:00:00Z", "2024-01-02T00:00:00Z", "2024-01-03T00:00:00Z", "2024-01-04T00:00:00Z"}},
	{"@hourly", "UTC", "2024-02-29T21:30:00Z",
	 {"2024-02-29T22:00:00Z", "2024-02-29T23:00:00Z", "2024-03-01T00:00:00Z", "2024-03-01T01:00:00Z", "2024-03-01T02:00:00Z"}},
	{"0 0 31 * *", "UTC", "2024-01-31T00:00:00Z",
	 {"2024-03-31T00:00:00Z", "2024-05-31T00:00:00Z", "2024-07-31T00:00:00Z", "2024-08-31T00:00:00Z", "2024-10-31T00:00:00Z"}},
	{"0 0 30 2,4 *", "UTC", "2024-01-01T00:00:00Z",
	 {"2024-04-30T00:00:00Z", "2025-04-30T00:00:00Z", "2026-04-30T00:00:00Z", "2027-04-30T00:00:00Z", "2028-04-30T00:00:00Z"}},
	{"59 23 31 12 *", "UTC", "2024-06-01T00:00:00Z",
	 {"2024-12-31T23:59:00Z", "2025-12-31T23:59:00Z", "2026-12-31T23:59:00Z", "2027-12-31T23:59:00Z", "2028-12-31T23:59:00Z"}},
	{"0 0 * * 7", "UTC", "2024-01-01T00:00:00Z",
	 {"2024-01-07T00:00:00Z", "2024-01-14T00:00:00Z", "2024-01-21T00:00:00Z", "2024-01-28T00:00:00Z", "2024-02-04T00:00:00Z"}},
	{"0 0 * * 0,7", "UTC", "2024-01-01T00:00:00Z",
	 {"2024-01-07T00:00:00Z", "2024-01-14T00:00:00Z", "2024-01-21T00:00:00Z", "2024-01-28T00:00:00Z", "2024-02-04T00:00:00Z"}},
	{"0 0 * * 5-7", "UTC", "2024-01-01T00:00:00Z",
	 {"2024-01-05T00:00:00Z", "2024-01-06T00:00:00Z", "2024-01-07T00:00:00Z", "2024-01-12T00:00:00Z", "2024-01-13T00:00:00Z"}},
	{"15,45 8-10 * * *", "UTC", "2024-01-01T09:50:00Z",
	 {"2024-01-01T10:15:00Z", "2024-01-01T10:45:00Z", "2024-01-02T08:15:00Z", "2024-01-02T08:45:00Z", "2024-01-02T09:15:00Z"}},
	{"0 8-18/2 * * *", "UTC", "2024-01-01T15:00:00Z",
	 {"2024-01-01T16:00:00Z", "2024-01-01T18:00:00Z", "2024-01-02T08:00:00Z", "2024-01-02T10:00:00Z", "2024-01-02T12:00:00Z"}},
	{"0-5 0 * * *", "UTC", "2024-01-01T00:02:30Z",
	 {"2024-01-01T00:03:00Z", "2024-01-01T00:04:00Z", "2024-01-01T00:05:00Z", "2024-01-02T00:00:00Z", "2024-01-02T00:01:00Z"}},
	{"*/15 * * * *", "UTC", "2024-01-01T23:40:00Z",
	 {"2024-01-01T23:45:00Z", "2024-01-02T00:00:00Z", "2024-01-02T00:15:00Z", "2024-01-02T00:30:00Z", "2024-01-02T00:45:00Z"}},
	{"0 0 1 */3 *", "UTC", "2024-02-01T00:00:00Z",
	 {"2024-04-01T00:00:00Z", "2024-07-01T00:00:00Z", "2024-10-01T00:00:00Z", "2025-01-01T00:00:00Z", "2025-04-01T00:00:00Z"}},
	{"0 0 1 jan-dec/5 *", "UTC", "2024-02-01T00:00:00Z",
	 {"2024-06-01T00:00:00Z", "2024-11-01T00:00:00Z", "2025-01-01T00:00:00Z", "2025-06-01T00:00:00Z", "2025-11-01T00:00:00Z"}},
	{"23 0-20/2 * * *", "UTC", "2024-01-01T19:00:00Z",
	 {"2024-01-01T20:23:00Z", "2024-01-02T00:23:00Z", "2024-01-02T02:23:00Z", "2024-01-02T04:23:00Z", "2024-01-02T06:23:00Z"}},
	{"0 4 8-14 * *", "UTC", "2024-01-13T12:00:00Z",
	 {"2024-01-14T04:00:00Z", "2024-02-08T04:00:00Z", "2024-02-09T04:00:00Z", "2024-02-10T04:00:00Z", "2024-02-11T04:00:00Z"}},
	{"0 0 28-31 2 *", "UTC", "2023-02-27T00:00:00Z",
	 {"2023-02-28T00:00:00Z", "2024-02-28T00:00:00Z", "2024-02-29T00:00:00Z", "2025-02-28T00:00:00Z", "2026-02-28T00:00:00Z"}},
	{"*/7 */7 */7 */7 *", "UTC", "2024-01-01T00:00:00Z",
	 {"2024-01-01T00:07:00Z", "2024-01-01T00:14:00Z", "2024-01-01T00:21:00Z", "2024-01-01T00:28:00Z", "2024-01-01T00:35:00Z"}},
	{"0 0 * * sun", "UTC", "2024-03-02T23:59:00Z",
	 {"2024-03-03T00:00:00Z", "2024-03-10T00:00:00Z", "2024-03-17T00:00:00Z", "2024-03-24T00:00:00Z", "2024-03-31T00:00:00Z"}},
	{"1 2 3 4 5", "UTC", "2024-03-30T00:00:00Z",
	 {"2024-04-03T02:01:00Z", "2024-04-05T02:01:00Z", "2024-04-12T02:01:00Z", "2024-04-19T02:01:00Z", "2024-04-26T02:01:00Z"}},
	{"0 22 * * 1-5", "UTC", "2024-03-01T23:00:00Z",
	 {"2024-03-04T22:00:00Z", "2024-03-05T22:00:00Z", "2024-03-06T22:00:00Z", "2024-03-07T22:00:00Z", "2024-03-08T22:00:00Z"}},
	{"5 0 * aug *", "UTC", "2024-08-30T00:00:00Z",
	 {"2024-08-30T00:05:00Z", "2024-08-31T00:05:00Z", "2025-08-01T00:05:00Z", "2025-08-02T00:05:00Z", "2025-08-03T00:05:00Z"}},
	{"0 0,12 1 */2 *", "UTC", "2024-02-01T00:00:00Z",
	 {"2024-03-01T00:00:00Z", "2024-03-01T12:00:00Z", "2024-05-01T00:00:00Z", "2024-05-01T12:00:00Z", "2024-07-01T00:00:00Z"}},
	{"0 0 29 2 sun", "UTC", "2024-02-01T00:00:00Z",
	 {"2024-02-04T00:00:00Z", "2024-02-11T00:00:00Z", "2024-02-18T00:00:00Z", "2024-02-25T00:00:00Z", "2024-02-29T00:00:00Z"}},
	{"0 0 */31 * *", "UTC", "2024-01-01T00:00:00Z",
	 {"2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z", "2024-04-01T00:00:00Z", "2024-05-01T00:00:00Z", "2024-06-01T00:00:00Z"}},
	{"0 9 * * *", "Europe/Moscow", "2024-01-01T00:00:00Z",
	 {"2024-01-01T06:00:00Z", "2024-01-02T06:00:00Z", "2024-01-03T06:00:00Z", "2024-01-04T06:00:00Z", "2024-01-05T06:00:00Z"}},
	{"0 9 * * *", "Asia/Kolkata", "2024-01-01T00:00:00Z",
	 {"2024-01-01T03:30:00Z", "2024-01-02T03:30:00Z", "2024-01-03T03:30:00Z", "2024-01-04T03:30:00Z", "2024-01-05T03:30:00Z"}},
	{"30 2 * * *", "America/New_York", "2040-03-09T00:00:00Z",
	 {"2040-03-09T07:30:00Z", "2040-03-10T07:30:00Z", "2040-03-11T07:00:00Z", "2040-03-12T06:30:00Z", "2040-03-13T06:30:00Z"}},
	{"0 9 * * *", "Australia/Sydney", "2024-04-05T00:00:00Z",
	 {"2024-04-05T22:00:00Z", "2024-04-06T23:00:00Z", "2024-04-07T23:00:00Z", "2024-04-08T23:00:00Z", "2024-04-09T23:00:00Z"}},
	{"0 0 * * *", "Pacific/Chatham", "2024-04-05T00:00:00Z",
	 {"2024-04-05T10:15:00Z", "2024-04-06T10:15:00Z", "2024-04-07T11:15:00Z", "2024-04-08T11:15:00Z", "2024-04-09T11:15:00Z"}},
	{"*/30 1 * * *", "Europe/Dublin", "2024-10-26T23:00:00Z",
	 {"2024-10-27T00:00:00Z", "2024-10-27T00:30:00Z", "2024-10-28T01:00:00Z", "2024-10-28T01:30:00Z", "2024-10-29T01:00:00Z"}},
	{"15 2 * * *", "Australia/Lord_Howe", "2024-10-04T00:00:00Z",
	 {"2024-10-04T15:45:00Z", "2024-10-05T15:30:00Z", "2024-10-06T15:15:00Z", "2024-10-07T15:15:00Z", "2024-10-08T15:15:00Z"}},
	{"45 1 * * *", "Australia/Lord_Howe", "2025-04-04T00:00:00Z",
	 {"2025-04-04T14:45:00Z", "2025-04-05T14:45:00Z", "2025-04-06T15:15:00Z", "2025-04-07T15:15:00Z", "2025-04-08T15:15:00Z"}},
	{"30 2 * * *", "Europe/Berlin", "2099-03-27T00:00:00Z",
	 {"2099-03-27T01:30:00Z", "2099-03-28T01:30:00Z", "2099-03-29T01:00:00Z", "2099-03-30T00:30:00Z", "2099-03-31T00:30:00Z"}},
	{"@every 7m", "UTC", "2024-01-01T00:00:00Z",
	 {"2024-01-01T00:01:00Z", "2024-01-01T00:08:00Z", "2024-01-01T00:15:00Z", "2024-01-01T00:22:00Z", "2024-01-01T00:29:00Z"}},
	{"@every 1h30m", "Europe/Berlin", "2024-01-01T00:00:00Z",
	 {"2024-01-01T01:30:00Z", "2024-01-01T03:00:00Z", "2024-01-01T04:30:00Z", "2024-01-01T06:00:00Z", "2024-01-01T07:30:00Z"}},
	{"@every 1d", "UTC", "2024-01-01T12:00:00Z",
	 {"2024-01-02T00:00:00Z", "2024-01-03T00:00:00Z", "2024-01-04T00:00:00Z", "2024-01-05T00:00:00Z", "2024-01-06T00:00:00Z"}},
	{"@every 45s", "UTC", "2024-01-01T00:00:00Z",
	 {"2024-01-01T00:00:45Z", "2024-01-01T00:01:30Z", "2024-01-01T00:02:15Z", "2024-01-01T00:03:00Z", "2024-01-01T00:03:45Z"}},
};

static void expression_table(void **state)
{
	(void)state;
	assert_true(SKL_ARRAY_LEN(table) >= 40);
	for (size_t i = 0; i < SKL_ARRAY_LEN(table); i++)
		expect_fires(table[i].expr, table[i].zone, table[i].after, table[i].fires, 5);
}

/* ---- DST: the documented rule ---- */

/* America/New_York 2024: spring forward Sun Mar 10, 02:00 EST -> 03:00 EDT
 * (07:00Z); fall back Sun Nov 3, 02:00 EDT -> 01:00 EST (06:00Z). */
static void dst_new_york(void **state)
{
	(void)state;
	const char *z = "America/New_York";
	/* 02:30 does not exist on Mar 10: once, at 03:00 EDT, the end of the gap */
	expect_fires("30 2 * * *", z, "2024-03-09T00:00:00Z",
	             (const char *[]){"2024-03-09T07:30:00Z", "2024-03-10T07:00:00Z",
	                              "2024-03-11T06:30:00Z", "2024-03-12T06:30:00Z"}, 4);
	/* 02:30 occurs once on Nov 3 (after the repeated hour) */
	expect_fires("30 2 * * *", z, "2024-11-02T00:00:00Z",
	             (const char *[]){"2024-11-02T06:30:00Z", "2024-11-03T07:30:00Z",
	                              "2024-11-04T07:30:00Z"}, 3);
	/* 01:30 occurs twice on Nov 3: once, at its first occurrence (EDT) */
	expect_fires("30 1 * * *", z, "2024-11-02T00:00:00Z",
	             (const char *[]){"2024-11-02T05:30:00Z", "2024-11-03T05:30:00Z",
	                              "2024-11-04T06:30:00Z"}, 3);
	/* hourly: 02:00 is skipped and becomes 03:00 EDT, which fires once */
	expect_fires("0 * * * *", z, "2024-03-10T04:30:00Z",
	             (const char *[]){"2024-03-10T05:00:00Z", "2024-03-10T06:00:00Z",
	                              "2024-03-10T07:00:00Z", "2024-03-10T08:00:00Z",
	                              "2024-03-10T09:00:00Z"}, 5);
	/* hourly: 01:00 EST (the repeat) does not fire */
	expect_fires("0 * * * *", z, "2024-11-03T03:30:00Z",
	             (const char *[]){"2024-11-03T04:00:00Z", "2024-11-03T05:00:00Z",
	                              "2024-11-03T07:00:00Z", "2024-11-03T08:00:00Z",
	                              "2024-11-03T09:00:00Z"}, 5);
	/* every 15 minutes: 02:00..02:45 collapse into one fire at 03:00 EDT */
	expect_fires("*/15 * * * *", z, "2024-03-10T06:20:00Z",
	             (const char *[]){"2024-03-10T06:30:00Z", "2024-03-10T06:45:00Z",
	                              "2024-03-10T07:00:00Z", "2024-03-10T07:15:00Z",
	                              "2024-03-10T07:30:00Z"}, 5);
	/* every 15 minutes: the repeated 01:00..01:45 EST do not fire */
	expect_fires("*/15 * * * *", z, "2024-11-03T05:20:00Z",
	             (const char *[]){"2024-11-03T05:30:00Z", "2024-11-03T05:45:00Z",
	                              "2024-11-03T07:00:00Z", "2024-11-03T07:15:00Z",
	                              "2024-11-03T07:30:00Z"}, 5);
}

/* Europe/Berlin 2024: spring forward Sun Mar 31, 02:00 CET -> 03:00 CEST
 * (01:00Z); fall back Sun Oct 27, 03:00 CEST -> 02:00 CET (01:00Z). */
static void dst_berlin(void **state)
{
	(void)state;
	const char *z = "Europe/Berlin";
	expect_fires("30 2 * * *", z, "2024-03-29T12:00:00Z",
	             (const char *[]){"2024-03-30T01:30:00Z", "2024-03-31T01:00:00Z",
	                              "2024-04-01T00:30:00Z"}, 3);
	/* 02:30 occurs twice on Oct 27: CEST (00:30Z) only */
	expect_fires("30 2 * * *", z, "2024-10-25T12:00:00Z",
	             (const char *[]){"2024-10-26T00:30:00Z", "2024-10-27T00:30:00Z",
	                              "2024-10-28T01:30:00Z"}, 3);
	expect_fires("0 * * * *", z, "2024-03-30T22:30:00Z",
	             (const char *[]){"2024-03-30T23:00:00Z", "2024-03-31T00:00:00Z",
	                              "2024-03-31T01:00:00Z", "2024-03-31T02:00:00Z",
	                              "2024-03-31T03:00:00Z"}, 5);
	expect_fires("0 * * * *", z, "2024-10-26T22:30:00Z",
	             (const char *[]){"2024-10-26T23:00:00Z", "2024-10-27T00:00:00Z",
	                              "2024-10-27T02:00:00Z", "2024-10-27T03:00:00Z",
	                              "2024-10-27T04:00:00Z"}, 5);
	expect_fires("*/15 * * * *", z, "2024-03-31T00:20:00Z",
	             (const char *[]){"2024-03-31T00:30:00Z", "2024-03-31T00:45:00Z",
	                              "2024-03-31T01:00:00Z", "2024-03-31T01:15:00Z",
	                              "2024-03-31T01:30:00Z"}, 5);
	expect_fires("*/15 * * * *", z, "2024-10-27T00:20:00Z",
	             (const char *[]){"2024-10-27T00:30:00Z", "2024-10-27T00:45:00Z",
	                              "2024-10-27T02:00:00Z", "2024-10-27T02:15:00Z",
	                              "2024-10-27T02:30:00Z"}, 5);
	/* starting inside the second 02:xx: its times already fired (first
	 * occurrence), so the next is 03:00 CET */
	expect_fires("*/15 * * * *", z, "2024-10-27T01:10:00Z",
	             (const char *[]){"2024-10-27T02:00:00Z"}, 1);
	/* beyond the zone file's table (2037): the footer's rule */
	expect_fires("30 2 * * *", z, "2087-03-29T12:00:00Z",
	             (const char *[]){"2087-03-30T01:00:00Z", "2087-03-31T00:30:00Z"}, 2);
}

/* ---- rejections ---- */

static void rejections(void **state)
{
	(void)state;
	static const struct {
		const char *expr, *want;
	} bad[] = {
		{"", "character 1: expected 5 fields (minute hour day-of-month month day-of-week), found 0"},
		{"* * * *", "character 8: expected 5 fields"},
		{"* * * * * *", "character 11: unexpected sixth field"},
		{"60 * * * *", "minute field, character 1: 60 is out of range 0-59"},
		{"* 24 * * *", "hour field, character 3: 24 is out of range 0-23"},
		{"* * 0 * *", "day-of-month field, character 5: 0 is out of range 1-31"},
		{"* * 32 * *", "day-of-month field, character 5: 32 is out of range 1-31"},
		{"* * * 13 *", "month field, character 7: 13 is out of range 1-12"},
		{"* * * * 8", "day-of-week field, character 9: 8 is out of range 0-7"},
		{"*/0 * * * *", "minute field, character 3: step 0 is out of range 1-59"},
		{"*/x * * * *", "minute field, character 3: step must be a number"},
		{"5-1 * * * *", "minute field, character 1: range 5-1 runs backwards"},
		{"0 0 * * fri-mon", "day-of-week field, character 9: range 5-1 runs backwards"},
		{"1,,2 * * * *", "minute field, character 3: unexpected character ','"},
		{"1, * * * *", "minute field, character 2: list ends with ','"},
		{"1-2-3 * * * *", "minute field, character 4: unexpected character '-'"},
		{"* * * * 1-", "day-of-week field, character 11: range without an end"},
		{"* * * jab *", "month field, character 7: unknown name \"jab\" (expected jan..dec)"},
		{"* * * * funday", "day-of-week field, character 9: unknown name \"funday\""},
		{"mon * * * *", "minute field, character 1: unknown name \"mon\" (this field takes numbers only)"},
		{"* * L * *", "day-of-month field, character 5: 'L' is not supported"},
		{"* * * * 5#2", "day-of-week field, character 10: unexpected character '#'"},
		{"* * ? * *", "day-of-month field, character 5: unexpected character '?'"},
		{"0 0 30 2 *", "day-of-month field, character 5: never fires"},
		{"0 0 31 4,6,9,11 *", "day-of-month field, character 5: never fires"},
		{"99999 * * * *", "minute field, character 1: number too large"},
		{"@reboot", "character 1: unknown macro \"@reboot\""},
		{"@daily x", "character 8: unexpected text after @daily"},
		{"@every", "character 7: expected a duration after @every"},
		{"@every 1500ms", "character 8: @every needs whole seconds, at least 1s"},
		{"@every 0s", "character 8: @every needs whole seconds, at least 1s"},
		{"@every 5 minutes", "character 10: expected one duration after @every"},
		{"@every soon", "character 8: invalid duration \"soon\""},
		{"* * * * *\n", "character 10: unexpected control or non-ASCII character"},
		{"* * * * \xc3\xa9", "character 9: unexpected control or non-ASCII character"},
	};
	for (size_t i = 0; i < SKL_ARRAY_LEN(bad); i++) {
		skl_cron_expr *e = (skl_cron_expr *)&e;
		skl_error err;
		skl_rc rc = skl_cron_parse(bad[i].expr, &e, &err);
		if (rc != SKL_INVALID || e != NULL)
			fail_msg("\"%s\": rc %d (%s), want SKL_INVALID", bad[i].expr, rc, err.message);
		if (strstr(err.message, bad[i].want) == NULL)
			fail_msg("\"%s\": message \"%s\" does not contain \"%s\"", bad[i].expr, err.message,
			         bad[i].want);
		if (strncmp(err.message, "invalid cron expression \"", 25) != 0)
			fail_msg("\"%s\": message \"%s\" does not name the expression", bad[i].expr,
			         err.message);
	}
	char long_expr[SKL_CRON_EXPR_MAX + 2];
	memset(long_expr, '*', sizeof(long_expr) - 1);
	long_expr[sizeof(long_expr) - 1] = '\0';
	skl_cron_expr *e = NULL;
	skl_error err;
	assert_int_equal(skl_cron_parse(long_expr, &e, &err), SKL_INVALID);
	assert_non_null(strstr(err.message, "over the limit of 256"));
}

static void zones(void **state)
{
	(void)state;
	const char *bad[] = {"Mars/Olympus_Mons", "../../etc/passwd", "/etc/localtime", "Europe/",
	                     "Europe//Berlin", ".hidden", "Europe/../UTC", "zone.tab", "Europe/Ber lin",
	                     "", "right/UTC", NULL};
	for (size_t i = 0; i < SKL_ARRAY_LEN(bad); i++) {
		skl_error err;
		if (skl_cron_zone_check(bad[i], &err) != SKL_INVALID)
			fail_msg("zone \"%s\" accepted", bad[i] ? bad[i] : "NULL");
		assert_true(strlen(err.message) > 0);
	}
	const char *good[] = {"UTC", "Etc/UTC", "Europe/Moscow", "America/Argentina/Buenos_Aires",
	                      "Etc/GMT+5", "EST5EDT"};
	for (size_t i = 0; i < SKL_ARRAY_LEN(good); i++) {
		skl_error err;
		if (skl_cron_zone_check(good[i], &err) != SKL_OK)
			fail_msg("zone \"%s\" rejected: %s", good[i], err.message);
	}
	skl_cron_expr *e = parse_ok("0 9 * * *");
	int64_t next = 1;
	skl_error err;
	assert_int_equal(skl_cron_next(e, "Nowhere/City", 0, &next, &err), SKL_INVALID);
	assert_int_equal(next, 0);
	assert_non_null(strstr(err.message, "unknown time zone \"Nowhere/City\""));
	skl_cron_expr_free(e);
	char buf[SKL_CRON_LOCAL_LEN];
	assert_int_equal(skl_cron_format_local(T("2024-03-31T01:00:00Z"), "Europe/Berlin", buf, &err),
	                 SKL_OK);
	assert_string_equal(buf, "2024-03-31T03:00:00+02:00");
	assert_int_equal(skl_cron_format_local(T("2024-01-01T00:00:00Z"), "America/St_Johns", buf,
	                                       &err), SKL_OK);
	assert_string_equal(buf, "2023-12-31T20:30:00-03:30");
}

/* ---- zone offsets against the C library's reading of the same files ---- */

static long libc_offset(int64_t t)
{
	time_t tt = (time_t)t;
	struct tm tm;
	localtime_r(&tt, &tm);
	return tm.tm_gmtoff;
}

/* Samples 1902..2150 (past the tables of the zone files, where the footer
 * rule takes over); where the library's offset changes between samples,
 * bisects to the transition and compares both sides of it too. */
static void offsets_match_libc(void **state)
{
	(void)state;
	const char *zones_[] = {"America/New_York", "Europe/Berlin", "Australia/Sydney",
	                        "Asia/Kolkata", "Pacific/Chatham", "America/St_Johns", "Europe/Dublin",
	                        "Africa/Casablanca", "America/Sao_Paulo", "Australia/Lord_Howe",
	                        "Antarctica/Troll", "Pacific/Apia"};
	int64_t from = T("1902-01-01T00:00:00Z"), to = T("2150-01-01T00:00:00Z");
	for (size_t i = 0; i < SKL_ARRAY_LEN(zones_); i++) {
		const skl_tz *z;
		skl_error err;
		assert_int_equal(skl__tz_get(zones_[i], &z, &err), SKL_OK);
		char tzvar[64];
		snprintf(tzvar, sizeof(tzvar), ":%s", zones_[i]);
		setenv("TZ", tzvar, 1); /* this test is single-threaded; the library never does this */
		tzset();
		long prev = libc_offset(from);
		for (int64_t t = from; t < to; t += 86353) {
			long want = libc_offset(t);
			if (skl__tz_offset(z, t) != want) {
				char b[SKL_CRON_TIME_LEN];
				fail_msg("%s at %s: offset %d, C library says %ld", zones_[i], iso(t, b),
				         skl__tz_offset(z, t), want);
			}
			if (want != prev) { /* a transition in (t - step, t]: find it */
				int64_t lo = t - 86353, hi = t;
				while (hi - lo > 1) {
					int64_t mid = lo + (hi - lo) / 2;
					if (libc_offset(mid) == prev)
						lo = mid;
					else
						hi = mid;
				}
				if (skl__tz_offset(z, lo) != prev || skl__tz_offset(z, hi) != want) {
					char b[SKL_CRON_TIME_LEN];
					fail_msg("%s: transition at %s: offsets %d/%d, C library %ld/%ld",
					         zones_[i], iso(hi, b), skl__tz_offset(z, lo), skl__tz_offset(z, hi),
					         prev, want);
				}
			}
			prev = want;
		}
	}
	unsetenv("TZ");
	tzset();
}

/* ---- a "slim" zone file: the footer's rule carries everything after 1981 ---- */

/* zic -b slim of: Rule EU 1970 only - Jan 1 0:00 0 -; Rule EU 1981 max -
 * Mar lastSun 1:00u 1:00 S; Rule EU 1996 max - Oct lastSun 1:00u 0 -;
 * Zone Test/Slim 1:00 EU CE%sT.  Two transitions, then
 * "CET-1CEST,M3.5.0,M10.5.0/3". */
static const unsigned char slim_tzif[] = {
	0x54, 0x5a, 0x69, 0x66, 0x32, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x54, 0x5a, 0x69, 0x66, 0x32, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x09, 0xff,
	0xff, 0xff, 0xff, 0xff, 0xff, 0xf1, 0xf0, 0x00, 0x00, 0x00, 0x00, 0x15,
	0x23, 0xeb, 0x90, 0x00, 0x01, 0x00, 0x00, 0x0e, 0x10, 0x00, 0x00, 0x00,
	0x00, 0x1c, 0x20, 0x01, 0x04, 0x43, 0x45, 0x54, 0x00, 0x43, 0x45, 0x53,
	0x54, 0x00, 0x0a, 0x43, 0x45, 0x54, 0x2d, 0x31, 0x43, 0x45, 0x53, 0x54,
	0x2c, 0x4d, 0x33, 0x2e, 0x35, 0x2e, 0x30, 0x2c, 0x4d, 0x31, 0x30, 0x2e,
	0x35, 0x2e, 0x30, 0x2f, 0x33, 0x0a
};

static void write_file(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

static void slim_and_broken_files(void **state)
{
	(void)state;
	const char *tmp = getenv("TMPDIR");
	char dir[128], path[192];
	snprintf(dir, sizeof(dir), "%s/skl-tz.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/Test", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/Test/Slim", dir);
	write_file(path, slim_tzif, sizeof(slim_tzif));
	snprintf(path, sizeof(path), "%s/Test/Short", dir);
	write_file(path, slim_tzif, 60);
	snprintf(path, sizeof(path), "%s/Test/Text", dir);
	write_file(path, "hello, world\n", 13);
	setenv("TZDIR", dir, 1); /* single-threaded test; read when a zone is first loaded */
	const skl_tz *slim, *berlin;
	skl_error err;
	assert_int_equal(skl__tz_get("Test/Slim", &slim, &err), SKL_OK);
	assert_int_equal(skl__tz_get("Test/Short", &berlin, &err), SKL_INVALID);
	assert_non_null(strstr(err.message, "truncated"));
	assert_int_equal(skl__tz_get("Test/Text", &berlin, &err), SKL_INVALID);
	assert_non_null(strstr(err.message, "not a TZif file"));
	unsetenv("TZDIR");
	assert_int_equal(skl__tz_get("Europe/Berlin", &berlin, &err), SKL_OK);
	for (int64_t t = T("1997-01-01T00:00:00Z"); t < T("2150-01-01T00:00:00Z"); t += 3547) {
		if (skl__tz_offset(slim, t) != skl__tz_offset(berlin, t)) {
			char b[SKL_CRON_TIME_LEN];
			fail_msg("at %s: slim file says %d, Europe/Berlin %d", iso(t, b),
			         skl__tz_offset(slim, t), skl__tz_offset(berlin, t));
		}
	}
	expect_fires("30 2 * * *", "Test/Slim", "2024-03-30T12:00:00Z",
	             (const char *[]){"2024-03-31T01:00:00Z", "2024-04-01T00:30:00Z"}, 2);
	expect_fires("*/30 2 * * *", "Test/Slim", "2024-10-26T12:00:00Z",
	             (const char *[]){"2024-10-27T00:00:00Z", "2024-10-27T00:30:00Z",
	                              "2024-10-28T01:00:00Z"}, 3);
	for (const char *f = "Slim\0Short\0Text\0"; *f; f += strlen(f) + 1) {
		snprintf(path, sizeof(path), "%s/Test/%s", dir, f);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/Test", dir);
	rmdir(path);
	rmdir(dir);
}

/* ---- instants as text ---- */

static void time_text(void **state)
{
	(void)state;
	char b[SKL_CRON_TIME_LEN];
	assert_string_equal(iso(0, b), "1970-01-01T00:00:00Z");
	assert_string_equal(iso(T("2024-02-29T23:59:59Z"), b), "2024-02-29T23:59:59Z");
	assert_string_equal(iso(T("2024-03-10T03:00-04:00"), b), "2024-03-10T07:00:00Z");
	assert_string_equal(iso(T("1969-12-31 23:59:59+00:00"), b), "1969-12-31T23:59:59Z");
	assert_string_equal(iso(T("9999-12-31T23:59:59Z"), b), "9999-12-31T23:59:59Z");
	const char *bad[] = {"2023-02-29T00:00Z", "2024-13-01T00:00Z", "2024-01-01T24:00Z",
	                     "2024-01-01T00:00", "2024-01-01T00:00:00+5", "2024-01-01", "x"};
	for (size_t i = 0; i < SKL_ARRAY_LEN(bad); i++) {
		int64_t t;
		if (skl__cron_time_parse(bad[i], &t))
			fail_msg("\"%s\" parsed as %s", bad[i], iso(t, b));
	}
	skl_cron_expr *e = parse_ok("* * * * *");
	int64_t next = 0;
	skl_error err;
	assert_int_equal(skl_cron_next(e, NULL, T("9999-12-31T23:59:00Z"), &next, &err), SKL_EMPTY);
	assert_int_equal(skl_cron_next(e, NULL, SKL_CRON_T_MAX + 1, &next, &err), SKL_INVALID);
	skl_cron_expr_free(e);
}

/* ---- plans: due fire times and catch-up ---- */

static void plan(const char *expr, const char *cursor, const char *now, skl_catch_up c,
                 int bound, skl_cron_plan *p)
{
	skl_cron_expr *e = parse_ok(expr);
	skl_error err;
	if (skl__cron_plan(e, "UTC", T(cursor), T(now), c, bound, 60, p, &err) != SKL_OK)
		fail_msg("plan \"%s\" %s..%s: %s", expr, cursor, now, err.message);
	skl_cron_expr_free(e);
}

static void expect_plan(const skl_cron_plan *p, size_t n, const char *first, const char *last,
                        const char *next)
{
	char a[SKL_CRON_TIME_LEN], b[SKL_CRON_TIME_LEN];
	if (p->nfires != n)
		fail_msg("%zu fire times, want %zu", p->nfires, n);
	if (n && p->fires[0] != T(first))
		fail_msg("first fire time %s, want %s", iso(p->fires[0], a), iso(T(first), b));
	if (n && p->fires[n - 1] != T(last))
		fail_msg("last fire time %s, want %s", iso(p->fires[n - 1], a), iso(T(last), b));
	for (size_t i = 1; i < n; i++)
		if (p->fires[i] <= p->fires[i - 1])
			fail_msg("fire times out of order at %zu", i);
	if (!p->has_next || p->next != T(next))
		fail_msg("next %s, want %s", p->has_next ? iso(p->next, a) : "none", iso(T(next), b));
}

static void catch_up_plans(void **state)
{
	(void)state;
	skl_cron_plan p;
	const char *t0 = "2030-01-01T00:00:00Z", *t2h = "2030-01-01T02:00:00Z";
	/* on time: the one due fire time runs whatever the policy */
	plan("* * * * *", t0, "2030-01-01T00:01:20Z", SKL_CATCH_UP_NONE, 100, &p);
	assert_false(p.behind);
	expect_plan(&p, 1, "2030-01-01T00:01:00Z", "2030-01-01T00:01:00Z", "2030-01-01T00:02:00Z");
	skl__cron_plan_free(&p);
	/* nothing due yet */
	plan("* * * * *", t0, "2030-01-01T00:00:59Z", SKL_CATCH_UP_ALL, 100, &p);
	assert_false(p.any_due);
	expect_plan(&p, 0, NULL, NULL, "2030-01-01T00:01:00Z");
	skl__cron_plan_free(&p);
	/* two hours down: none, latest, all (bounded) */
	plan("* * * * *", t0, t2h, SKL_CATCH_UP_NONE, 100, &p);
	assert_true(p.behind && p.any_due);
	assert_int_equal(p.newest, T(t2h));
	expect_plan(&p, 0, NULL, NULL, "2030-01-01T02:01:00Z");
	skl__cron_plan_free(&p);
	plan("* * * * *", t0, t2h, SKL_CATCH_UP_LATEST, 100, &p);
	expect_plan(&p, 1, t2h, t2h, "2030-01-01T02:01:00Z");
	skl__cron_plan_free(&p);
	plan("* * * * *", t0, t2h, SKL_CATCH_UP_ALL, 500, &p);
	expect_plan(&p, 120, "2030-01-01T00:01:00Z", t2h, "2030-01-01T02:01:00Z");
	skl__cron_plan_free(&p);
	plan("* * * * *", t0, t2h, SKL_CATCH_UP_ALL, 50, &p);
	expect_plan(&p, 50, "2030-01-01T01:11:00Z", t2h, "2030-01-01T02:01:00Z");
	skl__cron_plan_free(&p);
	/* a leap day missed for years: latest runs the newest one only */
	plan("0 0 29 2 *", "2024-03-01T00:00:00Z", "2033-01-01T00:00:00Z", SKL_CATCH_UP_LATEST, 100,
	     &p);
	expect_plan(&p, 1, "2032-02-29T00:00:00Z", "2032-02-29T00:00:00Z", "2036-02-29T00:00:00Z");
	skl__cron_plan_free(&p);
	/* thirty years behind a schedule firing every second: bounded work */
	plan("@every 1s", "2000-01-01T00:00:00Z", t2h, SKL_CATCH_UP_ALL, 100, &p);
	expect_plan(&p, 100, "2030-01-01T01:58:21Z", t2h, "2030-01-01T02:00:01Z");
	skl__cron_plan_free(&p);
}

/* ---- any thread, any zone ---- */

typedef struct thread_arg {
	const char *zone;
	int64_t sum;
} thread_arg;

static void *thread_main(void *arg)
{
	thread_arg *a = arg;
	skl_cron_expr *e = NULL;
	skl_error err;
	if (skl_cron_parse("*/15 * * * *", &e, &err) != SKL_OK)
		return NULL;
	int64_t t = 1700000000;
	for (int i = 0; i < 3000; i++) {
		if (skl_cron_next(e, a->zone, t, &t, &err) != SKL_OK)
			break;
		a->sum += t % 100003;
	}
	skl_cron_expr_free(e);
	return NULL;
}

static void threads(void **state)
{
	(void)state;
	const char *names[] = {"Europe/Berlin", "America/New_York", "Asia/Tokyo", "Europe/Berlin",
	                       "Australia/Adelaide", "America/New_York", "Africa/Cairo", "Asia/Tokyo"};
	enum { N = 8 };
	thread_arg par[N], seq[N];
	pthread_t th[N];
	for (int i = 0; i < N; i++) {
		par[i] = (thread_arg){.zone = names[i]};
		seq[i] = par[i];
		pthread_create(&th[i], NULL, thread_main, &par[i]);
	}
	for (int i = 0; i < N; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < N; i++) {
		thread_main(&seq[i]);
		if (par[i].sum != seq[i].sum || seq[i].sum == 0)
			fail_msg("%s: %lld in a thread, %lld alone", names[i], (long long)par[i].sum,
			         (long long)seq[i].sum);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(expression_table), cmocka_unit_test(dst_new_york),
		cmocka_unit_test(dst_berlin),       cmocka_unit_test(rejections),
		cmocka_unit_test(zones),            cmocka_unit_test(offsets_match_libc),
		cmocka_unit_test(time_text),        cmocka_unit_test(catch_up_plans),
		cmocka_unit_test(threads),          cmocka_unit_test(slim_and_broken_files),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
