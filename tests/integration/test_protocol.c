/*
 * test_protocol.c — the worker protocol in SQL (sql/0011_protocol.sql),
 * called as any client would: plain statements on the case's URL, direct
 * or through PgBouncer.
 *
 *   fenced_calls              stale owners change nothing and are told so;
 *                             complete is idempotent for its own claim
 *   heartbeat_after_rescue    a heartbeat after expiry and rescue is refused
 *   queue_in_handle           protocol 2: every call that takes a handle
 *                             takes the job's queue too; a wrong queue is a
 *                             stale handle; the protocol-1 forms still work
 *   outcome_records           protocol 3: the outcomes as one JSON array of
 *                             records do what protocol 2's arrays do
 *   retry_strategies          1,000 draws per backoff strategy stay in range
 *                             with the expected mean
 *   deferred_retries_spread   200 failures with the budget spent: no two in
 *                             the same 10 ms, spread over [cap/2, cap]
 *   breakers_open_and_probe   a breaker opens, admits one probe, closes
 *   bad_input                 every function refuses bad arguments with its
 *                             SQLSTATE and writes nothing
 *   no_job_poisons_the_claim  extreme values of every column a user sets
 *   job_fence_interleaving    the effect pattern under the campaign's
 *                             interleaving: one effect for one job
 *   c_api_refuses_bad_times   skl_enqueue: SKL_INVALID, nothing written
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <skiplock.h>

#include "itest.h"

static PGconn *open_db(itest_ctx *t)
{
	skl_client_close(itest_client(t, "itest-protocol", true));
	return itest_connect(t->url, "itest-protocol");
}

/* Runs sql and fails the case unless it fails with SQLSTATE state. */
static void expect_state(PGconn *db, const char *state, const char *sql)
{
	PGresult *r = PQexec(db, sql);
	const char *got = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	if (PQresultStatus(r) != PGRES_FATAL_ERROR || got == NULL || strcmp(got, state) != 0)
		itest_fail(__FILE__, __LINE__, "%s: want SQLSTATE %s, got %s (%s)", sql, state,
		           got ? got : "none", PQresultErrorMessage(r));
	printf("  %s -> %s: %s", state, sql, PQresultErrorMessage(r));
	PQclear(r);
}

/* Enqueues n jobs of kind with extra named arguments (may be ""). */
static void enqueue_n(PGconn *db, const char *kind, int n, const char *args)
{
	PQclear(itest_sql(db, "SELECT count(skiplock.enqueue('%s'%s)) FROM generate_series(1, %d)",
	                  kind, args, n));
}

static void fenced_calls(itest_ctx *t)
{
	PGconn *db = open_db(t);
	enqueue_n(db, "k", 1, "");
	PGresult *r = itest_sql(db, "SELECT id, fencing FROM skiplock.claim('w1', '{k}')");
	CHECK_EQ(PQntuples(r), 1);
	long long id = atoll(PQgetvalue(r, 0, 0)), f = atoll(PQgetvalue(r, 0, 1));
	PQclear(r);
	CHECK_STR(itest_text(db, "SELECT skiplock.complete(%lld, %lld)", id, f + 1), "fenced_out");
	CHECK_STR(itest_text(db, "SELECT skiplock.fail(%lld, %lld, 'x')", id, f - 1), "fenced_out");
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.all_jobs"), "running");
	CHECK_STR(itest_text(db, "SELECT skiplock.complete(%lld, %lld, '{\"r\": 1}')", id, f),
	          "completed");
	CHECK_STR(itest_text(db, "SELECT skiplock.complete(%lld, %lld)", id, f), "completed");
	CHECK_STR(itest_text(db, "SELECT skiplock.complete(%lld, %lld)", id, f + 1), "fenced_out");
	CHECK_STR(itest_text(db, "SELECT skiplock.fail(%lld, %lld, 'late')", id, f), "fenced_out");
	CHECK_STR(itest_text(t->admin, "SELECT state || ' ' || result::text || ' ' || "
	                               "jsonb_array_length(errors) FROM skiplock.all_jobs"),
	          "completed {\"r\": 1} 0");
	/* the batched form: one row per accepted outcome, none for the stale */
	enqueue_n(db, "k", 2, "");
	CHECK_EQ(itest_int(db, "WITH c AS (SELECT array_agg(id ORDER BY id) i, array_agg(fencing"
	                       " ORDER BY id) f FROM skiplock.claim('w1', '{k}', n => 2))"
	                       " SELECT count(*) FROM c, skiplock.record(c.i, array[c.f[1], 99],"
	                       " '{ok,ok}')"), 1);
	PQfinish(db);
}

