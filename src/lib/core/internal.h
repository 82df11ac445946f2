/*
 * internal.h — private structures and helpers shared by the library's parts.
 *
 * Invariants kept by everything that includes this file:
 *  - every database call goes through skl__exec / skl__exec_simple, which
 *    bound it by the client's deadline and classify failures (error.c holds
 *    the one SQLSTATE table);
 *  - only unnamed statements and transaction-local settings are used, so a
 *    transaction-mode pooler never sees session state from us — except the
 *    worker's hot statements on a connection it has found to be direct
 *    (skl__exec_hot);
 *  - the library never prints or exits: diagnostics go to the log callback.
 */
#ifndef SKL_INTERNAL_H
#define SKL_INTERNAL_H

#include <libpq-fe.h>
#include <stdarg.h>
#include <stdint.h>

#include "skiplock/client.h"

#define SKL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#define SKL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

typedef enum skl_tx_state {
	SKL_TX_NONE = 0,       /* autocommit: each statement is its own transaction */
	SKL_TX_OPEN = 1,       /* BEGIN sent; nothing commits until COMMIT */
	SKL_TX_COMMITTING = 2  /* COMMIT sent; its outcome is ours to learn */
} skl_tx_state;

#define SKL_PREPARED_MAX 8

struct skl_client {
	char *url;
	char *direct_url;
	char *appname;
	skl_pooler pooler;
	int connect_timeout_ms;
	int call_timeout_ms;
	int retry_max_ms;
	int retry_base_ms;
	int retry_cap_ms;
	skl_log_fn log;
	void *log_ctx;

	PGconn *conn;          /* NULL when not connected */
	skl_tx_state tx;
	int server_version;
	uint64_t connects;
	uint64_t indeterminate;  /* outcomes skl__run saw as SKL_INDETERMINATE */
	uint64_t rng;
	uint64_t direct_conn;  /* `connects` of the connection found direct: hot
	                        * statements may be prepared on it (0: none) */
	const char *prepared[SKL_PREPARED_MAX]; /* the texts prepared on it */
	int nprepared;
	int err_position;      /* the last server error's statement position (1-based
	                        * characters), 0 when it had none */
	bool require_schema;   /* check skiplock's schema before the first operation */
	bool schema_ok;        /* that check passed (it is not repeated) */
	signed char tokens;    /* the role may read fencing tokens: 1 yes, -1 no, 0 not
	                        * asked yet (queue/inspect.c, skl__tokens_readable) */
};

/* Per-call transaction settings for skl__run. Zero fields take defaults. */
typedef struct skl_txn_opts {
	int txn;                   /* wrap fn in BEGIN … COMMIT */
	int idempotent;            /* fn may be re-run after an indeterminate outcome */
	int lock_timeout_ms;       /* SET LOCAL lock_timeout; 0: 5000 */
	int statement_timeout_ms;  /* SET LOCAL statement_timeout; 0: from the deadline */
	int idle_timeout_ms;       /* idle_in_transaction_session_timeout; 0: from the deadline */
	int rollback;              /* end with ROLLBACK even when fn succeeds: nothing is kept */
	int schema_itself;         /* fn installs or inspects skiplock's schema: no
	                            * schema check before it, its errors are its own */
} skl_txn_opts;

typedef skl_rc (*skl_txn_fn)(skl_client *c, void *ctx, skl_error *err);

/* error.c */
skl_rc skl__seterr(skl_error *err, skl_rc rc, const char *fmt, ...) SKL_PRINTF(3, 4);
skl_rc skl__seterr_result(skl_error *err, const PGresult *res);
skl_rc skl__seterr_errno(skl_error *err, int errnum, const char *fmt, ...) SKL_PRINTF(3, 4);
/* What to fix after the server refused a connection with this permanent
 * SQLSTATE (never NULL). */
const char *skl__refusal_hint(const char *sqlstate);
void skl__log(const skl_client *c, skl_log_level level, const char *fmt, ...) SKL_PRINTF(3, 4);

/* columns.c: a statement's result columns, checked by name before they are
 * read by position (an enum of positions next to the SQL, with a table of
 * names).  True when res has names[0..n) as its first n columns. */
