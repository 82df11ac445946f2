/*
 * limits.c — skiplock/limits.h: limits on job starts (sql/0029_limits.sql),
 * set and removed through the logged SECURITY DEFINER functions limit_set
 * and limit_remove, one statement each, and listed from limits_status.
 *
 * Every bound the database enforces is checked here first, so bad input is
 * refused before any statement (the command's exit 2 with nothing
 * written); the database's own checks stay the authority.  The actions are
 * not re-sent after an indeterminate outcome: each writes one row of the
 * action log.  Enforcing a limit is the claim's business (queue.c calls
 * the claim; the SQL decides), nothing here.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "queue/control_int.h"
#include "queue/queue_int.h"
#include "skiplock/limits.h"

static const skl_txn_opts read_opts = {.txn = 1, .idempotent = 1};

/* ---- checks ---- */

static skl_rc check_count(const char *what, int v, skl_error *err)
{
	if (v < 0 || v > SKL_LIMIT_MAX)
		return skl__seterr(err, SKL_INVALID, "%s must be 1 to %d, got %d", what, SKL_LIMIT_MAX,
		                   v);
	return SKL_OK;
}

skl_rc skl_limit_spec_check(const skl_limit_spec *s, skl_error *err)
{
	if (s == NULL)
		return skl__seterr(err, SKL_INVALID, "a limit needs a spec");
	if (skl__check_kind(s->kind, err) != SKL_OK)
		return SKL_INVALID;
	if (s->max_running == 0 && s->rate == 0)
		return skl__seterr(err, SKL_INVALID, "a limit needs max_running, a rate, or both");
	if (check_count("max_running", s->max_running, err) != SKL_OK ||
	    check_count("rate", s->rate, err) != SKL_OK)
		return SKL_INVALID;
	if (s->per_ms < 0 || s->per_ms > SKL_LIMIT_PER_MAX_MS)
		return skl__seterr(err, SKL_INVALID, "per must be 1 ms to 1 day, got %" PRId64 " ms",
		                   s->per_ms);
	if (s->per_ms > 0 && s->rate == 0)
		return skl__seterr(err, SKL_INVALID, "per is the window of a rate: give a rate too");
	size_t kf = s->key_field ? strlen(s->key_field) : 1;
	if (kf == 0 || kf > SKL_LIMIT_FIELD_MAX)
		return skl__seterr(err, SKL_INVALID, "key_field must be 1 to %d bytes",
		                   SKL_LIMIT_FIELD_MAX);
	return SKL_OK;
}

/* ---- the two actions ---- */

/* v as decimal text into buf, or NULL when v is 0 (not given). */
static const char *opt_num(int64_t v, char *buf, size_t cap)
{
	if (v == 0)
		return NULL;
	snprintf(buf, cap, "%" PRId64, v);
	return buf;
}

skl_rc skl_limit_set(skl_client *c, const skl_limit_spec *s, const skl_actor *who,
                     skl_error *err)
{
	skl_rc rc = skl_limit_spec_check(s, err);
	if (rc == SKL_OK)
		rc = skl__check_actor(who, err);
	if (rc != SKL_OK)
		return rc;
	char run[24], rate[24], per[24];
	skl_stmt st = {
		.sql = "SELECT l.kind FROM skiplock.limit_set($1, $2::int, $3::int,"
		       " $4::bigint * interval '1 millisecond', $5, $6, $7) l",
		.nparams = 7,
		.params = {s->kind, opt_num(s->max_running, run, sizeof(run)),
		           opt_num(s->rate, rate, sizeof(rate)), opt_num(s->per_ms, per, sizeof(per)),
		           s->key_field, who->name, who->role}};
	bool isnull = true;
	const char *v = NULL;
	rc = skl__act(c, &st, &isnull, &v, err);
	PQclear(st.res);
	/* 22023: a value the database refuses that the check above let by */
	if (rc == SKL_DB && err && strcmp(err->sqlstate, "22023") == 0)
		err->rc = rc = SKL_INVALID;
	return rc;
}

