/*
 * error.c — result-code names, error records, and the one SQLSTATE table.
 *
 * Transient means "a retry of the same operation may succeed": connection
 * trouble, server shutdown or restart, serialization failures, deadlocks,
 * lock timeouts and connection limits.  Everything else is permanent and
 * surfaces at once.  Classification is by SQLSTATE only, never by message.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

static const char *const rc_names[SKL_RC_LAST] = {
	[SKL_OK] = "success",
	[SKL_EMPTY] = "nothing to do",
	[SKL_RETRY] = "transient failure, safe to retry",
	[SKL_INDETERMINATE] = "outcome unknown",
	[SKL_CONFLICT] = "conflict",
	[SKL_FENCED] = "stale fencing token",
	[SKL_DB] = "database error",
	[SKL_NOMEM] = "out of memory",
	[SKL_MISUSE] = "library misuse",
	[SKL_INVALID] = "invalid input",
	[SKL_UNREACHABLE] = "database unreachable",
	[SKL_IO] = "system error",
	[SKL_REFUSED] = "connection refused by the server",
	[SKL_SCHEMA] = "skiplock's schema is missing or too old",
};

const char *skl_strerror(skl_rc rc)
{
	if ((int)rc < 0 || rc >= SKL_RC_LAST || rc_names[rc] == NULL)
		return "unknown result code";
	return rc_names[rc];
}

void skl_error_clear(skl_error *err)
{
	if (err == NULL)
		return;
	memset(err, 0, sizeof(*err));
}

void skl_free(void *ptr)
{
	free(ptr);
}

/* Exact SQLSTATEs that are transient; class 08 is matched as a class. */
static const char *const transient_states[] = {
	"57P01", /* admin_shutdown: pg_terminate_backend, fast shutdown */
	"57P02", /* crash_shutdown */
	"57P03", /* cannot_connect_now: starting up, in recovery */
	"40001", /* serialization_failure */
	"40P01", /* deadlock_detected */
	"55P03", /* lock_not_available: lock_timeout, NOWAIT */
	"53300", /* too_many_connections */
};

bool skl_sqlstate_is_transient(const char *sqlstate)
{
	if (sqlstate == NULL || sqlstate[0] == '\0')
		return true;
	if (strncmp(sqlstate, "08", 2) == 0)
		return true;
	for (size_t i = 0; i < SKL_ARRAY_LEN(transient_states); i++)
		if (strcmp(sqlstate, transient_states[i]) == 0)
			return true;
	return false;
}

/* What to fix when the server refuses a connection with a SQLSTATE that
 * is not transient (the first entry whose prefix matches). */
static const struct {
	const char *prefix;
	const char *hint;
} refusal_hints[] = {
	{"3D000", "check the database name in the URL, or create the database"},
	{"28P01", "check the password (in the URL, PGPASSWORD or ~/.pgpass)"},
	{"28000", "check the user name in the URL and the server's pg_hba.conf"},
	{"42501", "grant the role CONNECT on the database"},
	{"", "retrying cannot fix this: check the URL and the server's settings"},
};

const char *skl__refusal_hint(const char *sqlstate)
{
	size_t i = 0;
	while (strncmp(sqlstate, refusal_hints[i].prefix, strlen(refusal_hints[i].prefix)) != 0)
		i++;
	return refusal_hints[i].hint;
}

static void set_message(skl_error *err, const char *fmt, va_list ap)
{
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	size_t n = strlen(err->message);
	while (n > 0 && (err->message[n - 1] == '\n' || err->message[n - 1] == ' '))
		err->message[--n] = '\0';
}

skl_rc skl__seterr(skl_error *err, skl_rc rc, const char *fmt, ...)
{
	if (err == NULL)
		return rc;
	skl_error_clear(err);
	err->rc = rc;
	err->indeterminate = (rc == SKL_INDETERMINATE);
	va_list ap;
	va_start(ap, fmt);
	set_message(err, fmt, ap);
	va_end(ap);
	return rc;
}

skl_rc skl__seterr_errno(skl_error *err, int errnum, const char *fmt, ...)
{
	if (err == NULL)
		return SKL_IO;
	skl_error_clear(err);
	err->rc = SKL_IO;
	err->sys_errno = errnum;
	va_list ap;
	va_start(ap, fmt);
	set_message(err, fmt, ap);
	va_end(ap);
	size_t n = strlen(err->message);
	snprintf(err->message + n, sizeof(err->message) - n, ": %s", strerror(errnum));
	return SKL_IO;
}

static void copy_field(char *dst, size_t cap, const PGresult *res, int field)
{
	const char *v = PQresultErrorField(res, field);
	snprintf(dst, cap, "%s", v ? v : "");
}

/* skiplock's own permanent SQLSTATEs with a result code of their own. */
static const struct {
	const char *state;
	skl_rc rc;
} own_states[] = {
	{"SK001", SKL_FENCED}, /* lease_fence: stale token or expired lease */
	{"SK002", SKL_FENCED}, /* idem_complete, idem_release: not in progress under
	                        * this holder */
};

static skl_rc permanent_rc(const char *sqlstate)
{
	for (size_t i = 0; sqlstate && i < SKL_ARRAY_LEN(own_states); i++)
		if (strcmp(sqlstate, own_states[i].state) == 0)
			return own_states[i].rc;
	return SKL_DB;
}

/* Fills err from a failed result; SKL_RETRY for transient SQLSTATEs,
 * SKL_FENCED for SK001, SKL_DB otherwise.  The caller decides about
 * indeterminacy. */
skl_rc skl__seterr_result(skl_error *err, const PGresult *res)
{
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	skl_rc rc = skl_sqlstate_is_transient(state) ? SKL_RETRY : permanent_rc(state);
	if (err == NULL)
		return rc;
	skl_error_clear(err);
	err->rc = rc;
	copy_field(err->sqlstate, sizeof(err->sqlstate), res, PG_DIAG_SQLSTATE);
	copy_field(err->message, sizeof(err->message), res, PG_DIAG_MESSAGE_PRIMARY);
	copy_field(err->detail, sizeof(err->detail), res, PG_DIAG_MESSAGE_DETAIL);
	copy_field(err->hint, sizeof(err->hint), res, PG_DIAG_MESSAGE_HINT);
	if (err->message[0] == '\0')
		snprintf(err->message, sizeof(err->message), "%s",
		         PQresStatus(PQresultStatus(res)));
	return rc;
}

void skl__log(const skl_client *c, skl_log_level level, const char *fmt, ...)
{
	if (c == NULL || c->log == NULL)
		return;
	char buf[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	c->log(c->log_ctx, level, buf);
}
