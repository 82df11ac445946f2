/*
 * SPDX-License-Identifier: MIT
 * skiplock/lease.h — named leases with expiry and fencing tokens.
 *
 * A lease is a row in skiplock.leases, not a session: it survives
 * reconnects and transaction-mode poolers, and it ends when its holder
 * stops renewing it.  Each acquisition of a name returns a fencing token
 * one higher than any before for that name (tokens never repeat, even
 * after a release); the protected resource checks the token, so a holder
 * that was paused past its expiry and wakes up cannot write.  Expiry is
 * judged by the database clock.  These calls mirror the SQL functions
 * skiplock.lease_acquire, lease_renew, lease_release and lease_fence
 * (sql/0003_leases.sql); docs/leases.md explains when to use a lease.
 *
 * Every call is one short transaction through the client (no session
 * state, nothing held between calls) and blocks up to the client's retry
 * bound.  Acquire, renew and release are retried after an indeterminate
 * outcome: a repeated renew or release has the same effect as one, and a
 * repeated acquire cannot take the lease twice (after a lost answer it
 * may report SKL_CONFLICT while the first attempt holds the lease; it
 * then expires after ttl_ms).
 *
 * Memory: strings passed in are used only during the call.  Arrays
 * returned by skl_lease_list belong to the caller (skl_lease_list_free).
 * Thread-safety: as skl_client (one thread at a time per client).
 */
#ifndef SKIPLOCK_LEASE_H
#define SKIPLOCK_LEASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "skiplock/client.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SKL_LEASE_NAME_MAX 256   /* characters in a lease name or owner */

/* Takes lease `name` for `owner` (1..256 characters each; the owner must
 * identify one holder, e.g. host:pid:random) for ttl_ms milliseconds.
 * SKL_OK: the lease is held and *fencing is its new token.
 * SKL_CONFLICT: a live lease is held — by anyone, this owner included —
 * and err's message names the holder, its token and the time left;
 * *fencing is 0.  SKL_INVALID: bad name, owner or ttl (nothing sent). */
SKL_API skl_rc skl_lease_acquire(skl_client *c, const char *name, const char *owner,
                                 int64_t ttl_ms, int64_t *fencing, skl_error *err);

/* Extends the lease to now() + ttl_ms by the database clock.  SKL_OK when
 * name is live and held by (owner, fencing); SKL_FENCED when it is not
 * (expired, taken by another, wrong owner or token) — nothing changed,
 * and the caller must stop acting as the holder. */
SKL_API skl_rc skl_lease_renew(skl_client *c, const char *name, const char *owner,
                               int64_t fencing, int64_t ttl_ms, skl_error *err);

/* Expires the lease now, keeping its row and token.  SKL_OK when (owner,
 * fencing) is the name's current token (also when it had expired and
 * nobody took it since); SKL_FENCED otherwise, and nothing changed. */
SKL_API skl_rc skl_lease_release(skl_client *c, const char *name, const char *owner,
                                 int64_t fencing, skl_error *err);

/* Checks in a transaction of its own that fencing is the current token of
 * the live lease name: SKL_OK, or SKL_FENCED (SQLSTATE SK001) with the
 * reason in err.  A snapshot only; use skl_lease_fenced_exec to write. */
SKL_API skl_rc skl_lease_fence(skl_client *c, const char *name, int64_t fencing,
                               skl_error *err);

/* A fenced write: in one transaction, SELECT skiplock.lease_fence(name,
 * fencing), then sql with its nparams text parameters ($1…).  SKL_FENCED
 * when the token is stale or the lease expired: the transaction rolled
 * back and sql had no effect.  *rows (may be NULL) gets the number of rows
 * sql affected or returned.  Retried only when nothing can have committed;
 * after a lost COMMIT answer the result is SKL_INDETERMINATE. */
SKL_API skl_rc skl_lease_fenced_exec(skl_client *c, const char *name, int64_t fencing,
                                     const char *sql, int nparams,
                                     const char *const *values, int64_t *rows,
                                     skl_error *err);

/* One row of skiplock.leases.  Strings stay valid until
 * skl_lease_list_free; times are ISO 8601 in UTC. */
typedef struct skl_lease_info {
	const char *name;
	const char *owner;         /* the last holder */
	int64_t fencing;           /* the last token issued; -1 when the client's
	                            * role may not read tokens (the worker and
	                            * reader roles: docs/security.md) */
	bool live;                 /* not expired by the database clock */
	int64_t expires_in_ms;     /* negative once expired */
	const char *acquired_at;
	const char *renewed_at;
	const char *expires_at;
	void *internal;            /* owned by the library */
} skl_lease_info;

/* Every lease, live or expired, ordered by name.  *leases is NULL and *n 0
 * when there is none (SKL_OK). */
SKL_API skl_rc skl_lease_list(skl_client *c, skl_lease_info **leases, size_t *n,
                              skl_error *err);
/* Frees what skl_lease_list returned (n entries).  Accepts NULL. */
SKL_API void skl_lease_list_free(skl_lease_info *leases, size_t n);

#ifdef __cplusplus
}
#endif
#endif