skl_rc skl_limit_remove(skl_client *c, const char *kind, const skl_actor *who, bool *removed,
                        skl_error *err)
{
	if (removed)
		*removed = false;
	skl_rc rc = skl__check_kind(kind, err);
	if (rc == SKL_OK)
		rc = skl__check_actor(who, err);
	if (rc != SKL_OK)
		return rc;
	skl_stmt st = {.sql = "SELECT skiplock.limit_remove($1, $2, $3)", .nparams = 3,
	               .params = {kind, who->name, who->role}};
	bool isnull = true;
	const char *v = NULL;
	rc = skl__act(c, &st, &isnull, &v, err);
	if (rc == SKL_OK && removed)
		*removed = !isnull && v[0] == 't';
	PQclear(st.res);
	return rc;
}

/* ---- the list ---- */

enum { L_KIND, L_FIELD, L_MAXRUN, L_RUNNING, L_RATE, L_PER, L_STARTED, L_WAITING, L_KEYS,
       L_CHANGED_AT, L_CHANGED_BY, L_NCOLS };
static const char *const col_names[L_NCOLS] = {
	"kind", "key_field", "max_running", "running", "rate", "per_ms", "started", "waiting",
	"keys", "changed_at", "changed_by"};

static const char *const list_sql =
	"SELECT kind, key_field, max_running, running, rate, per_ms, started, waiting, keys,"
	"       to_char(changed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
	"         AS changed_at, changed_by"
	"  FROM skiplock.limits_status()";

/* Column col of row as a number; dflt for NULL. */
static int64_t num_or(const PGresult *r, int row, int col, int64_t dflt)
{
	return PQgetisnull(r, row, col) ? dflt : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

/* Copies the text of column col to *pp (NULL for NULL). */
static const char *text_at(const PGresult *r, int row, int col, char **pp)
{
	if (PQgetisnull(r, row, col))
		return NULL;
	const char *s = strcpy(*pp, PQgetvalue(r, row, col));
	*pp += strlen(s) + 1;
	return s;
}

/* Fills l from row `row`, its strings in one allocation; false when out
 * of memory. */
static bool fill_limit(skl_limit_info *l, const PGresult *r, int row)
{
	static const int texts[] = {L_KIND, L_FIELD, L_CHANGED_AT, L_CHANGED_BY};
	size_t bytes = 0;
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		bytes += (size_t)PQgetlength(r, row, texts[i]) + 1;
	char *mem = malloc(bytes), *p = mem;
	if (mem == NULL)
		return false;
	*l = (skl_limit_info){
		.internal = mem,
		.max_running = (int)num_or(r, row, L_MAXRUN, 0),
		.running = num_or(r, row, L_RUNNING, 0),
		.rate = (int)num_or(r, row, L_RATE, 0),
		.per_ms = num_or(r, row, L_PER, 0),
		.started = num_or(r, row, L_STARTED, -1),
		.waiting = num_or(r, row, L_WAITING, 0),
		.keys = num_or(r, row, L_KEYS, -1),
	};
	l->kind = text_at(r, row, L_KIND, &p);
	l->key_field = text_at(r, row, L_FIELD, &p);
	l->changed_at = text_at(r, row, L_CHANGED_AT, &p);
	l->changed_by = text_at(r, row, L_CHANGED_BY, &p);
	return true;
}

skl_rc skl_limits_list(skl_client *c, skl_limit_info **rows, size_t *n, skl_error *err)
{
	*rows = NULL;
	*n = 0;
	skl_stmt s = {.sql = list_sql};
	skl_rc rc = skl__run_stmt(c, &read_opts, &s, err);
	if (rc == SKL_OK)
		rc = skl__check_columns(s.res, col_names, L_NCOLS, err);
	size_t m = rc == SKL_OK ? (size_t)PQntuples(s.res) : 0, i = 0;
	skl_limit_info *out = m ? calloc(m, sizeof(*out)) : NULL;
	while (out && i < m && fill_limit(&out[i], s.res, (int)i))
		i++;
	PQclear(s.res);
	if (rc != SKL_OK)
		return rc;
	if (i < m) {
		skl_limits_free(out, i);
		return skl__seterr(err, SKL_NOMEM, "out of memory reading the limits");
	}
	*rows = out;
	*n = m;
	return SKL_OK;
}

void skl_limits_free(skl_limit_info *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		free(rows[i].internal);
	free(rows);
}
