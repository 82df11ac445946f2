/*
 * schedule_apply.c — skl_cron_apply: make skiplock.schedules equal to a
 * list of wanted schedules (`skiplock cron apply FILE`, `cron add
 * --replace`), so every deploy can run it.
 *
 * One transaction: LOCK TABLE … IN SHARE ROW EXCLUSIVE MODE (it conflicts
 * with itself, so two applies never interleave, and with the tick's
 * updates, which wait the few milliseconds it lasts; readers do not), one
 * read of every schedule, then one statement per schedule that differs.
 * The differences are computed here from that read, so a retry after a
 * lost COMMIT recomputes them and converges: the call is idempotent.
 * Timing: a schedule whose expression or zone changes, or that is
 * resumed, moves last_fire to the newest fire time at or before now and
 * next_fire past it (what passed is skipped, as skl_cron_resume does);
 * the tick's compare-and-set on last_fire keeps each fire time enqueued
 * at most once across the change.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord/cron_int.h"

static const char *const read_sql =
	"LOCK TABLE skiplock.schedules IN SHARE ROW EXCLUSIVE MODE;"
	"SELECT floor(extract(epoch FROM now()))::bigint, s.name, s.expression, s.zone, s.kind,"
	"       s.payload::text, s.queue, s.priority, s.max_attempts, s.catch_up, s.enabled,"
	"       floor(extract(epoch FROM " SKL_SQL_IN_RANGE("coalesce(s.last_fire, s.created_at)")
	"))::bigint"
	"  FROM (SELECT 1) t LEFT JOIN skiplock.schedules s ON true ORDER BY s.name";

enum { R_NOW, R_NAME, R_EXPR, R_ZONE, R_KIND, R_PAYLOAD, R_QUEUE, R_PRIO, R_MAX, R_CATCH,
       R_ENABLED, R_CURSOR };

static const char *const insert_sql =
	"INSERT INTO skiplock.schedules (name, expression, zone, kind, payload, queue, priority,"
	"                                max_attempts, catch_up, enabled, next_fire, created_at)"
	" VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, $10, to_timestamp($11::bigint),"
	"         to_timestamp($12::bigint))";

static const char *const update_sql =
	"UPDATE skiplock.schedules"
	"   SET expression = $2, zone = $3, kind = $4, payload = $5::jsonb, queue = $6,"
	"       priority = $7, max_attempts = $8, catch_up = $9, enabled = $10,"
	"       last_fire = CASE WHEN $11 THEN coalesce(to_timestamp($12::bigint), last_fire)"
	"                   ELSE last_fire END,"
	"       next_fire = CASE WHEN $11 THEN to_timestamp($13::bigint) ELSE next_fire END,"
	"       updated_at = now()"
	" WHERE name = $1";

static const char *const delete_sql = "DELETE FROM skiplock.schedules WHERE name = $1";

typedef struct apply_ctx {
	const skl_schedule_want *want;
	size_t n;
	bool prune;
	skl_cron_expr **exprs;  /* want[i]'s parsed expression */
	skl_cron_step *steps;   /* n + schedules read, at most */
	size_t nsteps;
	int64_t now;
} apply_ctx;

/* The nine spec columns as statement parameters, $1..$9. */
typedef struct spec_params {
	const char *v[13];
	char prio[16], max[16], enabled[8], now[24], last[24], next[24];
} spec_params;

static void fill_spec(spec_params *p, const skl_schedule_spec *s)
{
	/* cppcheck-suppress ctuuninitvar ; *p is this function's output: snprintf writes p->prio */
	snprintf(p->prio, sizeof(p->prio), "%d", s->priority);
	snprintf(p->max, sizeof(p->max), "%d", s->max_attempts > 0 ? s->max_attempts : 25);
	const char *v[9] = {s->name, s->expression, s->zone ? s->zone : "UTC", s->kind,
	                    s->payload ? s->payload : "{}", s->queue ? s->queue : "default",
	                    p->prio, p->max, skl_catch_up_name(s->catch_up)};
	memcpy(p->v, v, sizeof(v));
}

static skl_rc exec_params(skl_client *c, const char *sql, int n, const char *const *v,
                          skl_error *err)
{
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, sql, n, v, &res, err);
	PQclear(res);
	return rc;
}

