/*
 * schedule.c — cron schedules in skiplock.schedules (sql/0004_schedules.sql)
 * and the tick every worker runs.
 *
 * Writes: this file never writes the table.  Adding, removing, pausing
 * and resuming call the schema's functions (schedule_add, schedule_remove,
 * schedule_set_paused; sql/0032_schedule_api.sql), which check, write and
 * log; the checks here only give the same answer before a round trip.
 *
 * Exactly-once invariant: a fire time is enqueued only by the statement
 * (skiplock.schedule_fire) that moves the schedule's last_fire past it,
 * and that statement changes nothing unless last_fire still holds the
 * value its caller read — a compare-and-set, not a read-then-write.  Any
 * number of workers may evaluate the same schedule at the same instant:
 * one moves it, the others find it moved and write nothing.  The unique
 * key cron:NAME:<fire time> marks each job with its fire time.
 *
 * Clock: "now" is the database's (or the caller's explicit instant, for
 * tests), read in the same statement that finds the due schedules; fire
 * times are computed here from the expression and the zone, never by the
 * server's TimeZone setting.  Timestamps cross the wire as UTC text with
 * microseconds so the compare-and-set matches exactly.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord/cron_int.h"
#include "core/buf.h"
#include "skiplock/queue.h"

/* A timestamptz as whole Unix seconds, rounded down; NULL stays NULL. */
#define SKL_EPOCH(x) "floor(extract(epoch FROM (" x ")))::bigint"
/* The same for a time read from skiplock.schedules, clamped first. */
#define SKL_EPOCH_STORED(x) SKL_EPOCH(SKL_SQL_IN_RANGE(x))

static const skl_txn_opts read_opts = {.idempotent = 1};

/* ---- checking input ---- */

static skl_rc check_name(const char *what, const char *s, size_t max, skl_error *err)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > max)
		return skl__seterr(err, SKL_INVALID, "%s must be 1 to %zu bytes (got %zu)", what, max, n);
	for (const char *p = s; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return skl__seterr(err, SKL_INVALID, "%s must not contain control characters", what);
	return SKL_OK;
}

static skl_rc check_payload(const char *json, skl_error *err)
{
	if (json == NULL)
		return SKL_OK;
	size_t n = strlen(json);
	if (n > SKL_PAYLOAD_MAX_DEFAULT)
		return skl__seterr(err, SKL_INVALID, "payload is %zu bytes, over the limit of %d", n,
		                   SKL_PAYLOAD_MAX_DEFAULT);
	json_error_t e;
	json_t *v = json_loads(json, JSON_DECODE_ANY, &e);
	if (v == NULL)
		return skl__seterr(err, SKL_INVALID, "invalid JSON payload at line %d, column %d: %s",
		                   e.line, e.column, e.text);
	json_decref(v);
	return SKL_OK;
}

static skl_rc check_spec(const skl_schedule_spec *s, skl_cron_expr **e, skl_error *err)
{
	skl_rc rc = check_name("schedule name", s->name, SKL_SCHEDULE_NAME_MAX, err);
	if (rc == SKL_OK)
		rc = check_name("job kind", s->kind, SKL_KIND_MAX, err);
	if (rc == SKL_OK && s->queue)
		rc = check_name("queue name", s->queue, SKL_KIND_MAX, err);
	if (rc == SKL_OK && (s->max_attempts < 0 || (unsigned)s->catch_up > SKL_CATCH_UP_ALL))
		rc = skl__seterr(err, SKL_INVALID, "max_attempts must not be negative and catch_up "
		                 "must be a skl_catch_up");
	if (rc == SKL_OK)
		rc = check_payload(s->payload, err);
	if (rc == SKL_OK)
		rc = skl_cron_zone_check(s->zone ? s->zone : "UTC", err);
	if (rc == SKL_OK)
		rc = skl_cron_parse(s->expression, e, err);
	return rc;
}

skl_rc skl__schedule_check(const skl_schedule_spec *s, skl_cron_expr **e, skl_error *err)
{
	return check_spec(s, e, err);
}

/* ---- statements returning one row ---- */

typedef skl_stmt row_call;

/* Runs one statement with retries; on SKL_OK, call->res holds its rows. */
static skl_rc run_row(skl_client *c, row_call *call, skl_error *err)
{
	return skl__run_stmt(c, &read_opts, call, err);
}

