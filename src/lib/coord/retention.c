/*
 * retention.c — the retention settings: calls of skiplock.retention_set,
 * retention_reset and partition_width_set (sql/0013_finished.sql,
 * sql/0018_maintenance_locks.sql), which hold all of the logic, and the
 * reading of the settings.  Maintenance itself is maintain.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "skiplock/retention.h"

typedef struct set_call {
	const char *sql;
	int n;
	const char *params[4];
} set_call;

static skl_rc set_fn(skl_client *c, void *ctx, skl_error *err)
{
	set_call *s = ctx;
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, s->sql, s->n, s->params, &res, err);
	PQclear(res);
	return rc;
}

static bool valid_state(const char *state)
{
	return state == NULL || strcmp(state, "completed") == 0 ||
	       strcmp(state, "discarded") == 0 || strcmp(state, "cancelled") == 0;
}

skl_rc skl_retention_set(skl_client *c, const char *queue, const char *state, int64_t keep_ms,
                         skl_error *err)
{
	if (!valid_state(state))
		return skl__seterr(err, SKL_INVALID,
		                   "state must be completed, discarded or cancelled, got \"%s\"", state);
	if (keep_ms < -1 || keep_ms > INT64_C(3155760000000))
		return skl__seterr(err, SKL_INVALID, "retention must be 0 to 100 years, or forever");
	if (queue && (strlen(queue) < 1 || strlen(queue) > 128))
		return skl__seterr(err, SKL_INVALID, "a queue name is 1 to 128 characters");
	char keep[24];
	snprintf(keep, sizeof(keep), "%" PRId64, keep_ms < 0 ? 0 : keep_ms);
	set_call s = {.sql = "SELECT skiplock.retention_set($1, $2, $3 * interval '1 millisecond', $4)",
	              .n = 4, .params = {queue ? queue : "*", state, keep, keep_ms < 0 ? "t" : "f"}};
	static const skl_txn_opts o = {.idempotent = 1};
	return skl__run(c, &o, set_fn, &s, err);
}

skl_rc skl_retention_reset(skl_client *c, const char *queue, skl_error *err)
{
	set_call s = {.sql = "SELECT skiplock.retention_reset($1)", .n = 1,
	              .params = {queue ? queue : "*"}};
	static const skl_txn_opts o = {.idempotent = 1};
	return skl__run(c, &o, set_fn, &s, err);
}

skl_rc skl_retention_set_width(skl_client *c, int64_t width_ms, skl_error *err)
{
	if (width_ms != 0 && (width_ms < 1000 || width_ms > 86400000))
		return skl__seterr(err, SKL_INVALID,
		                   "the partition width must be 1 second to 1 day, or automatic");
	char w[24];
	snprintf(w, sizeof(w), "%" PRId64, width_ms);
	set_call s = {.sql = "SELECT skiplock.partition_width_set("
	                     "nullif($1::bigint, 0) * interval '1 millisecond')",
	              .n = 1, .params = {w}};
	static const skl_txn_opts o = {.idempotent = 1};
	return skl__run(c, &o, set_fn, &s, err);
}

/* ---- reading the settings ---- */

static const char *const list_sql =
	"SELECT queue, state, coalesce((extract(epoch FROM keep) * 1000)::bigint, -1)"
	"  FROM skiplock.retention ORDER BY queue <> '*', queue, state";

static const char *const info_sql =
	"SELECT (extract(epoch FROM skiplock.partition_width()) * 1000)::bigint,"
	"       (SELECT count(*) FROM skiplock.finished_partitions),"
	"       to_char(m.last_run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),"
	"       m.last_owner, m.last_summary,"
	"       (SELECT count(*) FROM (SELECT 1 FROM skiplock.jobs"
	"         WHERE state IN ('completed', 'discarded', 'cancelled') LIMIT 1000000) x),"
	"       m.partition_width IS NULL"
	"  FROM skiplock.maintenance m";

