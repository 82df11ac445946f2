/*
 * schema_repair.c — installed steps checked against the built-in ones, and
 * `skiplock init --repair`.
 *
 * skiplock.schema_version records the SHA-256 of the text each step was
 * applied from.  A recorded checksum that is not the built-in step's means
 * the database holds an older (or foreign) text of that step: init refuses
 * it rather than build on it.  Only a "superseded" text listed in
 * sql/CHECKSUMS can be repaired: it was reviewed to differ from the step
 * only in function definitions and comments, so re-creating the step's
 * functions (CREATE OR REPLACE FUNCTION keeps their owner, grants and
 * triggers) and comments brings the database to the built-in text.  Each
 * repair is one transaction under the schema lock that first re-reads the
 * recorded checksum, so replicas repairing at once repair once.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/buf.h"
#include "core/internal.h"
#include "core/schema_steps.h"
#include "skiplock/schema.h"

/* The statement s[0..n) starts with the words of `words` (case and runs of
 * white space ignored); returns the offset just past them, or 0. */
static size_t starts_with(const char *s, size_t n, const char *words)
{
	size_t i = 0;
	for (const char *w = words; *w; w++) {
		if (*w == ' ') {
			if (i >= n || !isspace((unsigned char)s[i]))
				return 0;
			while (i < n && isspace((unsigned char)s[i]))
				i++;
		} else if (i >= n || tolower((unsigned char)s[i++]) != *w) {
			return 0;
		}
	}
	return i < n && (isspace((unsigned char)s[i]) || s[i] == '(') ? i : 0;
}

/* The name at s[i..] (after white space, up to "(" or white space). */
static void read_name(const char *s, size_t n, size_t i, char *name, size_t cap)
{
	while (i < n && isspace((unsigned char)s[i]))
		i++;
	size_t j = i;
	while (j < n && s[j] != '(' && !isspace((unsigned char)s[j]))
		j++;
	snprintf(name, cap, "%.*s", (int)(j - i), s + i);
}

/* CREATE [OR REPLACE] FUNCTION: the offset past those words, or 0. */
static size_t create_function_at(const char *s, size_t n)
{
	size_t i = starts_with(s, n, "create function");
	return i ? i : starts_with(s, n, "create or replace function");
}

/* The name of the function a statement creates ("skiplock.f") into name;
 * false when it creates none. */
static bool created_function(const char *s, size_t n, char *name, size_t cap)
{
	size_t i = create_function_at(s, n);
	if (i)
		read_name(s, n, i, name, cap);
	return i > 0;
}

/* The function a COMMENT ON FUNCTION statement is about, into name. */
static bool commented_function(const char *s, size_t n, char *name, size_t cap)
{
	size_t i = starts_with(s, n, "comment on function");
	if (i)
		read_name(s, n, i, name, cap);
	return i > 0;
}

/* Whether a step after idx creates the function `name` again. */
static bool redefined_later(int idx, const char *name)
{
	char other[256];
	for (int k = idx + 1; k < skl_schema_nsteps; k++) {
		const char *t = skl_schema_steps[k].sql;
		size_t len = strlen(t), pos = 0, start, n;
		int line;
		while (skl__next_statement(t, len, &pos, &start, &n, &line))
			if (created_function(t + start, n, other, sizeof(other)) &&
			    strcasecmp(other, name) == 0)
				return true;
	}
	return false;
}

static void add_statement(skl_buf *out, const char *s, size_t n, size_t skip, const char *head)
{
	skl_buf_adds(out, head);
	skl_buf_add(out, s + skip, n - skip);
	skl_buf_adds(out, ";\n");
}

