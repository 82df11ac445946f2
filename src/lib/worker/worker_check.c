/*
 * worker_check.c — a worker's options against their documented bounds
 * (skiplock/worker.h), checked by skl_worker_new before anything starts,
 * so a value the database would refuse on every claim (a queue name that
 * is not UTF-8, one over its length) or that would flood it (a 1 ms lease)
 * is refused once, with SKL_INVALID, instead of failing forever.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "skiplock/lease.h"
#include "worker/worker_int.h"

/* Bytes of the UTF-8 sequence at s (as PostgreSQL accepts it: no
 * overlong forms, no surrogates, at most U+10FFFF), or 0 if invalid. */
static size_t utf8_seq(const unsigned char *s)
{
	if (s[0] < 0x80)
		return 1;
	size_t n = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3
	         : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
	for (size_t i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) ||
	    (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))
		return 0;
	return n;
}

void skl__utf8_scrub(char *s)
{
	for (size_t i = 0, n; s[i]; i += n)
		if ((n = utf8_seq((const unsigned char *)s + i)) == 0) {
			s[i] = '?';
			n = 1;
		}
}

skl_rc skl__check_name(const char *what, const char *s, size_t max_chars, size_t max_bytes,
                       skl_error *err)
{
	size_t chars = 0, bytes = s ? strlen(s) : 0;
	for (size_t i = 0, n; i < bytes; i += n, chars++)
		if ((n = utf8_seq((const unsigned char *)s + i)) == 0)
			return skl__seterr(err, SKL_INVALID, "%s is not valid UTF-8 (byte %zu)", what,
			                   i + 1);
	if (chars == 0 || chars > max_chars || bytes > max_bytes)
		return skl__seterr(err, SKL_INVALID, "%s must be 1 to %zu %s (got %zu)", what,
		                   max_bytes == max_chars ? max_bytes : max_chars,
		                   max_bytes == max_chars ? "bytes" : "characters",
		                   max_bytes == max_chars ? bytes : chars);
	return SKL_OK;
}

/* "90s", "5m", "24h", "250ms": the largest exact unit. */
static void fmt_ms(char *buf, size_t n, int64_t ms)
{
	if (ms != 0 && ms % 3600000 == 0)
		snprintf(buf, n, "%" PRId64 "h", ms / 3600000);
	else if (ms != 0 && ms % 60000 == 0)
		snprintf(buf, n, "%" PRId64 "m", ms / 60000);
	else if (ms != 0 && ms % 1000 == 0)
		snprintf(buf, n, "%" PRId64 "s", ms / 1000);
	else
		snprintf(buf, n, "%" PRId64 "ms", ms);
}

typedef struct bound {
	const char *name;
	size_t off;
	int64_t min, max;
} bound;

#define B(name, field, min, max) {name, offsetof(skl_worker_options, field), min, max}
static const bound bounds[] = {
	B("lease", lease_ms, SKL_WORKER_LEASE_MIN_MS, SKL_WORKER_LEASE_MAX_MS),
	B("poll", poll_ms, SKL_WORKER_POLL_MIN_MS, SKL_WORKER_POLL_MAX_MS),
	B("poll-max", poll_max_ms, SKL_WORKER_POLL_MIN_MS, SKL_WORKER_POLL_MAX_MS),
	B("poll-idle", poll_idle_ms, SKL_WORKER_POLL_MIN_MS, SKL_WORKER_IDLE_MAX_MS),
	B("rescue-every", rescue_every_ms, SKL_WORKER_POLL_MIN_MS, SKL_WORKER_POLL_MAX_MS),
	B("cron-every", cron_every_ms, SKL_WORKER_POLL_MIN_MS, SKL_WORKER_POLL_MAX_MS),
	B("metrics-every", queue_stats_every_ms, SKL_WORKER_POLL_MIN_MS, SKL_WORKER_POLL_MAX_MS),
	B("timeout", job_timeout_ms, 1, SKL_WORKER_TIMEOUT_MAX_MS),
	B("kill-grace", kill_grace_ms, 1, SKL_WORKER_POLL_MAX_MS),
	B("shutdown-timeout", shutdown_timeout_ms, 1, SKL_WORKER_LEASE_MAX_MS),
	B("backoff-base", backoff_base_ms, 1, SKL_WORKER_TIMEOUT_MAX_MS),
	B("backoff-cap", backoff_cap_ms, 1, SKL_WORKER_TIMEOUT_MAX_MS),
};
#undef B

