/*
 * Integration tests of the queue library, direct and through PgBouncer:
 * enqueue paths, unique keys, claim order, delayed jobs, fencing against
 * stale owners, heartbeats, rescue, retries and the error history, and the
 * claim's plan on a large table.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/internal.h"
#include "queue/queue_int.h"
#include "itest.h"
#include "skiplock.h"
#include "ledger.h"

static skl_client *open_client(itest_ctx *t)
{
	return itest_client(t, "itest-queue", true);
}

static int64_t enqueue(skl_client *c, const char *kind, const char *payload,
                       const skl_enqueue_opts *o)
{
	int64_t id = 0;
	skl_error err;
	if (skl_enqueue(c, kind, payload, o, &id, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "enqueue %s: %s", kind, err.message);
	return id;
}

/* Claims with o (owner "itest"); fails the case unless OK or EMPTY. */
static size_t claim_with(skl_client *c, skl_claim_opts *o, skl_job **jobs)
{
	o->owner = "itest";
	size_t n = 0;
	skl_error err;
	skl_rc rc = skl_claim(c, o, jobs, &n, &err);
	if (rc != SKL_OK && rc != SKL_EMPTY)
		itest_fail(__FILE__, __LINE__, "claim: %s", err.message);
	return n;
}

static size_t claim(skl_client *c, const char *kind, size_t limit, int64_t lease_ms,
                    skl_job **jobs)
{
	const char *kinds[] = {kind};
	skl_claim_opts o = {.kinds = kinds, .nkinds = 1, .limit = limit, .lease_ms = lease_ms};
	return claim_with(c, &o, jobs);
}

static void enqueue_paths_round_trip(itest_ctx *t)
{
	skl_client *c = open_client(t);
	skl_enqueue_opts o;
	skl_enqueue_opts_init(&o);
	o.queue = "mail";
	o.priority = 3;
	o.max_attempts = 7;
	int64_t a = enqueue(c, "send", "{\"to\": \"a@example.com\"}", &o);
	/* the SQL function, named arguments, inside the caller's transaction */
	PGconn *app = itest_connect(t->url, "itest-app");
	PQclear(itest_sql(app, "BEGIN"));
	long long b = itest_int(app, "SELECT skiplock.enqueue('send', '{\"to\": \"b\"}', "
	                             "queue => 'mail', priority => 3)");
	PQclear(itest_sql(app, "COMMIT"));
	/* a rolled-back enqueue leaves nothing */
	PQclear(itest_sql(app, "BEGIN"));
	PQclear(itest_sql(app, "SELECT skiplock.enqueue('send', '{}', 'mail')"));
	PQclear(itest_sql(app, "ROLLBACK"));
	PQfinish(app);
	/* bulk: two with one unique key in the same batch, one plain */
	skl_job_spec specs[3] = {
		{.kind = "send", .payload = "{\"n\": 1}", .opts = {.queue = "mail", .unique_key = "k"}},
		{.kind = "send", .payload = "{\"n\": 2}", .opts = {.queue = "mail", .unique_key = "k"}},
		{.kind = "send", .payload = NULL, .opts = {.queue = "mail"}},
	};
	int64_t ids[3];
	skl_error err;
	CHECK_EQ(skl_enqueue_bulk(c, specs, 3, ids, &err), SKL_OK);
	CHECK_EQ(ids[0], ids[1]);
	CHECK(ids[2] != ids[0]);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"), 4);
	skl_job *jobs = NULL;
	size_t n = claim(c, "send", 10, 30000, &jobs);
	CHECK_EQ(n, 4);
	CHECK_EQ(jobs[0].id, a); /* priority 3 first, then by run_at, id */
	CHECK_EQ(jobs[1].id, b);
	CHECK_STR(jobs[0].queue, "mail");
	CHECK_STR(jobs[0].payload, "{\"to\": \"a@example.com\"}");
	CHECK_EQ(jobs[0].max_attempts, 7);
	CHECK_EQ(jobs[0].attempt, 1);
	CHECK_EQ(jobs[0].fencing, 1);
	skl_jobs_free(jobs, n);
	skl_client_close(c);
	itest_no_leftovers(t);
}

