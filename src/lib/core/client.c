/*
 * client.c — one logical connection: connect, call with a deadline, retry.
 *
 * Invariants:
 *  - libpq runs in non-blocking mode and every wait is a poll() bounded by a
 *    client-side deadline; a frozen pooler or a black-holed connection cannot
 *    block a caller longer than its deadline (TCP keepalives do not help
 *    against a stopped peer whose kernel still ACKs).
 *  - after a deadline or a lost connection the connection is closed, never
 *    reused: its protocol state is unknown.
 *  - an outcome is "indeterminate" exactly when a write may have committed
 *    without us learning it: the connection died or the deadline passed
 *    while an autocommit statement or a COMMIT was in flight.  Inside an
 *    open transaction nothing can have committed, so that failure is a
 *    definite SKL_RETRY.
 *  - only unnamed statements (PQsendQueryParams / PQsendQuery) are used.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/internal.h"

void skl_client_options_init(skl_client_options *o)
{
	memset(o, 0, sizeof(*o));
	o->pooler = SKL_POOLER_AUTO;
	o->connect_timeout_ms = 5000;
	o->call_timeout_ms = 30000;
	o->retry_max_ms = 30000;
	o->retry_base_ms = 50;
	o->retry_cap_ms = 2000;
}

static const char *env_or(const char *v, const char *name)
{
	if (v != NULL)
		return v;
	const char *e = getenv(name);
	return e && *e ? e : NULL;
}

static skl_rc copy_options(skl_client *c, const skl_client_options *o, skl_error *err)
{
	const char *url = env_or(o->url, "DATABASE_URL");
	const char *direct = env_or(o->direct_url, "DIRECT_DATABASE_URL");
	c->url = strdup(url ? url : "");
	c->direct_url = skl__strdup(direct);
	c->appname = strdup(o->application_name ? o->application_name : "skiplock");
	if (!c->url || !c->appname || (direct && !c->direct_url))
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	c->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 5000;
	c->call_timeout_ms = o->call_timeout_ms > 0 ? o->call_timeout_ms : 30000;
	c->retry_max_ms = o->retry_max_ms >= 0 ? o->retry_max_ms : 30000;
	c->retry_base_ms = o->retry_base_ms > 0 ? o->retry_base_ms : 50;
	c->retry_cap_ms = o->retry_cap_ms > 0 ? o->retry_cap_ms : 2000;
	c->log = o->log;
	c->log_ctx = o->log_ctx;
	c->require_schema = o->require_schema;
	c->rng = skl__seed();
	return SKL_OK;
}

skl_rc skl_client_open(const skl_client_options *o, skl_client **out, skl_error *err)
{
	skl_client_options defaults;
	*out = NULL;
	if (o == NULL) {
		skl_client_options_init(&defaults);
		o = &defaults;
	}
	skl_client *c = calloc(1, sizeof(*c));
	if (c == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	skl_rc rc = copy_options(c, o, err);
	if (rc == SKL_OK && c->direct_url) {
		skl_pooler ignored;
		rc = skl_url_detect_pooler(c->direct_url, &ignored, err);
		if (rc != SKL_OK)
			snprintf(err->message, sizeof(err->message), "invalid direct URL");
	}
	c->pooler = o->pooler;
	if (rc == SKL_OK && c->pooler == SKL_POOLER_AUTO)
		rc = skl_url_detect_pooler(c->url, &c->pooler, err);
	else if (rc == SKL_OK)
		rc = skl_url_detect_pooler(c->url, &(skl_pooler){0}, err);
	if (rc != SKL_OK) {
		skl_client_close(c);
		return rc;
	}
	*out = c;
	skl_error_clear(err);
	return SKL_OK;
}

static void drop_conn(skl_client *c)
{
	if (c->conn)
		PQfinish(c->conn);
	c->conn = NULL;
	c->tx = SKL_TX_NONE;
}

void skl_client_close(skl_client *c)
{
	if (c == NULL)
		return;
	drop_conn(c);
	free(c->url);
	free(c->direct_url);
	free(c->appname);
	free(c);
}

skl_pooler skl_client_pooler(const skl_client *c)
{
	return c->pooler;
}

uint64_t skl_client_connects(const skl_client *c)
{
	return c->connects;
}

uint64_t skl_client_indeterminate(const skl_client *c)
{
	return c->indeterminate;
}

int skl_client_backend_pid(const skl_client *c)
{
	return c->conn ? PQbackendPID(c->conn) : 0;
}

/* Waits until the socket is ready for `events` or the deadline passes.
 * Returns 1 ready, 0 deadline, -1 error. */
