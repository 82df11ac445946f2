/*
 * txn.c — run an operation with reconnects, retries and per-transaction
 * settings.
 *
 * Every operation of the library goes through skl__run.  Settings a
 * transaction needs are applied with SET LOCAL inside it, in the same round
 * trip as BEGIN, so nothing outlives the transaction on a pooled backend:
 *   statement_timeout                    below the client deadline, so the
 *                                        server gives up before the client
 *   lock_timeout                         DDL and row locks never queue long
 *   idle_in_transaction_session_timeout  a frozen client frees its locks
 *   client_connection_check_interval     (PG >= 14) a killed client's
 *                                        statement stops in about a second
 * Retries: transient failures (SQLSTATE table in error.c, lost connections,
 * failed connects) are retried with capped exponential backoff and full
 * jitter until retry_max_ms has passed; an indeterminate outcome is retried
 * only when the caller declares the operation idempotent.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "skiplock/schema.h"

static int or_default(int v, int dflt)
{
	return v > 0 ? v : dflt;
}

static void begin_sql(const skl_client *c, const skl_txn_opts *o, char *buf, size_t cap)
{
	int st = or_default(o->statement_timeout_ms,
	                    c->call_timeout_ms > 200 ? c->call_timeout_ms - 100 : c->call_timeout_ms);
	int idle = or_default(o->idle_timeout_ms, c->call_timeout_ms);
	int n = snprintf(buf, cap,
	                 "BEGIN; SET LOCAL statement_timeout = %d; SET LOCAL lock_timeout = %d; "
	                 "SET LOCAL idle_in_transaction_session_timeout = %d",
	                 st, or_default(o->lock_timeout_ms, 5000), idle);
	if (c->server_version >= 140000 && n > 0 && (size_t)n < cap)
		snprintf(buf + n, cap - (size_t)n, "; SET LOCAL client_connection_check_interval = 1000");
}

static skl_rc simple(skl_client *c, const char *sql, skl_error *err)
{
	PGresult *res = NULL;
	skl_rc rc = skl__exec_simple(c, sql, &res, err);
	PQclear(res);
	return rc;
}

static void rollback_quietly(skl_client *c)
{
	if (c->conn == NULL || c->tx == SKL_TX_NONE)
		return;
	skl_error ignored;
	if (simple(c, "ROLLBACK", &ignored) != SKL_OK && c->conn)
		PQfinish(c->conn), c->conn = NULL;
	c->tx = SKL_TX_NONE;
}

static skl_rc run_once(skl_client *c, const skl_txn_opts *o, skl_txn_fn fn, void *ctx,
                       skl_error *err)
{
	skl_rc rc = skl__connect(c, err);
	if (rc != SKL_OK || !o->txn)
		return rc != SKL_OK ? rc : fn(c, ctx, err);
	char begin[320];
	begin_sql(c, o, begin, sizeof(begin));
	c->tx = SKL_TX_OPEN;
	rc = simple(c, begin, err);
	if (rc == SKL_OK)
		rc = fn(c, ctx, err);
	if ((rc != SKL_OK && rc != SKL_EMPTY) || o->rollback) {
		rollback_quietly(c);
		return rc;
	}
	skl_error keep = {0};
	if (rc == SKL_EMPTY && err)
		keep = *err;
	c->tx = SKL_TX_COMMITTING;
	skl_rc crc = simple(c, "COMMIT", err);
	c->tx = SKL_TX_NONE;
	if (crc != SKL_OK)
		return crc;
	if (rc == SKL_EMPTY && err)
		*err = keep;
	return rc;
}

static bool retryable(skl_rc rc, const skl_txn_opts *o)
{
	return rc == SKL_RETRY || rc == SKL_UNREACHABLE || (rc == SKL_INDETERMINATE && o->idempotent);
}

/* Runs fn until it succeeds, fails for good, or retry_max_ms has passed. */
static skl_rc run_retrying(skl_client *c, const skl_txn_opts *o, skl_txn_fn fn, void *ctx,
                           skl_error *err)
{
	int64_t start = skl__now_ms();
	for (int attempt = 0;; attempt++) {
		skl_rc rc = run_once(c, o, fn, ctx, err);
		if (rc == SKL_INDETERMINATE)
			c->indeterminate++;
		if (!retryable(rc, o))
			return rc;
		int64_t delay = skl__backoff_full(attempt, c->retry_base_ms, c->retry_cap_ms, &c->rng);
		int64_t spent = skl__now_ms() - start;
		if (spent >= c->retry_max_ms) {
			skl__log(c, SKL_LOG_DEBUG, "giving up after %d attempts in %lld ms: %s",
			         attempt + 1, (long long)spent, err ? err->message : skl_strerror(rc));
			return rc;
		}
		if (delay > c->retry_max_ms - spent)
			delay = c->retry_max_ms - spent;
		skl__log(c, SKL_LOG_DEBUG, "retrying in %lld ms after a transient failure: %s%s%s",
		         (long long)delay, err ? err->message : skl_strerror(rc),
		         err && err->sqlstate[0] ? " SQLSTATE " : "", err ? err->sqlstate : "");
		skl__sleep_ms(delay);
	}
}