static void unique_key_returns_holder(itest_ctx *t)
{
	skl_client *c = open_client(t);
	skl_enqueue_opts o;
	skl_enqueue_opts_init(&o);
	o.unique_key = "report:2026-11-29";
	int64_t a = enqueue(c, "report", "{}", &o), b = enqueue(c, "report", "{\"x\": 1}", &o);
	CHECK_EQ(a, b);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"), 1);
	skl_job *jobs = NULL;
	CHECK_EQ(claim(c, "report", 1, 30000, &jobs), 1);
	CHECK_EQ(enqueue(c, "report", "{}", &o), a); /* running still holds the key */
	skl_outcome out = {.id = jobs[0].id, .fencing = jobs[0].fencing,
	                   .kind = SKL_OUTCOME_COMPLETE, .result = "{\"rows\": 3}"};
	bool ok = false;
	skl_error err;
	CHECK_EQ(skl_record(c, &out, 1, &ok, &err), SKL_OK);
	CHECK(ok);
	skl_jobs_free(jobs, 1);
	int64_t d = enqueue(c, "report", "{}", &o); /* finished: the key is free again */
	CHECK(d != a);
	CHECK_STR(itest_text(t->admin, "SELECT result::text FROM skiplock.all_jobs WHERE id = %" PRId64,
	                     a), "{\"rows\": 3}");
	skl_client_close(c);
}

/* Outcomes travel as a skiplock.outcome[] literal, two text formats
 * nested: an error, a queue and a result full of what either escapes
 * (quotes, backslashes, commas, parentheses, braces, spaces, an empty
 * string) arrive byte for byte. */
static void outcome_text_round_trip(itest_ctx *t)
{
	static const char *const queue = "q \"x\", (y) {z}\\";
	static const char *const error = "a \"quoted\", (paren) {brace} \\ back\\\"; ''";
	static const char *const result = "{\"s\": \"x\\\"y\\\\z, (1) {2}\", \"e\": \"\"}";
	skl_client *c = open_client(t);
	skl_enqueue_opts o;
	skl_enqueue_opts_init(&o);
	o.queue = queue;
	o.max_attempts = 5;
	int64_t a = enqueue(c, "esc", "{}", &o), b = enqueue(c, "esc", "{}", &o);
	const char *kinds[] = {"esc"}, *queues[] = {queue};
	skl_claim_opts co = {.kinds = kinds, .nkinds = 1, .queues = queues, .nqueues = 1,
	                     .limit = 2, .lease_ms = 30000};
	skl_job *jobs = NULL;
	size_t n = claim_with(c, &co, &jobs);
	skl_error err;
	CHECK_EQ(n, 2);
	skl_outcome outs[2] = {
		{.id = jobs[0].id, .fencing = jobs[0].fencing, .queue = jobs[0].queue,
		 .kind = SKL_OUTCOME_COMPLETE, .result = result},
		{.id = jobs[1].id, .fencing = jobs[1].fencing, .queue = jobs[1].queue,
		 .kind = SKL_OUTCOME_RETRY, .error = error}};
	bool ok[2] = {false, false};
	CHECK_EQ(skl_record(c, outs, 2, ok, &err), SKL_OK);
	CHECK(ok[0] && ok[1]);
	int64_t done = outs[0].id, retried = outs[1].id;
	CHECK(done == a || done == b);
	CHECK_STR(itest_text(t->admin, "SELECT queue FROM skiplock.all_jobs WHERE id = %" PRId64,
	                     done), queue);
	CHECK_STR(itest_text(t->admin, "SELECT result->>'s' FROM skiplock.all_jobs WHERE id = %" PRId64,
	                     done), "x\"y\\z, (1) {2}");
	CHECK_STR(itest_text(t->admin, "SELECT errors->-1->>'error' FROM skiplock.jobs WHERE id = %" PRId64,
	                     retried), error);
	skl_jobs_free(jobs, n);
	skl_client_close(c);
}

static void claim_order_and_delays(itest_ctx *t)
{
	skl_client *c = open_client(t);
	skl_enqueue_opts o;
	skl_enqueue_opts_init(&o);
	int64_t low = enqueue(c, "k", "{}", &o);
	o.priority = 10;
	int64_t high = enqueue(c, "k", "{}", &o);
	o.priority = 0;
	o.run_at = "2000-01-01 00:00:00+00";
	int64_t old = enqueue(c, "k", "{}", &o);
	o.run_at = NULL;
	o.delay_ms = 1500;
	int64_t later = enqueue(c, "k", "{}", &o);
	o.delay_ms = 0;
	o.run_at = "2199-01-01 00:00:00+00";
	enqueue(c, "k", "{}", &o);
	int64_t want[] = {high, old, low};
	for (int i = 0; i < 3; i++) {
		skl_job *jobs = NULL;
		CHECK_EQ(claim(c, "k", 1, 30000, &jobs), 1);
		CHECK_EQ(jobs[0].id, want[i]);
		skl_jobs_free(jobs, 1);
	}
	skl_job *jobs = NULL;
	CHECK_EQ(claim(c, "k", 5, 30000, &jobs), 0); /* the delayed job is not due yet */
	CHECK(jobs == NULL);
	usleep(1600 * 1000);
	CHECK_EQ(claim(c, "k", 5, 30000, &jobs), 1);
	CHECK_EQ(jobs[0].id, later);
	skl_jobs_free(jobs, 1);
	CHECK_EQ(claim(c, "other-kind", 5, 30000, &jobs), 0);
	skl_client_close(c);
}

