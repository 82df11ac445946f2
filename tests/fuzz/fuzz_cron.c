/*
 * fuzz_cron.c — cron expressions and zone names.  Input: the expression,
 * optionally a newline and a zone name.  A parsed expression's next fire
 * time is strictly later than the instant asked about, and the next one
 * after it later still; errors are SKL_INVALID with a message.
 */
#include "fuzz.h"
#include "skiplock.h"

static void check_next(const skl_cron_expr *e, const char *zone, int64_t after)
{
	int64_t next = 0, next2 = 0;
	skl_error err;
	skl_rc rc = skl_cron_next(e, zone, after, &next, &err);
	if (rc == SKL_OK) {
		if (next <= after)
			fuzz_fail("next %lld not after %lld", (long long)next, (long long)after);
		char buf[SKL_CRON_LOCAL_LEN];
		skl_cron_format_utc(next, buf);
		skl_cron_format_local(next, zone, buf, &err);
		if (skl_cron_next(e, zone, next, &next2, &err) == SKL_OK && next2 <= next)
			fuzz_fail("second fire %lld not after %lld", (long long)next2, (long long)next);
	} else if (rc != SKL_EMPTY && rc != SKL_INVALID) {
		fuzz_fail("skl_cron_next: rc %d", rc);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_cstr(data, size);
	if (s == NULL)
		return 0;
	char *nl = strchr(s, '\n');
	const char *zone = "UTC";
	if (nl) {
		*nl = '\0';
		zone = nl + 1;
	}
	skl_error err;
	if (skl_cron_zone_check(zone, &err) != SKL_OK)
		zone = "Europe/Berlin";
	skl_cron_expr *e = NULL;
	skl_rc rc = skl_cron_parse(s, &e, &err);
	if (rc == SKL_OK) {
		check_next(e, zone, 1711846800);  /* 2024-03-31T01:00:00Z, a DST change */
		check_next(e, zone, 253402300000); /* near the end of year 9999 */
		check_next(e, zone, -62135596700); /* near the start of year 1 */
	} else if (rc != SKL_INVALID || e != NULL || err.message[0] == '\0') {
		fuzz_fail("\"%s\": rc %d without a message", s, rc);
	}
	skl_cron_expr_free(e);
	free(s);
	return 0;
}
