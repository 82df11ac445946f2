/*
 * backoff.c — capped exponential backoff with full jitter.
 *
 * The ceiling of retry n (0-based) is min(cap, base * 2^n); the delay is
 * uniform in [0, ceiling].  Full jitter spreads a fleet's retries instead of
 * sending them in lockstep (see the retry-storm incident in the seeds).
 */
#include "internal.h"

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

int64_t skl__backoff_full(int attempt, int64_t base_ms, int64_t cap_ms, uint64_t *rng)
{
	int64_t ceiling = skl__backoff_ceiling(attempt, base_ms, cap_ms);
	return (int64_t)(skl__rand01(rng) * (double)(ceiling + 1));
}
