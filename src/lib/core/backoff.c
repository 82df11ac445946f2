/*
 * backoff.c — retry delays: capped exponential backoff with full jitter
 * (the default, also used for the library's own reconnects), equal and
 * decorrelated jitter, and the unjittered exponential and fixed delays.
 *
 * Jitter spreads a fleet's retries instead of sending them in lockstep (see
 * the retry-storm incident in the seeds); exponential and fixed exist for
 * tests and for people who insist.
 */
#include <string.h>

#include "core/internal.h"
#include "skiplock/retry.h"

int64_t skl__backoff_ceiling(int attempt, int64_t base_ms, int64_t cap_ms)
{
	if (base_ms <= 0 || cap_ms <= 0)
		return 0;
	if (attempt < 0)
		attempt = 0;
	int64_t v = base_ms;
	for (int i = 0; i < attempt && v < cap_ms; i++)
		v *= 2;
	return v < cap_ms ? v : cap_ms;
}

/* Uniform integer in [lo, hi]. */
static int64_t uniform(int64_t lo, int64_t hi, uint64_t *rng)
{
	if (hi <= lo)
		return lo;
	return lo + (int64_t)(skl__rand01(rng) * (double)(hi - lo + 1));
}

int64_t skl__backoff_full(int attempt, int64_t base_ms, int64_t cap_ms, uint64_t *rng)
{
	return uniform(0, skl__backoff_ceiling(attempt, base_ms, cap_ms), rng);
}

static const char *const names[] = {NULL, "full", "equal", "decorrelated", "exponential",
                                     "fixed"};

const char *skl_backoff_name(skl_backoff b)
{
	return (unsigned)b < SKL_ARRAY_LEN(names) ? names[b] : NULL;
}

skl_rc skl_backoff_parse(const char *name, skl_backoff *out)
{
	for (size_t i = 1; name && i < SKL_ARRAY_LEN(names); i++)
		if (strcmp(name, names[i]) == 0) {
			*out = (skl_backoff)i;
			return SKL_OK;
		}
	return SKL_INVALID;
}

int64_t skl_backoff_delay(skl_backoff b, int n, int64_t base_ms, int64_t cap_ms,
                          int64_t prev_ms, uint64_t *rng)
{
	if (base_ms <= 0 || cap_ms <= 0)
		return 0;
	int64_t c = skl__backoff_ceiling(n, base_ms, cap_ms);
	switch (b) {
	case SKL_BACKOFF_EQUAL: return c / 2 + uniform(0, c - c / 2, rng);
	case SKL_BACKOFF_EXPONENTIAL: return c;
	case SKL_BACKOFF_FIXED: return base_ms < cap_ms ? base_ms : cap_ms;
	case SKL_BACKOFF_DECORRELATED: {
		int64_t prev = prev_ms > 0 ? prev_ms : base_ms;
		int64_t hi = prev > INT64_MAX / 3 ? INT64_MAX : prev * 3;
		int64_t d = uniform(base_ms < cap_ms ? base_ms : cap_ms, hi < cap_ms ? hi : cap_ms, rng);
		return d < cap_ms ? d : cap_ms;
	}
	case SKL_BACKOFF_DEFAULT:
	case SKL_BACKOFF_FULL:
	default: return uniform(0, c, rng);
	}
}