static int64_t col_i64(const PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

static const char *const now_sql = "SELECT " SKL_EPOCH("coalesce($1::timestamptz, now())");

/* The database's clock (or `at`), in whole seconds. */
static skl_rc db_now(skl_client *c, const char *at, int64_t *now, skl_error *err)
{
	row_call call = {.sql = now_sql, .nparams = 1, .params = {at}};
	skl_rc rc = run_row(c, &call, err);
	if (rc == SKL_OK)
		*now = col_i64(call.res, 0, 0);
	PQclear(call.res);
	return rc;
}

/* ---- writes: through the schema's functions (sql/0032_schedule_api.sql) ---- */

skl_rc skl__cron_refusal(skl_rc rc, skl_error *err)
{
	if (rc != SKL_DB || err == NULL)
		return rc;
	if (strcmp(err->sqlstate, "22023") == 0 || strcmp(err->sqlstate, "22004") == 0)
		rc = SKL_INVALID;
	else if (strcmp(err->sqlstate, "23505") == 0)
		rc = SKL_CONFLICT;
	else
		return rc;
	err->rc = rc;
	err->sqlstate[0] = '\0';
	return rc;
}

skl_rc skl__cron_who(const skl_actor *who, const char **name, const char **role,
                     skl_error *err)
{
	*name = who ? who->name : NULL;
	*role = who ? who->role : NULL;
	return who ? skl__check_actor(who, err) : SKL_OK;
}

/* Created at `now` (the caller's read of the clock, whole seconds): a
 * retry after a lost answer finds its own schedule, created at that
 * instant with that definition, and succeeds (schedule_add). */
static const char *const add_sql =
	"SELECT " SKL_EPOCH("next_fire") " FROM skiplock.schedule_add(name => $1,"
	" expression => $2, zone => $3, kind => $4, payload => $5::jsonb, queue => $6,"
	" priority => $7::int, max_attempts => $8::int, catch_up => $9,"
	" at => to_timestamp($10::bigint), actor => coalesce($11, current_user::text),"
	" role => coalesce($12, 'library'))";

static skl_rc insert_schedule(skl_client *c, const skl_schedule_spec *s, int64_t now,
                              const skl_actor *who, int64_t *next, skl_error *err)
{
	char prio[16], max[16], at[24];
	const char *actor, *role;
	skl_rc rc = skl__cron_who(who, &actor, &role, err);
	snprintf(prio, sizeof(prio), "%d", s->priority);
	snprintf(max, sizeof(max), "%d", s->max_attempts > 0 ? s->max_attempts : 25);
	snprintf(at, sizeof(at), "%" PRId64, now);
	row_call call = {.sql = add_sql, .nparams = 12,
	                 .params = {s->name, s->expression, s->zone ? s->zone : "UTC", s->kind,
	                            s->payload ? s->payload : "{}", s->queue ? s->queue : "default",
	                            prio, max, skl_catch_up_name(s->catch_up), at, actor, role}};
	if (rc == SKL_OK)
		rc = skl__cron_refusal(run_row(c, &call, err), err);
	if (rc == SKL_OK)
		*next = col_i64(call.res, 0, 0);
	PQclear(call.res);
	return rc;
}

skl_rc skl_cron_add_as(skl_client *c, const skl_schedule_spec *s, const char *at,
                       const skl_actor *who, int64_t *next_fire, skl_error *err)
{
	if (next_fire)
		*next_fire = 0;
	if (s == NULL)
		return skl__seterr(err, SKL_MISUSE, "schedule spec is NULL");
	skl_cron_expr *e = NULL;
	skl_rc rc = check_spec(s, &e, err);
	skl_cron_expr_free(e);
	int64_t now = 0, next = 0;
	if (rc == SKL_OK)
		rc = db_now(c, at, &now, err);
	if (rc == SKL_OK)
		rc = insert_schedule(c, s, now, who, &next, err);
	if (rc == SKL_OK && next_fire)
		*next_fire = next;
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}

skl_rc skl_cron_add(skl_client *c, const skl_schedule_spec *s, const char *at,
                    int64_t *next_fire, skl_error *err)
{
	return skl_cron_add_as(c, s, at, NULL, next_fire, err);
}

/* ---- remove, pause, resume ---- */

static const char *const remove_sql =
	"SELECT skiplock.schedule_remove(name => $1, actor => coalesce($2, current_user::text),"
	" role => coalesce($3, 'library'))";
/* NULL when there is no such schedule. */
static const char *const set_paused_sql =
	"SELECT skiplock.schedule_set_paused(name => $1, paused => $4::boolean,"
	" at => $5::timestamptz, actor => coalesce($2, current_user::text),"
	" role => coalesce($3, 'library'))";

/* One call of sql by schedule name; SKL_EMPTY when it answers NULL or
 * false (no such schedule). */
static skl_rc by_name(skl_client *c, const char *sql, const char *name, const skl_actor *who,
                      const char *paused, const char *at, skl_error *err)
{
	row_call call = {.sql = sql, .nparams = paused ? 5 : 3, .params = {name, NULL, NULL,
	                                                                    paused, at}};
	skl_rc rc = check_name("schedule name", name, SKL_SCHEDULE_NAME_MAX, err);
	if (rc == SKL_OK)
		rc = skl__cron_who(who, &call.params[1], &call.params[2], err);
	if (rc == SKL_OK)
		rc = skl__cron_refusal(run_row(c, &call, err), err);
	if (rc == SKL_OK && (PQgetisnull(call.res, 0, 0) ||
	                     (!paused && PQgetvalue(call.res, 0, 0)[0] == 'f')))
		rc = skl__seterr(err, SKL_EMPTY, "no schedule \"%s\"", name);
	PQclear(call.res);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}

skl_rc skl_cron_remove_as(skl_client *c, const char *name, const skl_actor *who,
                          skl_error *err)
{
	return by_name(c, remove_sql, name, who, NULL, NULL, err);
}

skl_rc skl_cron_remove(skl_client *c, const char *name, skl_error *err)
{
	return skl_cron_remove_as(c, name, NULL, err);
}

skl_rc skl_cron_pause(skl_client *c, const char *name, skl_error *err)
{
	return by_name(c, set_paused_sql, name, NULL, "true", NULL, err);
}

/* schedule_set_paused skips what passed before at (NULL: now()). */
skl_rc skl_cron_resume(skl_client *c, const char *name, const char *at, skl_error *err)
{
	return by_name(c, set_paused_sql, name, NULL, "false", at, err);
}

/* ---- list ---- */

static const char *const list_sql =
	"SELECT name, expression, zone, kind, payload::text, queue, priority, max_attempts,"
	"       catch_up, enabled, " SKL_EPOCH_STORED("created_at") ", "
	SKL_EPOCH_STORED("last_fire") ", " SKL_EPOCH_STORED("next_fire")
	"  FROM skiplock.schedules ORDER BY name";

enum { L_NAME, L_EXPR, L_ZONE, L_KIND, L_PAYLOAD, L_QUEUE, L_PRIO, L_MAX, L_CATCH, L_ENABLED,
       L_CREATED, L_LAST, L_NEXT, L_NSTR = L_QUEUE + 1 };

/* One allocation holds a row's strings; info->internal points at it. */
static bool fill_info(skl_schedule_info *s, const PGresult *r, int row)
{
	const char **dst[L_NSTR] = {&s->name, &s->expression, &s->zone, &s->kind, &s->payload,
	                            &s->queue};
	size_t total = 0;
	for (int i = 0; i < L_NSTR; i++)
		total += (size_t)PQgetlength(r, row, i) + 1;
	char *mem = malloc(total), *p = mem;
	if (mem == NULL)
		return false;
	for (int i = 0; i < L_NSTR; i++) {
		size_t len = (size_t)PQgetlength(r, row, i);
		memcpy(p, PQgetvalue(r, row, i), len + 1);
		*dst[i] = p;
		p += len + 1;
	}
	skl_catch_up cu = SKL_CATCH_UP_LATEST;
	skl_catch_up_parse(PQgetvalue(r, row, L_CATCH), &cu, NULL);
	s->priority = (int)col_i64(r, row, L_PRIO);
	s->max_attempts = (int)col_i64(r, row, L_MAX);
	s->catch_up = cu;
	s->enabled = PQgetvalue(r, row, L_ENABLED)[0] == 't';
	s->created_at = col_i64(r, row, L_CREATED);
	s->has_last_fire = !PQgetisnull(r, row, L_LAST);
	s->last_fire = col_i64(r, row, L_LAST);
	s->has_next_fire = s->enabled && !PQgetisnull(r, row, L_NEXT);
	s->next_fire = s->has_next_fire ? col_i64(r, row, L_NEXT) : 0;
	s->internal = mem;
	return true;
}

skl_rc skl_cron_list(skl_client *c, skl_schedule_info **out, size_t *n, skl_error *err)
{
	*out = NULL;
	*n = 0;
	row_call call = {.sql = list_sql};
	skl_rc rc = run_row(c, &call, err);
	if (rc != SKL_OK)
		return rc;
	int rows = PQntuples(call.res);
	skl_schedule_info *s = rows ? calloc((size_t)rows, sizeof(*s)) : NULL;
	int filled = 0;
	while (s && filled < rows && fill_info(&s[filled], call.res, filled))
		filled++;
	PQclear(call.res);
	if (filled < rows) {
		skl_schedule_info_free(s, (size_t)filled);
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	}
	*out = s;
	*n = (size_t)rows;
	skl_error_clear(err);
	return SKL_OK;
}

void skl_schedule_info_free(skl_schedule_info *s, size_t n)
{
	for (size_t i = 0; s && i < n; i++)
		free(s[i].internal);
	free(s);
}

/* ---- the tick ---- */

/* The tick is one call: the database plans and fires every due schedule
 * (skiplock.cron_tick, sql/0024_cron.sql), so workers in every language
 * agree on fire times by construction.  cron_tick_at, for an explicit
 * instant, is the owner's (tests and simulations). */
static const char *const tick_sql =
	"SELECT due, fired, behind, enqueued, failed, coalesce(failure, ''),"
	"       CASE WHEN next_due IS NULL THEN -1"
	"            ELSE greatest(0, ceil(extract(epoch FROM next_due - db_now) * 1000))::bigint END"
	"  FROM skiplock.cron_tick($1::int, $2::int, $3::bigint * interval '1 millisecond')";
static const char *const tick_at_sql =
	"SELECT due, fired, behind, enqueued, failed, coalesce(failure, ''),"
	"       CASE WHEN next_due IS NULL THEN -1"
	"            ELSE greatest(0, ceil(extract(epoch FROM next_due - db_now) * 1000))::bigint END"
	"  FROM skiplock.cron_tick_at($4::timestamptz, $1::int, $2::int,"
	"                             $3::bigint * interval '1 millisecond')";

enum { T_DUE, T_FIRED, T_BEHIND, T_ENQUEUED, T_FAILED, T_FAILURE, T_NEXT_IN };

static void tick_read(const PGresult *res, skl_cron_tick_result *r)
{
	r->due = (int)col_i64(res, 0, T_DUE);
	r->fired = (int)col_i64(res, 0, T_FIRED);
	r->behind = (int)col_i64(res, 0, T_BEHIND);
	r->enqueued = col_i64(res, 0, T_ENQUEUED);
	r->failed = (int)col_i64(res, 0, T_FAILED);
	r->next_in_ms = col_i64(res, 0, T_NEXT_IN);
	snprintf(r->failure, sizeof(r->failure), "%s", PQgetvalue(res, 0, T_FAILURE));
}

skl_rc skl_cron_tick(skl_client *c, const skl_cron_tick_opts *o, skl_cron_tick_result *r,
                     skl_error *err)
{
	static const skl_cron_tick_opts defaults = {0};
	skl_cron_tick_result local;
	if (o == NULL)
		o = &defaults;
	if (r == NULL)
		r = &local;
	memset(r, 0, sizeof(*r));
	r->next_in_ms = -1;
	if (o->catch_up_bound < 0 || o->catch_up_bound > 100000 || o->grace_ms < 0 ||
	    o->max_schedules < 0)
		return skl__seterr(err, SKL_MISUSE, "catch_up_bound must be 0..100000, grace_ms and "
		                   "max_schedules not negative");
	char limit[16], bound[16], grace[24];
	snprintf(limit, sizeof(limit), "%d", o->max_schedules > 0 ? o->max_schedules : 100);
	snprintf(bound, sizeof(bound), "%d", o->catch_up_bound > 0 ? o->catch_up_bound : 100);
	snprintf(grace, sizeof(grace), "%" PRId64, o->grace_ms > 0 ? o->grace_ms : 60000);
	/* One statement, retry-safe: a repeat after a lost answer finds the
	 * schedules it moved no longer due, and the unique keys hold. */
	row_call call = {.sql = o->at ? tick_at_sql : tick_sql, .nparams = o->at ? 4 : 3,
	                 .params = {limit, bound, grace, o->at}};
	skl_rc rc = run_row(c, &call, err);
	if (rc == SKL_OK) {
		tick_read(call.res, r);
		if (r->fired)
			skl__log(c, r->behind ? SKL_LOG_INFO : SKL_LOG_DEBUG,
			         "cron: %d schedule(s) fired, %" PRId64 " job(s)%s", r->fired, r->enqueued,
			         r->behind ? " (some behind: catch-up policy applied)" : "");
		skl_error_clear(err);
	}
	PQclear(call.res);
	return rc;
}