int skl__schema_repair_sql(int idx, skl_buf *out)
{
	const char *t = skl_schema_steps[idx].sql;
	size_t len = strlen(t), pos = 0, start, n;
	int line, count = 0;
	char name[256];
	while (skl__next_statement(t, len, &pos, &start, &n, &line)) {
		const char *s = t + start;
		if (created_function(s, n, name, sizeof(name)) && !redefined_later(idx, name)) {
			add_statement(out, s, n, create_function_at(s, n), "CREATE OR REPLACE FUNCTION");
			count++;
		} else if (commented_function(s, n, name, sizeof(name)) &&
		           !redefined_later(idx, name)) {
			add_statement(out, s, n, 0, "");
		}
	}
	return count;
}

/* ---- checking and repairing an installed schema ---- */

skl_rc skl__schema_drift_error(const skl_schema_state *st, skl_error *err)
{
	if (st->ndrift == 0)
		return SKL_OK;
	const skl_schema_drift *d = &st->drift[0];
	for (int i = 0; i < st->ndrift; i++)
		if (!st->drift[i].repairable) {
			d = &st->drift[i];
			break;
		}
	char built[65];
	skl__schema_checksum(skl_schema_steps[d->idx].sql, built);
	const char *name = skl_schema_steps[d->idx].name;
	if (d->repairable)
		return skl__seterr(err, SKL_CONFLICT,
		                   "schema step %s is installed from an earlier text (checksum "
		                   "%.12s, built in %.12s) whose functions differ: run `skiplock init "
		                   "--repair` (skl_schema_repair) to re-create them",
		                   name, d->recorded, built);
	return skl__seterr(err, SKL_CONFLICT,
	                   "schema step %s is installed from a text this build does not know "
	                   "(checksum %.12s, built in %.12s): refusing to build on it; no safe "
	                   "repair is known (see \"Checksums and repair\" in sql/SCHEMA.md)",
	                   name, d->recorded, built);
}

typedef struct repair_args {
	const skl_schema_drift *d;
	int functions;
} repair_args;

/* CREATE OR REPLACE FUNCTION resets what later steps set with ALTER
 * FUNCTION (SECURITY DEFINER, a fixed search_path: step 0011).  Before a
 * repair, the statements that set them again; run them after it. */
static const char *const attributes_sql =
	"SELECT coalesce(string_agg(format('ALTER FUNCTION %s %s%s', p.oid::regprocedure,"
	"         CASE WHEN p.prosecdef THEN 'SECURITY DEFINER' ELSE 'SECURITY INVOKER' END,"
	"         coalesce((SELECT string_agg(' SET ' || split_part(c, '=', 1) || ' = ' ||"
	"                                     substr(c, strpos(c, '=') + 1), '')"
	"                     FROM unnest(p.proconfig) c), '')), '; '), '')"
	"  FROM pg_proc p WHERE p.pronamespace::regnamespace::text IN ('skiplock', 'skiplock_internal')"
	"   AND (p.prosecdef OR p.proconfig IS NOT NULL)";

/* Step 0034 moved the internal functions to schema skiplock_internal; an
 * older step's text still names them skiplock.f: the repair's statements
 * with each such name (in a definition, a call or a comment) moved too. */
static const char *const moved_names_sql =
	"SELECT coalesce(regexp_replace($1, '\\mskiplock\\.(' || string_agg(DISTINCT p.proname, '|')"
	"                               || ')\\(', 'skiplock_internal.\\1(', 'g'), $1)"
	"  FROM pg_proc p WHERE p.pronamespace::regnamespace::text = 'skiplock_internal'";

/* The repair's statements for the functions' schemas of today. */
static skl_rc repair_statements(skl_client *c, const skl_schema_step *s, repair_args *a,
                                char **out, skl_error *err)
{
	skl_buf sql;
	skl_buf_init(&sql, 4 << 20);
	a->functions = skl__schema_repair_sql(a->d->idx, &sql);
	skl_rc rc = skl_buf_failed(&sql)
		? skl__seterr(err, SKL_NOMEM, "out of memory repairing schema step %s", s->name)
		: SKL_OK;
	PGresult *res = NULL;
	if (rc == SKL_OK)
		rc = skl__exec(c, moved_names_sql, 1, (const char *[]){skl_buf_str(&sql)}, &res, err);
	if (rc == SKL_OK && (*out = strdup(PQgetvalue(res, 0, 0))) == NULL)
		rc = skl__seterr(err, SKL_NOMEM, "out of memory repairing schema step %s", s->name);
	PQclear(res);
	skl_buf_free(&sql);
	return rc;
}

