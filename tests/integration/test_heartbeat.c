/*
 * test_heartbeat.c — an open effect transaction of one job (its
 * skiplock.job_fence) costs the worker's other jobs nothing
 * (sql/0020_heartbeat_idem.sql), direct and through PgBouncer.
 *
 *   heartbeat_skips_locked_row   SQL and C: with a job's row held by a
 *                                job_fence, the batched heartbeat does not
 *                                wait; the others are extended, the held
 *                                one is "locked" (kept, not extended), a
 *                                stale claim of it is lost; once the fence
 *                                ends it is extended again
 *   heartbeat_plan               its statements read skiplock.jobs by
 *                                jobs_pkey, never a sequential scan
 *   fence_keeps_other_leases     a worker with three jobs: A's handler
 *                                holds a job_fence past 2 x the lease while
 *                                another connection rescues every 100 ms;
 *                                B and C keep their leases (attempt and
 *                                fencing unchanged) and run once
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <skiplock.h>

#include "itest.h"

/* Claims n jobs of kind for owner "w1" with the given lease; ids and
 * fencings in id order. */
static void claim_n(PGconn *db, int n, const char *lease, long long *ids, long long *fen)
{
	PGresult *r = itest_sql(db, "SELECT id, fencing FROM skiplock.claim('w1', '{k}', n => %d,"
	                            " lease => '%s') ORDER BY id", n, lease);
	CHECK_EQ(PQntuples(r), n);
	for (int i = 0; i < n; i++) {
		ids[i] = atoll(PQgetvalue(r, i, 0));
		fen[i] = atoll(PQgetvalue(r, i, 1));
	}
	PQclear(r);
}

static void heartbeat_skips_locked_row(itest_ctx *t)
{
	skl_client *c = itest_client(t, "itest-heartbeat", true);
	PGconn *db = itest_connect(t->url, "itest-heartbeat");
	PQclear(itest_sql(db, "SELECT skiplock.enqueue('k') FROM generate_series(1, 3)"));
	long long id[3], f[3];
	claim_n(db, 3, "2 s", id, f);
	PGconn *fence = itest_connect(t->url, "itest-fence");
	PQclear(itest_sql(fence, "BEGIN; SELECT skiplock.job_fence(%lld, %lld)", id[0], f[0]));
	char want[160];
	snprintf(want, sizeof(want), "%lld:true:true %lld:true:false %lld:true:false %lld:false:false",
	         id[0], id[1], id[2], id[0]);
	/* Bounded, so that a heartbeat that waits fails here instead of hanging. */
	CHECK_STR(itest_text(db, "BEGIN; SET LOCAL statement_timeout = '3s';"
	                         " SELECT string_agg(id || ':' || extended || ':' || locked, ' ')"
	                         " FROM skiplock.heartbeat('{%lld,%lld,%lld,%lld}',"
	                         " '{%lld,%lld,%lld,%lld}', '1 hour')",
	                     id[0], id[1], id[2], id[0], f[0], f[1], f[2], f[0] + 1), want);
	PQclear(itest_sql(db, "COMMIT"));
	/* B and C now hold an hour, A still its 2 s; the rescue skips A. */
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.jobs"
	                             " WHERE lease_expires_at > now() + interval '50 minutes'"), 2);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.jobs WHERE id = %lld"
	                             " AND lease_expires_at < now() + interval '1 minute'", id[0]), 1);
	/* The C call says the same. */
	int64_t ids[3] = {id[0], id[1], id[2]}, fens[3] = {f[0], f[1], f[2]};
	skl_hb_state st[3];
	bool alive[3];
	skl_error err;
	CHECK_EQ(skl_heartbeat_states(c, ids, fens, 3, 60000, st, &err), SKL_OK);
	CHECK_EQ(st[0], SKL_HB_LOCKED);
	CHECK_EQ(st[1], SKL_HB_EXTENDED);
	CHECK_EQ(st[2], SKL_HB_EXTENDED);
	fens[2]++;
	CHECK_EQ(skl_heartbeat(c, ids, fens, 3, 60000, alive, &err), SKL_OK);
	CHECK(alive[0] && alive[1] && !alive[2]);
	/* The fence ends: A is extended again. */
	PQclear(itest_sql(fence, "COMMIT"));
	CHECK_STR(itest_text(db, "SELECT string_agg(extended || ':' || locked, ' ') FROM"
	                         " skiplock.heartbeat('{%lld}', '{%lld}', '1 hour')", id[0], f[0]),
	          "true:false");
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.jobs WHERE id = %lld"
	                             " AND lease_expires_at > now() + interval '50 minutes'", id[0]), 1);
	PQfinish(fence);
	PQfinish(db);
	skl_client_close(c);
	itest_no_leftovers(t);
}

