/* Unit tests: the backoff strategies (names, bounds, means, spread) and
 * the breaker settings parser.  Generators are seeded with fixed values so
 * every run draws the same numbers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/internal.h"
#include "skiplock.h"

static void names(void **state)
{
	(void)state;
	const char *all[] = {"full", "equal", "decorrelated", "exponential", "fixed"};
	for (size_t i = 0; i < SKL_ARRAY_LEN(all); i++) {
		skl_backoff b = SKL_BACKOFF_DEFAULT;
		assert_int_equal(skl_backoff_parse(all[i], &b), SKL_OK);
		assert_string_equal(skl_backoff_name(b), all[i]);
	}
	skl_backoff b = SKL_BACKOFF_FIXED;
	assert_int_equal(skl_backoff_parse("jitter", &b), SKL_INVALID);
	assert_int_equal(skl_backoff_parse("", &b), SKL_INVALID);
	assert_int_equal(skl_backoff_parse(NULL, &b), SKL_INVALID);
	assert_int_equal(b, SKL_BACKOFF_FIXED);
	assert_null(skl_backoff_name(SKL_BACKOFF_DEFAULT));
	assert_null(skl_backoff_name((skl_backoff)99));
}

/* Mean of `n` delays for retry `k`, checking each lies in [lo, hi]. */
static double sample_mean(skl_backoff b, int k, int64_t base, int64_t cap, int64_t prev,
                          int64_t lo, int64_t hi, uint64_t *rng)
{
	const int n = 20000;
	double sum = 0;
	for (int i = 0; i < n; i++) {
		int64_t d = skl_backoff_delay(b, k, base, cap, prev, rng);
		if (d < lo || d > hi)
			fail_msg("%s retry %d: %lld outside [%lld, %lld]", skl_backoff_name(b), k,
			         (long long)d, (long long)lo, (long long)hi);
		sum += (double)d;
	}
	return sum / n;
}

static void assert_near(double got, double want, double tol, const char *what)
{
	if (got < want * (1 - tol) - 1 || got > want * (1 + tol) + 1)
		fail_msg("%s: mean %.1f, expected %.1f within %.0f%%", what, got, want, tol * 100);
}

static void full_and_equal(void **state)
{
	(void)state;
	uint64_t rng = 0x9e3779b97f4a7c15ULL;
	for (int k = 0; k < 12; k++) {
		int64_t c = skl__backoff_ceiling(k, 100, 60000);
		assert_near(sample_mean(SKL_BACKOFF_FULL, k, 100, 60000, 0, 0, c, &rng), c / 2.0,
		            0.03, "full");
		assert_near(sample_mean(SKL_BACKOFF_DEFAULT, k, 100, 60000, 0, 0, c, &rng), c / 2.0,
		            0.03, "default");
		assert_near(sample_mean(SKL_BACKOFF_EQUAL, k, 100, 60000, 0, c / 2, c, &rng),
		            c * 0.75, 0.03, "equal");
	}
}

static void unjittered(void **state)
{
	(void)state;
	uint64_t rng = 7;
	int64_t want[] = {250, 500, 1000, 2000, 4000, 5000, 5000};
	for (int k = 0; k < 7; k++) {
		assert_int_equal(skl_backoff_delay(SKL_BACKOFF_EXPONENTIAL, k, 250, 5000, 0, &rng),
		                 want[k]);
		assert_int_equal(skl_backoff_delay(SKL_BACKOFF_FIXED, k, 250, 5000, 0, &rng), 250);
	}
	assert_int_equal(skl_backoff_delay(SKL_BACKOFF_FIXED, 3, 9000, 5000, 0, &rng), 5000);
	/* a zero base or cap means no delay, never a division or a loop */
	assert_int_equal(skl_backoff_delay(SKL_BACKOFF_FULL, 3, 0, 5000, 0, &rng), 0);
	assert_int_equal(skl_backoff_delay(SKL_BACKOFF_EQUAL, 3, 100, 0, 0, &rng), 0);
	/* huge retry numbers stay at the cap */
	assert_int_equal(skl_backoff_delay(SKL_BACKOFF_EXPONENTIAL, 100000, 1, 3600000, 0, &rng),
	                 3600000);
}

