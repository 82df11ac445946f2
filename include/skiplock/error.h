/*
 * SPDX-License-Identifier: MIT
 * skiplock/error.h — result codes and the error record every call fills.
 *
 * Contract, stated once for the whole library: every fallible function
 * returns an skl_rc and, when it is given a non-NULL skl_error, fills it on
 * failure (and clears it on success).  The record is owned by the caller,
 * needs no freeing, and may live on the stack.  Numbering of skl_rc never
 * changes; new codes are added before SKL_RC_LAST, which is never returned.
 *
 * Conventions every exported function keeps unless its comment says
 * otherwise (each comment adds only what differs):
 *  - NULL: err may always be NULL; *_free functions accept NULL and do
 *    nothing; any other pointer must not be NULL (some calls detect it and
 *    return SKL_MISUSE, none promises to).
 *  - Results: a call that takes an skl_client and reaches the database may
 *    also fail with the connection's codes, listed once in client.h; its
 *    comment names the others (SKL_EMPTY, SKL_CONFLICT, SKL_INVALID…).
 *  - Memory: strings and arrays passed in are copied or used only during
 *    the call.  Memory a call returns belongs to the caller and is freed by
 *    the function its comment names (skl_free when it names none).  What an
 *    out-parameter holds after a failure is unspecified unless the comment
 *    says; on failure nothing needs freeing.
 *  - Blocking: a call with an skl_client blocks up to that client's retry
 *    bound (client.h); a call without one never waits on the network (a
 *    few read local files, as their comments say).
 *  - Threads: a call without a handle is thread-safe; a handle (client,
 *    worker, report) is used by one thread at a time.  *_init functions
 *    only fill a caller-owned struct with defaults.
 */
#ifndef SKIPLOCK_ERROR_H
#define SKIPLOCK_ERROR_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SKL_BUILDING_LIBRARY)
#define SKL_API __attribute__((visibility("default")))
#else
#define SKL_API
#endif

typedef enum skl_rc {
	SKL_OK = 0,            /* success */
	SKL_EMPTY = 1,         /* nothing to do (no job, no row): not an error */
	SKL_RETRY = 2,         /* transient failure; definitely not applied */
	SKL_INDETERMINATE = 3, /* outcome unknown: deadline passed or the
	                        * connection died after the write was sent */
	SKL_CONFLICT = 4,      /* held by someone else, or a duplicate */
	SKL_FENCED = 5,        /* a stale fencing token: ownership was lost */
	SKL_DB = 6,            /* permanent server error; SQLSTATE in skl_error */
	SKL_NOMEM = 7,         /* out of memory */
	SKL_MISUSE = 8,        /* the API was called wrongly */
	SKL_INVALID = 9,       /* bad input: URL, duration, JSON, name… */
	SKL_UNREACHABLE = 10,  /* no connection within the retry bound */
	SKL_IO = 11,           /* a local system call failed; errno kept */
	SKL_REFUSED = 12,      /* the server (or the TLS handshake) refused the
	                        * connection for a reason a retry cannot cure:
	                        * no such database or role, a wrong or missing
	                        * password, the TLS mode; never retried.
	                        * SQLSTATE when the server sent one; the hint
	                        * says what to fix */
	SKL_SCHEMA = 13,       /* skiplock's schema is missing or older than this
	                        * library: run `skiplock init` (skl_schema_install) */
	SKL_RC_LAST            /* sentinel, never returned */
} skl_rc;

typedef struct skl_error {
	skl_rc rc;             /* same as the returned code */
	char sqlstate[6];      /* five characters and NUL, or "" */
	int sys_errno;         /* errno for SKL_IO, else 0 */
	bool indeterminate;    /* the operation may or may not have happened */
	char message[512];     /* primary message: lower case, no final period */
	char detail[512];      /* detail sentence(s), or "" */
	char hint[256];        /* hint sentence, or "" */
} skl_error;

/* A static, never-NULL name for a result code ("no job", "stale fencing token"…).
 * Any value, even out of range, is accepted.  Thread-safe. */
SKL_API const char *skl_strerror(skl_rc rc);

/* Resets an error record to "no error".  Accepts NULL. */
SKL_API void skl_error_clear(skl_error *err);

/* True when a SQLSTATE names a transient condition that a retry may cure:
 * class 08 (connection), 57P01-57P03 (shutdown, crash, cannot connect now),
 * 40001 (serialization), 40P01 (deadlock), 55P03 (lock not available),
 * 53300 (too many connections).  NULL or "" (no SQLSTATE: a dropped
 * connection) is transient too.  This is the one classification table of
 * the library; nothing else looks at SQLSTATEs or message text. */
SKL_API bool skl_sqlstate_is_transient(const char *sqlstate);

/* Frees memory the library returned to the caller.  Accepts NULL. */
SKL_API void skl_free(void *ptr);

#ifdef __cplusplus
}
#endif
#endif
