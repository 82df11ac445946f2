/*
 * inspect.c — read-only views of skiplock.jobs (sql/0002_jobs.sql): a
 * filtered list, one job with its error history, and status per queue and
 * kind.  The library formats nothing for people: it returns plain
 * structures and the command prints them.
 *
 * Every statement here only reads, so skl__run may repeat it after an
 * indeterminate outcome.  Each runs in its own short transaction only so
 * that SET LOCAL statement_timeout stops the server's side of a long scan
 * when the client's deadline passes.  Times are formatted by the database
 * in UTC and durations are differences against the database's now(), so no
 * client clock is involved.
 *
 * The error history is jsonb written by queue.c as objects {attempt, at,
 * error}; it is read defensively (a hand-edited entry of another shape is
 * shown as text, never fails the statement).
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "queue/list_filter.h"
#include "queue/queue_int.h"
#include "skiplock/inspect.h"

/* A timestamptz as ISO 8601 text in UTC with milliseconds; NULL stays NULL. */
#define SKL_TS(x) "to_char((" x ") AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
/* Milliseconds from b to a; NULL stays NULL. */
#define SKL_MS(a, b) "(extract(epoch FROM (" a ") - (" b ")) * 1000)::bigint"
/* The 'at' of an error entry v as timestamptz, or NULL when it does not
 * look like a timestamp (CASE keeps the cast from ever seeing bad text). */
#define SKL_ERR_AT(v)                                                                   \
	"CASE WHEN (" v " ->> 'at') ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.]+([+-][0-9:]+|Z)?$'" \
	" THEN (" v " ->> 'at')::timestamptz END"
/* The error history as an array, whatever the column holds. */
#define SKL_ERRORS_ARRAY "CASE WHEN jsonb_typeof(j.errors) = 'array' THEN j.errors ELSE '[]' END"
/* The text of an error entry: its "error" field, else the entry as JSON. */
#define SKL_ERR_TEXT(v) "coalesce(" v " ->> 'error', " v " #>> '{}')"

/* The columns of a job: position (C_*), expression, name.  The select
 * lists are built from this table and every answer is checked against its
 * names (skl__check_columns) before a column is read by position.  TOKEN
 * is the fencing token's expression: the worker and reader roles may not
 * read it (sql/0017_guards.sql), so each statement has a form without it. */
#define JOB_COLUMNS(X, TOKEN)                                                                 \
	X(C_ID, "j.id", "id") X(C_QUEUE, "j.queue", "queue") X(C_KIND, "j.kind", "kind")          \
	X(C_STATE, "j.state", "state") X(C_PRIO, "j.priority", "priority")                        \
	X(C_ATTEMPT, "j.attempt", "attempt") X(C_MAX, "j.max_attempts", "max_attempts")           \
	X(C_FENCING, TOKEN, "fencing") X(C_RUN_AT, SKL_TS("j.run_at"), "run_at")                  \
	X(C_CREATED, SKL_TS("j.created_at"), "created_at")                                        \
	X(C_ATTEMPTED, SKL_TS("j.attempted_at"), "attempted_at")                                  \
	X(C_FINISHED, SKL_TS("j.finished_at"), "finished_at")                                     \
	X(C_OWNER, "j.lease_owner", "lease_owner")                                                \
	X(C_LEASE, SKL_TS("j.lease_expires_at"), "lease_expires_at")                              \
	X(C_LEASE_MS, SKL_MS("j.lease_expires_at", "now()"), "lease_ms")                          \
	X(C_UKEY, "j.unique_key", "unique_key") X(C_TIMEOUT, "j.timeout_ms", "timeout_ms")        \
	X(C_BBASE, "j.backoff_base_ms", "backoff_base_ms")                                        \
	X(C_BCAP, "j.backoff_cap_ms", "backoff_cap_ms")                                           \
	X(C_LAST_ERROR, SKL_ERR_TEXT("((" SKL_ERRORS_ARRAY ") -> -1)"), "last_error")
#define COL_ENUM(e, expr, name) e,
#define COL_NAME(e, expr, name) name,
#define COL_SELECT(e, expr, name) expr " AS " name ", "

/* After the job's columns: its payload and result (NULL in a list), then
 * in skl_job_get one entry of its error history per row. */
enum { JOB_COLUMNS(COL_ENUM, -) C_PAYLOAD, C_RESULT, C_LIST_NCOLS = C_RESULT + 1,
       C_ERR_ORD = C_LIST_NCOLS, C_ERR_ATTEMPT, C_ERR_AT, C_ERR_TEXT, C_GET_NCOLS };