static skl_rc run_repair(skl_client *c, const skl_schema_step *s, repair_args *a,
                         skl_error *err)
{
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, attributes_sql, 0, NULL, &res, err);
	char *restore = rc == SKL_OK ? strdup(PQgetvalue(res, 0, 0)) : NULL;
	PQclear(res);
	if (rc == SKL_OK && restore == NULL)
		rc = skl__seterr(err, SKL_NOMEM, "out of memory repairing schema step %s", s->name);
	char *sql = NULL;
	if (rc == SKL_OK)
		rc = repair_statements(c, s, a, &sql, err);
	if (rc == SKL_OK)
		rc = skl__exec_simple(c, sql, &res, err);
	PQclear(res);
	res = NULL;
	if (rc == SKL_OK && restore[0])
		rc = skl__exec_simple(c, restore, &res, err);
	PQclear(res);
	free(sql);
	free(restore);
	return rc;
}

/* One step, under the schema lock: still recorded with the superseded
 * checksum?  Then its functions and comments, and the new checksum. */
static skl_rc repair_fn(skl_client *c, void *ctx, skl_error *err)
{
	repair_args *a = ctx;
	const skl_schema_step *s = &skl_schema_steps[a->d->idx];
	char ver[16], sum[65];
	snprintf(ver, sizeof(ver), "%d", s->version);
	skl__schema_checksum(s->sql, sum);
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, "SELECT pg_advisory_xact_lock(8316001898373562369), "
	                         "(SELECT checksum FROM skiplock.schema_version WHERE version = $1)",
	                      1, (const char *[]){ver}, &res, err);
	bool still = rc == SKL_OK && strcmp(PQgetvalue(res, 0, 1), a->d->recorded) == 0;
	PQclear(res);
	res = NULL; /* cleared again below when the repair fails */
	if (rc != SKL_OK || !still)
		return rc == SKL_OK ? SKL_EMPTY : rc;
	rc = run_repair(c, s, a, err);
	if (rc == SKL_OK)
		rc = skl__exec(c, "UPDATE skiplock.schema_version SET checksum = $2 WHERE version = $1",
		               2, (const char *[]){ver, sum}, &res, err);
	PQclear(res);
	return rc;
}

skl_rc skl_schema_repair(skl_client *c, int *repaired, skl_error *err)
{
	static const skl_txn_opts ro = {.idempotent = 1, .schema_itself = 1};
	static const skl_txn_opts o = {.txn = 1, .idempotent = 1, .lock_timeout_ms = 10000,
	                               .schema_itself = 1};
	skl_schema_state st;
	int n = 0;
	if (repaired)
		*repaired = 0;
	skl_rc rc = skl__run(c, &ro, skl__schema_read, &st, err);
	for (int i = 0; rc == SKL_OK && i < st.ndrift; i++)
		if (!st.drift[i].repairable)
			rc = skl__schema_drift_error(&st, err);
	for (int i = 0; rc == SKL_OK && i < st.ndrift; i++) {
		repair_args a = {&st.drift[i], 0};
		rc = skl__run(c, &o, repair_fn, &a, err);
		if (rc == SKL_OK) {
			n++;
			skl__log(c, SKL_LOG_INFO, "repaired schema step %s: %d functions re-created",
			         skl_schema_steps[st.drift[i].idx].name, a.functions);
		} else if (rc == SKL_EMPTY) {
			rc = SKL_OK; /* another replica repaired it first */
		}
	}
	if (repaired)
		*repaired = n;
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}