static int wait_socket(PGconn *conn, short events, int64_t deadline)
{
	int fd = PQsocket(conn);
	if (fd < 0)
		return -1;
	for (;;) {
		int64_t left = deadline - skl__now_ms();
		if (left <= 0)
			return 0;
		struct pollfd p = {.fd = fd, .events = events};
		int r = poll(&p, 1, left > 1000 ? 1000 : (int)left);
		if (r > 0)
			return 1;
		if (r < 0 && errno != EINTR)
			return -1;
	}
}

/* One line: no trailing blanks; a newline before an indented line becomes
 * ';', other newlines and tabs a space. */
static void flatten(char *buf)
{
	size_t n = strlen(buf);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	for (char *p = buf; *p; p++)
		if (*p == '\n' || *p == '\t')
			*p = (p[1] == '\t' || p[1] == ' ') ? ';' : ' ';
}

static void conn_message(const skl_client *c, PGconn *conn, char *buf, size_t cap)
{
	/* Scrubbed whole, before the copy can cut a password in two. */
	char *full = strdup(conn ? PQerrorMessage(conn) : "out of memory");
	skl__scrub(full, c->url);
	snprintf(buf, cap, "%s", full ? full : "out of memory");
	free(full);
	flatten(buf);
}

/* libpq has no accessor for the SQLSTATE of a server's refusal at connect
 * time (no PGresult reaches the caller).  In PQERRORS_VERBOSE, set for the
 * connection attempt only, libpq writes each server error as "SEVERITY:  "
 * SQLSTATE ": " message, then a LOCATION line: that layout, not the
 * translated text, is read here.  Fills state (or "") and, in shown, the
 * message without the SQLSTATE and the LOCATION lines. */
