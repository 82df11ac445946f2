/*
 * test_notify.c — wake-up notifications are hints: a flood of NOTIFY
 * skiplock_jobs, which any role can send, costs an idle worker a bounded
 * number of claims, and a real enqueue is still picked up promptly
 * (worker_loop.c on_wake), direct and through PgBouncer (there the worker
 * LISTENs on a side connection to the direct endpoint).
 *
 *   notify_flood_bounded   the reader role sends thousands of
 *                          notifications while a worker idles: its claims
 *                          (skiplock_worker_claims_total) stay within one
 *                          per --poll interval (plus a few); a job enqueued
 *                          during the flood completes within seconds
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

#define POLL_MS 200
#define FLOOD_MS 3000

typedef struct worker_run {
	skl_worker *w;
	skl_rc rc;
	atomic_int done;
} worker_run;

static int handler(const skl_job *job, void *ctx)
{
	(void)job;
	worker_run *r = ctx;
	atomic_fetch_add(&r->done, 1);
	return SKL_JOB_OK;
}

static void *run(void *arg)
{
	worker_run *r = arg;
	skl_error err;
	r->rc = skl_worker_run(r->w, &err);
	return NULL;
}

/* The value of an unlabelled counter in the worker's metrics. */
static long long metric(skl_worker *w, const char *name)
{
	char *text = NULL;
	skl_error err;
	CHECK_EQ(skl_worker_metrics(w, &text, &err), SKL_OK);
	char pat[96];
	snprintf(pat, sizeof(pat), "\n%s ", name);
	const char *p = strstr(text, pat);
	CHECK(p != NULL);
	long long v = atoll(p + strlen(pat));
	skl_free(text);
	return v;
}

typedef struct flood {
	const char *url, *role;
	int64_t until;
	long long sent;
} flood;

/* The reader role notifies, 20 distinct payloads per transaction (equal
 * ones would be folded into one), until `until`. */
static void *flood_run(void *arg)
{
	flood *f = arg;
	PGconn *db = itest_connect(f->url, "itest-flood");
	char sql[256];
	snprintf(sql, sizeof(sql), "BEGIN; SET LOCAL ROLE %s; SELECT pg_notify('skiplock_jobs', "
	         "g::text) FROM generate_series(1, 20) g; COMMIT", f->role);
	while (itest_now_ms() < f->until) {
		PGresult *r = PQexec(db, sql);
		if (PQresultStatus(r) == PGRES_COMMAND_OK)
			f->sent += 20;
		PQclear(r);
	}
	PQfinish(db);
	return NULL;
}

static void notify_flood_bounded(itest_ctx *t)
{
	skl_client_close(itest_client(t, "itest-notify", true));
	char role[80];
	snprintf(role, sizeof(role), "rd_%s", t->dbname);
	PQclear(itest_sql(t->admin, "CREATE ROLE %s NOLOGIN;"
	                            " SELECT skiplock.grant_roles(NULL, NULL, NULL, '%s')",
	                  role, role));
	skl_client_options co;
	skl_client_options_init(&co);
	co.url = t->url;
	co.direct_url = t->direct_url;
	skl_worker_options wo;
	skl_worker_options_init(&wo);
	wo.concurrency = 1;
	wo.poll_ms = POLL_MS;
	wo.poll_max_ms = 1000;
	wo.no_cron = true;
	worker_run wr = {.rc = SKL_OK};
	skl_error err;
	CHECK(skl_worker_new(&co, &wo, &wr.w, &err) == SKL_OK);
	CHECK(skl_worker_handle(wr.w, "k", handler, &wr, &err) == SKL_OK);
	pthread_t wt;
	CHECK_EQ(pthread_create(&wt, NULL, run, &wr), 0);
	/* Listening: a notification reaches the worker. */
	int64_t deadline = itest_now_ms() + 30000;
	while (metric(wr.w, "skiplock_worker_notifications_total") == 0 &&
	       itest_now_ms() < deadline) {
		PQclear(itest_sql(t->admin, "NOTIFY skiplock_jobs"));
		usleep(200 * 1000);
	}
	CHECK(metric(wr.w, "skiplock_worker_notifications_total") > 0);
	usleep(2 * POLL_MS * 1000);
	long long claims0 = metric(wr.w, "skiplock_worker_claims_total");
	long long notes0 = metric(wr.w, "skiplock_worker_notifications_total");
	int64_t t0 = itest_now_ms();
	flood f = {.url = t->url, .role = role, .until = t0 + FLOOD_MS};
	pthread_t ft;
	CHECK_EQ(pthread_create(&ft, NULL, flood_run, &f), 0);
	/* Halfway through, a real job: claimed within a poll or so. */
	usleep(FLOOD_MS / 2 * 1000);
	int64_t enq = itest_now_ms();
	PQclear(itest_sql(t->admin, "SELECT skiplock.enqueue('k')"));
	while (atomic_load(&wr.done) == 0 && itest_now_ms() < enq + 30000)
		usleep(10 * 1000);
	int64_t picked = itest_now_ms() - enq;
	pthread_join(ft, NULL);
	usleep(2 * POLL_MS * 1000); /* what arrived last is read */
	long long claims = metric(wr.w, "skiplock_worker_claims_total") - claims0;
	long long notes = metric(wr.w, "skiplock_worker_notifications_total") - notes0;
	int64_t elapsed = itest_now_ms() - t0;
	skl_worker_stop(wr.w);
	pthread_join(wt, NULL);
	skl_worker_free(wr.w);
	CHECK_EQ(wr.rc, SKL_OK);
	printf("  %lld notifications sent in %d ms, %lld read; %lld claims in %" PRId64
	       " ms (bound %" PRId64 "); the job completed %" PRId64 " ms after its enqueue\n",
	       f.sent, FLOOD_MS, notes, claims, elapsed, elapsed / POLL_MS + 5, picked);
	CHECK(f.sent >= 1000);
	CHECK(notes >= 100);
	CHECK_INT(<=, claims, elapsed / POLL_MS + 5);
	CHECK_EQ(atomic_load(&wr.done), 1);
	CHECK_INT(<, picked, 5000);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"
	                             " WHERE state = 'completed'"), 1);
	PQclear(itest_sql(t->admin, "DROP OWNED BY %s; DROP ROLE %s", role, role));
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"notify_flood_bounded", notify_flood_bounded, 120},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