static size_t claim_after(skl_client *c, const skl_job *mark, size_t limit, skl_job **jobs)
{
	const char *kinds[] = {"m"};
	skl_claim_opts o = {.kinds = kinds, .nkinds = 1, .limit = limit, .lease_ms = 30000,
	                    .after_set = true, .after_priority = mark->priority,
	                    .after_run_at_us = mark->run_at_us, .after_id = mark->id};
	return claim_with(c, &o, jobs);
}

/* A claim after a place in the claim order takes the jobs placed after it,
 * in order, across priorities, and leaves the ones placed before it (a
 * higher priority, an older run_at) to a claim from the front. */
static void claim_after_a_place(itest_ctx *t)
{
	skl_client *c = open_client(t);
	skl_enqueue_opts o;
	skl_enqueue_opts_init(&o);
	int64_t ids[6];
	for (int i = 0; i < 5; i++)
		ids[i] = enqueue(c, "m", "{}", &o);
	o.priority = -1;
	ids[5] = enqueue(c, "m", "{}", &o);
	skl_job *first = NULL, *jobs = NULL;
	CHECK_EQ(claim(c, "m", 2, 30000, &first), 2);
	CHECK_EQ(first[0].id + first[1].id, ids[0] + ids[1]);
	const skl_job *m1 = first[0].id == ids[1] ? &first[0] : &first[1];
	o.priority = 5;
	int64_t high = enqueue(c, "m", "{}", &o);
	o.priority = 0;
	o.run_at = "2000-01-01 00:00:00+00";
	int64_t old = enqueue(c, "m", "{}", &o);
	CHECK_EQ(claim_after(c, m1, 2, &jobs), 2);
	CHECK_EQ(jobs[0].id + jobs[1].id, ids[2] + ids[3]);
	skl_job mark = jobs[0].id == ids[3] ? jobs[0] : jobs[1];
	skl_jobs_free(jobs, 2);
	CHECK_EQ(claim_after(c, &mark, 5, &jobs), 2); /* the rest of priority 0, then -1 */
	CHECK_EQ(jobs[0].id + jobs[1].id, ids[4] + ids[5]);
	skl_jobs_free(jobs, 2);
	CHECK_EQ(claim_after(c, &mark, 5, &jobs), 0);
	CHECK_EQ(claim(c, "m", 5, 30000, &jobs), 2);  /* from the front */
	CHECK_EQ(jobs[0].id + jobs[1].id, high + old);
	skl_jobs_free(jobs, 2);
	skl_jobs_free(first, 2);
	skl_client_close(c);
}