static void decorrelated(void **state)
{
	(void)state;
	uint64_t rng = 0xdeadbeefcafeULL;
	/* from a previous delay p: uniform in [base, min(cap, 3p)] */
	int64_t prevs[] = {0, 100, 400, 1500, 20000};
	for (size_t i = 0; i < SKL_ARRAY_LEN(prevs); i++) {
		int64_t p = prevs[i] > 0 ? prevs[i] : 100;
		int64_t hi = 3 * p < 10000 ? 3 * p : 10000;
		double m = sample_mean(SKL_BACKOFF_DECORRELATED, 0, 100, 10000, prevs[i], 100, hi, &rng);
		assert_near(m, (100.0 + (double)hi) / 2.0, 0.03, "decorrelated");
	}
	/* a chain: each delay within [base, min(cap, 3 * the one before)] */
	int64_t prev = 0;
	for (int k = 0; k < 1000; k++) {
		int64_t d = skl_backoff_delay(SKL_BACKOFF_DECORRELATED, k, 100, 10000, prev, &rng);
		int64_t hi = prev > 0 ? (3 * prev < 10000 ? 3 * prev : 10000) : 300;
		if (d < 100 || d > hi)
			fail_msg("chain step %d: %lld outside [100, %lld]", k, (long long)d, (long long)hi);
		prev = d;
	}
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* 1,000 jobs that failed at the same moment, on retry 12 (ceiling 1 h):
 * full jitter schedules no two at the same millisecond; exponential
 * schedules all of them at the same one. */
static void simultaneous_failures(void **state)
{
	(void)state;
	uint64_t rng = 0x2545f4914f6cdd1dULL;
	int64_t full[1000], expo[1000];
	for (int i = 0; i < 1000; i++) {
		full[i] = skl_backoff_delay(SKL_BACKOFF_FULL, 12, 1000, 3600000, 0, &rng);
		expo[i] = skl_backoff_delay(SKL_BACKOFF_EXPONENTIAL, 12, 1000, 3600000, 0, &rng);
	}
	qsort(full, 1000, sizeof(int64_t), cmp64);
	for (int i = 1; i < 1000; i++) {
		if (full[i] == full[i - 1])
			fail_msg("two retries at %lld ms", (long long)full[i]);
		assert_int_equal(expo[i], expo[0]);
	}
}

static void breaker_settings(void **state)
{
	(void)state;
	skl_breaker_config c;
	skl_breaker_config_init(&c);
	assert_int_equal(c.failure_pct, 50);
	assert_int_equal(c.window_calls, 100);
	assert_int_equal(c.window_ms, 60000);
	assert_int_equal(c.open_ms, 60000);
	assert_int_equal(c.probes, 3);
	skl_error err;
	assert_int_equal(skl_breaker_config_parse("rate:80%,open:2s,probes:2,min:4", &c, &err),
	                 SKL_OK);
	assert_int_equal(c.failure_pct, 80);
	assert_int_equal(c.open_ms, 2000);
	assert_int_equal(c.probes, 2);
	assert_int_equal(c.min_calls, 4);
	assert_int_equal(c.window_calls, 100);
	const char *bad[] = {"rate:0", "rate:101", "open:-1s", "probes:0", "window:0s", "speed:3",
	                     "rate", "calls:x", "open:1s,", "min:-2"};
	for (size_t i = 0; i < SKL_ARRAY_LEN(bad); i++) {
		skl_breaker_config t = c;
		if (skl_breaker_config_parse(bad[i], &t, &err) != SKL_INVALID)
			fail_msg("\"%s\" was accepted", bad[i]);
		assert_memory_equal(&t, &c, sizeof(c));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(names),        cmocka_unit_test(full_and_equal),
		cmocka_unit_test(unjittered),   cmocka_unit_test(decorrelated),
		cmocka_unit_test(simultaneous_failures), cmocka_unit_test(breaker_settings),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
