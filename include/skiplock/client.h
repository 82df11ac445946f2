/*
 * SPDX-License-Identifier: MIT
 * skiplock/client.h — connecting to PostgreSQL safely through poolers.
 *
 * An skl_client is one logical connection to one database: it connects
 * lazily, reconnects after a dead connection, bounds every database call
 * with a client-side deadline, and never leaves session state behind
 * (no session SET, no session advisory lock, no named prepared statement
 * on a pooled connection).
 *
 * Thread-safety: an skl_client may be used by one thread at a time.  Use
 * one per thread; distinct clients are independent.
 *
 * Every call of the library that takes an skl_client and reaches the
 * database (in this header and the others) retries transient failures and
 * so blocks for up to retry_max_ms plus one call_timeout_ms, and besides
 * the codes its comment names may fail with the connection's codes:
 * SKL_UNREACHABLE (no connection within the bound), SKL_RETRY (a transient
 * failure outlasted the bound; nothing was applied), SKL_INDETERMINATE (a
 * write was sent and its answer lost: it may have been applied), SKL_REFUSED
 * (no such database or role, password, TLS), SKL_SCHEMA (require_schema and
 * the schema is missing or old), SKL_DB (a server error, SQLSTATE in err)
 * and SKL_NOMEM.
 */
#ifndef SKIPLOCK_CLIENT_H
#define SKIPLOCK_CLIENT_H

#include <stdint.h>
#include "skiplock/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct skl_client skl_client;

typedef enum skl_pooler {
	SKL_POOLER_AUTO = 0,        /* decide from the URL */
	SKL_POOLER_NONE = 1,        /* a direct connection to Postgres */
	SKL_POOLER_SESSION = 2,     /* a session-mode pooler */
	SKL_POOLER_TRANSACTION = 3  /* a transaction-mode pooler */
} skl_pooler;

typedef enum skl_log_level {
	SKL_LOG_DEBUG = 0,
	SKL_LOG_INFO = 1,
	SKL_LOG_WARNING = 2,
	SKL_LOG_ERROR = 3
} skl_log_level;

/* Diagnostics sink.  The library never prints; it calls this (if set) from
 * the thread that made the call.  msg is valid only during the call; it
 * may quote input (a job's kind or queue, a handler's stderr) with any byte
 * in it, so a sink that writes lines must escape control characters. */
typedef void (*skl_log_fn)(void *ctx, skl_log_level level, const char *msg);

typedef struct skl_client_options {
	const char *url;          /* URL or conninfo; NULL: $DATABASE_URL, else
	                           * libpq's own PG* variables */
	const char *direct_url;   /* non-pooled endpoint; NULL: $DIRECT_DATABASE_URL */
	skl_pooler pooler;        /* SKL_POOLER_AUTO by default */
	const char *application_name; /* NULL: "skiplock" */
	int connect_timeout_ms;   /* per connection attempt; default 5000 */
	int call_timeout_ms;      /* client-side deadline of one call; default 30000 */
	int retry_max_ms;         /* bound on the total time spent retrying one
	                           * operation, connecting included; default 30000 */
	int retry_base_ms;        /* first backoff step; default 50 */
	int retry_cap_ms;         /* largest backoff step; default 2000 */
	skl_log_fn log;           /* optional */
	void *log_ctx;
	bool require_schema;      /* before its first operation the client checks,
	                           * once, that skiplock's schema is installed at
	                           * skl_schema_latest() or newer (one read of
	                           * skiplock.schema_version); every operation fails
	                           * with SKL_SCHEMA until it is (the schema calls
	                           * themselves skip the check).  Default false: a
	                           * client may serve databases without skiplock's
	                           * schema (doctor, explain, migrate); a missing
	                           * skiplock object then fails as SKL_DB (42P01…) */
} skl_client_options;

/* Fills opts with the defaults above.  Call it before setting fields. */
SKL_API void skl_client_options_init(skl_client_options *opts);

/* Creates a client.  Validates the URL (SKL_INVALID when it does not parse)
 * and resolves the pooler mode, but does not connect: the first call does.
 * The strings in opts are copied.  *out is NULL on failure.  Does not block. */
SKL_API skl_rc skl_client_open(const skl_client_options *opts, skl_client **out,
                               skl_error *err);

/* Closes the connection and frees the client.  Accepts NULL. */
SKL_API void skl_client_close(skl_client *c);

/* Connects now if not connected (with retries within retry_max_ms) and runs
 * a trivial query.  SKL_UNREACHABLE when no connection could be made.
 * Blocks up to the retry bound. */
SKL_API skl_rc skl_client_ping(skl_client *c, skl_error *err);

/* The resolved pooler mode of the client's URL (never SKL_POOLER_AUTO). */
SKL_API skl_pooler skl_client_pooler(const skl_client *c);

/* Number of times the client (re)connected since it was opened. */
SKL_API uint64_t skl_client_connects(const skl_client *c);

/* Number of calls whose outcome was indeterminate (SKL_INDETERMINATE: the
 * connection died after a write or COMMIT was sent), retried or not. */
SKL_API uint64_t skl_client_indeterminate(const skl_client *c);

/* The backend pid of the current connection, or 0 when not connected. */
SKL_API int skl_client_backend_pid(const skl_client *c);

/* ---- URL helpers: pure functions, no network, thread-safe ---- */

/* Detects a pooler from the URL alone: a host whose first label ends in
 * "-pooler" (Neon), a "pooler.supabase.com" host, or port 6432 (PgBouncer)
 * or 6543 (Supabase transaction pooler) => SKL_POOLER_TRANSACTION; a
 * Supabase pooler host on port 5432 => SKL_POOLER_SESSION; otherwise
 * SKL_POOLER_NONE.  *out is set on SKL_OK; SKL_INVALID when url does not
 * parse. */
SKL_API skl_rc skl_url_detect_pooler(const char *url, skl_pooler *out, skl_error *err);

/* Derives the direct (non-pooled) endpoint of a pooled URL: a Neon host
 * "ep-x-pooler.region.aws.neon.tech" becomes "ep-x.region.aws.neon.tech",
 * everything else (user, password, port, database, parameters, sslmode)
 * kept as written.  Returns a new string in *out (free with skl_free), or
 * SKL_INVALID when no direct endpoint can be derived (the message says to
 * pass --direct-url).  *out is NULL on failure. */
SKL_API skl_rc skl_url_direct(const char *url, char **out, skl_error *err);

/* Copies url with any password replaced by "***", for messages and logs.
 * Returns NULL only when out of memory.  Free with skl_free. */
SKL_API char *skl_url_redact(const char *url);

/* Parses "pooler" names: auto, none, session, transaction; SKL_INVALID for
 * any other. */
SKL_API skl_rc skl_pooler_parse(const char *s, skl_pooler *out, skl_error *err);
/* The name of a pooler mode, a static string; "unknown" out of range. */
SKL_API const char *skl_pooler_name(skl_pooler p);

/* Parses a duration such as "250ms", "5s", "2m", "1h30m", "1d" or a bare
 * number of seconds into milliseconds.  Rejects negatives, empty strings,
 * unknown units and overflow with SKL_INVALID naming the problem. */
SKL_API skl_rc skl_duration_parse(const char *s, int64_t *ms, skl_error *err);

#ifdef __cplusplus
}
#endif
#endif