static bool same_json(const char *a, const char *b)
{
	json_t *x = json_loads(a, JSON_DECODE_ANY, NULL), *y = json_loads(b, JSON_DECODE_ANY, NULL);
	bool same = x && y && json_equal(x, y);
	json_decref(x);
	json_decref(y);
	return same;
}

static void note(char *fields, size_t cap, bool differs, const char *name)
{
	size_t n = strlen(fields);
	if (differs)
		snprintf(fields + n, cap - n, "%s%s", n ? ", " : "", name);
}

/* What differs between want and the row read; *timing when the fire
 * times must be recomputed (expression, zone, or resumed). */
static void differences(const skl_schedule_want *w, const PGresult *r, int row, char *fields,
                        size_t cap, bool *timing)
{
	spec_params p;
	fill_spec(&p, &w->spec);
	static const char *const names[] = {"expression", "zone", "kind", "payload", "queue",
	                                    "priority", "max_attempts", "catch_up"};
	bool d[8];
	fields[0] = '\0';
	for (int i = 0; i < 8; i++) {
		const char *have = PQgetvalue(r, row, R_EXPR + i);
		d[i] = i == 3 ? !same_json(p.v[1 + i], have) : strcmp(p.v[1 + i], have) != 0;
		note(fields, cap, d[i], names[i]);
	}
	bool enabled = PQgetvalue(r, row, R_ENABLED)[0] == 't';
	bool pause_differs = w->paused >= 0 && (w->paused == 1) == enabled;
	*timing = d[0] || d[1] || (pause_differs && w->paused == 0);
	note(fields, cap, pause_differs, "paused");
}

/* last_fire: the newest fire time at or before now after cursor (none:
 * keep it); next_fire: the first after that (none: NULL, never). */
static skl_rc skip_past(const skl_cron_expr *e, const char *zone, int64_t cursor, int64_t now,
                        spec_params *p, skl_error *err)
{
	skl_cron_plan plan;
	skl_rc rc = skl__cron_plan(e, zone, cursor, now, SKL_CATCH_UP_NONE, 1, -1, &plan, err);
	if (rc != SKL_OK)
		return rc;
	snprintf(p->last, sizeof(p->last), "%" PRId64, plan.newest);
	snprintf(p->next, sizeof(p->next), "%" PRId64, plan.next);
	p->v[11] = plan.any_due ? p->last : NULL;
	p->v[12] = plan.has_next ? p->next : NULL;
	skl__cron_plan_free(&plan);
	return SKL_OK;
}

static skl_rc change(skl_client *c, apply_ctx *a, size_t i, const PGresult *r, int row,
                     skl_cron_step *st, skl_error *err)
{
	const skl_schedule_want *w = &a->want[i];
	bool timing;
	differences(w, r, row, st->fields, sizeof(st->fields), &timing);
	if (st->fields[0] == '\0')
		return SKL_OK; /* SKL_CRON_KEEP */
	st->change = SKL_CRON_CHANGE;
	spec_params p;
	fill_spec(&p, &w->spec);
	bool enabled = w->paused < 0 ? PQgetvalue(r, row, R_ENABLED)[0] == 't' : w->paused == 0;
	p.v[9] = enabled ? "true" : "false";
	p.v[10] = timing ? "true" : "false";
	p.v[11] = p.v[12] = NULL;
	skl_rc rc = timing ? skip_past(a->exprs[i], p.v[2], strtoll(PQgetvalue(r, row, R_CURSOR),
	                                                              NULL, 10), a->now, &p, err)
	                   : SKL_OK;
	return rc == SKL_OK ? exec_params(c, update_sql, 13, p.v, err) : rc;
}

static skl_rc add(skl_client *c, apply_ctx *a, size_t i, skl_cron_step *st, skl_error *err)
{
	const skl_schedule_want *w = &a->want[i];
	spec_params p;
	fill_spec(&p, &w->spec);
	int64_t next = 0;
	skl_rc rc = skl_cron_next(a->exprs[i], p.v[2], a->now, &next, err);
	if (rc != SKL_OK && rc != SKL_EMPTY) /* SKL_EMPTY: never fires; stored, never due */
		return rc;
	snprintf(p.next, sizeof(p.next), "%" PRId64, next);
	snprintf(p.now, sizeof(p.now), "%" PRId64, a->now);
	p.v[9] = w->paused == 1 ? "false" : "true";
	p.v[10] = rc == SKL_OK ? p.next : NULL;
	p.v[11] = p.now;
	st->change = SKL_CRON_ADD;
	return exec_params(c, insert_sql, 12, p.v, err);
}