static void heartbeat_after_rescue(itest_ctx *t)
{
	PGconn *db = open_db(t);
	enqueue_n(db, "k", 1, "");
	PGresult *r = itest_sql(db, "SELECT id, fencing FROM skiplock.claim('w1', '{k}', NULL, 1,"
	                            " '100 ms')");
	long long id = atoll(PQgetvalue(r, 0, 0)), f = atoll(PQgetvalue(r, 0, 1));
	PQclear(r);
	CHECK_STR(itest_text(db, "SELECT extended FROM skiplock.heartbeat('{%lld}', '{%lld}', '1 s')",
	                     id, f), "t");
	usleep(1200000);
	CHECK_EQ(itest_int(db, "SELECT count(*) FROM skiplock.rescue()"), 1);
	CHECK_STR(itest_text(db, "SELECT extended FROM skiplock.heartbeat('{%lld}', '{%lld}', '1 s')",
	                     id, f), "f");
	r = itest_sql(db, "SELECT fencing FROM skiplock.claim('w2', '{k}')");
	long long f2 = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	CHECK_EQ(f2, f + 1);
	CHECK_STR(itest_text(db, "SELECT string_agg(extended::text, ',') FROM "
	                         "skiplock.heartbeat('{%lld,%lld}', '{%lld,%lld}')", id, id, f, f2),
	          "false,true");
	CHECK_STR(itest_text(db, "SELECT skiplock.complete(%lld, %lld)", id, f), "fenced_out");
	CHECK_STR(itest_text(db, "SELECT skiplock.complete(%lld, %lld)", id, f2), "completed");
	PQfinish(db);
}

/* Claims one job of kind k in queue qa as w1: its id and fencing token. */
static void claim_one(PGconn *db, long long *id, long long *f)
{
	PGresult *r = itest_sql(db, "SELECT id, fencing FROM skiplock.claim('w1', '{k}', '{qa}')");
	CHECK_EQ(PQntuples(r), 1);
	*id = atoll(PQgetvalue(r, 0, 0));
	*f = atoll(PQgetvalue(r, 0, 1));
	PQclear(r);
}

static void queue_in_handle(itest_ctx *t)
{
	PGconn *db = open_db(t);
	long long id, f;
	CHECK_EQ(itest_int(db, "SELECT skiplock.protocol_version()"), 4);
	enqueue_n(db, "k", 1, ", queue => 'qa'");
	claim_one(db, &id, &f);
	/* a wrong queue: a stale handle for every call */
	CHECK_STR(itest_text(db, "SELECT string_agg(extended::text, ',') FROM skiplock.heartbeat("
	                         "'{%lld,%lld}', '{%lld,%lld}', '1 s', '{qb,qa}')", id, id, f, f),
	          "false,true");
	CHECK_STR(itest_text(db, "SELECT skiplock.complete(%lld, %lld, NULL, 'qb')", id, f),
	          "fenced_out");
	CHECK_STR(itest_text(db, "SELECT skiplock.fail(%lld, %lld, 'x', queue => 'qb')", id, f),
	          "fenced_out");
	CHECK_EQ(itest_int(db, "SELECT count(*) FROM skiplock.record('{%lld}', '{%lld}', '{ok}', "
	                       "job_queues => '{qb}')", id, f), 0);
	char sql[256];
	snprintf(sql, sizeof(sql), "SELECT skiplock.job_fence(%lld, %lld, 'qb')", id, f);
	expect_state(db, "SK001", sql);
	snprintf(sql, sizeof(sql), "SELECT skiplock.job_complete(%lld, %lld, NULL, 'qb')", id, f);
	expect_state(db, "SK001", sql);
	snprintf(sql, sizeof(sql), "SELECT skiplock.heartbeat('{%lld}', '{%lld}', '1 s', '{qa,qb}')",
	         id, f);
	expect_state(db, "2202E", sql);
	snprintf(sql, sizeof(sql), "SELECT skiplock.record('{%lld}', '{%lld}', '{ok}', "
	                           "job_queues => '{qa,qa}')", id, f);
	expect_state(db, "2202E", sql);
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.jobs WHERE id = %lld", id),
	          "running");
	/* the right queue: protocol 2 */
	CHECK_STR(itest_text(db, "SELECT skiplock.job_fence(%lld, %lld, 'qa')", id, f), "");
	CHECK_STR(itest_text(db, "SELECT skiplock.fail(%lld, %lld, 'x', queue => 'qa')", id, f),
	          "available");
	PQclear(itest_sql(t->admin, "UPDATE skiplock.jobs SET run_at = now() WHERE id = %lld", id));
	claim_one(db, &id, &f);
	CHECK_STR(itest_text(db, "SELECT skiplock.complete(%lld, %lld, '1', 'qa')", id, f),
	          "completed");
	CHECK_STR(itest_text(db, "SELECT skiplock.complete(%lld, %lld, '1', 'qa')", id, f),
	          "completed");
	CHECK_STR(itest_text(db, "SELECT skiplock.complete(%lld, %lld, '1', 'qb')", id, f),
	          "fenced_out");
	/* the same calls in protocol 1, side by side: found by id alone */
	enqueue_n(db, "k", 1, ", queue => 'qa'");
	claim_one(db, &id, &f);
	CHECK_STR(itest_text(db, "SELECT extended FROM skiplock.heartbeat('{%lld}', '{%lld}')",
	                     id, f), "t");
	CHECK_STR(itest_text(db, "SELECT skiplock.complete(%lld, %lld)", id, f), "completed");
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.finished_jobs "
	                             "WHERE state = 'completed' AND queue = 'qa'"), 2);
	PQfinish(db);
}