/* Durations: 0 is the default; anything else must be within bounds. */
static skl_rc check_durations(const skl_worker_options *o, skl_error *err)
{
	for (size_t i = 0; i < SKL_ARRAY_LEN(bounds); i++) {
		const bound *b = &bounds[i];
		int64_t v = *(const int64_t *)((const char *)o + b->off);
		if (v == 0 || (v >= b->min && v <= b->max))
			continue;
		char lo[32], hi[32], got[32];
		fmt_ms(lo, sizeof(lo), b->min);
		fmt_ms(hi, sizeof(hi), b->max);
		fmt_ms(got, sizeof(got), v);
		return skl__seterr(err, SKL_INVALID, "%s must be from %s to %s (got %s)", b->name, lo,
		                   hi, got);
	}
	return SKL_OK;
}

static skl_rc check_counts(const skl_worker_options *o, skl_error *err)
{
	if (o->concurrency < 0 || o->concurrency > SKL_WORKER_CONCURRENCY_MAX)
		return skl__seterr(err, SKL_INVALID, "concurrency must be from 1 to %d (got %d)",
		                   SKL_WORKER_CONCURRENCY_MAX, o->concurrency);
	if (o->prefetch < 0 || o->prefetch > SKL_WORKER_CONCURRENCY_MAX)
		return skl__seterr(err, SKL_INVALID, "prefetch must be from 0 to %d (got %d)",
		                   SKL_WORKER_CONCURRENCY_MAX, o->prefetch);
	int conc = o->concurrency > 0 ? o->concurrency : 8, room = conc + o->prefetch;
	int most = room < SKL_WORKER_CONNECTIONS_MAX ? room : SKL_WORKER_CONNECTIONS_MAX;
	if (o->connections < 0 || o->connections > most)
		return skl__seterr(err, SKL_INVALID, "connections must be from 1 to %d (got %d)%s",
		                   most, o->connections,
		                   most < SKL_WORKER_CONNECTIONS_MAX
		                       ? ": at most concurrency + prefetch" : "");
	if (o->retry_budget_pct > 10000)
		return skl__seterr(err, SKL_INVALID, "retry budget must be at most 10000%% (got %d)",
		                   o->retry_budget_pct);
	if (o->nqueues > SKL_WORKER_QUEUES_MAX || (o->nqueues > 0 && o->queues == NULL))
		return skl__seterr(err, SKL_INVALID, "at most %d queues, given as an array",
		                   SKL_WORKER_QUEUES_MAX);
	if (o->nhandler_env > 0 && o->handler_env == NULL)
		return skl__seterr(err, SKL_INVALID, "handler_env is NULL");
	return SKL_OK;
}

static skl_rc check_strings(const skl_worker_options *o, skl_error *err)
{
	for (size_t i = 0; i < o->nqueues; i++)
		if (skl__check_name("queue name", o->queues[i], SKL_KIND_MAX, SKL_KIND_MAX, err) !=
		    SKL_OK)
			return SKL_INVALID;
	if (o->owner && skl__check_name("owner", o->owner, SKL_LEASE_NAME_MAX,
	                                4 * SKL_LEASE_NAME_MAX, err) != SKL_OK)
		return SKL_INVALID;
	for (size_t i = 0; i < o->nhandler_env; i++) {
		const char *v = o->handler_env[i];
		if (v == NULL || *v == '\0' || strchr(v, '=') || strncmp(v, "SKIPLOCK_", 9) == 0)
			return skl__seterr(err, SKL_INVALID,
			                   "handler environment: \"%.64s\" is not a variable name that "
			                   "may be passed (SKIPLOCK_* are the job's own)", v ? v : "");
	}
	return SKL_OK;
}

skl_rc skl__worker_options_check(const skl_worker_options *o, skl_error *err)
{
	if (check_durations(o, err) != SKL_OK || check_counts(o, err) != SKL_OK ||
	    check_strings(o, err) != SKL_OK)
		return SKL_INVALID;
	return SKL_OK;
}
