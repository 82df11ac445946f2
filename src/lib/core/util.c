/*
 * util.c — clocks, sleeping, randomness and small string helpers.
 *
 * Randomness is per handle (xorshift64* seeded from getrandom), so no lock
 * and no global state is shared between threads.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/internal.h"

int64_t skl__now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void skl__sleep_ms(int64_t ms)
{
	if (ms <= 0)
		return;
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

uint64_t skl__seed(void)
{
	uint64_t s = 0;
	if (getrandom(&s, sizeof(s), 0) != (ssize_t)sizeof(s)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		s = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)(uintptr_t)&s;
	}
	return s ? s : 0x9e3779b97f4a7c15ULL;
}

uint64_t skl__rand(uint64_t *state)
{
	uint64_t x = *state ? *state : 0x9e3779b97f4a7c15ULL;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545F4914F6CDD1DULL;
}

double skl__rand01(uint64_t *state)
{
	return (double)(skl__rand(state) >> 11) * (1.0 / 9007199254740992.0);
}

char *skl__strdup(const char *s)
{
	return s ? strdup(s) : NULL;
}