/* 1,000 first attempts of kind `s` failed with base 1000 ms, cap 8000 ms:
 * min, max and mean of the delays chosen. */
enum outcome_form { FORM_ARRAYS, FORM_JSON, FORM_ROWS };

/* Four outcomes of kind `kind` (claimed in priority order 4..1): ok with a
 * result, a retry after 5 s, a discard, a failed last attempt; with the
 * arrays of protocol 2, the JSON records of protocol 3 or the
 * skiplock.outcome[] of protocol 4.  Returns what became of the jobs, as
 * text. */
static char *record_four(PGconn *db, itest_ctx *t, const char *kind, enum outcome_form form)
{
	for (int p = 4; p >= 1; p--)
		PQclear(itest_sql(db, "SELECT skiplock.enqueue('%s', queue => 'qa', priority => %d, "
		                      "max_attempts => %d)", kind, p, p == 1 ? 1 : 5));
	if (form == FORM_ROWS)
		CHECK_EQ(itest_int(db,
			"WITH c AS (SELECT * FROM skiplock.claim('w', '{%s}', n => 4)),"
			" o AS (SELECT array_agg(ROW(c.queue, c.id, c.fencing, x.o, x.r, x.e, x.ms, NULL,"
			"         NULL, NULL, NULL)::skiplock.outcome ORDER BY c.priority DESC) AS a"
			"       FROM c JOIN (VALUES (4, 'ok', '{\"n\": 1}'::jsonb, NULL, NULL::bigint),"
			"         (3, 'retry', NULL, 'e1', 5000), (2, 'discard', NULL, 'e2', NULL),"
			"         (1, 'fail', NULL, 'e3', NULL)) x(p, o, r, e, ms) ON x.p = c.priority)"
			" SELECT count(*) FROM o, skiplock.record_rows(o.a)", kind), 4);
	else if (form == FORM_JSON)
		CHECK_EQ(itest_int(db,
			"WITH c AS (SELECT * FROM skiplock.claim('w', '{%s}', n => 4)),"
			" o AS (SELECT jsonb_agg(jsonb_build_object('queue', c.queue, 'id', c.id,"
			"         'fencing', c.fencing) || x.o ORDER BY c.priority DESC) AS j"
			"       FROM c JOIN (VALUES (4, '{\"outcome\": \"ok\", \"result\": {\"n\": 1}}'::jsonb),"
			"         (3, '{\"outcome\": \"retry\", \"error\": \"e1\", \"retry_after_ms\": 5000}'),"
			"         (2, '{\"outcome\": \"discard\", \"error\": \"e2\"}'),"
			"         (1, '{\"outcome\": \"fail\", \"error\": \"e3\"}')) x(p, o) ON x.p = c.priority)"
			" SELECT count(*) FROM o, skiplock.record(o.j)", kind), 4);
	else
		CHECK_EQ(itest_int(db,
			"WITH c AS (SELECT array_agg(id ORDER BY priority DESC) AS i,"
			"                  array_agg(fencing ORDER BY priority DESC) AS f"
			"             FROM skiplock.claim('w', '{%s}', n => 4))"
			" SELECT count(*) FROM c, skiplock.record(c.i, c.f, '{ok,retry,discard,fail}',"
			"   '{\"{\\\"n\\\": 1}\",NULL,NULL,NULL}', '{NULL,e1,e2,e3}', '{0,5000,0,0}',"
			"   job_queues => '{qa,qa,qa,qa}')", kind), 4);
	return strdup(itest_text(t->admin,
		"SELECT string_agg(format('%%s %%s %%s %%s %%s', priority, state,"
		"                         coalesce(result::text, '-'), coalesce(errors->-1->>'error', '-'),"
		"                         coalesce((last_delay_ms BETWEEN 5000 AND 5501)::text, '-')),"
		"                  '; ' ORDER BY priority) FROM skiplock.all_jobs WHERE kind = '%s'", kind));
}

