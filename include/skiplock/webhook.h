/*
 * SPDX-License-Identifier: MIT
 * skiplock/webhook.h — webhook handlers: a worker delivers a kind's jobs by
 * HTTP POST (libcurl).
 *
 * Each attempt POSTs the job's payload as `Content-Type: application/json`
 * with `Idempotency-Key: skiplock-<job id>` (the same on every attempt, so
 * the receiver can drop duplicates), `X-Skiplock-Kind` and
 * `X-Skiplock-Attempt`, and, when a secret is configured,
 * `X-Skiplock-Signature: sha256=<hex HMAC-SHA256 of the body>`.  Redirects
 * are not followed.
 *
 * Outcomes:
 *  - 2xx: completed; the response body (at most 64 KiB) is kept as the
 *    result when it is JSON.
 *  - 429 and 503: retried; a `Retry-After` (seconds or an HTTP date) sets
 *    the delay, at most the backoff cap; without one the backoff applies.
 *  - any other 4xx: discarded at once (retrying cannot help).
 *  - 5xx, 3xx, timeouts, DNS and connection errors: a failed attempt,
 *    retried with backoff until max_attempts.
 * The attempt's error is "HTTP <status>: <start of the body>" or the
 * transport error; it never contains the secret or the URL's password.
 *
 * Connections are reused across jobs: each handler thread keeps one libcurl
 * handle (and its connection cache) for its whole life.
 *
 * Thread-safety: register handlers from one thread before skl_worker_run;
 * skl_retry_after_ms is pure and may be called from any thread.
 */
#ifndef SKIPLOCK_WEBHOOK_H
#define SKIPLOCK_WEBHOOK_H

#include <stdbool.h>
#include <stdint.h>

#include "skiplock/worker.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SKL_WEBHOOK_BODY_MAX (64 * 1024) /* bytes of response body kept */

typedef struct skl_webhook_opts {
	int64_t timeout_ms;       /* bound of a whole request of this kind; a job
	                           * enqueued with its own timeout uses that;
	                           * 0: the worker's job_timeout_ms */
	int64_t connect_timeout_ms; /* 0: min(timeout, 10 s) */
	const char *secret_env;   /* name of an environment variable holding the
	                           * HMAC secret, read once at registration; NULL:
	                           * no signature */
} skl_webhook_opts;
/* Fills o with the defaults above (every field 0 or NULL). */
SKL_API void skl_webhook_opts_init(skl_webhook_opts *o);

/* Registers a webhook handler for kind.  url must be http:// or https://
 * with a host (SKL_INVALID otherwise, and when opts->secret_env names an
 * unset or empty variable); SKL_CONFLICT when the kind already has a
 * handler.  opts may be NULL.  Copies everything it keeps. */
SKL_API skl_rc skl_worker_handle_webhook(skl_worker *w, const char *kind, const char *url,
                                         const skl_webhook_opts *opts, skl_error *err);

/* Checks a webhook URL as skl_worker_handle_webhook does.  SKL_OK or
 * SKL_INVALID with the reason. */
SKL_API skl_rc skl_webhook_url_check(const char *url, skl_error *err);

/* Parses a Retry-After value: delay-seconds ("120") or an HTTP date
 * ("Wed, 21 Oct 2026 07:28:00 GMT", also the obsolete RFC 850 and asctime
 * forms), relative to now_s (Unix seconds).  Surrounding blanks are
 * ignored.  *delay_ms gets the delay, 0 for a date in the past, at most
 * one year.  False (and *delay_ms untouched) when value is not one of
 * these forms. */
SKL_API bool skl_retry_after_ms(const char *value, int64_t now_s, int64_t *delay_ms);

#ifdef __cplusplus
}
#endif
#endif