/* The row of schedule name in the read, or -1. */
static int row_of(const PGresult *r, const char *name)
{
	for (int row = 0; row < PQntuples(r); row++)
		if (!PQgetisnull(r, row, R_NAME) && strcmp(PQgetvalue(r, row, R_NAME), name) == 0)
			return row;
	return -1;
}

static bool wanted(const apply_ctx *a, const char *name)
{
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->want[i].spec.name, name) == 0)
			return true;
	return false;
}

static skl_rc remove_unwanted(skl_client *c, apply_ctx *a, const PGresult *r, skl_error *err)
{
	skl_rc rc = SKL_OK;
	for (int row = 0; rc == SKL_OK && a->prune && row < PQntuples(r); row++) {
		const char *name = PQgetvalue(r, row, R_NAME);
		if (PQgetisnull(r, row, R_NAME) || wanted(a, name))
			continue;
		skl_cron_step *st = &a->steps[a->nsteps++];
		memset(st, 0, sizeof(*st));
		snprintf(st->name, sizeof(st->name), "%s", name);
		st->change = SKL_CRON_REMOVE;
		rc = exec_params(c, delete_sql, 1, (const char *const[]){name}, err);
	}
	return rc;
}

static skl_rc apply_fn(skl_client *c, void *ctx, skl_error *err)
{
	apply_ctx *a = ctx;
	PGresult *r = NULL;
	skl_rc rc = skl__exec_simple(c, read_sql, &r, err);
	if (rc != SKL_OK)
		return rc;
	a->now = strtoll(PQgetvalue(r, 0, R_NOW), NULL, 10);
	a->nsteps = 0;
	for (size_t i = 0; i < a->n; i++)
		if ((rc = skl__schedule_zone_db_check(c, a->want[i].spec.zone, err)) != SKL_OK) {
			char msg[sizeof(err->message)];
			snprintf(msg, sizeof(msg), "%s", err->message);
			PQclear(r);
			return rc == SKL_INVALID ? skl__seterr(err, rc, "schedule %zu (\"%.128s\"): %.400s",
			                                        i + 1, a->want[i].spec.name, msg)
			                         : rc;
		}
	skl_cron_step *grown = realloc(a->steps, (a->n + (size_t)PQntuples(r)) * sizeof(*grown));
	if (grown == NULL) {
		PQclear(r);
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	}
	a->steps = grown;
	for (size_t i = 0; rc == SKL_OK && i < a->n; i++) {
		skl_cron_step *st = &a->steps[a->nsteps++];
		memset(st, 0, sizeof(*st));
		snprintf(st->name, sizeof(st->name), "%s", a->want[i].spec.name);
		int row = row_of(r, st->name);
		rc = row < 0 ? add(c, a, i, st, err) : change(c, a, i, r, row, st, err);
	}
	if (rc == SKL_OK)
		rc = remove_unwanted(c, a, r, err);
	PQclear(r);
	return rc;
}

/* Every spec is valid and every name appears once; exprs[i] parsed. */
static skl_rc check_all(const skl_schedule_want *want, size_t n, skl_cron_expr **exprs,
                        skl_error *err)
{
	for (size_t i = 0; i < n; i++) {
		skl_rc rc = skl__schedule_check(&want[i].spec, &exprs[i], err);
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

skl_rc skl_cron_apply(skl_client *c, const skl_schedule_want *want, size_t n, bool prune,
                      bool dry_run, skl_cron_step **steps, size_t *nsteps, skl_error *err)
{
	if (steps)
		*steps = NULL;
	if (nsteps)
		*nsteps = 0;
	if (want == NULL && n > 0)
		return skl__seterr(err, SKL_MISUSE, "want is NULL");
	apply_ctx a = {.want = want, .n = n, .prune = prune,
	               .exprs = calloc(n ? n : 1, sizeof(skl_cron_expr *))};
	skl_rc rc = a.exprs ? check_all(want, n, a.exprs, err)
	                    : skl__seterr(err, SKL_NOMEM, "out of memory");
	skl_txn_opts o = {.txn = 1, .idempotent = 1, .rollback = dry_run};
	if (rc == SKL_OK)
		rc = skl__run(c, &o, apply_fn, &a, err);
	for (size_t i = 0; a.exprs && i < n; i++)
		skl_cron_expr_free(a.exprs[i]);
	free(a.exprs);
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