static void outcome_records(itest_ctx *t)
{
	PGconn *db = open_db(t);
	char *arrays = record_four(db, t, "eq_arrays", FORM_ARRAYS);
	char *records = record_four(db, t, "eq_records", FORM_JSON);
	char *rows = record_four(db, t, "eq_rows", FORM_ROWS);
	CHECK_STR(arrays, "1 discarded - e3 -; 2 discarded - e2 -; "
	                  "3 available - e1 true; 4 completed {\"n\": 1} - -");
	CHECK_STR(records, arrays);
	CHECK_STR(rows, arrays);
	free(arrays);
	free(records);
	free(rows);
	PQfinish(db);
}

static void strategy_draws(PGconn *db, const char *s, long long lo, long long hi, double mean)
{
	char kind[32];
	snprintf(kind, sizeof(kind), "b_%s", s);
	enqueue_n(db, kind, 1000, "");
	PGresult *r = itest_sql(db,
		"WITH c AS (SELECT array_agg(id) i, array_agg(fencing) f FROM skiplock.claim('w',"
		"  '{%s}', n => 1000)),"
		" d AS (SELECT r.delay_ms FROM c, skiplock.record(c.i, c.f,"
		"  array_fill('retry'::text, ARRAY[1000]), backoffs => array_fill('%s'::text, ARRAY[1000]),"
		"  backoff_bases_ms => array_fill(1000::bigint, ARRAY[1000]),"
		"  backoff_caps_ms => array_fill(8000::bigint, ARRAY[1000])) r)"
		" SELECT count(*), min(delay_ms), max(delay_ms), avg(delay_ms)::float8 FROM d", kind, s);
	long long n = atoll(PQgetvalue(r, 0, 0)), mn = atoll(PQgetvalue(r, 0, 1)),
	          mx = atoll(PQgetvalue(r, 0, 2));
	double avg = atof(PQgetvalue(r, 0, 3));
	PQclear(r);
	printf("  %-12s n=%lld min=%lld max=%lld mean=%.1f (want %lld..%lld, mean %.0f)\n", s, n, mn,
	       mx, avg, lo, hi, mean);
	CHECK_EQ(n, 1000);
	CHECK_INT(>=, mn, lo);
	CHECK_INT(<=, mx, hi);
	CHECK(avg > mean * 0.9 && avg < mean * 1.1);
	if (lo < hi) /* jittered: the draws cover the range */
		CHECK(mn < lo + (hi - lo) / 10 && mx > hi - (hi - lo) / 10);
}