/* 20,000 jobs, 10 claimed: the heartbeat of those 10 (one held by a
 * fence, one stale) reads the jobs through their primary key. */
static void heartbeat_plan(itest_ctx *t)
{
	skl_client_close(itest_client(t, "itest-heartbeat", true));
	PQclear(itest_sql(t->admin, "SELECT count(skiplock.enqueue('k')) FROM generate_series(1, 20000)"));
	long long id[10], f[10];
	claim_n(t->admin, 10, "1 hour", id, f);
	PQclear(itest_sql(t->admin, "ANALYZE skiplock.jobs"));
	PGconn *fence = itest_connect(t->direct_url, "itest-fence");
	PQclear(itest_sql(fence, "BEGIN; SELECT skiplock.job_fence(%lld, %lld)", id[0], f[0]));
	itest_call_plans_use(t->admin, "jobs_pkey", NULL,
	                     "SELECT * FROM skiplock.heartbeat(ARRAY(SELECT id FROM skiplock.jobs"
	                     " WHERE state = 'running' ORDER BY id), ARRAY(SELECT fencing +"
	                     " (id = %lld)::int FROM skiplock.jobs WHERE state = 'running'"
	                     " ORDER BY id), '1 hour')", id[9]);
	PQclear(itest_sql(fence, "COMMIT"));
	PQfinish(fence);
}

/* ---- a worker whose job A holds its fence for longer than the lease ---- */

#define LEASE_MS 1500

typedef struct fence_state {
	const char *url;
	atomic_int runs[3];          /* handler runs of A, B, C */
	atomic_int fence_failed;
	int64_t first_id;
	skl_worker *w;
	skl_rc rc;
} fence_state;

static atomic_int *runs_of(fence_state *s, const skl_job *job)
{
	int64_t i = job->id - s->first_id;
	CHECK(i >= 0 && i < 3);
	return &s->runs[i];
}

/* Job A: on its first attempt its effect transaction holds job_fence for
 * 2 x the lease and more (later attempts commit at once). */
static int fence_handler(const skl_job *job, void *ctx)
{
	fence_state *s = ctx;
	atomic_fetch_add(runs_of(s, job), 1);
	PGconn *db = PQconnectdb(s->url);
	char sql[160];
	snprintf(sql, sizeof(sql), "BEGIN; SELECT skiplock.job_fence(%" PRId64 ", %" PRId64 ")",
	         job->id, job->fencing);
	PGresult *r = PQexec(db, sql);
	bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
	PQclear(r);
	if (ok && job->attempt == 1)
		usleep((2 * LEASE_MS + 500) * 1000);
	r = PQexec(db, ok ? "COMMIT" : "ROLLBACK");
	ok = ok && PQresultStatus(r) == PGRES_COMMAND_OK;
	PQclear(r);
	PQfinish(db);
	if (!ok)
		atomic_fetch_add(&s->fence_failed, 1);
	return ok ? SKL_JOB_OK : SKL_JOB_RETRY;
}

/* Jobs B and C: run for 3 x the lease, heartbeated by the worker. */
static int slow_handler(const skl_job *job, void *ctx)
{
	fence_state *s = ctx;
	atomic_fetch_add(runs_of(s, job), 1);
	for (int i = 0; i < 3 * LEASE_MS / 50 && !skl_job_lost(job); i++)
		usleep(50 * 1000);
	return skl_job_lost(job) ? SKL_JOB_RETRY : SKL_JOB_OK;
}

