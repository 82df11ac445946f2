/*
 * webhook_int.h — the pure parts of webhook.c, for unit tests.
 */
#ifndef SKL_WEBHOOK_INT_H
#define SKL_WEBHOOK_INT_H

#include <stdbool.h>
#include <stddef.h>

/* The outcome of an HTTP status (SKL_JOB_OK, SKL_JOB_RETRY for 429/503,
 * SKL_JOB_DISCARD for other 4xx, 1 for a failed attempt); *honour_retry_after
 * is true for 429 and 503. */
int skl__webhook_outcome(long status, bool *honour_retry_after);

/* Writes "sha256=" and the lower-case hex HMAC-SHA256 of msg under key into
 * out (72 bytes).  False on a libcrypto failure. */
bool skl__webhook_sign(const char *key, const char *msg, size_t len, char out[72]);

#endif