static bool record1(skl_client *c, const skl_job *j, skl_outcome_kind k, const char *error,
                    int64_t delay)
{
	/* Without a delay of its own, a retry waits 1 ms (fixed backoff): the
	 * database makes the retry decision. */
	skl_outcome out = {.id = j->id, .fencing = j->fencing, .kind = k, .error = error,
	                   .retry_delay_ms = delay, .backoff = SKL_BACKOFF_FIXED,
	                   .backoff_base_ms = 1};
	bool ok = false;
	skl_error err;
	if (skl_record(c, &out, 1, &ok, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "record: %s", err.message);
	usleep(3000);
	return ok;
}

/* A stale owner (its lease expired and the job was rescued and claimed
 * again) can neither complete, fail nor extend the new claim. */
static void stale_owner_is_fenced_out(itest_ctx *t)
{
	skl_client *c = open_client(t);
	enqueue(c, "k", "{}", NULL);
	skl_job *first = NULL, *second = NULL;
	CHECK_EQ(claim(c, "k", 1, 300, &first), 1);
	bool alive = false;
	skl_error err;
	CHECK_EQ(skl_heartbeat(c, &first->id, &first->fencing, 1, 300, &alive, &err), SKL_OK);
	CHECK(alive);
	usleep(700 * 1000);
	int rescued = 0, discarded = 0;
	CHECK_EQ(skl_rescue(c, 100, &rescued, &discarded, &err), SKL_OK);
	CHECK_EQ(rescued, 1);
	CHECK_EQ(discarded, 0);
	CHECK_EQ(claim(c, "k", 1, 30000, &second), 1);
	CHECK_EQ(second->id, first->id);
	CHECK_EQ(second->fencing, first->fencing + 1);
	CHECK_EQ(second->attempt, 2);
	CHECK(!record1(c, first, SKL_OUTCOME_COMPLETE, NULL, 0));
	CHECK(!record1(c, first, SKL_OUTCOME_RETRY, "late failure", 0));
	CHECK_EQ(skl_heartbeat(c, &first->id, &first->fencing, 1, 30000, &alive, &err), SKL_OK);
	CHECK(!alive);
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.all_jobs"), "running");
	CHECK(record1(c, second, SKL_OUTCOME_COMPLETE, NULL, 0));
	CHECK_STR(itest_text(t->admin, "SELECT state || ' ' || fencing || ' ' || "
	                               "jsonb_array_length(errors) FROM skiplock.all_jobs"),
	          "completed 2 1");
	CHECK(strstr(itest_text(t->admin, "SELECT errors->0->>'error' FROM skiplock.all_jobs"),
	             "lease expired") != NULL);
	skl_jobs_free(first, 1);
	skl_jobs_free(second, 1);
	skl_client_close(c);
}

static void retries_then_discard_with_history(itest_ctx *t)
{
	skl_client *c = open_client(t);
	skl_enqueue_opts o;
	skl_enqueue_opts_init(&o);
	o.max_attempts = 3;
	int64_t id = enqueue(c, "k", "{}", &o);
	for (int attempt = 1; attempt <= 3; attempt++) {
		skl_job *j = NULL;
		CHECK_EQ(claim(c, "k", 1, 30000, &j), 1);
		CHECK_EQ(j->attempt, attempt);
		char msg[32];
		snprintf(msg, sizeof(msg), "boom %d", attempt);
		CHECK(record1(c, j, SKL_OUTCOME_RETRY, msg, 0));
		skl_jobs_free(j, 1);
	}
	CHECK_STR(itest_text(t->admin, "SELECT state || ' ' || attempt FROM skiplock.all_jobs"),
	          "discarded 3");
	CHECK_STR(itest_text(t->admin, "SELECT string_agg(e->>'attempt' || ':' || (e->>'error'), "
	                               "',') FROM skiplock.all_jobs, jsonb_array_elements(errors) e"),
	          "1:boom 1,2:boom 2,3:boom 3");
	/* a retry delay is applied by the database clock */
	int64_t id2 = enqueue(c, "k", "{}", NULL);
	skl_job *j = NULL;
	CHECK_EQ(claim(c, "k", 1, 30000, &j), 1);
	CHECK(record1(c, j, SKL_OUTCOME_RETRY, "later", 60000));
	skl_jobs_free(j, 1);
	CHECK_INT(>, itest_int(t->admin, "SELECT extract(epoch FROM run_at - now())::int FROM "
	                                 "skiplock.jobs WHERE id = %" PRId64, id2), 55);
	/* discard at once; operator retry brings it back with a fresh budget */
	int64_t id3 = enqueue(c, "d", "{}", NULL);
	CHECK_EQ(claim(c, "d", 1, 30000, &j), 1);
	CHECK(record1(c, j, SKL_OUTCOME_DISCARD, "bad payload", 0));
	skl_jobs_free(j, 1);
	skl_error err;
	CHECK_EQ(skl_job_retry(c, id3, &err), SKL_OK);
	CHECK_STR(itest_text(t->admin, "SELECT state || ' ' || attempt || '/' || max_attempts || ' ' "
	                               "|| fencing || ' ' || jsonb_array_length(errors) "
	                               "FROM skiplock.all_jobs WHERE id = %" PRId64, id3),
	          "available 1/26 1 1");
	/* the exhausted job: N more attempts */
	CHECK_EQ(skl_job_retry_attempts(c, id, 2, &err), SKL_OK);
	CHECK_STR(itest_text(t->admin, "SELECT state || ' ' || attempt || '/' || max_attempts "
	                               "FROM skiplock.all_jobs WHERE id = %" PRId64, id),
	          "available 3/5");
	CHECK_EQ(skl_job_retry_attempts(c, id, -1, &err), SKL_INVALID);
	CHECK_EQ(skl_job_cancel(c, id3, &err), SKL_OK);
	CHECK_EQ(skl_job_cancel(c, id3, &err), SKL_CONFLICT);
	CHECK_EQ(skl_job_retry(c, 999999, &err), SKL_EMPTY);
	skl_client_close(c);
}

/* The error history keeps the newest 20 attempts. */
static void error_history_is_bounded(itest_ctx *t)
{
	skl_client *c = open_client(t);
	skl_enqueue_opts o;
	skl_enqueue_opts_init(&o);
	o.max_attempts = 30;
	enqueue(c, "k", "{}", &o);
	for (int i = 0; i < 25; i++) {
		skl_job *j = NULL;
		CHECK_EQ(claim(c, "k", 1, 30000, &j), 1);
		CHECK(record1(c, j, SKL_OUTCOME_RETRY, "again", 0));
		skl_jobs_free(j, 1);
	}
	CHECK_STR(itest_text(t->admin, "SELECT jsonb_array_length(errors) || ' ' || "
	                               "(errors->0->>'attempt') || ' ' || (errors->-1->>'attempt') "
	                               "FROM skiplock.all_jobs"), "20 6 25");
	skl_client_close(c);
}

/* The claim reads the partial index, not the table, when almost every job
 * has finished. */
static void claim_plan_uses_partial_index(itest_ctx *t)
{
	skl_client *c = open_client(t);
	PQclear(itest_sql(t->admin,
	                  "INSERT INTO skiplock.jobs (kind, state, finished_at) "
	                  "SELECT 'k', CASE WHEN g %% 100 = 0 THEN 'available' ELSE 'completed' END,"
	                  " CASE WHEN g %% 100 = 0 THEN NULL ELSE now() END "
	                  "FROM generate_series(1, 200000) g; ANALYZE skiplock.jobs"));
	itest_plan_uses(t->admin, "jobs_claim_idx",
	                "SELECT id FROM skiplock.jobs WHERE state = 'available' "
	                "AND run_at <= now() AND kind = ANY ('{k}'::text[]) ORDER BY "
	                "priority DESC, run_at, id LIMIT 100 FOR UPDATE SKIP LOCKED");
	/* The calls the library sends, planned with its parameters: the
	 * breaker exclusion must not hide the index from the planner (a
	 * single-kind table once made it pick a scan and sort of every row).
	 * The claims run inside skiplock.claim (sql/0011_protocol.sql); on a
	 * direct connection a worker prepares the calls, and after five runs
	 * the server may keep generic plans of the statements inside. */
	for (int generic = 0; generic < 2; generic++) {
		if (generic)
			PQclear(itest_sql(t->admin, "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan"));
		itest_call_plans_use(t->admin, "jobs_claim_idx", NULL,
		                     "SELECT * FROM skiplock.claim('w', '{k}', NULL, 100)");
		itest_call_plans_use(t->admin, "jobs_claim_idx", NULL,
		                     "SELECT * FROM skiplock.record_claim('{1}', '{1}', '{ok}', NULL,"
		                     " NULL, NULL, NULL, NULL, NULL, NULL, 'w', '{k}', NULL, 100,"
		                     " '30 s')");
		itest_call_plans_use(t->admin, "jobs_claim_idx", NULL,
		                     "SELECT * FROM skiplock.claim('w', '{k}', NULL, 100, '30 s', 0, 0, 0)");
		if (generic)
			PQclear(itest_sql(t->admin, "COMMIT"));
	}
	skl_job *jobs = NULL;
	int64_t start = itest_now_ms();
	CHECK_EQ(claim(c, "k", 100, 30000, &jobs), 100);
	printf("  claim of 100 from 200000 rows: %lld ms\n", (long long)(itest_now_ms() - start));
	skl_jobs_free(jobs, 100);
	skl_client_close(c);
}

/* The ids and fencing tokens of n claimed jobs as two array literals. */
static void claim_arrays(const skl_job *jobs, int n, char *ids, char *fences, size_t cap)
{
	size_t a = (size_t)snprintf(ids, cap, "{"), b = (size_t)snprintf(fences, cap, "{");
	for (int i = 0; i < n && a < cap && b < cap; i++) {
		a += (size_t)snprintf(ids + a, cap - a, "%s%" PRId64, i ? "," : "", jobs[i].id);
		b += (size_t)snprintf(fences + b, cap - b, "%s%" PRId64, i ? "," : "", jobs[i].fencing);
	}
	if (a < cap)
		snprintf(ids + a, cap - a, "}");
	if (b < cap)
		snprintf(fences + b, cap - b, "}");
}

/* Writes that end or extend claims look their rows up by id.  Statistics
 * taken while no job ran make the partial index of running jobs look
 * empty, and the planner once hashed all of it for each batch: every
 * running job of the fleet, and every dead version a held snapshot keeps
 * (10 ms and 6,000 buffers per batch of 64 in the held-xmin benchmark). */
static void fenced_writes_use_primary_key(itest_ctx *t)
{
	skl_client *c = open_client(t);
	PQclear(itest_sql(t->admin,
	                  "INSERT INTO skiplock.jobs (kind) SELECT 'k' FROM generate_series(1, 20000);"
	                  " ANALYZE skiplock.jobs"));
	skl_job *jobs = NULL;
	CHECK_EQ(claim(c, "k", 100, 30000, &jobs), 100);
	char ids[2048], fences[2048];
	claim_arrays(jobs, 100, ids, fences, sizeof(ids));
	skl_jobs_free(jobs, 100);
	for (int generic = 0; generic < 2; generic++) {
		if (generic)
			PQclear(itest_sql(t->admin, "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan"));
		itest_call_plans_use(t->admin, "jobs_pkey", "jobs_rescue_idx",
		                     "SELECT * FROM skiplock.record('%s', '%s',"
		                     " array_fill('ok'::text, ARRAY[100]))", ids, fences);
		itest_call_plans_use(t->admin, "jobs_pkey", "jobs_rescue_idx",
		                     "SELECT * FROM skiplock.heartbeat('%s', '%s', '30 s')", ids, fences);
		if (generic)
			PQclear(itest_sql(t->admin, "COMMIT"));
	}
	skl_client_close(c);
}

/* Finished jobs are in skiplock.finished_jobs (sql/0013_finished.sql):
 * the claim never reads that table, and an outcome only inserts into it,
 * however many finished jobs it holds. */
static void finished_jobs_out_of_the_hot_path(itest_ctx *t)
{
	skl_client *c = open_client(t);
	PQclear(itest_sql(t->admin,
	                  "INSERT INTO skiplock.jobs (kind) SELECT 'k' FROM generate_series(1, 20000);"
	                  " ANALYZE skiplock.jobs"));
	skl_job *jobs = NULL;
	CHECK_EQ(claim(c, "k", 1000, 30000, &jobs), 1000);
	char ids[16384], fences[16384];
	claim_arrays(jobs, 1000, ids, fences, sizeof(ids));
	skl_jobs_free(jobs, 1000);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.record('%s', '%s',"
	                             " array_fill('ok'::text, ARRAY[1000]))", ids, fences), 1000);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.finished_jobs"), 1000);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.jobs WHERE state = 'completed'"), 0);
	PQclear(itest_sql(t->admin, "ANALYZE skiplock.finished_jobs"));
	CHECK_EQ(claim(c, "k", 10, 30000, &jobs), 10);
	char one[64], onef[64];
	snprintf(one, sizeof(one), "{%" PRId64 "}", jobs[0].id);
	snprintf(onef, sizeof(onef), "{%" PRId64 "}", jobs[0].fencing);
	skl_jobs_free(jobs, 10);
	itest_call_plans_use(t->admin, "jobs_claim_idx", "finished_jobs",
	                     "SELECT * FROM skiplock.claim('w', '{k}', NULL, 10)");
	itest_call_plans_use(t->admin, "jobs_pkey", " on finished_jobs_",
	                     "SELECT * FROM skiplock.record('%s', '%s', '{ok}')", one, onef);
	skl_client_close(c);
}