static const char *const job_cols[C_GET_NCOLS] = {
	JOB_COLUMNS(COL_NAME, -) "payload", "result", "err_ord", "err_attempt", "err_at",
	"err_text"};

/* The token for a role that may not read it: NULL, read as -1. */
#define NO_TOKEN "NULL::bigint"

/* The filters are skiplock.jobs_matching's (list_filter.h), shared with
 * the count and the bulk actions of control.h.  jobs_matching runs with
 * the caller's rights and so leaves the token out; a role that may read
 * it ([1]) looks it up by id. */
#define LIST_SQL(TOKEN)                                                                        \
	"SELECT " JOB_COLUMNS(COL_SELECT, TOKEN) "NULL::text AS payload, NULL::text AS result"    \
	"  FROM " SKL_JOBS_MATCHING " j"                                                         \
	" ORDER BY j.id DESC LIMIT $4"
static const char *const list_sql[2] = {
	LIST_SQL(NO_TOKEN),
	LIST_SQL("(SELECT t.fencing FROM skiplock.all_jobs t WHERE t.id = j.id LIMIT 1)")};

/* One row per entry of the error history (one row with NULLs when it is
 * empty), oldest first. */
#define GET_SQL(TOKEN)                                                                         \
	"SELECT " JOB_COLUMNS(COL_SELECT, TOKEN) "j.payload::text AS payload,"                    \
	"       j.result::text AS result, e.ord AS err_ord, e.v ->> 'attempt' AS err_attempt,"    \
	"       coalesce(" SKL_TS(SKL_ERR_AT("e.v")) ", e.v ->> 'at') AS err_at,"                 \
	"       " SKL_ERR_TEXT("e.v") " AS err_text"                                               \
	"  FROM skiplock.all_jobs j"                                                             \
	"  LEFT JOIN LATERAL jsonb_array_elements(" SKL_ERRORS_ARRAY ") WITH ORDINALITY"        \
	"    AS e(v, ord) ON true"                                                               \
	" WHERE j.id = $1"                                                                       \
	" ORDER BY e.ord"
static const char *const get_sql[2] = {GET_SQL(NO_TOKEN), GET_SQL("j.fencing")};

/* Whether the role may read the tokens of jobs and leases: a role that
 * may read every column of both. */
static const char *const tokens_sql =
	"SELECT has_column_privilege('skiplock.all_jobs', 'fencing', 'SELECT')"
	"   AND has_column_privilege('skiplock.leases', 'fencing', 'SELECT')";

skl_rc skl__tokens_readable(skl_client *c, bool *yes, skl_error *err)
{
	static const skl_txn_opts o = {.idempotent = 1};
	if (c->tokens == 0) {
		skl_stmt s = {.sql = tokens_sql};
		skl_rc rc = skl__run_stmt(c, &o, &s, err);
		if (rc != SKL_OK)
			return rc;
		c->tokens = PQgetvalue(s.res, 0, 0)[0] == 't' ? 1 : -1;
		PQclear(s.res);
	}
	*yes = c->tokens > 0;
	return SKL_OK;
}

/* ---- copying result rows into caller-owned structures ---- */

typedef struct str_col {
	int col;
	size_t off;     /* of a const char * field */
} str_col;

/* Copies the listed text columns of one row into a single allocation and
 * points the fields of base at it; a NULL column leaves its field NULL.
 * Returns the allocation (the caller keeps it as `internal`), or NULL. */
static void *copy_strings(const PGresult *r, int row, const str_col *cols, size_t n, void *base)
{
	size_t total = 1;
	for (size_t i = 0; i < n; i++)
		if (!PQgetisnull(r, row, cols[i].col))
			total += (size_t)PQgetlength(r, row, cols[i].col) + 1;
	char *mem = malloc(total), *p = mem;
	if (mem == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		const char **field = (const char **)(void *)((char *)base + cols[i].off);
		*field = NULL;
		if (PQgetisnull(r, row, cols[i].col))
			continue;
		size_t len = (size_t)PQgetlength(r, row, cols[i].col);
		memcpy(p, PQgetvalue(r, row, cols[i].col), len);
		p[len] = '\0';
		*field = p;
		p += len + 1;
	}
	return mem;
}

