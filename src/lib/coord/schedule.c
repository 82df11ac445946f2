/*
 * schedule.c — cron schedules in skiplock.schedules (sql/0004_schedules.sql)
 * and the tick every worker runs.
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

/* A timestamptz as exact UTC text that reads back as the same value
 * ('infinity' and '-infinity' as themselves); NULL stays NULL. */
#define SKL_TS_US(x)                                                                         \
	"CASE WHEN isfinite(" x ") THEN to_char((" x ") AT TIME ZONE 'UTC',"                      \
	" 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') ELSE (" x ")::text END"
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

/* The database's word on a zone (skiplock.cron_zone_check): the tick
 * computes fire times with the server's reading of the tz database, which
 * takes a few names (CET, EST, …) as fixed-offset abbreviations. */
skl_rc skl__schedule_zone_db_check(skl_client *c, const char *zone, skl_error *err)
{
	const char *params[1] = {zone ? zone : "UTC"};
	PGresult *r = NULL;
	skl_rc rc = skl__exec(c, "SELECT skiplock.cron_zone_check($1)", 1, params, &r, err);
	PQclear(r);
	if (rc == SKL_DB && err && strcmp(err->sqlstate, "22023") == 0) {
		rc = err->rc = SKL_INVALID; /* bad input, as the C checks report it */
		err->sqlstate[0] = '\0';
	}
	return rc;
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

static const char *col_str(const PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
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

/* ---- add ---- */

/* Inserts unless the name is taken.  `same` tells a retry of our own
 * insert (after a lost answer) from a schedule someone else added: the
 * snapshot of the EXISTS does not see this statement's own insert. */
static const char *const add_sql =
	"WITH ins AS ("
	"  INSERT INTO skiplock.schedules (name, expression, zone, kind, payload, queue, priority,"
	"                                  max_attempts, catch_up, next_fire, created_at)"
	"  VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9, to_timestamp($10::bigint),"
	"          to_timestamp($11::bigint))"
	"  ON CONFLICT (name) DO NOTHING RETURNING 1)"
	" SELECT (SELECT count(*) FROM ins),"
	"        EXISTS (SELECT 1 FROM skiplock.schedules WHERE name = $1 AND expression = $2"
	"                  AND zone = $3 AND kind = $4 AND payload = $5::jsonb AND queue = $6"
	"                  AND priority = $7 AND max_attempts = $8 AND catch_up = $9"
	"                  AND created_at = to_timestamp($11::bigint))";

static skl_rc insert_schedule(skl_client *c, const skl_schedule_spec *s, int64_t created,
                              const int64_t *next, skl_error *err)
{
	char prio[16], max[16], nx[24], cr[24];
	snprintf(prio, sizeof(prio), "%d", s->priority);
	snprintf(max, sizeof(max), "%d", s->max_attempts > 0 ? s->max_attempts : 25);
	snprintf(nx, sizeof(nx), "%" PRId64, next ? *next : 0);
	snprintf(cr, sizeof(cr), "%" PRId64, created);
	row_call call = {.sql = add_sql, .nparams = 11,
	                 .params = {s->name, s->expression, s->zone ? s->zone : "UTC", s->kind,
	                            s->payload ? s->payload : "{}", s->queue ? s->queue : "default",
	                            prio, max, skl_catch_up_name(s->catch_up), next ? nx : NULL, cr}};
	skl_rc rc = run_row(c, &call, err);
	if (rc == SKL_OK && col_i64(call.res, 0, 0) == 0 && PQgetvalue(call.res, 0, 1)[0] != 't')
		rc = skl__seterr(err, SKL_CONFLICT, "schedule \"%s\" already exists", s->name);
	PQclear(call.res);
	return rc;
}

skl_rc skl_cron_add(skl_client *c, const skl_schedule_spec *s, const char *at,
                    int64_t *next_fire, skl_error *err)
{
	if (next_fire)
		*next_fire = 0;
	if (s == NULL)
		return skl__seterr(err, SKL_MISUSE, "schedule spec is NULL");
	skl_cron_expr *e = NULL;
	skl_rc rc = check_spec(s, &e, err);
	int64_t now = 0, next = 0;
	if (rc == SKL_OK)
		rc = db_now(c, at, &now, err);
	if (rc == SKL_OK)
		rc = skl__schedule_zone_db_check(c, s->zone, err);
	if (rc == SKL_OK)
		rc = skl_cron_next(e, s->zone, now, &next, err);
	bool fires = rc == SKL_OK;
	if (rc == SKL_EMPTY) /* valid, but not within a century: store it, never due */
		rc = SKL_OK;
	skl_cron_expr_free(e);
	if (rc == SKL_OK)
		rc = insert_schedule(c, s, now, fires ? &next : NULL, err);
	if (rc == SKL_OK && next_fire)
		*next_fire = fires ? next : 0;
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}

/* ---- remove, pause, resume ---- */

static const char *const remove_sql = "DELETE FROM skiplock.schedules WHERE name = $1 RETURNING 1";
static const char *const pause_sql =
	"UPDATE skiplock.schedules SET enabled = false,"
	"       updated_at = CASE WHEN enabled THEN now() ELSE updated_at END"
	" WHERE name = $1 RETURNING 1";

static skl_rc by_name(skl_client *c, const char *sql, const char *name, skl_error *err)
{
	skl_rc rc = check_name("schedule name", name, SKL_SCHEDULE_NAME_MAX, err);
	row_call call = {.sql = sql, .nparams = 1, .params = {name}};
	if (rc == SKL_OK)
		rc = run_row(c, &call, err);
	if (rc == SKL_OK && PQntuples(call.res) == 0)
		rc = skl__seterr(err, SKL_EMPTY, "no schedule \"%s\"", name);
	PQclear(call.res);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}

skl_rc skl_cron_remove(skl_client *c, const char *name, skl_error *err)
{
	return by_name(c, remove_sql, name, err);
}

skl_rc skl_cron_pause(skl_client *c, const char *name, skl_error *err)
{
	return by_name(c, pause_sql, name, err);
}

static const char *const resume_read_sql =
	"SELECT expression, zone, enabled, " SKL_TS_US("last_fire") ", "
	SKL_EPOCH_STORED("coalesce(last_fire, created_at)") ", "
	SKL_EPOCH("coalesce($2::timestamptz, now())")
	"  FROM skiplock.schedules WHERE name = $1";

static const char *const resume_sql =
	"UPDATE skiplock.schedules"
	"   SET enabled = true, last_fire = coalesce($3::timestamptz, last_fire),"
	"       next_fire = $4::timestamptz, updated_at = now()"
	" WHERE name = $1 AND NOT enabled AND last_fire IS NOT DISTINCT FROM $2::timestamptz"
	" RETURNING 1";

/* Whether a plan's next fire time can be stored: one at or after the end
 * of the stored range never becomes a job, so it is stored as none. */
static bool has_next(const skl_cron_plan *p)
{
	return p->has_next && p->next < SKL_SCHEDULE_T_END;
}

/* Enables a paused schedule with last_fire moved to the newest fire time
 * at or before now: what passed while it was paused is skipped. */
static skl_rc resume_once(skl_client *c, const char *name, const PGresult *r, bool *done,
                          skl_error *err)
{
	skl_cron_expr *e = NULL;
	skl_cron_plan p;
	const char *zone = PQgetvalue(r, 0, 1);
	skl_rc rc = skl_cron_parse(PQgetvalue(r, 0, 0), &e, err);
	if (rc == SKL_OK) /* policy none with no grace: nothing enqueued, newest found */
		rc = skl__cron_plan(e, zone, col_i64(r, 0, 4), col_i64(r, 0, 5), SKL_CATCH_UP_NONE, 1,
		                    -1, &p, err);
	skl_cron_expr_free(e);
	if (rc != SKL_OK)
		return rc;
	char last[SKL_CRON_TIME_LEN], next[SKL_CRON_TIME_LEN];
	skl_cron_format_utc(p.newest, last);
	skl_cron_format_utc(p.next, next);
	row_call call = {.sql = resume_sql, .nparams = 4,
	                 .params = {name, col_str(r, 0, 3), p.any_due ? last : NULL,
	                            has_next(&p) ? next : NULL}};
	skl__cron_plan_free(&p);
	rc = run_row(c, &call, err);
	*done = rc == SKL_OK && PQntuples(call.res) > 0;
	PQclear(call.res);
	return rc;
}

skl_rc skl_cron_resume(skl_client *c, const char *name, const char *at, skl_error *err)
{
	skl_rc rc = check_name("schedule name", name, SKL_SCHEDULE_NAME_MAX, err);
	bool done = false;
	/* A few rounds: the row may change between the read and the update. */
	for (int round = 0; rc == SKL_OK && !done && round < 5; round++) {
		row_call call = {.sql = resume_read_sql, .nparams = 2, .params = {name, at}};
		rc = run_row(c, &call, err);
		if (rc == SKL_OK && PQntuples(call.res) == 0)
			rc = skl__seterr(err, SKL_EMPTY, "no schedule \"%s\"", name);
		else if (rc == SKL_OK && PQgetvalue(call.res, 0, 2)[0] == 't')
			done = true; /* enabled already */
		else if (rc == SKL_OK)
			rc = resume_once(c, name, call.res, &done, err);
		PQclear(call.res);
	}
	if (rc == SKL_OK && !done)
		rc = skl__seterr(err, SKL_CONFLICT, "schedule \"%s\" kept changing; try again", name);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
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