/* ---- prefetch: jobs claimed beyond the concurrency ---- */

typedef struct pf_state {
	skl_worker *w;
	atomic_int inside, most;
	skl_rc rc;
} pf_state;

static int pf_handler(const skl_job *job, void *ctx)
{
	(void)job;
	pf_state *s = ctx;
	int now = atomic_fetch_add(&s->inside, 1) + 1;
	for (int m = atomic_load(&s->most); now > m && !atomic_compare_exchange_weak(&s->most, &m, now);)
		;
	usleep(1200 * 1000);
	atomic_fetch_sub(&s->inside, 1);
	return SKL_JOB_OK;
}

static void *pf_run(void *arg)
{
	pf_state *s = arg;
	skl_error err;
	s->rc = skl_worker_run(s->w, &err);
	return NULL;
}

/* A worker with one handler on its own thread, and its orderly end. */
static pthread_t start_worker(itest_ctx *t, const skl_worker_options *wo, const char *kind,
                              skl_handler_fn fn, void *ctx, pf_state *s)
{
	skl_client_options co;
	skl_client_options_init(&co);
	co.url = t->url;
	skl_error err;
	CHECK(skl_worker_new(&co, wo, &s->w, &err) == SKL_OK);
	CHECK(skl_worker_handle(s->w, kind, fn, ctx, &err) == SKL_OK);
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, pf_run, s), 0);
	return th;
}

