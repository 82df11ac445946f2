/*
 * schedule_apply.c — skl_cron_apply: make skiplock.schedules equal to a
 * list of wanted schedules (`skiplock cron apply FILE`, `cron add
 * --replace`), so every deploy can run it.
 *
 * The list goes to skiplock.schedules_apply (sql/0032_schedule_api.sql)
 * as one JSON array, in one statement of one transaction: the function
 * takes the table's lock, computes the differences from what it reads,
 * writes them (a change of expression or zone, or a resume, skips the
 * fire times that passed) and logs the call.  A retry after a lost COMMIT
 * recomputes them and converges: the call is idempotent.  A dry run is
 * the same transaction rolled back.  The checks here give the function's
 * answer before a round trip.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord/cron_int.h"

static const char *const apply_sql =
	"SELECT name, action, fields FROM skiplock.schedules_apply($1::jsonb, $2::boolean,"
	" actor => coalesce($3, current_user::text), role => coalesce($4, 'library'))";

typedef struct apply_ctx {
	const char *params[4];    /* the statement's: list, prune, actor, role */
	skl_cron_step *steps;
	size_t nsteps;
} apply_ctx;

/* One want as schedules_apply reads it; NULL when out of memory. */
static json_t *want_json(const skl_schedule_want *w)
{
	const skl_schedule_spec *s = &w->spec;
	json_t *payload = json_loads(s->payload ? s->payload : "{}", JSON_DECODE_ANY, NULL);
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:o?, s:s, s:i, s:i, s:s}", "name", s->name,
	                      "expression", s->expression, "zone", s->zone ? s->zone : "UTC",
	                      "kind", s->kind, "payload", payload, "queue",
	                      s->queue ? s->queue : "default", "priority", s->priority,
	                      "max_attempts", s->max_attempts > 0 ? s->max_attempts : 25,
	                      "catch_up", skl_catch_up_name(s->catch_up));
	if (o && w->paused >= 0 && json_object_set_new(o, "paused", json_boolean(w->paused)) != 0) {
		json_decref(o);
		o = NULL;
	}
	return o;
}

/* want[0..n) as a JSON array, malloc'd text; NULL when out of memory. */
static char *wants_json(const skl_schedule_want *want, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++)
		if (json_array_append_new(a, want_json(&want[i])) != 0) {
			json_decref(a);
			a = NULL;
		}
	char *text = a ? json_dumps(a, JSON_COMPACT) : NULL;
	json_decref(a);
	return text;
}

static skl_cron_change change_of(const char *action)
{
	if (strcmp(action, "created") == 0)
		return SKL_CRON_ADD;
	if (strcmp(action, "updated") == 0)
		return SKL_CRON_CHANGE;
	return strcmp(action, "removed") == 0 ? SKL_CRON_REMOVE : SKL_CRON_KEEP;
}

static skl_rc apply_fn(skl_client *c, void *ctx, skl_error *err)
{
	apply_ctx *a = ctx;
	PGresult *r = NULL;
	skl_rc rc = skl__exec(c, apply_sql, 4, a->params, &r, err);
	if (rc != SKL_OK)
		return rc;
	size_t rows = (size_t)PQntuples(r);
	skl_cron_step *grown = realloc(a->steps, (rows ? rows : 1) * sizeof(*grown));
	if (grown == NULL) {
		PQclear(r);
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	}
	a->steps = grown;
	a->nsteps = rows;
	for (size_t i = 0; i < rows; i++) {
		skl_cron_step *st = &a->steps[i];
		memset(st, 0, sizeof(*st));
		snprintf(st->name, sizeof(st->name), "%s", PQgetvalue(r, (int)i, 0));
		st->change = change_of(PQgetvalue(r, (int)i, 1));
		snprintf(st->fields, sizeof(st->fields), "%s", PQgetvalue(r, (int)i, 2));
	}
	PQclear(r);
	return SKL_OK;
}

/* Every spec is valid and every name appears once. */
static skl_rc check_all(const skl_schedule_want *want, size_t n, skl_error *err)
{
	for (size_t i = 0; i < n; i++) {
		skl_cron_expr *e = NULL;
		skl_rc rc = skl__schedule_check(&want[i].spec, &e, err);
		skl_cron_expr_free(e);
		if (rc != SKL_OK) {
			char msg[sizeof(err->message)];
			snprintf(msg, sizeof(msg), "%s", err ? err->message : "");
			return skl__seterr(err, rc, "schedule %zu (\"%.128s\"): %.400s", i + 1,
			                   want[i].spec.name ? want[i].spec.name : "", msg);
		}
		for (size_t j = 0; j < i; j++)
			if (strcmp(want[j].spec.name, want[i].spec.name) == 0)
				return skl__seterr(err, SKL_INVALID, "schedule \"%s\" is given twice",
				                   want[i].spec.name);
	}
	return SKL_OK;
}

skl_rc skl_cron_apply_as(skl_client *c, const skl_schedule_want *want, size_t n, bool prune,
                         bool dry_run, const skl_actor *who, skl_cron_step **steps,
                         size_t *nsteps, skl_error *err)
{
	if (steps)
		*steps = NULL;
	if (nsteps)
		*nsteps = 0;
	if (want == NULL && n > 0)
		return skl__seterr(err, SKL_MISUSE, "want is NULL");
	apply_ctx a = {.params = {NULL, prune ? "true" : "false"}};
	skl_rc rc = skl__cron_who(who, &a.params[2], &a.params[3], err);
	if (rc == SKL_OK)
		rc = check_all(want, n, err);
	char *list = rc == SKL_OK ? wants_json(want, n) : NULL;
	if (rc == SKL_OK && list == NULL)
		rc = skl__seterr(err, SKL_NOMEM, "out of memory");
	a.params[0] = list;
	skl_txn_opts o = {.txn = 1, .idempotent = 1, .rollback = dry_run};
	if (rc == SKL_OK)
		rc = skl__cron_refusal(skl__run(c, &o, apply_fn, &a, err), err);
	free(list);
	if (rc == SKL_OK && steps) {
		*steps = a.steps;
		a.steps = NULL;
	}
	if (rc == SKL_OK && nsteps)
		*nsteps = a.nsteps;
	free(a.steps);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}

skl_rc skl_cron_apply(skl_client *c, const skl_schedule_want *want, size_t n, bool prune,
                      bool dry_run, skl_cron_step **steps, size_t *nsteps, skl_error *err)
{
	return skl_cron_apply_as(c, want, n, prune, dry_run, NULL, steps, nsteps, err);
}
