/*
 * bulk.c — retry, cancel or discard every job matching a filter (or a list
 * of ids), skiplock/control.h.
 *
 * The count comes first (one read: how many match up to the mark, the
 * highest id among them, and how many above it), then the action's row of
 * skiplock.actions, then batches newest first: each batch is one
 * transaction that selects the next jobs below the previous batch's lowest
 * id that still match the filter and hands them to skiplock.jobs_act,
 * which runs each through its fenced per-job function and adds what
 * changed to the log row.  Ids only go down from the highest id counted,
 * so no job is looked at twice and none that came after the count is
 * looked at; a job a worker finished, claimed or changed in the meantime
 * either no longer matches or is refused by the per-job function, and
 * counts as skipped.  A batch selects at most as many jobs as the count
 * has left to change, so a job that entered the filter since the count
 * (an older id that matches now) can take the place of one that left it
 * but never add to the count: changed <= matched.  The filter is
 * skiplock.jobs_matching, the list's own (list_filter.h).
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/internal.h"
#include "queue/control_int.h"
#include "queue/list_filter.h"
#include "skiplock/control.h"

enum { BULK_DEFAULT_BATCH = 500, BULK_MAX_BATCH = 10000, BULK_MAX_IDS = 100000 };

static const char *const action_names[] = {"retry", "cancel", "discard"};
static const skl_txn_opts read_opts = {.txn = 1, .idempotent = 1};
/* A batch is not re-sent after an indeterminate outcome: its jobs may
 * have changed, and the log row's counts with them. */
static const skl_txn_opts act_opts = {.txn = 1, .idempotent = 0};

const char *skl_bulk_action_name(skl_bulk_action a)
{
	return (unsigned)a < SKL_ARRAY_LEN(action_names) ? action_names[a] : NULL;
}

skl_rc skl_bulk_action_parse(const char *name, skl_bulk_action *a, skl_error *err)
{
	for (size_t i = 0; name && i < SKL_ARRAY_LEN(action_names); i++)
		if (strcmp(name, action_names[i]) == 0) {
			*a = (skl_bulk_action)i;
			return SKL_OK;
		}
	return skl__seterr(err, SKL_INVALID,
	                   "unknown action \"%.32s\" (expected retry, cancel or discard)",
	                   name ? name : "");
}

/* ---- the count ---- */

/* $4: the mark (NULL: none): matched up to it, their highest id, newer. */
static const char *const count_sql =
	"SELECT count(*) FILTER (WHERE $4::bigint IS NULL OR j.id <= $4),"
	" coalesce(max(j.id) FILTER (WHERE $4::bigint IS NULL OR j.id <= $4), 0),"
	" count(*) FILTER (WHERE j.id > $4::bigint) FROM " SKL_JOBS_MATCHING " j";
static const char *const count_ids_sql =
	"SELECT count(*), coalesce(max(j.id), 0), 0 FROM skiplock.all_jobs j"
	" WHERE j.id = ANY ($1::bigint[])";

/* Runs a statement whose one row is n bigints (n <= 3) into v. */
static skl_rc numbers(skl_client *c, const skl_txn_opts *o, skl_stmt *s, int64_t *v, int n,
                      skl_error *err)
{
	skl_rc rc = skl__run_stmt(c, o, s, err);
	if (rc == SKL_OK && (PQntuples(s->res) != 1 || PQnfields(s->res) < n))
		rc = skl__seterr(err, SKL_DB, "a bulk statement answered an unexpected shape");
	for (int i = 0; rc == SKL_OK && i < n; i++)
		v[i] = strtoll(PQgetvalue(s->res, 0, i), NULL, 10);
	return rc;
}

/* v: matched up to up_to (0: no mark), their highest id, newer ones. */
static skl_rc count_matching(skl_client *c, const skl_list_opts *o, int64_t up_to, int64_t v[3],
                             skl_error *err)
{
	skl__list_filter f;
	char mark[24];
	skl_stmt s = {.sql = count_sql, .nparams = SKL_MATCHING_NPARAMS};
	skl_rc rc = skl__matching_params(o, &f, s.params, err);
	snprintf(mark, sizeof(mark), "%" PRId64, up_to);
	s.params[3] = up_to > 0 ? mark : NULL;
	if (rc == SKL_OK)
		rc = numbers(c, &read_opts, &s, v, 3, err);
	PQclear(s.res);
	return rc;
}