bool skl__columns_match(const PGresult *res, const char *const *names, int n);
/* SKL_OK, or SKL_DB naming the first column out of place. */
skl_rc skl__check_columns(const PGresult *res, const char *const *names, int n, skl_error *err);

/* util.c */
int64_t skl__now_ms(void);             /* monotonic clock */
void skl__sleep_ms(int64_t ms);
uint64_t skl__seed(void);              /* from the kernel's entropy */
uint64_t skl__rand(uint64_t *state);   /* xorshift64*; state never 0 */
double skl__rand01(uint64_t *state);   /* uniform in [0, 1) */
char *skl__strdup(const char *s);      /* NULL in, NULL out */

/* backoff.c: delay in ms before retry number `attempt` (0-based), uniform
 * in [0, min(cap, base * 2^attempt)] — "full jitter". */
int64_t skl__backoff_full(int attempt, int64_t base_ms, int64_t cap_ms, uint64_t *rng);
/* The same bound without jitter: min(cap, base * 2^attempt). */
int64_t skl__backoff_ceiling(int attempt, int64_t base_ms, int64_t cap_ms);

/* client.c: one statement (unnamed, parameters as text), bounded by the
 * call deadline.  On SKL_OK, *out holds the result (PQclear it); on failure
 * *out is NULL and err says whether the outcome is indeterminate. */
skl_rc skl__exec(skl_client *c, const char *sql, int nparams, const char *const *values,
                 PGresult **out, skl_error *err);
/* The same for the few statements a worker sends all the time (claims,
 * outcomes, heartbeats; sql must be a static string).  On a connection
 * skl__set_direct marked, each is prepared once, under a name derived
 * from its text, so it is neither parsed nor analysed again; elsewhere, or
 * if the server no longer knows the name, it is skl__exec. */
skl_rc skl__exec_hot(skl_client *c, const char *sql, int nparams, const char *const *values,
                     PGresult **out, skl_error *err);
/* The current connection reaches the server itself (no transaction-mode
 * pooler in between): hot statements may be prepared on it. */
void skl__set_direct(skl_client *c);
/* Several statements without parameters in one round trip (simple protocol). */
skl_rc skl__exec_simple(skl_client *c, const char *sql, PGresult **out, skl_error *err);
/* Runs fn with connection (re)establishment and retry on transient errors,
 * inside BEGIN … COMMIT with SET LOCAL settings when o->txn. */
skl_rc skl__run(skl_client *c, const skl_txn_opts *o, skl_txn_fn fn, void *ctx, skl_error *err);

/* A start-up check: the database answers within within_ms (or the
 * client's own retry bound, if shorter) and has skiplock's schema at this
 * build's version: SKL_UNREACHABLE, SKL_REFUSED or SKL_SCHEMA otherwise,
 * whatever the client's require_schema. */
skl_rc skl__start_check(skl_client *c, int within_ms, skl_error *err);
/* One statement with text parameters, for skl__run_stmt. */
typedef struct skl_stmt {
	const char *sql;
	int nparams;
	const char *params[16];
	PGresult *res;            /* on SKL_OK its rows; the caller clears it */
} skl_stmt;
/* Runs one statement through skl__run (retries, settings per o); on
 * failure s->res is NULL. */
skl_rc skl__run_stmt(skl_client *c, const skl_txn_opts *o, skl_stmt *s, skl_error *err);
/* Ensures a live connection (one attempt, bounded by connect_timeout). */
skl_rc skl__connect(skl_client *c, skl_error *err);

/* redact.c: replaces, in place, every password found in url (3 bytes or
 * longer, as written or percent-decoded) that occurs in msg by "***". */
void skl__scrub(char *msg, const char *url);

/* sqlscan.c: the next statement of text at or after *pos: its offset and
 * length (without the ';') and the 1-based line it starts on.  False when
 * only whitespace and comments are left. */
bool skl__next_statement(const char *text, size_t len, size_t *pos, size_t *start,
                         size_t *stmt_len, int *line);

/* url.c */
skl_rc skl__url_host_port(const char *url, char **host, char **port, skl_error *err);

#endif