static int64_t col_i64(const PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? 0 : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

#define JOB_STR(c, f) {c, offsetof(skl_job_info, f)}
static const str_col job_strs[] = {
	JOB_STR(C_QUEUE, queue), JOB_STR(C_KIND, kind), JOB_STR(C_STATE, state),
	JOB_STR(C_RUN_AT, run_at), JOB_STR(C_CREATED, created_at),
	JOB_STR(C_ATTEMPTED, attempted_at), JOB_STR(C_FINISHED, finished_at),
	JOB_STR(C_OWNER, lease_owner), JOB_STR(C_LEASE, lease_expires_at),
	JOB_STR(C_UKEY, unique_key), JOB_STR(C_LAST_ERROR, last_error),
	JOB_STR(C_PAYLOAD, payload), JOB_STR(C_RESULT, result)};

static bool fill_job(skl_job_info *j, const PGresult *r, int row)
{
	*j = (skl_job_info){
		.id = col_i64(r, row, C_ID),
		.priority = (int)col_i64(r, row, C_PRIO),
		.attempt = (int)col_i64(r, row, C_ATTEMPT),
		.max_attempts = (int)col_i64(r, row, C_MAX),
		.fencing = PQgetisnull(r, row, C_FENCING) ? -1 : col_i64(r, row, C_FENCING),
		.lease_expires_in_ms = col_i64(r, row, C_LEASE_MS),
		.timeout_ms = col_i64(r, row, C_TIMEOUT),
		.backoff_base_ms = col_i64(r, row, C_BBASE),
		.backoff_cap_ms = col_i64(r, row, C_BCAP),
	};
	j->internal = copy_strings(r, row, job_strs, SKL_ARRAY_LEN(job_strs), j);
	return j->internal != NULL;
}

/* The error history: one entry per row whose ordinality is not NULL, in
 * one allocation (the array first, then its strings). */
static bool fill_errors(skl_job_info *j, const PGresult *r)
{
	size_t n = 0, text = 0;
	for (int row = 0; row < PQntuples(r); row++)
		if (!PQgetisnull(r, row, C_ERR_ORD)) {
			n++;
			text += (size_t)PQgetlength(r, row, C_ERR_AT) +
			        (size_t)PQgetlength(r, row, C_ERR_TEXT) + 2;
		}
	if (n == 0)
		return true;
	skl_job_error *e = malloc(n * sizeof(*e) + text);
	if (e == NULL)
		return false;
	char *p = (char *)(e + n);
	for (int row = 0, i = 0; row < PQntuples(r); row++) {
		if (PQgetisnull(r, row, C_ERR_ORD))
			continue;
		e[i].attempt = (int)col_i64(r, row, C_ERR_ATTEMPT);
		e[i].at = strcpy(p, PQgetvalue(r, row, C_ERR_AT));
		p += strlen(p) + 1;
		e[i].error = strcpy(p, PQgetvalue(r, row, C_ERR_TEXT));
		p += strlen(p) + 1;
		i++;
	}
	j->errors = e;
	j->nerrors = n;
	return true;
}

void skl_job_info_free(skl_job_info *jobs, size_t n)
{
	for (size_t i = 0; jobs && i < n; i++) {
		free(jobs[i].internal);
		free(jobs[i].errors);
	}
	free(jobs);
}

/* ---- list and get ---- */

typedef struct read_call {
	const char *sql;
	int nparams;
	const char *params[SKL_MATCHING_NPARAMS];
	bool one;               /* get: one job, rows are its error history */
	skl_job_info *jobs;
	size_t n;
} read_call;

/* Reads are repeatable: whatever an earlier try left is dropped first. */
static void read_reset(read_call *rc)
{
	skl_job_info_free(rc->jobs, rc->n);
	rc->jobs = NULL;
	rc->n = 0;
}

static skl_rc jobs_fn(skl_client *c, void *ctx, skl_error *err)
{
	read_call *rc = ctx;
	read_reset(rc);
	PGresult *res = NULL;
	skl_rc r = skl__exec(c, rc->sql, rc->nparams, rc->params, &res, err);
	if (r == SKL_OK)
		r = skl__check_columns(res, job_cols, rc->one ? C_GET_NCOLS : C_LIST_NCOLS, err);
	if (r != SKL_OK) {
		PQclear(res);
		return r;
	}
	size_t rows = (size_t)PQntuples(res), want = rc->one ? (rows > 0) : rows;
	if (want == 0) {
		PQclear(res);
		return rc->one ? skl__seterr(err, SKL_EMPTY, "no job %s", rc->params[0]) : SKL_OK;
	}
	rc->jobs = calloc(want, sizeof(skl_job_info));
	bool ok = rc->jobs != NULL;
	for (size_t i = 0; ok && i < want; i++, rc->n++)
		ok = fill_job(&rc->jobs[i], res, (int)i);
	if (ok && rc->one)
		ok = fill_errors(&rc->jobs[0], res);
	PQclear(res);
	return ok ? SKL_OK : skl__seterr(err, SKL_NOMEM, "out of memory reading jobs");
}

static const skl_txn_opts read_opts = {.txn = 1, .idempotent = 1};

skl_rc skl_jobs_list(skl_client *c, const skl_list_opts *o, skl_job_info **jobs, size_t *n,
                     skl_error *err)
{
	*jobs = NULL;
	*n = 0;
	static const skl_list_opts none = {0};
	if (o == NULL)
		o = &none;
	if (o->limit < 0)
		return skl__seterr(err, SKL_INVALID, "limit must not be negative");
	skl__list_filter f;
	read_call rc = {.nparams = SKL_MATCHING_NPARAMS};
	skl_rc r = skl__matching_params(o, &f, rc.params, err);
	bool tokens = false;
	if (r == SKL_OK)
		r = skl__tokens_readable(c, &tokens, err);
	if (r != SKL_OK)
		return r;
	rc.sql = list_sql[tokens];
	char limit[16];
	snprintf(limit, sizeof(limit), "%d", o->limit ? o->limit : 50);
	rc.params[3] = limit;
	r = skl__run(c, &read_opts, jobs_fn, &rc, err);
	if (r != SKL_OK) {
		read_reset(&rc);
		return r;
	}
	*jobs = rc.jobs;
	*n = rc.n;
	return SKL_OK;
}

skl_rc skl_job_get(skl_client *c, int64_t id, skl_job_info **job, skl_error *err)
{
	*job = NULL;
	char ids[24];
	snprintf(ids, sizeof(ids), "%" PRId64, id);
	bool tokens = false;
	skl_rc r = skl__tokens_readable(c, &tokens, err);
	if (r != SKL_OK)
		return r;
	read_call rc = {.sql = get_sql[tokens], .nparams = 1, .params = {ids}, .one = true};
	r = skl__run(c, &read_opts, jobs_fn, &rc, err);
	if (r != SKL_OK) {
		read_reset(&rc);
		return r;
	}
	*job = rc.jobs;
	return SKL_OK;
}

/* ---- status per queue and kind ---- */

/* Counting by state reads every row; recent errors are read only from rows
 * that can hold one: a finished job's history was written before
 * finished_at, so only unfinished jobs and jobs finished within the window
 * qualify (the latter through jobs_finished_idx). */
static const char *const status_sql =
	"WITH t AS (SELECT now() AS now, now() - $1 * interval '1 millisecond' AS since),"
	" g AS ("
	"  SELECT j.queue, j.kind,"
	"    count(*) FILTER (WHERE j.state = 'available' AND j.run_at <= t.now) AS due,"
	"    count(*) FILTER (WHERE j.state = 'available' AND j.run_at > t.now) AS scheduled,"
	"    count(*) FILTER (WHERE j.state = 'running') AS running,"
	"    count(*) FILTER (WHERE j.state = 'running' AND j.lease_expires_at < t.now) AS expired,"
	"    count(*) FILTER (WHERE j.state = 'completed') AS completed,"
	"    count(*) FILTER (WHERE j.state = 'discarded') AS discarded,"
	"    count(*) FILTER (WHERE j.state = 'cancelled') AS cancelled,"
	"    min(j.run_at) FILTER (WHERE j.state = 'available' AND j.run_at <= t.now) AS oldest_due,"
	"    min(j.lease_expires_at) FILTER (WHERE j.state = 'running') AS next_lease,"
	"    count(*) FILTER (WHERE j.state = 'completed' AND j.finished_at >= t.since) AS done"
	"    FROM skiplock.all_jobs j CROSS JOIN t GROUP BY j.queue, j.kind),"
	" e AS ("
	"  SELECT j.queue, j.kind, count(*) AS errors"
	"    FROM skiplock.all_jobs j CROSS JOIN t,"
	"         jsonb_array_elements(" SKL_ERRORS_ARRAY ") AS x(v)"
	"   WHERE (j.state IN ('available', 'running') OR j.finished_at >= t.since)"
	"     AND " SKL_ERR_AT("x.v") " >= t.since"
	"   GROUP BY j.queue, j.kind)"
	" SELECT g.queue, g.kind, g.due, g.scheduled, g.running, g.expired, g.completed,"
	"        g.discarded, g.cancelled, coalesce(" SKL_MS("t.now", "g.oldest_due") ", -1),"
	"        " SKL_TS("g.next_lease") ", coalesce(" SKL_MS("g.next_lease", "t.now") ", 0),"
	"        coalesce(e.errors, 0), g.done"
	"   FROM g CROSS JOIN t LEFT JOIN e ON e.queue = g.queue AND e.kind = g.kind"
	"  ORDER BY g.queue, g.kind";

enum { S_QUEUE, S_KIND, S_DUE, S_SCHEDULED, S_RUNNING, S_EXPIRED, S_COMPLETED, S_DISCARDED,
       S_CANCELLED, S_OLDEST_MS, S_NEXT_LEASE, S_NEXT_LEASE_MS, S_ERRORS, S_DONE };

#define STATUS_STR(c, f) {c, offsetof(skl_queue_status, f)}
static const str_col status_strs[] = {STATUS_STR(S_QUEUE, queue), STATUS_STR(S_KIND, kind),
                                      STATUS_STR(S_NEXT_LEASE, next_lease_expiry)};

static bool fill_status(skl_queue_status *s, const PGresult *r, int row)
{
	*s = (skl_queue_status){
		.due = col_i64(r, row, S_DUE),
		.scheduled = col_i64(r, row, S_SCHEDULED),
		.running = col_i64(r, row, S_RUNNING),
		.lease_expired = col_i64(r, row, S_EXPIRED),
		.completed = col_i64(r, row, S_COMPLETED),
		.discarded = col_i64(r, row, S_DISCARDED),
		.cancelled = col_i64(r, row, S_CANCELLED),
		.oldest_due_age_ms = col_i64(r, row, S_OLDEST_MS),
		.next_lease_expiry_in_ms = col_i64(r, row, S_NEXT_LEASE_MS),
		.recent_errors = col_i64(r, row, S_ERRORS),
		.recent_completed = col_i64(r, row, S_DONE),
	};
	int64_t seen = s->recent_errors + s->recent_completed;
	s->failure_rate = seen > 0 ? (double)s->recent_errors / (double)seen : -1.0;
	s->internal = copy_strings(r, row, status_strs, SKL_ARRAY_LEN(status_strs), s);
	return s->internal != NULL;
}

typedef struct status_call {
	char window[24];
	skl_queue_status *rows;
	size_t n;
} status_call;

static skl_rc status_fn(skl_client *c, void *ctx, skl_error *err)
{
	status_call *sc = ctx;
	skl_queue_status_free(sc->rows, sc->n);
	sc->rows = NULL;
	sc->n = 0;
	const char *params[1] = {sc->window};
	PGresult *res = NULL;
	skl_rc r = skl__exec(c, status_sql, 1, params, &res, err);
	if (r != SKL_OK)
		return r;
	size_t rows = (size_t)PQntuples(res);
	sc->rows = rows ? calloc(rows, sizeof(skl_queue_status)) : NULL;
	bool ok = rows == 0 || sc->rows != NULL;
	for (size_t i = 0; ok && i < rows; i++, sc->n++)
		ok = fill_status(&sc->rows[i], res, (int)i);
	PQclear(res);
	return ok ? SKL_OK : skl__seterr(err, SKL_NOMEM, "out of memory reading the status");
}

skl_rc skl_queue_status_get(skl_client *c, int64_t window_ms, skl_queue_status **rows,
                            size_t *n, skl_error *err)
{
	*rows = NULL;
	*n = 0;
	if (window_ms < 0)
		return skl__seterr(err, SKL_INVALID, "status window must not be negative");
	status_call sc = {.rows = NULL};
	snprintf(sc.window, sizeof(sc.window), "%" PRId64, window_ms ? window_ms : 300000);
	skl_rc r = skl__run(c, &read_opts, status_fn, &sc, err);
	if (r != SKL_OK) {
		skl_queue_status_free(sc.rows, sc.n);
		return r;
	}
	*rows = sc.rows;
	*n = sc.n;
	return SKL_OK;
}

void skl_queue_status_free(skl_queue_status *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		free(rows[i].internal);
	free(rows);
}
