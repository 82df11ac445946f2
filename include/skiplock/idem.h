/*
 * SPDX-License-Identifier: MIT
 * skiplock/idem.h — idempotency keys: claim, replay, in-progress, conflict.
 *
 * A request carrying an idempotency key is claimed before any side effect.
 * The claim is one insert decided by the key's primary key in
 * skiplock.idempotency_keys, so of any number of concurrent attempts,
 * across any number of servers, exactly one acquires the key.  A retry of
 * a finished request replays the stored status code and body; an attempt
 * while another holds the key is told it is in progress; the same key with
 * a different request fingerprint is a conflict.  An in-progress claim
 * whose holder is gone (its recovery window passed) may be taken over by
 * the same request.  An acquired claim comes with a holder token, a
 * secret only its holder knows: completing or releasing the claim needs
 * it, so no other caller that knows the key can store a response for it,
 * and a holder that was taken over can no longer complete.  The same
 * operations are SQL functions (skiplock.idem_claim, idem_complete,
 * idem_release) for any language; docs/idempotency.md has the pattern and
 * its trade-offs.
 *
 * Calls taking an skl_client are as thread-safe as the client (one thread
 * at a time per client), block up to the client's retry bound, and retry
 * transient failures.  skl_idem_fingerprint is pure: any thread.
 *
 * Memory: strings passed in are used only during the call; what the
 * library returns is freed with skl_idem_result_free or skl_free.
 * Out-parameters are set first and assigned only on success.
 */
#ifndef SKIPLOCK_IDEM_H
#define SKIPLOCK_IDEM_H

#include <stddef.h>
#include <stdint.h>

#include "skiplock/client.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SKL_IDEM_KEY_MAX 255              /* bytes in a key (and a fingerprint) */
#define SKL_IDEM_HASH_LEN 65              /* SHA-256 as lower-case hex, and NUL */
#define SKL_IDEM_TTL_DEFAULT_MS 86400000  /* keys are remembered 24 hours */
#define SKL_IDEM_RECOVERY_DEFAULT_MS 60000 /* an in-progress claim is safe 60 s */
#define SKL_IDEM_HOLDER_MAX 255           /* bytes in a holder token */

typedef enum skl_idem_outcome {
	SKL_IDEM_ACQUIRED = 0,    /* do the work, then complete or release */
	SKL_IDEM_REPLAY = 1,      /* done before: answer with the stored response */
	SKL_IDEM_IN_PROGRESS = 2, /* another attempt holds the key; retry later */
	SKL_IDEM_CONFLICT = 3     /* the key belongs to a different request */
} skl_idem_outcome;

typedef struct skl_idem_claim_opts {
	int64_t ttl_ms;       /* how long the key is remembered; 0: 24 hours */
	int64_t recovery_ms;  /* how long an in-progress claim is protected from
	                       * takeover; 0: 60 s.  Choose it longer than the
	                       * slowest handler. */
} skl_idem_claim_opts;

typedef struct skl_idem_result {
	skl_idem_outcome outcome;
	int response_code;    /* SKL_IDEM_REPLAY: the stored status code; else 0 */
	char *response_body;  /* SKL_IDEM_REPLAY: the stored JSON text as the
	                       * server prints it (byte-identical on every
	                       * replay); else NULL.  Free with skl_idem_result_free. */
	char *holder;         /* SKL_IDEM_ACQUIRED: the holder token (64 hex digits
	                       * today) to pass to skl_idem_complete,
	                       * skl_idem_complete_with or skl_idem_release; a
	                       * secret: do not log it.  NULL for the other
	                       * outcomes, and when the database's schema predates
	                       * step 0020 (claims without a token).  Freed by
	                       * skl_idem_result_free. */
} skl_idem_result;

/* "acquired", "replay", "in_progress", "conflict"; "unknown" otherwise. */
SKL_API const char *skl_idem_outcome_name(skl_idem_outcome o);

