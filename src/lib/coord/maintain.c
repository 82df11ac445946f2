/*
 * maintain.c — skl_maintain: steps of skiplock.maintain_step under the
 * maintenance lease (sql/0018_maintenance_locks.sql decides every action),
 * and skl_maintenance_check, the doctor's "maintenance has not run".
 *
 * Invariant: no statement of a run is sent inside a transaction block.
 * The lease is taken and released by one autocommit statement each, and
 * each step is one simple-protocol query,
 *     SET LOCAL statement_timeout = N; SELECT … FROM skiplock.maintain_step(…)
 * which the server runs and commits as one implicit transaction whatever
 * the client does next: a maintainer stopped or killed at any moment holds
 * no lock that outcomes wait for.  N (10 s at most) is below the lease's
 * 15 s, which every step renews as it starts: a step never outlives the
 * lease, and no other maintainer takes over a run whose maintainer lives.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "skiplock/retention.h"

#define STEP_TIMEOUT_MS 10000  /* below the 15 s every step renews the lease to */
#define STEP_BATCH 2000         /* rows a step moves or deletes: well within that */
#define BLOCKED_WAITS 3         /* a run's pauses when only blocked work is left */
#define BLOCKED_PAUSE_MS 250

static const char *const acquire_sql = "SELECT skiplock.maintenance_acquire($1)";
static const char *const release_sql = "SELECT skiplock.maintenance_release($1, $2)";

typedef struct run_call {
	const char *owner;
	int64_t fencing;      /* 0: none */
	char fencing_text[24];
	char skip[512];       /* actions blocked so far in this run: a text[] literal */
	bool more;
	int waits;            /* pauses after steps that found only blocked work */
	skl_maintenance *sum;
} run_call;

static skl_rc acquire_fn(skl_client *c, void *ctx, skl_error *err)
{
	run_call *r = ctx;
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, acquire_sql, 1, (const char *[]){r->owner}, &res, err);
	r->fencing = 0;
	if (rc == SKL_OK && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
		r->fencing = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	return rc;
}

static skl_rc release_fn(skl_client *c, void *ctx, skl_error *err)
{
	run_call *r = ctx;
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, release_sql, 2, (const char *[]){r->owner, r->fencing_text}, &res,
	                      err);
	PQclear(res);
	return rc;
}

enum { S_ACTION, S_N, S_MORE, S_BLOCKED, S_REMAINING, S_NCOLS };
static const char *const step_cols[S_NCOLS] = {"action", "n", "more", "blocked", "remaining"};

/* Adds what one step did to the sums (see skl_maintenance). */
static void step_add(run_call *r, const PGresult *res)
{
	const char *action = PQgetvalue(res, 0, S_ACTION);
	int64_t n = strtoll(PQgetvalue(res, 0, S_N), NULL, 10);
	skl_maintenance *s = r->sum;
	if (strcmp(action, "attach") == 0)
		s->created++;
	else if (strcmp(action, "expire") == 0 || strcmp(action, "reshape") == 0)
		s->dropped++;
	else if (strcmp(action, "purge") == 0)
		s->deleted += n;
	else if (strcmp(action, "legacy") == 0)
		s->moved += n;
	s->remaining = strtoll(PQgetvalue(res, 0, S_REMAINING), NULL, 10);
	r->more = s->more = strcmp(PQgetvalue(res, 0, S_MORE), "t") == 0;
	snprintf(r->skip, sizeof(r->skip), "%s", PQgetvalue(res, 0, S_BLOCKED));
	s->rounds++;
}

