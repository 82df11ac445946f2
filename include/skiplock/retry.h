/*
 * SPDX-License-Identifier: MIT
 * skiplock/retry.h — retry policy: backoff strategies, and the fleet-wide
 * circuit breakers in skiplock.breakers (docs/retry.md has the design).
 *
 * Backoff: the delay before retry n (n = 0 after the first failed attempt)
 *  - full          uniform in [0, min(cap, base * 2^n)]  (the default)
 *  - equal         c/2 + uniform in [0, c/2], c = min(cap, base * 2^n)
 *  - decorrelated  min(cap, uniform in [base, 3 * previous delay])
 *  - exponential   min(cap, base * 2^n), no jitter
 *  - fixed         base, every time (capped)
 * A strategy is chosen per job (enqueue), else per kind (worker), else the
 * worker's default.  The retry budget and the handler's own delay
 * (skl_job_retry_after) are applied by the worker (skiplock/worker.h).
 *
 * Circuit breakers: one row per kind in skiplock.breakers, shared by every
 * worker of the fleet.  Only kinds with a row have a breaker (a worker
 * creates the row with skl_worker_breaker; an operator with
 * skl_breaker_force).  Outcomes recorded by any worker are counted in the
 * row by the same statement that records them; claims skip kinds whose
 * breaker is open and admit at most `probes` jobs fleet-wide while it is
 * half-open.  Every transition is a conditional UPDATE: no lock is held
 * beyond one statement.
 *
 * Memory: arrays returned here belong to the caller and are freed with
 * skl_breakers_free.  Thread-safety: the pure functions may be called from
 * any thread; the others as skl_client (one thread at a time per client).
 */
#ifndef SKIPLOCK_RETRY_H
#define SKIPLOCK_RETRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "skiplock/client.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum skl_backoff {
	SKL_BACKOFF_DEFAULT = 0,     /* not set: the next level decides */
	SKL_BACKOFF_FULL,
	SKL_BACKOFF_EQUAL,
	SKL_BACKOFF_DECORRELATED,
	SKL_BACKOFF_EXPONENTIAL,
	SKL_BACKOFF_FIXED
} skl_backoff;

/* "full", "equal", …; NULL for SKL_BACKOFF_DEFAULT or an unknown value. */
SKL_API const char *skl_backoff_name(skl_backoff b);
/* Parses a strategy name; SKL_INVALID (and *out unchanged) when unknown. */
SKL_API skl_rc skl_backoff_parse(const char *name, skl_backoff *out);

/* The delay in ms before retry n (0-based) with the given strategy, base
 * and cap (both > 0, else 0 is returned).  prev_ms is the previous delay
 * (decorrelated only; 0 or less means base).  *rng is a non-zero
 * generator state, advanced.  SKL_BACKOFF_DEFAULT means full. */
SKL_API int64_t skl_backoff_delay(skl_backoff b, int n, int64_t base_ms, int64_t cap_ms,
                                  int64_t prev_ms, uint64_t *rng);

/* A breaker's settings (defaults modelled on resilience4j). */
typedef struct skl_breaker_config {
	int failure_pct;      /* opens at this failure rate; default 50 */
	int min_calls;        /* ... once the window holds this many calls; default 10 */
	int window_calls;     /* the window restarts after this many calls; default 100 */
	int64_t window_ms;    /* ... or when it is this old; default 60000 */
	int64_t open_ms;      /* open this long before half-open; default 60000 */
	int probes;           /* jobs admitted fleet-wide while half-open; default 3 */
} skl_breaker_config;
/* Fills c with the defaults above. */
SKL_API void skl_breaker_config_init(skl_breaker_config *c);

/* Parses "rate:50,min:10,calls:100,window:60s,open:60s,probes:3" (any
 * subset, any order) over the values already in *c.  SKL_INVALID with a
 * message naming the bad part. */
SKL_API skl_rc skl_breaker_config_parse(const char *spec, skl_breaker_config *c,
                                        skl_error *err);

/* One breaker as stored. */
typedef struct skl_breaker_info {
	const char *kind;
	const char *state;        /* "closed", "open" or "half_open" */
	skl_breaker_config config;
	int calls, failures;      /* in the current window (closed) */
	int probes_left;          /* half-open: probes not yet admitted */
	int probe_successes;      /* half-open: probes that succeeded */
	int64_t open_for_ms;      /* open: until half-open; -1 forced open; 0 otherwise */
	const char *changed_at;   /* last transition, ISO 8601 UTC */
	void *internal;           /* owned by the library */
} skl_breaker_info;

/* Every breaker, by kind.  *rows is NULL when there are none. */
SKL_API skl_rc skl_breakers_list(skl_client *c, skl_breaker_info **rows, size_t *n,
                                 skl_error *err);
/* Frees what skl_breakers_list returned (n entries).  Accepts NULL. */
SKL_API void skl_breakers_free(skl_breaker_info *rows, size_t n);

/* Creates kind's breaker with config, or updates the settings of an
 * existing one (its state is kept).  Idempotent.  SKL_INVALID when a
 * setting is out of the range the database keeps (failure_pct 1 to 100,
 * min_calls and window_calls 1 to 1000000, probes 1 to 10000, window_ms
 * and open_ms 1 ms to 100 years: what skl_breaker_config_parse accepts). */
SKL_API skl_rc skl_breaker_configure(skl_client *c, const char *kind,
                                     const skl_breaker_config *config, skl_error *err);

/* Operator action: open forces kind's breaker open until closed (creating
 * it with default settings when missing); !open closes it and starts a
 * new window.  skl_breaker_set (skiplock/control.h) with the actor
 * "skl_breaker_force", role "api": recorded in skiplock.breaker_events and
 * in the action log.  SKL_EMPTY when closing a kind with no breaker. */
SKL_API skl_rc skl_breaker_force(skl_client *c, const char *kind, bool open, skl_error *err);

#ifdef __cplusplus
}
#endif
#endif