/* Claims key (1 to SKL_IDEM_KEY_MAX bytes) for the request whose
 * fingerprint is request_hash (1 to SKL_IDEM_KEY_MAX bytes; see
 * skl_idem_fingerprint).  o may be NULL for the defaults.  On SKL_OK,
 * *out holds the outcome: any of the four is a success.  SKL_INVALID for
 * a bad key, fingerprint or option, before any database call.  Safe to
 * retry: a claim repeated after a lost answer finds its own claim in
 * progress. */
SKL_API skl_rc skl_idem_claim(skl_client *c, const char *key, const char *request_hash,
                              const skl_idem_claim_opts *o, skl_idem_result *out,
                              skl_error *err);

/* Frees r->response_body and r->holder and resets r.  Accepts NULL. */
SKL_API void skl_idem_result_free(skl_idem_result *r);

/* Stores the response of the claim that holder acquired (the holder of
 * its skl_idem_result): status code and body (JSON text; SKL_INVALID when
 * it does not parse, or for an empty holder or one over
 * SKL_IDEM_HOLDER_MAX bytes).  Repeating it with the same response is a
 * no-op.  SKL_FENCED (SQLSTATE SK002) when the key is not in progress
 * under that holder: never claimed, released, expired, taken over by
 * another attempt after the recovery window, or a wrong holder — claim
 * again to learn the answer.  holder NULL is only for a claim that came
 * without one (a schema before step 0020); a key claimed with a token
 * then gets SKL_DB, SQLSTATE 42501. */
SKL_API skl_rc skl_idem_complete(skl_client *c, const char *key, const char *holder,
                                 int response_code, const char *response_body, skl_error *err);

/* A side effect committed with the completion: sql is one statement with
 * parameters $1…$nparams (as text) that returns one row whose first column
 * is the response body (JSON). */
typedef struct skl_idem_effect {
	const char *sql;
	int nparams;
	const char *const *params;
} skl_idem_effect;

/* Runs effect and skiplock.idem_complete(key, response_code, <its body>,
 * holder) in one transaction: both commit or neither does.  On SKL_OK,
 * *body (if not NULL) is the stored body (free with skl_free).  holder as
 * in skl_idem_complete.  SKL_FENCED when the key is not in progress under
 * that holder (as skl_idem_complete), and then the effect was
 * rolled back — including on a retry after a COMMIT whose answer was lost,
 * so claim again: a replay means the earlier attempt committed.  SKL_INVALID
 * when the statement returns no row or a body that is not JSON (rolled
 * back too). */
SKL_API skl_rc skl_idem_complete_with(skl_client *c, const char *key, const char *holder,
                                      int response_code, const skl_idem_effect *effect,
                                      char **body, skl_error *err);

/* Gives up the claim that holder acquired, before any side effect, so a
 * retry may run at once.  A completed, expired or unknown key is left
 * alone (SKL_OK); SKL_FENCED (SK002) when the key is in progress under
 * another holder (taken over, or a wrong holder).  holder as in
 * skl_idem_complete. */
SKL_API skl_rc skl_idem_release(skl_client *c, const char *key, const char *holder,
                                skl_error *err);

/* Deletes expired keys in batches of `batch` (0: 1000), each batch its own
 * short transaction, until none is left.  *deleted (may be NULL) counts
 * them, also on failure. */
SKL_API skl_rc skl_idem_prune(skl_client *c, int batch, int64_t *deleted, skl_error *err);

/* The request fingerprint: SHA-256 over method, NUL, path, NUL and the
 * body's bytes, as 64 lower-case hex digits and NUL into hex.  method and
 * path are C strings; body may be NULL when body_len is 0.  SKL_INVALID
 * for NULL method or path; SKL_NOMEM if libcrypto cannot allocate. */
SKL_API skl_rc skl_idem_fingerprint(const char *method, const char *path, const void *body,
                                    size_t body_len, char hex[SKL_IDEM_HASH_LEN],
                                    skl_error *err);

#ifdef __cplusplus
}
#endif
#endif
