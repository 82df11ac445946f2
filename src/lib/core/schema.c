/*
 * schema.c — `skiplock init`: install or upgrade the schema "skiplock".
 *
 * Each step (sql/NNNN_name.sql, append-only) runs in its own short
 * transaction that first takes pg_advisory_xact_lock(SKL_LOCK_SCHEMA): many
 * replicas may run init at once, through a transaction pooler too, and the
 * lock ends with the transaction, so nothing can leak onto a pooled backend.
 * A step is applied iff its version is absent from skiplock.schema_version,
 * checked under the lock; the row is written in the step's transaction, so
 * a step is applied exactly once or not at all.  The row keeps the step's
 * SHA-256; an installed step whose checksum is not the built-in text's
 * stops the install (schema_repair.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/schema_steps.h"
#include "skiplock/schema.h"

/* "skl" + 1: transaction-scoped advisory lock key of schema installation. */
#define SKL_LOCK_SCHEMA "8316001898373562369"

static const char *const bootstrap_sql =
	"SELECT pg_advisory_xact_lock(" SKL_LOCK_SCHEMA ");"
	"CREATE SCHEMA IF NOT EXISTS skiplock;"
	"CREATE TABLE IF NOT EXISTS skiplock.schema_version ("
	"  version int PRIMARY KEY,"
	"  name text NOT NULL,"
	"  checksum text NOT NULL,"
	"  applied_at timestamptz NOT NULL DEFAULT now())";

static const char *const step_present_sql =
	"SELECT 1 FROM skiplock.schema_version WHERE version = $1";

static const char *const step_record_sql =
	"INSERT INTO skiplock.schema_version (version, name, checksum) VALUES ($1, $2, $3)";

static skl_rc exec_simple(skl_client *c, const char *sql, skl_error *err)
{
	PGresult *res = NULL;
	skl_rc rc = skl__exec_simple(c, sql, &res, err);
	PQclear(res);
	return rc;
}

static skl_rc apply_step(skl_client *c, void *ctx, skl_error *err)
{
	const skl_schema_step *s = ctx;
	char ver[16], sum[65];
	snprintf(ver, sizeof(ver), "%d", s->version);
	skl_rc rc = exec_simple(c, bootstrap_sql, err);
	PGresult *res = NULL;
	if (rc == SKL_OK)
		rc = skl__exec(c, step_present_sql, 1, (const char *[]){ver}, &res, err);
	if (rc != SKL_OK)
		return rc;
	bool present = PQntuples(res) > 0;
	PQclear(res);
	if (present)
		return SKL_EMPTY;
	rc = exec_simple(c, s->sql, err);
	if (rc != SKL_OK) {
		size_t n = strlen(err ? err->message : "");
		if (err)
			snprintf(err->message + n, sizeof(err->message) - n, " (schema step %s)", s->name);
		return rc;
	}
	skl__schema_checksum(s->sql, sum);
	rc = skl__exec(c, step_record_sql, 3, (const char *[]){ver, s->name, sum}, &res, err);
	PQclear(res);
	return rc;
}

static bool has_version(const skl_schema_state *in, int v)
{
	return v > 0 && v < SKL_MAX_STEPS && (in->have[v / 8] & (1u << (v % 8)));
}

skl_rc skl_schema_installed(skl_client *c, int *out, skl_error *err)
{
	static const skl_txn_opts o = {.idempotent = 1, .schema_itself = 1};
	skl_schema_state in;
	*out = 0;
	skl_rc rc = skl__run(c, &o, skl__schema_read, &in, err);
	if (rc == SKL_OK)
		*out = in.max;
	return rc;
}

skl_rc skl_schema_install(skl_client *c, int *applied, skl_error *err)
{
	/* Idempotent: the version check runs under the lock in every attempt. */
	static const skl_txn_opts o = {.txn = 1, .idempotent = 1, .lock_timeout_ms = 10000,
	                               .schema_itself = 1};
	static const skl_txn_opts ro = {.idempotent = 1, .schema_itself = 1};
	skl_schema_state have;
	int n = 0;
	if (applied)
		*applied = 0;
	/* Every missing step is applied, not only those above the newest;
	 * none while an installed one differs from its built-in text. */
	skl_rc rc = skl__run(c, &ro, skl__schema_read, &have, err);
	if (rc == SKL_OK)
		rc = skl__schema_drift_error(&have, err);
	for (int i = 0; rc == SKL_OK && i < skl_schema_nsteps; i++) {
		if (has_version(&have, skl_schema_steps[i].version))
			continue;
		rc = skl__run(c, &o, apply_step, (void *)&skl_schema_steps[i], err);
		if (rc == SKL_OK) {
			n++;
			skl__log(c, SKL_LOG_INFO, "applied schema step %s", skl_schema_steps[i].name);
		} else if (rc == SKL_EMPTY) {
			rc = SKL_OK; /* another replica applied it first */
		}
	}
	if (applied)
		*applied = n;
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}