static void *run_worker(void *arg)
{
	fence_state *s = arg;
	skl_error err;
	s->rc = skl_worker_run(s->w, &err);
	return NULL;
}

typedef struct rescuer {
	const char *url;
	atomic_bool stop;
	atomic_int rescued;
} rescuer;

/* Another member of the fleet: rescues expired leases every 100 ms, on a
 * direct connection of its own. */
static void *rescue_loop(void *arg)
{
	rescuer *r = arg;
	PGconn *db = PQconnectdb(r->url);
	while (!atomic_load(&r->stop)) {
		PGresult *res = PQexec(db, "SELECT count(*) FROM skiplock.rescue()");
		if (PQresultStatus(res) == PGRES_TUPLES_OK)
			atomic_fetch_add(&r->rescued, atoi(PQgetvalue(res, 0, 0)));
		PQclear(res);
		usleep(100 * 1000);
	}
	PQfinish(db);
	return NULL;
}

static void fence_keeps_other_leases(itest_ctx *t)
{
	skl_client *c = itest_client(t, "itest-heartbeat", true);
	skl_client_close(c);
	fence_state s = {.url = t->url};
	PQclear(itest_sql(t->admin, "SELECT skiplock.enqueue('fence', priority => 2),"
	                            " skiplock.enqueue('slow', priority => 1),"
	                            " skiplock.enqueue('slow', priority => 0)"));
	s.first_id = itest_int(t->admin, "SELECT min(id) FROM skiplock.jobs");
	skl_client_options co;
	skl_client_options_init(&co);
	co.url = t->url;
	skl_worker_options wo;
	skl_worker_options_init(&wo);
	wo.concurrency = 3;
	wo.lease_ms = LEASE_MS;
	wo.rescue_every_ms = 200;
	wo.no_cron = true;
	skl_error err;
	CHECK(skl_worker_new(&co, &wo, &s.w, &err) == SKL_OK);
	CHECK(skl_worker_handle(s.w, "fence", fence_handler, &s, &err) == SKL_OK);
	CHECK(skl_worker_handle(s.w, "slow", slow_handler, &s, &err) == SKL_OK);
	rescuer r = {.url = t->direct_url};
	pthread_t wt, rt;
	CHECK_EQ(pthread_create(&wt, NULL, run_worker, &s), 0);
	CHECK_EQ(pthread_create(&rt, NULL, rescue_loop, &r), 0);
	int64_t deadline = itest_now_ms() + 60000;
	while (itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"
	                           " WHERE state = 'completed'") < 3 && itest_now_ms() < deadline)
		usleep(100 * 1000);
	atomic_store(&r.stop, true);
	pthread_join(rt, NULL);
	skl_worker_stop(s.w);
	pthread_join(wt, NULL);
	skl_worker_free(s.w);
	CHECK_EQ(s.rc, SKL_OK);
	printf("  runs: A %d, B %d, C %d; rescued by the other connection: %d\n",
	       atomic_load(&s.runs[0]), atomic_load(&s.runs[1]), atomic_load(&s.runs[2]),
	       atomic_load(&r.rescued));
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"
	                             " WHERE state = 'completed'"), 3);
	/* B and C: one claim each, never rescued, one run each. */
	CHECK_STR(itest_text(t->admin, "SELECT string_agg(attempt || '/' || fencing || '/' ||"
	                               " jsonb_array_length(errors), ' ' ORDER BY id)"
	                               " FROM skiplock.all_jobs WHERE kind = 'slow'"),
	          "1/1/0 1/1/0");
	CHECK_EQ(atomic_load(&s.runs[1]), 1);
	CHECK_EQ(atomic_load(&s.runs[2]), 1);
	CHECK(atomic_load(&s.runs[0]) >= 1);
	itest_no_leftovers(t);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"heartbeat_skips_locked_row", heartbeat_skips_locked_row, 60},
		{"heartbeat_plan", heartbeat_plan, 120},
		{"fence_keeps_other_leases", fence_keeps_other_leases, 120},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