typedef struct list_call {
	skl_retention *rows;
	size_t n;
	skl_retention_info *info;
} list_call;

static skl_rc info_fill(skl_retention_info *i, const PGresult *r)
{
	if (PQntuples(r) != 1)
		return SKL_OK;
	i->partition_width_ms = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
	i->partitions = atoi(PQgetvalue(r, 0, 1));
	i->unmoved = strtoll(PQgetvalue(r, 0, 5), NULL, 10);
	i->width_auto = PQgetvalue(r, 0, 6)[0] == 't';
	char **s = calloc(3, sizeof(char *));
	if (s == NULL)
		return SKL_NOMEM;
	i->internal = s;
	for (int k = 0; k < 3; k++)
		if (!PQgetisnull(r, 0, 2 + k) && (s[k] = skl__strdup(PQgetvalue(r, 0, 2 + k))) == NULL)
			return SKL_NOMEM;
	i->last_run_at = s[0], i->last_owner = s[1], i->last_summary = s[2];
	return SKL_OK;
}

static skl_rc list_fn(skl_client *c, void *ctx, skl_error *err)
{
	list_call *l = ctx;
	skl_retention_free(l->rows, l->n, l->info); /* a retried call starts again */
	l->rows = NULL, l->n = 0;
	*l->info = (skl_retention_info){0};
	PGresult *res = NULL, *inf = NULL;
	skl_rc rc = skl__exec(c, list_sql, 0, NULL, &res, err);
	if (rc == SKL_OK)
		rc = skl__exec(c, info_sql, 0, NULL, &inf, err);
	int n = rc == SKL_OK ? PQntuples(res) : 0;
	if (rc == SKL_OK && (l->rows = calloc((size_t)n + 1, sizeof(skl_retention))) == NULL)
		rc = SKL_NOMEM;
	for (int i = 0; rc == SKL_OK && i < n; i++, l->n++) {
		skl_retention *r = &l->rows[i];
		size_t lq = strlen(PQgetvalue(res, i, 0)) + 1, ls = strlen(PQgetvalue(res, i, 1)) + 1;
		char *b = malloc(lq + ls);
		if ((r->internal = b) == NULL) {
			rc = SKL_NOMEM;
			break;
		}
		r->queue = memcpy(b, PQgetvalue(res, i, 0), lq);
		r->state = memcpy(b + lq, PQgetvalue(res, i, 1), ls);
		r->keep_ms = strtoll(PQgetvalue(res, i, 2), NULL, 10);
	}
	if (rc == SKL_OK)
		rc = info_fill(l->info, inf);
	PQclear(res);
	PQclear(inf);
	return rc == SKL_NOMEM ? skl__seterr(err, SKL_NOMEM, "out of memory") : rc;
}

skl_rc skl_retention_list(skl_client *c, skl_retention **rows, size_t *n,
                          skl_retention_info *info, skl_error *err)
{
	skl_retention_info scratch;
	/* cppcheck-suppress uninitvar ; only its address is taken: *l.info is zeroed below */
	list_call l = {.info = info ? info : &scratch};
	*l.info = (skl_retention_info){0};
	static const skl_txn_opts o = {.txn = 1, .idempotent = 1};
	skl_rc rc = skl__run(c, &o, list_fn, &l, err);
	if (rc != SKL_OK || info == NULL)
		skl_retention_free(NULL, 0, l.info);
	if (rc != SKL_OK) {
		skl_retention_free(l.rows, l.n, NULL);
		l.rows = NULL, l.n = 0;
	}
	*rows = l.rows;
	*n = l.n;
	return rc;
}

void skl_retention_free(skl_retention *rows, size_t n, skl_retention_info *info)
{
	for (size_t i = 0; rows && i < n; i++)
		free(rows[i].internal);
	free(rows);
	if (info && info->internal) {
		char **s = info->internal;
		for (int k = 0; k < 3; k++)
			free(s[k]);
		free(s);
		info->internal = NULL;
	}
}