/* ---- roles ---- */

static const char *const *role_list(const skl_roles *r, const char *v[4])
{
	v[0] = r->owner;
	v[1] = r->worker;
	v[2] = r->operator_role;
	v[3] = r->reader;
	return v;
}

static skl_rc check_roles_fn(skl_client *c, void *ctx, skl_error *err)
{
	const char *v[4];
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c,
	                      "SELECT r FROM unnest(ARRAY[$1, $2, $3, $4]::text[]) r WHERE r IS NOT NULL "
	                      "AND NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname::text = r)",
	                      4, role_list(ctx, v), &res, err);
	if (rc == SKL_OK && PQntuples(res) > 0)
		rc = skl__seterr(err, SKL_INVALID,
		                 "role \"%s\" does not exist; create it first (CREATE ROLE ... LOGIN "
		                 "for a worker, NOLOGIN will do for an owner)",
		                 PQgetvalue(res, 0, 0));
	PQclear(res);
	return rc;
}

static skl_rc grant_fn(skl_client *c, void *ctx, skl_error *err)
{
	const char *v[4];
	PGresult *res = NULL;
	skl_rc rc = check_roles_fn(c, ctx, err);
	if (rc == SKL_OK)
		rc = skl__exec(c, "SELECT pg_advisory_xact_lock(" SKL_LOCK_SCHEMA "), "
		                  "skiplock.grant_roles($1, $2, $3, $4)",
		               4, role_list(ctx, v), &res, err);
	PQclear(res);
	return rc;
}

static bool role_names_ok(const skl_roles *r, skl_error *err)
{
	const char *v[4];
	role_list(r, v);
	for (int i = 0; i < 4; i++)
		if (v[i] && (!*v[i] || strlen(v[i]) >= 64)) {
			skl__seterr(err, SKL_INVALID, "role name \"%.80s\" must be 1 to 63 bytes", v[i]);
			return false;
		}
	return true;
}

skl_rc skl_schema_roles_exist(skl_client *c, const skl_roles *r, skl_error *err)
{
	static const skl_txn_opts o = {.idempotent = 1, .schema_itself = 1};
	if (!role_names_ok(r, err))
		return SKL_INVALID;
	skl_rc rc = skl__run(c, &o, check_roles_fn, (void *)r, err);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}

skl_rc skl_schema_grant_roles(skl_client *c, const skl_roles *r, skl_error *err)
{
	static const skl_txn_opts o = {.txn = 1, .idempotent = 1, .lock_timeout_ms = 10000,
	                               .schema_itself = 1};
	if (!role_names_ok(r, err))
		return SKL_INVALID;
	skl_rc rc = skl__run(c, &o, grant_fn, (void *)r, err);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}

static skl_rc distribute_fn(skl_client *c, void *ctx, skl_error *err)
{
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, "SELECT pg_advisory_xact_lock(" SKL_LOCK_SCHEMA "), "
	                         "skiplock.distribute()",
	                      0, NULL, &res, err);
	if (rc == SKL_OK && ctx)
		*(bool *)ctx = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 1), "t") == 0;
	PQclear(res);
	return rc;
}

skl_rc skl_schema_distribute(skl_client *c, bool *changed, skl_error *err)
{
	static const skl_txn_opts o = {.txn = 1, .idempotent = 1, .lock_timeout_ms = 10000,
	                               .schema_itself = 1};
	bool done = false;
	skl_rc rc = skl__run(c, &o, distribute_fn, &done, err);
	if (rc == SKL_OK)
		skl_error_clear(err);
	if (changed)
		*changed = rc == SKL_OK && done;
	return rc;
}

skl_rc skl_schema_check_roles(skl_client *c, const char *owner, const char *worker,
                              skl_error *err)
{
	skl_roles r = {.owner = owner, .worker = worker};
	return skl_schema_roles_exist(c, &r, err);
}

skl_rc skl_schema_grant(skl_client *c, const char *owner, const char *worker, skl_error *err)
{
	skl_roles r = {.owner = owner, .worker = worker};
	return skl_schema_grant_roles(c, &r, err);
}