static void stop_worker(pf_state *s, pthread_t th)
{
	skl_worker_stop(s->w);
	pthread_join(th, NULL);
	skl_worker_free(s->w);
	CHECK_EQ(s->rc, SKL_OK);
}

/* Concurrency 1 with prefetch 3: one claim takes all four jobs, one
 * handler runs at a time, and the jobs waiting in the worker keep their
 * leases through its heartbeats, although the last one waits longer than
 * a lease (the worker's own rescue runs every 300 ms): each job runs once,
 * on its first attempt. */
static void prefetch_keeps_leases(itest_ctx *t)
{
	skl_client *c = open_client(t);
	for (int i = 0; i < 4; i++)
		enqueue(c, "pf", "{}", NULL);
	skl_client_close(c);
	skl_worker_options wo;
	skl_worker_options_init(&wo);
	wo.concurrency = 1;
	wo.prefetch = 3;
	wo.lease_ms = 3000;
	wo.rescue_every_ms = 300;
	wo.no_cron = true;
	pf_state s = {.rc = SKL_OK};
	pthread_t th = start_worker(t, &wo, "pf", pf_handler, &s, &s);
	int64_t deadline = itest_now_ms() + 60000;
	while (itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed'") < 4 &&
	       itest_now_ms() < deadline)
		usleep(100 * 1000);
	stop_worker(&s, th);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"
	                             " WHERE state = 'completed' AND attempt = 1 AND fencing = 1"), 4);
	CHECK_EQ(itest_int(t->admin, "SELECT count(DISTINCT attempted_at) FROM skiplock.all_jobs"), 1);
	CHECK_EQ(atomic_load(&s.most), 1);
}