static void retry_strategies(itest_ctx *t)
{
	PGconn *db = open_db(t);
	strategy_draws(db, "full", 0, 1000, 500);
	strategy_draws(db, "equal", 500, 1000, 750);
	strategy_draws(db, "exponential", 1000, 1000, 1000);
	strategy_draws(db, "fixed", 1000, 1000, 1000);
	strategy_draws(db, "decorrelated", 1000, 3000, 2000);
	/* the job's own settings win over the caller's; a handler's delay wins over both */
	enqueue_n(db, "own", 1, ", backoff => 'fixed', backoff_base => '5 s'");
	CHECK_EQ(itest_int(db, "SELECT r.delay_ms FROM skiplock.claim('w', '{own}') c,"
	                       " skiplock.record(ARRAY[c.id], ARRAY[c.fencing], '{retry}',"
	                       " backoffs => '{exponential}', backoff_bases_ms => '{100}') r"), 5000);
	enqueue_n(db, "asked", 1, "");
	long long d = itest_int(db, "SELECT r.delay_ms FROM skiplock.claim('w', '{asked}') c,"
	                            " skiplock.record(ARRAY[c.id], ARRAY[c.fencing], '{retry}',"
	                            " retry_after_ms => '{20000}') r");
	CHECK(d >= 20000 && d <= 22001);
	PQfinish(db);
}

/* The campaign's trial: 200 jobs fail together with the retry budget spent
 * (cap one hour).  Their retries must not come back together. */
static void deferred_retries_spread(itest_ctx *t)
{
	PGconn *db = open_db(t);
	enqueue_n(db, "d", 200, "");
	PQclear(itest_sql(db, "WITH c AS (SELECT array_agg(id) i, array_agg(fencing) f FROM"
	                      " skiplock.claim('w', '{d}', n => 200))"
	                      " SELECT count(*) FROM c, skiplock.record(c.i, c.f,"
	                      " array_fill('retry'::text, ARRAY[200]),"
	                      " deferred => array_fill(true, ARRAY[200])) r"));
	PGresult *r = itest_sql(t->admin,
		"WITH d AS (SELECT last_delay_ms AS ms, run_at FROM skiplock.all_jobs WHERE kind = 'd')"
		" SELECT count(DISTINCT date_trunc('milliseconds', run_at)), min(ms), max(ms),"
		"  (SELECT min(g) FROM (SELECT ms - lag(ms) OVER (ORDER BY ms) AS g FROM d) x) FROM d");
	long long distinct = atoll(PQgetvalue(r, 0, 0)), mn = atoll(PQgetvalue(r, 0, 1)),
	          mx = atoll(PQgetvalue(r, 0, 2)), gap = atoll(PQgetvalue(r, 0, 3));
	PQclear(r);
	printf("  200 deferred retries: %lld distinct run_at ms, delays %lld..%lld ms, "
	       "smallest gap %lld ms\n", distinct, mn, mx, gap);
	CHECK_INT(>=, distinct, 150);
	CHECK_INT(>=, gap, 10);
	CHECK_INT(>=, mn, 1800000);
	CHECK_INT(<=, mx, 3600000);
	CHECK_INT(>, mx - mn, 1700000);
	PQfinish(db);
}

static void breakers_open_and_probe(itest_ctx *t)
{
	PGconn *db = open_db(t);
	PQclear(itest_sql(db, "SELECT skiplock.breaker_configure('b', 50, 2, 100, 60000, 300, 1)"));
	enqueue_n(db, "b", 5, "");
	PQclear(itest_sql(db, "WITH c AS (SELECT array_agg(id) i, array_agg(fencing) f FROM"
	                      " skiplock.claim('w', '{b}', n => 2))"
	                      " SELECT count(*) FROM c, skiplock.record(c.i, c.f, '{retry,retry}',"
	                      " retry_after_ms => '{60000,60000}')"));
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.breakers"), "open");
	CHECK_EQ(itest_int(db, "SELECT count(*) FROM skiplock.claim('w', '{b}', n => 5)"), 0);
	usleep(400000);
	PGresult *r = itest_sql(db, "SELECT id, fencing FROM skiplock.claim('w', '{b}', n => 5)");
	CHECK_EQ(PQntuples(r), 1); /* one probe */
	long long id = atoll(PQgetvalue(r, 0, 0)), f = atoll(PQgetvalue(r, 0, 1));
	PQclear(r);
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.breakers"), "half_open");
	CHECK_EQ(itest_int(db, "SELECT count(*) FROM skiplock.claim('w', '{b}', n => 5)"), 0);
	CHECK_STR(itest_text(db, "SELECT skiplock.complete(%lld, %lld)", id, f), "completed");
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.breakers"), "closed");
	CHECK_EQ(itest_int(db, "SELECT count(*) FROM skiplock.claim('w', '{b}', n => 5)"), 2);
	PQfinish(db);
}