/* ---- skiplock's schema: present and new enough ---- */

static const char *const schema_version_sql =
	"SELECT coalesce(max(version), 0) FROM skiplock.schema_version";

/* SKL_SCHEMA when skiplock's schema is missing (the read fails with
 * 42P01 or 3F000) or older than the steps built into the library. */
static skl_rc schema_fn(skl_client *c, void *ctx, skl_error *err)
{
	(void)ctx;
	PGresult *res = NULL;
	skl_error e;
	skl_rc rc = skl__exec(c, schema_version_sql, 0, NULL, &res, &e);
	int have = rc == SKL_OK ? atoi(PQgetvalue(res, 0, 0)) : -1;
	PQclear(res);
	if (rc != SKL_OK && (strcmp(e.sqlstate, "42P01") == 0 || strcmp(e.sqlstate, "3F000") == 0))
		have = 0;
	if (have < 0) {
		if (err)
			*err = e;
		return rc;
	}
	if (have >= skl_schema_latest())
		return SKL_OK;
	if (have == 0)
		return skl__seterr(err, SKL_SCHEMA, "skiplock's schema is not installed in this "
		                   "database: run `skiplock init`");
	return skl__seterr(err, SKL_SCHEMA, "skiplock's schema is at version %d, older than "
	                   "version %d this build needs: run `skiplock init`",
	                   have, skl_schema_latest());
}

static skl_rc check_schema(skl_client *c, skl_error *err)
{
	static const skl_txn_opts o = {.idempotent = 1};
	skl_rc rc = run_retrying(c, &o, schema_fn, NULL, err);
	c->schema_ok = rc == SKL_OK;
	return rc;
}

skl_rc skl__run(skl_client *c, const skl_txn_opts *o, skl_txn_fn fn, void *ctx, skl_error *err)
{
	static const skl_txn_opts plain = {0};
	if (o == NULL)
		o = &plain;
	skl_rc rc = SKL_OK;
	if (c->require_schema && !c->schema_ok && !o->schema_itself)
		rc = check_schema(c, err);
	return rc == SKL_OK ? run_retrying(c, o, fn, ctx, err) : rc;
}

static skl_rc ping_fn(skl_client *c, void *ctx, skl_error *err)
{
	(void)ctx;
	return simple(c, "SELECT 1", err);
}

skl_rc skl_client_ping(skl_client *c, skl_error *err)
{
	static const skl_txn_opts o = {.idempotent = 1};
	return skl__run(c, &o, ping_fn, NULL, err);
}

skl_rc skl__start_check(skl_client *c, int within_ms, skl_error *err)
{
	int keep = c->retry_max_ms;
	bool required = c->require_schema;
	if (within_ms < c->retry_max_ms)
		c->retry_max_ms = within_ms;
	c->require_schema = true;
	skl_rc rc = skl_client_ping(c, err);
	c->retry_max_ms = keep;
	c->require_schema = required;
	return rc;
}

static skl_rc stmt_fn(skl_client *c, void *ctx, skl_error *err)
{
	skl_stmt *s = ctx;
	PQclear(s->res);
	s->res = NULL;
	return skl__exec(c, s->sql, s->nparams, s->params, &s->res, err);
}

skl_rc skl__run_stmt(skl_client *c, const skl_txn_opts *o, skl_stmt *s, skl_error *err)
{
	skl_rc rc = skl__run(c, o, stmt_fn, s, err);
	if (rc != SKL_OK) {
		PQclear(s->res);
		s->res = NULL;
	}
	return rc;
}