/* A worker claims after the last job of its previous claim while it has a
 * backlog; a job placed before that (an old run_at, enqueued late) is
 * still claimed by the claim from the front the worker makes at least
 * every 2 s, long before the backlog is drained (it takes 4,000 × 10 ms
 * over 8 slots: at least 5 s). */
static int slow_handler(const skl_job *job, void *ctx)
{
	(void)job;
	(void)ctx;
	usleep(10 * 1000);
	return SKL_JOB_OK;
}

static void late_old_job_is_claimed(itest_ctx *t)
{
	skl_client *c = open_client(t);
	PQclear(itest_sql(t->admin, "INSERT INTO skiplock.jobs (kind) SELECT 'w'"
	                            " FROM generate_series(1, 4000); ANALYZE skiplock.jobs"));
	skl_worker_options wo;
	skl_worker_options_init(&wo);
	wo.concurrency = 8;
	wo.no_cron = true;
	pf_state s = {.rc = SKL_OK};
	pthread_t th = start_worker(t, &wo, "w", slow_handler, NULL, &s);
	int64_t deadline = itest_now_ms() + 120000;
	while (itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed'") < 100 &&
	       itest_now_ms() < deadline)
		usleep(20 * 1000);
	skl_enqueue_opts o;
	skl_enqueue_opts_init(&o);
	o.run_at = "2000-01-01 00:00:00+00";
	int64_t old = enqueue(c, "w", "{}", &o);
	while (itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE state <> 'completed'") > 0 &&
	       itest_now_ms() < deadline)
		usleep(100 * 1000);
	stop_worker(&s, th);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"
	                             " WHERE state = 'completed' AND attempt = 1"), 4001);
	long long after = itest_int(t->admin,
	                            "SELECT count(*) FROM skiplock.all_jobs WHERE attempted_at >"
	                            " (SELECT attempted_at FROM skiplock.all_jobs WHERE id = %lld)",
	                            (long long)old);
	printf("  jobs claimed after the late old job: %lld\n", after);
	CHECK(after > 0);
	skl_client_close(c);
}