static skl_rc step_fn(skl_client *c, void *ctx, skl_error *err)
{
	run_call *r = ctx;
	int st = c->call_timeout_ms - 100 < STEP_TIMEOUT_MS ? c->call_timeout_ms - 100
	                                                     : STEP_TIMEOUT_MS;
	char *owner = PQescapeLiteral(c->conn, r->owner, strlen(r->owner));
	char *skip = PQescapeLiteral(c->conn, r->skip, strlen(r->skip));
	size_t cap = (owner ? strlen(owner) : 0) + (skip ? strlen(skip) : 0) + 256;
	char *sql = owner && skip ? malloc(cap) : NULL;
	skl_rc rc = SKL_OK;
	if (sql == NULL)
		rc = owner && skip ? skl__seterr(err, SKL_NOMEM, "out of memory")
		                   : skl__seterr(err, SKL_INVALID, "cannot quote the maintenance owner: %s",
		                                 PQerrorMessage(c->conn));
	else
		snprintf(sql, cap, "SET LOCAL statement_timeout = %d; SELECT action, n, more, blocked,"
		         " remaining FROM skiplock.maintain_step(%s, %s, %s::text[], %d)",
		         st > 100 ? st : 100, owner, r->fencing_text, skip, STEP_BATCH);
	PQfreemem(owner);
	PQfreemem(skip);
	PGresult *res = NULL;
	if (rc == SKL_OK)
		rc = skl__exec_simple(c, sql, &res, err);
	free(sql);
	if (rc == SKL_OK)
		rc = skl__check_columns(res, step_cols, S_NCOLS, err);
	if (rc == SKL_OK && PQntuples(res) != 1)
		rc = skl__seterr(err, SKL_DB, "skiplock.maintain_step returned %d rows", PQntuples(res));
	if (rc == SKL_OK)
		step_add(r, res);
	PQclear(res);
	return rc;
}

skl_rc skl_maintain(skl_client *c, const char *owner, int max_rounds,
                    skl_maintenance_cb progress, void *ctx, skl_maintenance *done,
                    bool *ran, skl_error *err)
{
	skl_maintenance sum = {0};
	run_call r = {.owner = owner, .skip = "{}", .sum = &sum};
	*ran = false;
	/* Each statement alone, outside a transaction block; a step re-run
	 * after a lost answer does the next thing there is to do. */
	static const skl_txn_opts o = {.idempotent = 1};
	skl_rc rc = skl__run(c, &o, acquire_fn, &r, err);
	if (rc != SKL_OK || r.fencing == 0)
		goto out;
	*ran = true;
	snprintf(r.fencing_text, sizeof(r.fencing_text), "%" PRId64, r.fencing);
	do {
		rc = skl__run(c, &o, step_fn, &r, err);
		if (rc == SKL_FENCED) { /* the lease expired (a stopped process): another holds it */
			rc = SKL_OK;
			break;
		}
		if (rc == SKL_OK && progress && !progress(&sum, ctx))
			break;
		if (rc == SKL_OK && !r.more && strcmp(r.skip, "{}") != 0 && r.waits < BLOCKED_WAITS) {
			/* only work whose locks were busy is left (autovacuum, a long
			 * reader): try it again a little later */
			r.waits++;
			r.more = true;
			snprintf(r.skip, sizeof(r.skip), "{}");
			skl__sleep_ms(BLOCKED_PAUSE_MS);
		}
	} while (rc == SKL_OK && r.more && sum.rounds < max_rounds);
	skl_error ignored;
	(void)skl__run(c, &o, release_fn, &r, &ignored);
out:
	if (done)
		*done = sum;
	return rc;
}

/* ---- the finding: maintenance that has not run while jobs did ---- */

static const char *const installed_sql =
	"SELECT to_regclass('skiplock.maintenance') IS NOT NULL"
	"   AND to_regclass('skiplock.finished_jobs') IS NOT NULL";

/* Ages by the database clock; a job running now makes busy_age 0 (now(),
 * not clock_timestamp(), where an index is to be used). */
static const char *const status_sql =
	"SELECT to_char(m.last_run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
	"         AS last_run_at,"
	"       (extract(epoch FROM clock_timestamp() - m.last_run_at) * 1000)::bigint"
	"         AS last_run_age_ms,"
	"       m.last_owner, m.last_summary, l.owner AS lease_owner,"
	"       (extract(epoch FROM l.expires_at - clock_timestamp()) * 1000)::bigint AS lease_left_ms,"
	"       CASE WHEN EXISTS (SELECT 1 FROM skiplock.jobs j"
	"                          WHERE j.lease_expires_at > now()) THEN 0"
	"            ELSE (extract(epoch FROM clock_timestamp()"
	"                  - (SELECT max(f.finished_at) FROM skiplock.finished_jobs f)) * 1000)::bigint"
	"       END AS busy_age_ms"
	"  FROM skiplock.maintenance m"
	"  LEFT JOIN skiplock.leases l ON l.name = 'skiplock.maintenance'"
	"        AND l.expires_at > clock_timestamp()";