static void bad_input(itest_ctx *t)
{
	PGconn *db = open_db(t);
	enqueue_n(db, "k", 1, "");
	static const char *const cases[][2] = {
		{"22004", "SELECT * FROM skiplock.claim(NULL, '{k}')"},
		{"22004", "SELECT * FROM skiplock.claim('w', NULL)"},
		{"22023", "SELECT * FROM skiplock.claim('w', '{}')"},
		{"22023", "SELECT * FROM skiplock.claim('w', '{k}', n => 0)"},
		{"22023", "SELECT * FROM skiplock.claim('w', '{k}', n => 1001)"},
		{"22023", "SELECT * FROM skiplock.claim('w', '{k}', lease => '-1 s')"},
		{"22023", "SELECT * FROM skiplock.claim('w', '{k}', lease => '2 days')"},
		{"22023", "SELECT * FROM skiplock.claim('', '{k}')"},
		{"22004", "SELECT * FROM skiplock.heartbeat(NULL, '{1}')"},
		{"2202E", "SELECT * FROM skiplock.heartbeat('{1,2}', '{1}')"},
		{"22023", "SELECT * FROM skiplock.heartbeat('{1}', '{1}', '-5 s')"},
		{"22004", "SELECT * FROM skiplock.record(NULL, '{1}', '{ok}')"},
		{"2202E", "SELECT * FROM skiplock.record('{1}', '{1,2}', '{ok}')"},
		{"2202E", "SELECT * FROM skiplock.record('{1}', '{1}', '{ok}', errors => '{a,b}')"},
		{"22023", "SELECT * FROM skiplock.record('{1}', '{1}', '{done}')"},
		{"22023", "SELECT * FROM skiplock.record('{1}', '{1}', '{retry}', backoffs => '{fast}')"},
		{"22023", "SELECT * FROM skiplock.record('{1}', '{1}', '{retry}', retry_after_ms => '{-1}')"},
		{"22004", "SELECT * FROM skiplock.record(NULL::jsonb)"},
		{"22023", "SELECT * FROM skiplock.record('{}'::jsonb)"},
		{"22023", "SELECT * FROM skiplock.record('[1]')"},
		{"22004", "SELECT * FROM skiplock.record('[{\"id\": 1, \"outcome\": \"ok\"}]')"},
		{"22023", "SELECT * FROM skiplock.record('[{\"id\": 1, \"fencing\": 1, \"outcome\": \"done\"}]')"},
		{"22023", "SELECT * FROM skiplock.record('[{\"id\": 1, \"fencing\": 1, \"outcome\": \"ok\", "
		          "\"retry_after\": 5}]')"},
		{"22023", "SELECT * FROM skiplock.record((SELECT jsonb_agg(jsonb_build_object('id', 1, "
		          "'fencing', 1, 'outcome', 'ok')) FROM generate_series(1, skiplock.outcomes_max() + 1)))"},
		{"22023", "SELECT * FROM skiplock.record_claim('[{\"id\": 1, \"fencing\": 1, \"outcome\": "
		          "\"retry\", \"backoff\": \"fast\"}]', 'w', '{k}', NULL, 1, '30 s')"},
		{"22004", "SELECT * FROM skiplock.record_rows(NULL)"},
		{"22004", "SELECT * FROM skiplock.record_rows('{\"(q,,1,ok,,,,,,,)\"}')"},
		{"22004", "SELECT * FROM skiplock.record_rows('{NULL}')"},
		{"22023", "SELECT * FROM skiplock.record_rows('{\"(q,1,1,done,,,,,,,)\"}')"},
		{"22023", "SELECT * FROM skiplock.record_rows('{\"(q,1,1,retry,,,-1,,,,)\"}')"},
		{"22023", "SELECT * FROM skiplock.record_rows(array_fill(ROW('q', 1, 1, 'ok', NULL, NULL, "
		          "NULL, NULL, NULL, NULL, NULL)::skiplock.outcome, ARRAY[skiplock.outcomes_max() + 1]))"},
		{"22023", "SELECT * FROM skiplock.record_claim_rows('{\"(q,1,1,ok,,,,,slow,,)\"}', 'w', "
		          "'{k}', NULL, 1, '30 s')"},
		{"22004", "SELECT skiplock.complete(NULL, 1)"},
		{"22004", "SELECT skiplock.fail(1, 1, 'x', NULL)"},
		{"22023", "SELECT skiplock.fail(1, 1, 'x', retry_after => '-1 s')"},
		{"22023", "SELECT * FROM skiplock.rescue(0)"},
		{"22023", "SELECT skiplock.enqueue('k', run_at => '-infinity')"},
		{"22023", "SELECT skiplock.enqueue('k', timeout => '-1 s')"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_state(db, cases[i][0], cases[i][1]);
	CHECK_STR(itest_text(t->admin, "SELECT count(*) || ' ' || min(state) || ' ' || min(fencing)"
	                               " FROM skiplock.all_jobs"), "1 available 0");
	PQfinish(db);
}

/* Every column a user can set, at its extremes, through every way in.
 * Each value is refused with a clear error or stored; either way the
 * claims of every worker, and status, keep working. */
static void no_job_poisons_the_claim(itest_ctx *t)
{
	PGconn *db = open_db(t);
	static const char *const values[] = {
		"run_at => '-infinity'", "run_at => 'infinity'", "run_at => '4713-01-01 BC'",
		"run_at => '294276-12-31'", "run_at => '1969-12-31'", "run_at => '2200-01-01'",
		"priority => -2147483648", "priority => 2147483647", "max_attempts => 2147483647",
		"max_attempts => 0", "max_attempts => -1", "timeout => '-1 ms'", "timeout => '100 years'",
		"backoff_base => '24 days'", "backoff_cap => '-1 s'", "backoff => 'none'",
		"queue => repeat('q', 129)", "queue => ''", "unique_key => repeat('u', 513)",
		"unique_key => ''", "payload => (SELECT jsonb_agg(g) FROM generate_series(1, 100000) g)",
		"payload => '1e400'", "payload => '18446744073709551617'",
	};
	int stored = 0;
	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		PGresult *r = PQexecParams(db, "SELECT 1", 0, NULL, NULL, NULL, NULL, 0);
		PQclear(r);
		char sql[256];
		snprintf(sql, sizeof(sql), "SELECT skiplock.enqueue('poison', %s)", values[i]);
		r = PQexec(db, sql);
		const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
		printf("  %-60s %s\n", values[i], st ? st : "stored");
		stored += st == NULL;
		PQclear(r);
	}
	/* straight into the table, as an owner could: the constraints refuse it */
	expect_state(t->admin, "23514",
	             "INSERT INTO skiplock.jobs (kind, run_at) VALUES ('poison', '-infinity')");
	expect_state(t->admin, "23514",
	             "INSERT INTO skiplock.jobs (kind, timeout_ms) VALUES ('poison', -1)");
	PQclear(itest_sql(db, "SELECT skiplock.enqueue('other')"));
	CHECK_EQ(itest_int(db, "SELECT count(*) FROM skiplock.claim('w', '{poison,other}', n => 100)"),
	         stored + 1);
	PQclear(itest_sql(db, "SELECT skiplock.enqueue('other')"));
	CHECK_EQ(itest_int(db, "SELECT count(*) FROM skiplock.claim('w', '{other}', n => 100)"), 1);
	/* a handler's absurd delay is clamped, never an error for the batch */
	CHECK_EQ(itest_int(db, "WITH c AS (SELECT array_agg(id) i, array_agg(fencing) f FROM"
	                       " skiplock.jobs WHERE state = 'running')"
	                       " SELECT count(*) FROM c, skiplock.record(c.i, c.f,"
	                       " array_fill('retry'::text, ARRAY[cardinality(c.i)]),"
	                       " retry_after_ms => array_fill(9223372036854775807, "
	                       " ARRAY[cardinality(c.i)]))"), stored + 2);
	int rc = itest_sh("%s status --url '%s' >/dev/null", itest_bin(), t->url);
	CHECK_EQ(rc, 0);
	PQfinish(db);
}

/* The campaign's interleaving: the first owner's effect waits on a lock,
 * its lease expires, it is killed; the job is rescued and claimed again.
 * With skiplock.job_fence first in the effect's transaction, the rescue
 * skips the job while that transaction lives, the killed owner's effect
 * rolls back, and the balance moves once. */
static void job_fence_interleaving(itest_ctx *t)
{
	PGconn *db = open_db(t);
	PQclear(itest_sql(t->admin, "CREATE TABLE public.account (id int PRIMARY KEY, balance int);"
	                            " INSERT INTO public.account VALUES (1, 100)"));
	enqueue_n(db, "pay", 1, "");
	PGresult *r = itest_sql(db, "SELECT id, fencing FROM skiplock.claim('w1', '{pay}', NULL, 1,"
	                            " '200 ms')");
	long long id = atoll(PQgetvalue(r, 0, 0)), f1 = atoll(PQgetvalue(r, 0, 1));
	PQclear(r);
	PGconn *blocker = itest_connect(t->direct_url, "itest-blocker");
	PQclear(itest_sql(blocker, "BEGIN; SELECT * FROM public.account WHERE id = 1 FOR UPDATE"));
	PGconn *owner1 = itest_connect(t->url, "itest-owner1");
	PQclear(itest_sql(owner1, "BEGIN; SELECT skiplock.job_fence(%lld, %lld)", id, f1));
	char upd[128];
	snprintf(upd, sizeof(upd), "UPDATE public.account SET balance = balance + 100 WHERE id = 1");
	CHECK(PQsendQuery(owner1, upd));
	usleep(400000); /* owner1 waits on the account row; its lease expires */
	/* while owner1's fence holds the row, the rescue skips the job */
	PGconn *resc = itest_connect(t->url, "itest-rescuer");
	CHECK_EQ(itest_int(resc, "SELECT count(*) FROM skiplock.rescue()"), 0);
	/* owner1 is killed mid-effect; then the account lock goes */
	CHECK_EQ(itest_int(t->admin, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
	                             " WHERE application_name = 'itest-owner1'"
	                             "    OR (backend_type = 'client backend' AND state <> 'idle'"
	                             "        AND query LIKE 'UPDATE public.account%%')"), 1);
	PQfinish(owner1);
	PQclear(itest_sql(blocker, "COMMIT"));
	CHECK_EQ(itest_int(resc, "SELECT count(*) FROM skiplock.rescue()"), 1);
	r = itest_sql(db, "SELECT fencing FROM skiplock.claim('w2', '{pay}')");
	long long f2 = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	CHECK_EQ(f2, f1 + 1);
	/* a stale owner's effect aborts; the current owner's commits */
	char stale[96];
	snprintf(stale, sizeof(stale), "BEGIN; SELECT skiplock.job_fence(%lld, %lld)", id, f1);
	expect_state(resc, "SK001", stale);
	PQclear(PQexec(resc, "ROLLBACK"));
	PQclear(itest_sql(db, "BEGIN; SELECT skiplock.job_fence(%lld, %lld); %s; COMMIT", id, f2, upd));
	CHECK_STR(itest_text(db, "SELECT skiplock.complete(%lld, %lld)", id, f2), "completed");
	CHECK_EQ(itest_int(t->admin, "SELECT balance FROM public.account"), 200);
	PQfinish(resc);
	PQfinish(blocker);
	PQfinish(db);
}

/* The C API refuses the same values, as bad input, and writes nothing. */
static void c_api_refuses_bad_times(itest_ctx *t)
{
	skl_client *c = itest_client(t, "itest-protocol", true);
	static const char *const times[] = {"-infinity", "infinity", "1969-12-31 23:59:59+00",
	                                    "2200-01-01 00:00:00+00"};
	for (size_t i = 0; i < sizeof(times) / sizeof(times[0]); i++) {
		skl_enqueue_opts o;
		skl_enqueue_opts_init(&o);
		o.run_at = times[i];
		int64_t id = 0;
		skl_error err;
		CHECK_EQ(skl_enqueue(c, "k", "{}", &o, &id, &err), SKL_INVALID);
		printf("  run_at %s: %s\n", times[i], err.message);
	}
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"), 0);
	skl_client_close(c);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"fenced_calls", fenced_calls, 0},
		{"heartbeat_after_rescue", heartbeat_after_rescue, 0},
		{"queue_in_handle", queue_in_handle, 0},
		{"outcome_records", outcome_records, 0},
		{"retry_strategies", retry_strategies, 0},
		{"deferred_retries_spread", deferred_retries_spread, 0},
		{"breakers_open_and_probe", breakers_open_and_probe, 0},
		{"bad_input", bad_input, 0},
		{"no_job_poisons_the_claim", no_job_poisons_the_claim, 0},
		{"job_fence_interleaving", job_fence_interleaving, 0},
		{"c_api_refuses_bad_times", c_api_refuses_bad_times, 0},
	};
	return itest_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));
}