/* ---- several worker processes over a fenced ledger ---- */

static void many_workers_fenced_ledger(itest_ctx *t)
{
	enum { JOBS = 10000, WORKERS = 3 };
	skl_client *c = open_client(t);
	ledger_setup(t, c, JOBS);
	int64_t start = itest_now_ms();
	pid_t pids[WORKERS + 1];
	for (int i = 0; i < WORKERS; i++)
		pids[i] = ledger_worker_start(t->url, i, 2000);
	/* kill one worker mid-run; a replacement joins */
	while (itest_int(t->admin, "SELECT count(*) FROM ledger") < JOBS / 3)
		usleep(50000);
	kill(pids[0], SIGKILL);
	waitpid(pids[0], NULL, 0);
	pids[WORKERS] = ledger_worker_start(t->url, WORKERS, 2000);
	ledger_wait(t, 120);
	int64_t took = itest_now_ms() - start;
	ledger_stop(pids + 1, WORKERS);
	ledger_check(t, JOBS);
	long long rescued = itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE errors::text "
	                                        "LIKE '%%lease expired%%'");
	long long stale = itest_int(t->admin, "SELECT count(*) FROM ledger l JOIN skiplock.all_jobs j ON "
	                                      "j.id = l.job_id WHERE l.fencing <> j.fencing");
	printf("  %d jobs, %d workers (one SIGKILLed: %lld jobs rescued, %lld stale executions): "
	       "%lld ms, %.0f jobs/s\n", JOBS, WORKERS, rescued, stale, (long long)took,
	       JOBS * 1000.0 / (double)took);
	skl_client_close(c);
}

/* ---- a lost answer to a committed enqueue ---- */

static void enqueue_retried_after_lost_answer(itest_ctx *t)
{
	skl_client *setup = open_client(t);
	skl_client_close(setup);
	char dir[64], url[512];
	pid_t proxy = itest_start_proxy(t, dir, url, sizeof(url));
	skl_client_options o;
	skl_client_options_init(&o);
	o.url = url;
	o.application_name = "itest-lost-answer";
	skl_client *c = NULL;
	skl_error err;
	CHECK_EQ(skl_client_open(&o, &c, &err), SKL_OK);
	CHECK_EQ(skl_client_ping(c, &err), SKL_OK);
	CHECK_EQ(itest_sh("%s ctl %s/ctl drop-reply-matching enqueue_many >/dev/null",
	                  getenv("SKL_CUTPROXY"), dir), 0);
	int64_t id = 0;
	CHECK_EQ(skl_enqueue(c, "charge", "{\"amount\": 100}", NULL, &id, &err), SKL_OK);
	CHECK_EQ(skl_client_connects(c), 2); /* the answer was lost; it reconnected */
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"), 1);
	CHECK_EQ(itest_int(t->admin, "SELECT id FROM skiplock.all_jobs"), id);
	CHECK_EQ(itest_sh("%s ctl %s/ctl stats | grep -q 'commit_drops=1'", getenv("SKL_CUTPROXY"),
	                  dir), 0);
	skl_client_close(c);
	kill(proxy, SIGTERM);
	waitpid(proxy, NULL, 0);
	itest_sh("rm -rf %s", dir);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"enqueue_paths_round_trip", enqueue_paths_round_trip, 30},
		{"unique_key_returns_holder", unique_key_returns_holder, 30},
		{"outcome_text_round_trip", outcome_text_round_trip, 30},
		{"claim_order_and_delays", claim_order_and_delays, 30},
		{"stale_owner_is_fenced_out", stale_owner_is_fenced_out, 30},
		{"retries_then_discard_with_history", retries_then_discard_with_history, 30},
		{"error_history_is_bounded", error_history_is_bounded, 30},
		{"claim_plan_uses_partial_index", claim_plan_uses_partial_index, 60},
		{"finished_jobs_out_of_the_hot_path", finished_jobs_out_of_the_hot_path, 60},
		{"fenced_writes_use_primary_key", fenced_writes_use_primary_key, 30},
		{"many_workers_fenced_ledger", many_workers_fenced_ledger, 180},
		{"enqueue_retried_after_lost_answer", enqueue_retried_after_lost_answer, 60},
		{"prefetch_keeps_leases", prefetch_keeps_leases, 90},
		{"claim_after_a_place", claim_after_a_place, 30},
		{"late_old_job_is_claimed", late_old_job_is_claimed, 180},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