enum { M_RUN_AT, M_RUN_AGE, M_OWNER, M_SUMMARY, M_LEASE_OWNER, M_LEASE_LEFT, M_BUSY, M_NCOLS };
static const char *const status_cols[M_NCOLS] = {
	"last_run_at", "last_run_age_ms", "last_owner", "last_summary", "lease_owner",
	"lease_left_ms", "busy_age_ms"};

static int64_t ms_or(const PGresult *r, int col, int64_t none)
{
	return PQgetisnull(r, 0, col) ? none : strtoll(PQgetvalue(r, 0, col), NULL, 10);
}

/* The texts are copied into one block that st->internal owns. */
static skl_rc status_fill(skl_maintenance_status *st, const PGresult *r)
{
	static const int text_cols[] = {M_RUN_AT, M_OWNER, M_SUMMARY, M_LEASE_OWNER};
	const char **out[] = {&st->last_run_at, &st->last_owner, &st->last_summary,
	                      &st->lease_owner};
	size_t need = 0;
	for (int k = 0; k < 4; k++)
		need += PQgetisnull(r, 0, text_cols[k]) ? 0 : strlen(PQgetvalue(r, 0, text_cols[k])) + 1;
	char *b = malloc(need + 1);
	if (b == NULL)
		return SKL_NOMEM;
	st->internal = b;
	for (int k = 0; k < 4; k++) {
		if (PQgetisnull(r, 0, text_cols[k]))
			continue;
		size_t n = strlen(PQgetvalue(r, 0, text_cols[k])) + 1;
		*out[k] = memcpy(b, PQgetvalue(r, 0, text_cols[k]), n);
		b += n;
	}
	st->last_run_age_ms = ms_or(r, M_RUN_AGE, -1);
	st->lease_left_ms = ms_or(r, M_LEASE_LEFT, -1);
	st->busy_age_ms = ms_or(r, M_BUSY, -1);
	st->expected_ms = 3 * (int64_t)SKL_MAINTENANCE_EVERY_MS;
	/* Jobs ran or finished more than three intervals after the last run:
	 * a busy fleet whose maintenance stopped (an idle one does not run it). */
	st->overdue = st->busy_age_ms >= 0 &&
	              (st->last_run_age_ms < 0 || st->last_run_age_ms - st->busy_age_ms > st->expected_ms);
	return SKL_OK;
}

static skl_rc status_fn(skl_client *c, void *ctx, skl_error *err)
{
	skl_maintenance_status *st = ctx;
	skl_maintenance_status_free(st);
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, installed_sql, 0, NULL, &res, err);
	st->installed = rc == SKL_OK && PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 't';
	PQclear(res);
	res = NULL;
	if (rc != SKL_OK || !st->installed)
		return rc;
	rc = skl__exec(c, status_sql, 0, NULL, &res, err);
	if (rc == SKL_OK)
		rc = skl__check_columns(res, status_cols, M_NCOLS, err);
	if (rc == SKL_OK && PQntuples(res) != 1)
		rc = skl__seterr(err, SKL_DB, "skiplock.maintenance has %d rows", PQntuples(res));
	if (rc == SKL_OK && status_fill(st, res) != SKL_OK)
		rc = skl__seterr(err, SKL_NOMEM, "out of memory");
	PQclear(res);
	return rc;
}

skl_rc skl_maintenance_check(skl_client *c, skl_maintenance_status *st, skl_error *err)
{
	*st = (skl_maintenance_status){0};
	static const skl_txn_opts o = {.txn = 1, .idempotent = 1, .schema_itself = 1};
	skl_rc rc = skl__run(c, &o, status_fn, st, err);
	if (rc != SKL_OK)
		skl_maintenance_status_free(st);
	return rc;
}

void skl_maintenance_status_free(skl_maintenance_status *st)
{
	if (st == NULL)
		return;
	free(st->internal);
	*st = (skl_maintenance_status){0};
}