static void split_verbose(const char *msg, char state[6], char *shown, size_t cap)
{
	state[0] = '\0';
	for (const char *p = strstr(msg, ":  "); p; p = strstr(p + 1, ":  ")) {
		const char *s = p + 3;
		if (strspn(s, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ") == 5 && s[5] == ':' &&
		    s[6] == ' ') {
			memcpy(state, s, 5);
			state[5] = '\0';
			snprintf(shown, cap, "%.*s%.*s", (int)(s - msg), msg, (int)strcspn(s + 7, "\n"),
			         s + 7);
			return;
		}
	}
	snprintf(shown, cap, "%s", msg);
}

/* The sslmode of a connection attempt demands TLS. */
static bool tls_required(PGconn *pc)
{
	PQconninfoOption *opts = PQconninfo(pc);
	bool req = false;
	for (PQconninfoOption *o = opts; o && o->keyword; o++)
		if (strcmp(o->keyword, "sslmode") == 0 && o->val)
			req = strcmp(o->val, "require") == 0 || strncmp(o->val, "verify-", 7) == 0;
	PQconninfoFree(opts);
	return req;
}

/* SKL_REFUSED, with what to fix in *hint, when a retry cannot cure the
 * failure: the server asked for a password and has none, it sent a
 * SQLSTATE that is not transient (3D000, 28000, 28P01…), or the attempt
 * died in the TLS handshake that sslmode demands (refused or not
 * verified).  SKL_UNREACHABLE otherwise. */
static skl_rc classify_failure(PGconn *pc, bool in_tls, const char *state, const char **hint)
{
	if (PQconnectionNeedsPassword(pc)) {
		*hint = "the server asks for a password: give it in the URL, PGPASSWORD or ~/.pgpass";
		return SKL_REFUSED;
	}
	if (state[0] && !skl_sqlstate_is_transient(state)) {
		*hint = skl__refusal_hint(state);
		return SKL_REFUSED;
	}
	if (!state[0] && in_tls && tls_required(pc)) {
		*hint = "the TLS that sslmode demands failed: change sslmode in the URL, or enable "
		        "TLS (and a certificate the client trusts) on the server";
		return SKL_REFUSED;
	}
	return SKL_UNREACHABLE;
}

/* Fills err after a failed attempt (why: NULL for libpq's own message). */
static skl_rc connect_fail(skl_client *c, PGconn *pc, const char *why, bool in_tls,
                           skl_error *err)
{
	char msg[400], state[6] = "";
	const char *hint = NULL;
	skl_rc rc = SKL_UNREACHABLE;
	conn_message(c, pc, msg, sizeof(msg));
	if (pc && why == NULL) {
		char *full = strdup(PQerrorMessage(pc));
		if (full) {
			skl__scrub(full, c->url);
			split_verbose(full, state, msg, sizeof(msg));
			flatten(msg);
		}
		free(full);
		rc = classify_failure(pc, in_tls, state, &hint);
	}
	char *shown = skl_url_redact(c->url);
	skl__seterr(err, rc, "could not connect to %s: %s",
	            shown && *shown ? shown : "the database (PG* environment)", why ? why : msg);
	free(shown);
	if (err) {
		memcpy(err->sqlstate, state, sizeof(state));
		snprintf(err->hint, sizeof(err->hint), "%s", hint ? hint : "");
	}
	if (pc)
		PQfinish(pc);
	return rc;
}

static PGconn *start_connect(const skl_client *c)
{
	char ct[16], tut[16];
	snprintf(ct, sizeof(ct), "%d", (c->connect_timeout_ms + 999) / 1000);
	snprintf(tut, sizeof(tut), "%d", c->call_timeout_ms < 30000 ? c->call_timeout_ms : 30000);
	/* Defaults first: values in the URL (expanded from "dbname") win. */
	const char *const kw[] = {"connect_timeout", "keepalives", "keepalives_idle",
	                          "keepalives_interval", "keepalives_count",
	                          "tcp_user_timeout", "application_name", "dbname", NULL};
	const char *const val[] = {ct, "1", "5", "2", "3", tut, c->appname, c->url, NULL};
	PGconn *pc = PQconnectStartParams(kw, val, 1);
	if (pc)
		PQsetErrorVerbosity(pc, PQERRORS_VERBOSE); /* for split_verbose */
	return pc;
}

/* Server notices go to the log callback, never to stderr. */
static void on_notice(void *arg, const char *message)
{
	skl_client *c = arg;
	size_t n = strlen(message);
	skl__log(c, SKL_LOG_DEBUG, "server: %.*s", (int)(n && message[n - 1] == '\n' ? n - 1 : n),
	         message);
}

skl_rc skl__connect(skl_client *c, skl_error *err)
{
	if (c->conn && PQstatus(c->conn) == CONNECTION_OK)
		return SKL_OK;
	drop_conn(c);
	PGconn *pc = start_connect(c);
	if (pc == NULL)
		return connect_fail(c, pc, "out of memory", false, err);
	if (PQstatus(pc) == CONNECTION_BAD) {
		/* Rejected before any network I/O: the options themselves are bad. */
		char msg[400];
		conn_message(c, pc, msg, sizeof(msg));
		PQfinish(pc);
		return skl__seterr(err, SKL_INVALID, "invalid connection string: %s", msg);
	}
	int64_t deadline = skl__now_ms() + c->connect_timeout_ms;
	PostgresPollingStatusType st = PGRES_POLLING_WRITING;
	bool in_tls = false; /* the last state before a failure was the TLS handshake */
	while (st != PGRES_POLLING_OK) {
		if (st == PGRES_POLLING_FAILED)
			return connect_fail(c, pc, NULL, in_tls, err);
		int r = wait_socket(pc, st == PGRES_POLLING_READING ? POLLIN : POLLOUT, deadline);
		if (r == 0)
			return connect_fail(c, pc, "timed out", false, err);
		if (r < 0)
			return connect_fail(c, pc, NULL, false, err);
		in_tls = PQstatus(pc) == CONNECTION_SSL_STARTUP;
		st = PQconnectPoll(pc);
	}
	PQsetErrorVerbosity(pc, PQERRORS_DEFAULT);
	if (PQsetnonblocking(pc, 1) != 0)
		return connect_fail(c, pc, NULL, false, err);
	PQsetNoticeProcessor(pc, on_notice, c);
	c->conn = pc;
	c->tx = SKL_TX_NONE;
	c->server_version = PQserverVersion(pc);
	c->connects++;
	skl__log(c, SKL_LOG_DEBUG, "connected (backend pid %d, server %d)", PQbackendPID(pc),
	         c->server_version);
	return SKL_OK;
}

/* The connection failed without an error result from the server. */
static skl_rc lost(skl_client *c, const char *what, skl_error *err)
{
	char msg[400];
	conn_message(c, c->conn, msg, sizeof(msg));
	bool definite = (c->tx == SKL_TX_OPEN);
	drop_conn(c);
	return skl__seterr(err, definite ? SKL_RETRY : SKL_INDETERMINATE, "%s%s%s", what,
	                   msg[0] ? ": " : "", msg);
}

static skl_rc flush_all(skl_client *c, int64_t deadline, skl_error *err)
{
	for (;;) {
		int f = PQflush(c->conn);
		if (f == 0)
			return SKL_OK;
		if (f < 0)
			return lost(c, "connection lost while sending", err);
		int r = wait_socket(c->conn, POLLOUT | POLLIN, deadline);
		if (r == 0)
			return lost(c, "deadline passed while sending", err);
		if (r < 0 || !PQconsumeInput(c->conn))
			return lost(c, "connection lost while sending", err);
	}
}

/* Collects every result of the query in flight; keeps the first error, else
 * the last result. */
static skl_rc collect(skl_client *c, int64_t deadline, PGresult **keep, skl_error *err)
{
	for (;;) {
		while (PQisBusy(c->conn)) {
			int r = wait_socket(c->conn, POLLIN, deadline);
			if (r == 0) {
				PQclear(*keep);
				*keep = NULL;
				return lost(c, "deadline passed waiting for the server", err);
			}
			if (r < 0 || !PQconsumeInput(c->conn)) {
				PQclear(*keep);
				*keep = NULL;
				return lost(c, "connection lost", err);
			}
		}
		PGresult *r = PQgetResult(c->conn);
		if (r == NULL)
			return SKL_OK;
		bool keep_is_error = *keep && PQresultStatus(*keep) == PGRES_FATAL_ERROR;
		if (keep_is_error) {
			PQclear(r);
		} else {
			PQclear(*keep);
			*keep = r;
		}
	}
}

static skl_rc finish_call(skl_client *c, PGresult *res, PGresult **out, skl_error *err)
{
	ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
	if (res && (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_EMPTY_QUERY)) {
		*out = res;
		skl_error_clear(err);
		return SKL_OK;
	}
	if (res == NULL || PQresultErrorField(res, PG_DIAG_SQLSTATE) == NULL) {
		PQclear(res);
		return lost(c, "connection lost", err);
	}
	const char *pos = PQresultErrorField(res, PG_DIAG_STATEMENT_POSITION);
	c->err_position = pos ? atoi(pos) : 0;
	skl_rc rc = skl__seterr_result(err, res);
	PQclear(res);
	bool committing = (c->tx == SKL_TX_COMMITTING);
	if (PQstatus(c->conn) != CONNECTION_OK)
		drop_conn(c);
	/* A COMMIT answered by a connection-level error may have committed. */
	if (committing && rc == SKL_RETRY && err &&
	    (strncmp(err->sqlstate, "08", 2) == 0 || strncmp(err->sqlstate, "57P", 3) == 0)) {
		err->rc = rc = SKL_INDETERMINATE;
		err->indeterminate = true;
	}
	return rc;
}

/* How a statement goes out: simple protocol, unnamed with parameters, or
 * a statement prepared under `name`. */
typedef struct sendable {
	const char *sql;
	const char *name;
	int n;
	const char *const *vals;
	bool simple;
} sendable;

static skl_rc call(skl_client *c, const sendable *q, PGresult **out, skl_error *err)
{
	*out = NULL;
	if (c->conn == NULL)
		return skl__seterr(err, SKL_MISUSE, "not connected");
	int64_t deadline = skl__now_ms() + c->call_timeout_ms;
	int sent = q->simple ? PQsendQuery(c->conn, q->sql)
	           : q->name ? PQsendQueryPrepared(c->conn, q->name, q->n, q->vals, NULL, NULL, 0)
	                     : PQsendQueryParams(c->conn, q->sql, q->n, NULL, q->vals, NULL, NULL, 0);
	if (!sent)
		return lost(c, "could not send the query", err);
	skl_rc rc = flush_all(c, deadline, err);
	PGresult *res = NULL;
	if (rc == SKL_OK)
		rc = collect(c, deadline, &res, err);
	if (rc != SKL_OK)
		return rc;
	return finish_call(c, res, out, err);
}

skl_rc skl__exec(skl_client *c, const char *sql, int nparams, const char *const *values,
                 PGresult **out, skl_error *err)
{
	return call(c, &(sendable){.sql = sql, .n = nparams, .vals = values}, out, err);
}

skl_rc skl__exec_simple(skl_client *c, const char *sql, PGresult **out, skl_error *err)
{
	return call(c, &(sendable){.sql = sql, .simple = true}, out, err);
}

void skl__set_direct(skl_client *c)
{
	if (c->conn && c->direct_conn != c->connects) {
		c->direct_conn = c->connects;
		c->nprepared = 0;
	}
}

/* The name of a hot statement: from its text (CRC-32 and length), so that
 * on whatever backend it reaches, the name stands for this text only. */
static void hot_name(const char *sql, char name[48])
{
	size_t n = strlen(sql);
	uLong crc = crc32(crc32(0L, Z_NULL, 0), (const Bytef *)sql, (uInt)n);
	snprintf(name, 48, "skl_%08lx_%zu", (unsigned long)crc, n);
}

/* Prepares sql on the current connection, outside a transaction only (a
 * failed PREPARE would abort it); false when it is not prepared. */
static bool prepare_hot(skl_client *c, const char *sql, const char *name, int n)
{
	if (c->tx != SKL_TX_NONE || c->nprepared == SKL_PREPARED_MAX)
		return false;
	int64_t deadline = skl__now_ms() + c->call_timeout_ms;
	PGresult *res = NULL;
	skl_error err;
	if (!PQsendPrepare(c->conn, name, sql, n, NULL) || flush_all(c, deadline, &err) != SKL_OK ||
	    collect(c, deadline, &res, &err) != SKL_OK)
		return false; /* the connection is gone: the plain path says so */
	bool ok = res && PQresultStatus(res) == PGRES_COMMAND_OK;
	PQclear(res);
	if (ok)
		c->prepared[c->nprepared++] = sql;
	else
		c->direct_conn = 0; /* 42P05 (the name exists: a pooler), or worse */
	return ok;
}

skl_rc skl__exec_hot(skl_client *c, const char *sql, int nparams, const char *const *values,
                     PGresult **out, skl_error *err)
{
	if (c->conn == NULL || c->direct_conn != c->connects)
		return skl__exec(c, sql, nparams, values, out, err);
	char name[48];
	hot_name(sql, name);
	int i = 0;
	while (i < c->nprepared && c->prepared[i] != sql)
		i++;
	if (i == c->nprepared && !prepare_hot(c, sql, name, nparams))
		return c->conn ? skl__exec(c, sql, nparams, values, out, err)
		               : skl__seterr(err, SKL_RETRY, "connection lost while preparing");
	skl_rc rc = call(c, &(sendable){.name = name, .n = nparams, .vals = values}, out, err);
	/* Not known to this backend (a pooler after all, or DISCARD), or its
	 * result type changed with the schema: nothing ran; plain from now on. */
	if (rc != SKL_OK && err && (strcmp(err->sqlstate, "26000") == 0 ||
	                            strcmp(err->sqlstate, "0A000") == 0)) {
		c->direct_conn = 0;
		if (c->conn && c->tx == SKL_TX_NONE)
			rc = skl__exec(c, sql, nparams, values, out, err);
	}
	return rc;
}
