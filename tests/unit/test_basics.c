/* Unit tests: SQLSTATE classification, result-code names, durations,
 * backoff bounds and spread. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/internal.h"
#include "skiplock.h"

static void sqlstates(void **state)
{
	(void)state;
	const char *transient[] = {"08000", "08003", "08006", "08001", "08004", "57P01",
	                           "57P02", "57P03", "40001", "40P01", "55P03", "53300",
	                           "", NULL};
	const char *permanent[] = {"42P01", "23505", "42601", "22P02", "57014", "53200",
	                           "25P02", "28P01", "3D000", "XX000", "40002", "55000"};
	for (size_t i = 0; i < SKL_ARRAY_LEN(transient); i++)
		if (!skl_sqlstate_is_transient(transient[i]))
			fail_msg("%s should be transient", transient[i] ? transient[i] : "NULL");
	for (size_t i = 0; i < SKL_ARRAY_LEN(permanent); i++)
		if (skl_sqlstate_is_transient(permanent[i]))
			fail_msg("%s should be permanent", permanent[i]);
}

static void strerror_complete(void **state)
{
	(void)state;
	for (int rc = 0; rc < SKL_RC_LAST; rc++) {
		const char *s = skl_strerror((skl_rc)rc);
		if (s == NULL || strcmp(s, "unknown result code") == 0)
			fail_msg("result code %d has no name", rc);
	}
	assert_string_equal(skl_strerror(SKL_RC_LAST), "unknown result code");
	assert_string_equal(skl_strerror((skl_rc)-1), "unknown result code");
}

static void durations(void **state)
{
	(void)state;
	const struct { const char *s; int64_t ms; } ok[] = {
		{"250ms", 250}, {"5s", 5000}, {"5", 5000}, {"2m", 120000}, {"1h30m", 5400000},
		{"1d", 86400000}, {"0s", 0}, {"1m30s", 90000}, {"10min", 600000}, {"3sec", 3000},
	};
	for (size_t i = 0; i < SKL_ARRAY_LEN(ok); i++) {
		int64_t ms = -1;
		skl_error err;
		if (skl_duration_parse(ok[i].s, &ms, &err) != SKL_OK || ms != ok[i].ms)
			fail_msg("%s: got %lld (%s), want %lld", ok[i].s, (long long)ms, err.message,
			         (long long)ok[i].ms);
	}
	const char *bad[] = {"", "-5s", "5x", "s", "1.5s", "5 s", "1h30", "99999999999999999d",
	                     "abc", NULL};
	for (size_t i = 0; i < SKL_ARRAY_LEN(bad); i++) {
		int64_t ms = 77;
		skl_error err;
		if (skl_duration_parse(bad[i], &ms, &err) != SKL_INVALID)
			fail_msg("\"%s\" accepted as %lld", bad[i] ? bad[i] : "NULL", (long long)ms);
		assert_int_equal(ms, 77);
		assert_true(strlen(err.message) > 0);
	}
}

static void backoff_bounds(void **state)
{
	(void)state;
	assert_int_equal(skl__backoff_ceiling(0, 50, 2000), 50);
	assert_int_equal(skl__backoff_ceiling(1, 50, 2000), 100);
	assert_int_equal(skl__backoff_ceiling(5, 50, 2000), 1600);
	assert_int_equal(skl__backoff_ceiling(6, 50, 2000), 2000);
	assert_int_equal(skl__backoff_ceiling(1000, 50, 2000), 2000);
	uint64_t rng = 42;
	for (int attempt = 0; attempt < 12; attempt++) {
		int64_t ceiling = skl__backoff_ceiling(attempt, 50, 2000);
		for (int i = 0; i < 2000; i++) {
			int64_t d = skl__backoff_full(attempt, 50, 2000, &rng);
			if (d < 0 || d > ceiling)
				fail_msg("attempt %d: delay %lld outside [0, %lld]", attempt, (long long)d,
				         (long long)ceiling);
		}
	}
}

/* Full jitter: uniform in [0, ceiling]: mean near ceiling/2, every decile
 * populated, and no lockstep (few equal values). */
static void backoff_spread(void **state)
{
	(void)state;
	uint64_t rng = skl__seed();
	enum { N = 20000 };
	int64_t ceiling = 1000;
	int deciles[10] = {0};
	double sum = 0;
	for (int i = 0; i < N; i++) {
		int64_t d = skl__backoff_full(10, 1000, 1000, &rng);
		sum += (double)d;
		deciles[d * 10 / (ceiling + 1)]++;
	}
	double mean = sum / N;
	if (fabs(mean - ceiling / 2.0) > ceiling * 0.03)
		fail_msg("mean %.1f not within 3%% of %.1f", mean, ceiling / 2.0);
	for (int k = 0; k < 10; k++)
		if (deciles[k] < N / 10 * 0.85 || deciles[k] > N / 10 * 1.15)
			fail_msg("decile %d holds %d of %d draws", k, deciles[k], N);
}

static void rng_independent(void **state)
{
	(void)state;
	uint64_t a = skl__seed(), b = skl__seed();
	assert_true(a != b);
	assert_true(skl__rand(&a) != skl__rand(&b));
	uint64_t z = 0;
	assert_true(skl__rand(&z) != 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sqlstates),      cmocka_unit_test(strerror_complete),
		cmocka_unit_test(durations),      cmocka_unit_test(backoff_bounds),
		cmocka_unit_test(backoff_spread), cmocka_unit_test(rng_independent),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