skl_rc skl_jobs_count_mark(skl_client *c, const skl_list_opts *o, int64_t *n, int64_t *mark,
                           skl_error *err)
{
	static const skl_list_opts none = {0};
	int64_t v[3] = {0};
	*n = 0;
	if (mark)
		*mark = 0;
	skl_rc rc = count_matching(c, o ? o : &none, 0, v, err);
	if (rc == SKL_OK) {
		*n = v[0];
		if (mark)
			*mark = v[1];
	}
	return rc;
}

skl_rc skl_jobs_count(skl_client *c, const skl_list_opts *o, int64_t *n, skl_error *err)
{
	return skl_jobs_count_mark(c, o, n, NULL, err);
}

/* ---- checks and the log row's target ---- */

static int cmp_desc(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x < y) - (x > y);
}

/* The ids sorted newest first without repeats, as a new array in *out. */
static skl_rc sorted_ids(const skl_bulk_opts *o, int64_t **out, size_t *n, skl_error *err)
{
	int64_t *v = malloc(o->nids * sizeof(*v));
	if (v == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory copying ids");
	memcpy(v, o->ids, o->nids * sizeof(*v));
	qsort(v, o->nids, sizeof(*v), cmp_desc);
	size_t m = 0;
	for (size_t i = 0; i < o->nids; i++)
		if (m == 0 || v[m - 1] != v[i])
			v[m++] = v[i];
	*out = v;
	*n = m;
	return SKL_OK;
}

static skl_rc check_opts(const skl_bulk_opts *o, const skl_actor *who, skl_error *err)
{
	const char *why = NULL;
	if (o == NULL || skl_bulk_action_name(o->action) == NULL)
		return skl__seterr(err, SKL_INVALID, "a bulk action is retry, cancel or discard");
	if (o->batch < 0 || o->batch > BULK_MAX_BATCH)
		return skl__seterr(err, SKL_INVALID, "batch must be 1 to %d jobs", BULK_MAX_BATCH);
	if (o->nids > BULK_MAX_IDS || (o->nids > 0 && o->ids == NULL))
		return skl__seterr(err, SKL_INVALID, "at most %d ids", BULK_MAX_IDS);
	if (o->up_to < 0 || o->expect < 0 || (o->nids > 0 && (o->up_to || o->expect)))
		return skl__seterr(err, SKL_INVALID, "up_to and expect are positive and go with a "
		                                     "filter, not with ids");
	if (o->nids == 0 && !o->all && !o->dry_run && !skl_list_opts_narrows(o->filter, &why))
		return skl__seterr(err, SKL_INVALID, "the filter matches every job (%s): acting on "
		                                     "every job must be asked for (all)", why);
	for (size_t i = 0; i < o->nids; i++)
		if (o->ids[i] <= 0)
			return skl__seterr(err, SKL_INVALID, "job ids are positive, got %" PRId64,
			                   o->ids[i]);
	return skl__check_actor(who, err);
}

static void put_str(json_t *obj, const char *key, const char *v)
{
	if (v)
		json_object_set_new(obj, key, json_string(v));
}

/* {"ids": [...]} or the filter as given (the payload as JSON). */
static char *target_json(const skl_bulk_opts *o, const int64_t *ids, size_t n)
{
	json_t *t = json_object();
	if (n > 0) {
		json_t *a = json_array();
		for (size_t i = 0; i < n; i++)
			json_array_append_new(a, json_integer(ids[i]));
		json_object_set_new(t, "ids", a);
	} else if (o->filter) {
		const skl_list_opts *f = o->filter;
		put_str(t, "queue", f->queue);
		put_str(t, "kind", f->kind);
		put_str(t, "state", f->state);
		if (f->payload_contains)
			json_object_set_new(t, "payload", json_loads(f->payload_contains,
			                                             JSON_DECODE_ANY, NULL));
		put_str(t, "error", f->error_contains);
		put_str(t, "time_field", f->time_field);
		put_str(t, "from", f->from);
		put_str(t, "to", f->to);
	}
	if (n == 0 && o->all)
		json_object_set_new(t, "all", json_true());
	if (n == 0 && o->up_to > 0)
		json_object_set_new(t, "up_to", json_integer(o->up_to));
	char *s = t ? json_dumps(t, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(t);
	return s;
}

/* ---- the batches ---- */

typedef struct bulk_run {
	skl_client *c;
	const skl_bulk_opts *o;
	const skl_list_opts *filter;
	int64_t *ids;                /* sorted newest first; NULL: by filter */
	size_t nids;
	int64_t cursor;              /* the next batch takes ids below it */
	int lim;                     /* jobs the last batch selected at most */
	char action_id[24];
	int batch;
	skl_bulk_result *res;
} bulk_run;

static const char *const batch_sql =
	"SELECT visited, changed, coalesce(last_id, 0) FROM skiplock.jobs_act($12::bigint,"
	" ARRAY(SELECT j.id FROM " SKL_JOBS_MATCHING " j WHERE j.id < $13::bigint"
	"       ORDER BY j.id DESC LIMIT $4::int))";
static const char *const batch_ids_sql =
	"SELECT visited, changed, coalesce(last_id, 0) FROM skiplock.jobs_act($1::bigint,"
	" $2::bigint[])";

/* One batch by filter; *visited: jobs it looked at. */
static skl_rc batch_filter(bulk_run *b, int64_t *visited, int64_t *changed, skl_error *err)
{
	skl__list_filter f;
	char lim[16], cursor[24];
	skl_stmt s = {.sql = batch_sql, .nparams = SKL_MATCHING_NPARAMS + 2};
	skl_rc rc = skl__matching_params(b->filter, &f, s.params, err);
	int64_t left = b->res->matched - b->res->changed; /* changed never exceeds matched */
	b->lim = left < b->batch ? (int)left : b->batch;
	snprintf(lim, sizeof(lim), "%d", b->lim);
	snprintf(cursor, sizeof(cursor), "%" PRId64, b->cursor);
	s.params[3] = lim;
	s.params[SKL_MATCHING_NPARAMS] = b->action_id;
	s.params[SKL_MATCHING_NPARAMS + 1] = cursor;
	if (rc == SKL_OK)
		rc = skl__run_stmt(b->c, &act_opts, &s, err);
	if (rc == SKL_OK && (PQntuples(s.res) != 1 || PQnfields(s.res) != 3))
		rc = skl__seterr(err, SKL_DB, "a bulk batch answered an unexpected shape");
	if (rc == SKL_OK) {
		*visited = strtoll(PQgetvalue(s.res, 0, 0), NULL, 10);
		*changed = strtoll(PQgetvalue(s.res, 0, 1), NULL, 10);
		if (*visited > 0)
			b->cursor = strtoll(PQgetvalue(s.res, 0, 2), NULL, 10);
	}
	PQclear(s.res);
	return rc;
}

/* One batch of the ids list (the next b->batch of them). */
static skl_rc batch_ids(bulk_run *b, size_t *next, int64_t *visited, int64_t *changed,
                        skl_error *err)
{
	skl_buf arr;
	skl_buf_init(&arr, 0);
	size_t end = *next + (size_t)b->batch < b->nids ? *next + (size_t)b->batch : b->nids;
	skl_buf_adds(&arr, "{");
	for (size_t i = *next; i < end; i++)
		skl_buf_printf(&arr, "%s%" PRId64, i > *next ? "," : "", b->ids[i]);
	skl_buf_adds(&arr, "}");
	if (skl_buf_failed(&arr)) {
		skl_buf_free(&arr);
		return skl__seterr(err, SKL_NOMEM, "out of memory building a batch");
	}
	skl_stmt s = {.sql = batch_ids_sql, .nparams = 2, .params = {b->action_id, arr.data}};
	int64_t v[2] = {0};
	skl_rc rc = numbers(b->c, &act_opts, &s, v, 2, err);
	PQclear(s.res);
	skl_buf_free(&arr);
	if (rc == SKL_OK) {
		*visited = v[0];
		*changed = v[1];
		*next = end;
	}
	return rc;
}

static skl_rc run_batches(bulk_run *b, skl_error *err)
{
	size_t next = 0;
	for (;;) {
		int64_t visited = 0, changed = 0;
		skl_rc rc = b->ids ? batch_ids(b, &next, &visited, &changed, err)
		                   : batch_filter(b, &visited, &changed, err);
		if (rc != SKL_OK)
			return rc;
		if (visited == 0)
			return SKL_OK;
		b->res->changed += changed;
		b->res->batches++;
		b->res->skipped = b->res->matched - b->res->changed;
		if (b->o->progress && !b->o->progress(b->res, b->o->ctx))
			return SKL_OK;
		if (b->ids ? next >= b->nids
		           : visited < b->lim || b->res->changed >= b->res->matched)
			return SKL_OK;
	}
}

/* ---- the action ---- */

static skl_rc begin_action(bulk_run *b, const skl_actor *who, skl_error *err)
{
	char *target = target_json(b->o, b->ids, b->nids);
	if (target == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory writing the action's target");
	char matched[24];
	snprintf(matched, sizeof(matched), "%" PRId64, b->res->matched);
	skl_stmt s = {.sql = "SELECT skiplock.action_record($1, $2, $3, $4::jsonb, $5::bigint, 0)",
	              .nparams = 5,
	              .params = {who->name, who->role, skl_bulk_action_name(b->o->action), target,
	                         matched}};
	skl_rc rc = skl__run_stmt(b->c, &act_opts, &s, err);
	if (rc == SKL_OK && (PQntuples(s.res) != 1 || PQgetisnull(s.res, 0, 0)))
		rc = skl__seterr(err, SKL_DB, "the action log answered no id");
	if (rc == SKL_OK) {
		snprintf(b->action_id, sizeof(b->action_id), "%s", PQgetvalue(s.res, 0, 0));
		b->res->action_id = strtoll(b->action_id, NULL, 10);
	}
	PQclear(s.res);
	free(target);
	return rc;
}

/* The count: matched, the mark (where the batches start), newer; refused
 * when more match up to o->up_to than o->expect. */
static skl_rc count_first(bulk_run *b, skl_error *err)
{
	int64_t v[3] = {0};
	skl_rc rc;
	if (b->ids) {
		skl_buf arr;
		skl_buf_init(&arr, 0);
		skl_buf_adds(&arr, "{");
		for (size_t i = 0; i < b->nids; i++)
			skl_buf_printf(&arr, "%s%" PRId64, i ? "," : "", b->ids[i]);
		skl_buf_adds(&arr, "}");
		skl_stmt s = {.sql = count_ids_sql, .nparams = 1, .params = {arr.data}};
		rc = skl_buf_failed(&arr) ? skl__seterr(err, SKL_NOMEM, "out of memory counting ids")
		                          : numbers(b->c, &read_opts, &s, v, 3, err);
		PQclear(s.res);
		skl_buf_free(&arr);
	} else {
		rc = count_matching(b->c, b->filter, b->o->up_to, v, err);
	}
	b->res->matched = v[0];
	b->res->mark = v[1];
	b->res->newer = v[2];
	b->cursor = v[1] + 1;
	if (rc == SKL_OK && b->o->expect > 0 && v[0] > b->o->expect)
		rc = skl__seterr(err, SKL_CONFLICT, "the jobs matching changed since the count: %" PRId64
		                 " match up to job %" PRId64 ", %" PRId64 " were counted; count again",
		                 v[0], b->o->up_to > 0 ? b->o->up_to : v[1], b->o->expect);
	return rc;
}

skl_rc skl_jobs_bulk(skl_client *c, const skl_bulk_opts *o, const skl_actor *who,
                     skl_bulk_result *res, skl_error *err)
{
	static const skl_list_opts none = {0};
	skl_bulk_result mine = {0};
	if (res == NULL)
		res = &mine;
	*res = (skl_bulk_result){0};
	skl_rc rc = check_opts(o, who, err);
	if (rc != SKL_OK)
		return rc;
	bulk_run b = {.c = c, .o = o, .filter = o->filter ? o->filter : &none, .res = res,
	              .batch = o->batch ? o->batch : BULK_DEFAULT_BATCH};
	skl__list_filter f;
	const char *params[SKL_MATCHING_NPARAMS];
	if (o->nids == 0)
		rc = skl__matching_params(b.filter, &f, params, err); /* bad input: nothing sent */
	else
		rc = sorted_ids(o, &b.ids, &b.nids, err);
	if (rc == SKL_OK)
		rc = count_first(&b, err);
	if (rc == SKL_OK && !o->dry_run) {
		res->skipped = res->matched;
		rc = begin_action(&b, who, err);
		if (rc == SKL_OK)
			rc = run_batches(&b, err);
	}
	free(b.ids);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}
