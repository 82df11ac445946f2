/*
 * Integration tests of the worker registry (skiplock/workers.h,
 * sql/0016_workers.sql), direct and through PgBouncer: an empty claim
 * records its worker (and a new worker's insert deletes rows over a day
 * old); a second empty claim within 10 seconds writes nothing (no
 * transaction id is assigned); a claim that takes jobs does not touch the
 * table; a worker of kind a while kind b is due is idle with the count,
 * until another worker takes the b jobs; a paused queue's due job makes its
 * worker idle; an empty claim after a mark is not recorded; bad windows
 * are refused; on a 100,000-job backlog each set of workers' queues is
 * read once, through an index.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"
#include "skiplock.h"

static const skl_actor who = {.name = "alice@host", .role = "cli"};

static skl_client *open_client(itest_ctx *t)
{
	return itest_client(t, "itest-workers", true);
}

/* Claims up to limit jobs of kind for owner (queue NULL: every queue);
 * returns how many it took (left running). */
static size_t claim(skl_client *c, const char *owner, const char *kind, const char *queue,
                    size_t limit)
{
	const char *kinds[] = {kind}, *queues[] = {queue};
	skl_claim_opts o = {.kinds = kinds, .nkinds = 1, .queues = queue ? queues : NULL,
	                    .nqueues = queue ? 1 : 0, .limit = limit, .lease_ms = 30000,
	                    .owner = owner};
	skl_job *jobs = NULL;
	size_t n = 0;
	skl_error err;
	skl_rc rc = skl_claim(c, &o, &jobs, &n, &err);
	if (rc != SKL_OK && rc != SKL_EMPTY)
		itest_fail(__FILE__, __LINE__, "claim: %s", err.message);
	skl_jobs_free(jobs, n);
	return n;
}

/* n jobs of kind in queue, due a minute ago. */
static void due_jobs(itest_ctx *t, const char *queue, const char *kind, int n)
{
	PQclear(itest_sql(t->admin, "SELECT skiplock.enqueue('%s', '{}', '%s', now() - interval"
	                            " '1 minute') FROM generate_series(1, %d)", kind, queue, n));
}

static long long rows_of(itest_ctx *t, const char *owner)
{
	return itest_int(t->admin, "SELECT count(*) FROM skiplock.workers WHERE owner = '%s'", owner);
}

/* The idle workers (skl_workers_list, idle only) as "owner:waiting:kinds"
 * joined by spaces, into buf. */
static const char *idle_list(skl_client *c, char *buf, size_t cap)
{
	skl_worker_info *w = NULL;
	size_t n = 0, used = 0;
	skl_error err;
	if (skl_workers_list(c, 0, true, &w, &n, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "workers list: %s", err.message);
	buf[0] = '\0';
	for (size_t i = 0; i < n && used < cap; i++) {
		used += (size_t)snprintf(buf + used, cap - used, "%s%s:%lld:", i ? " " : "", w[i].owner,
		                         (long long)w[i].waiting);
		for (size_t k = 0; k < w[i].nwaiting_kinds && used < cap; k++)
			used += (size_t)snprintf(buf + used, cap - used, "%s%s", k ? "," : "",
			                         w[i].waiting_kinds[k]);
	}
	skl_workers_free(w, n);
	return buf;
}

static void empty_claim_records_the_worker(itest_ctx *t)
{
	skl_client *c = open_client(t);
	PQclear(itest_sql(t->admin, "INSERT INTO skiplock.workers (owner, kinds, empty_at)"
	                            " VALUES ('gone', '{a}', now() - interval '2 days')"));
	CHECK_EQ(claim(c, "host:1", "a", NULL, 10), 0);
	CHECK_STR(itest_text(t->admin, "SELECT kinds::text || ' ' || coalesce(queues::text, 'all')"
	                               " || ' ' || (empty_at > now() - interval '1 minute')"
	                               " FROM skiplock.workers WHERE owner = 'host:1'"),
	          "{a} all true");
	CHECK_EQ(rows_of(t, "gone"), 0); /* a new worker's insert removed it */
	skl_worker_info *w = NULL;
	size_t n = 0;
	skl_error err;
	CHECK_EQ(skl_workers_list(c, 60000, false, &w, &n, &err), SKL_OK);
	CHECK_EQ(n, 1);
	CHECK_STR(w[0].owner, "host:1");
	CHECK_EQ(w[0].nkinds, 1);
	CHECK_STR(w[0].kinds[0], "a");
	CHECK(w[0].queues == NULL);
	CHECK_EQ(w[0].waiting, 0);
	CHECK_INT(<, w[0].empty_age_ms, 60000);
	CHECK_EQ(strlen(w[0].empty_at), 24);
	skl_workers_free(w, n);
	/* other kinds or queues: the row follows them at once */
	CHECK_EQ(claim(c, "host:1", "b", "mail", 10), 0);
	CHECK_STR(itest_text(t->admin, "SELECT kinds::text || ' ' || queues::text"
	                               " FROM skiplock.workers WHERE owner = 'host:1'"),
	          "{b} {mail}");
	skl_client_close(c);
}

/* The transaction id of an empty claim's transaction, or "" when it wrote
 * nothing (no id assigned), on the run's URL. */
static const char *claim_xid(itest_ctx *t, const char *owner)
{
	PGconn *p = itest_connect(t->url, "itest-workers-xid");
	PQclear(itest_sql(p, "BEGIN"));
	PQclear(itest_sql(p, "SELECT count(*) FROM skiplock.claim('%s', '{a}')", owner));
	static char xid[32];
	snprintf(xid, sizeof(xid), "%s",
	         itest_text(p, "SELECT pg_current_xact_id_if_assigned()::text"));
	PQclear(itest_sql(p, "COMMIT"));
	PQfinish(p);
	return xid;
}

static void second_empty_claim_writes_nothing(itest_ctx *t)
{
	skl_client *c = open_client(t);
	CHECK(strcmp(claim_xid(t, "host:2"), "") != 0); /* the first one inserts */
	long long xmin = itest_int(t->admin, "SELECT xmin::text::bigint FROM skiplock.workers"
	                                     " WHERE owner = 'host:2'");
	CHECK_STR(claim_xid(t, "host:2"), "");
	CHECK_EQ(claim(c, "host:2", "a", NULL, 5), 0);
	CHECK_EQ(itest_int(t->admin, "SELECT xmin::text::bigint FROM skiplock.workers"
	                             " WHERE owner = 'host:2'"), xmin);
	/* 10 seconds later, the next empty claim writes the time */
	PQclear(itest_sql(t->admin, "UPDATE skiplock.workers SET empty_at = now() - interval"
	                            " '11 seconds' WHERE owner = 'host:2'"));
	CHECK(strcmp(claim_xid(t, "host:2"), "") != 0);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.workers WHERE owner = 'host:2'"
	                             " AND empty_at > now() - interval '5 seconds'"), 1);
	skl_client_close(c);
}

static void claim_that_takes_jobs_does_not_touch_it(itest_ctx *t)
{
	skl_client *c = open_client(t);
	due_jobs(t, "default", "a", 2);
	CHECK_EQ(claim(c, "busy:1", "a", NULL, 1), 1);
	CHECK_EQ(rows_of(t, "busy:1"), 0);
	/* a known worker's claim that takes a job leaves its row alone */
	PQclear(itest_sql(t->admin, "INSERT INTO skiplock.workers (owner, kinds, empty_at)"
	                            " VALUES ('busy:2', '{z}', now() - interval '1 hour')"));
	long long xmin = itest_int(t->admin, "SELECT xmin::text::bigint FROM skiplock.workers"
	                                     " WHERE owner = 'busy:2'");
	CHECK_EQ(claim(c, "busy:2", "a", NULL, 1), 1);
	CHECK_EQ(itest_int(t->admin, "SELECT xmin::text::bigint FROM skiplock.workers"
	                             " WHERE owner = 'busy:2'"), xmin);
	CHECK_STR(itest_text(t->admin, "SELECT kinds::text FROM skiplock.workers"
	                               " WHERE owner = 'busy:2'"), "{z}");
	skl_client_close(c);
}

static void idle_while_another_kind_waits(itest_ctx *t)
{
	skl_client *c = open_client(t);
	char buf[512];
	due_jobs(t, "default", "b", 3);
	CHECK_EQ(claim(c, "idle:a", "a", NULL, 10), 0);
	CHECK_STR(idle_list(c, buf, sizeof(buf)), "idle:a:3:b");
	/* a job enqueued after the empty claim was not left behind by it */
	PQclear(itest_sql(t->admin, "SELECT skiplock.enqueue('c')"));
	CHECK_STR(idle_list(c, buf, sizeof(buf)), "idle:a:3:b");
	CHECK_EQ(claim(c, "takes:b", "b", NULL, 10), 3);
	CHECK_STR(idle_list(c, buf, sizeof(buf)), "");
	CHECK_EQ(rows_of(t, "takes:b"), 0);
	/* the SQL function says the same */
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.idle_workers()"), 0);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.workers_seen()"), 1);
	skl_client_close(c);
}

static void paused_queue_makes_its_worker_idle(itest_ctx *t)
{
	skl_client *c = open_client(t);
	char buf[512];
	skl_error err;
	due_jobs(t, "mail", "send", 1);
	due_jobs(t, "other", "x", 1); /* not its queue */
	CHECK_EQ(skl_pause(c, "mail", NULL, &who, NULL, &err), SKL_OK);
	CHECK_EQ(claim(c, "mailer", "send", "mail", 10), 0);
	CHECK_STR(idle_list(c, buf, sizeof(buf)), "mailer:1:send");
	CHECK_EQ(skl_resume(c, "mail", NULL, &who, NULL, &err), SKL_OK);
	CHECK_EQ(claim(c, "mailer", "send", "mail", 10), 1);
	CHECK_STR(idle_list(c, buf, sizeof(buf)), "");
	skl_client_close(c);
}

static void empty_claim_after_a_mark_is_not_recorded(itest_ctx *t)
{
	skl_client *c = open_client(t);
	due_jobs(t, "default", "b", 1);
	const char *kinds[] = {"a"};
	skl_claim_opts o = {.kinds = kinds, .nkinds = 1, .limit = 5, .lease_ms = 30000,
	                    .owner = "marked", .after_set = true, .after_priority = 0,
	                    .after_run_at_us = 0, .after_id = 1};
	skl_job *jobs = NULL;
	size_t n = 0;
	skl_error err;
	CHECK_EQ(skl_claim(c, &o, &jobs, &n, &err), SKL_EMPTY);
	CHECK_EQ(rows_of(t, "marked"), 0);
	skl_client_close(c);
}

static void bad_windows_are_refused(itest_ctx *t)
{
	skl_client *c = open_client(t);
	skl_worker_info dummy;
	skl_worker_info *w = &dummy;
	size_t n = 7;
	skl_error err;
	CHECK_EQ(skl_workers_list(c, 999, false, &w, &n, &err), SKL_INVALID);
	CHECK(w == NULL);
	CHECK_EQ(n, 0);
	CHECK_EQ(skl_workers_list(c, 86400001, true, &w, &n, &err), SKL_INVALID);
	CHECK_EQ(skl_workers_list(c, -1, true, &w, &n, &err), SKL_INVALID);
	skl_client_close(c);
}

/* The server's execution time of q in ms (EXPLAIN ANALYZE on the
 * observer), or -1. */
static double exec_ms(itest_ctx *t, const char *q)
{
	PGresult *r = itest_sql(t->admin, "EXPLAIN (ANALYZE) %s", q);
	double ms = -1;
	for (int i = 0; i < PQntuples(r); i++)
		if (strncmp(PQgetvalue(r, i, 0), "Execution Time: ", 16) == 0)
			ms = strtod(PQgetvalue(r, i, 0) + 16, NULL);
	PQclear(r);
	return ms;
}

/* 20 workers, half of every queue and half of queue small, over a backlog
 * of 100,000 due jobs of queue big and 10 of small: each set of queues is
 * read once, through an index (claim order for every queue; the queue's
 * index for a small queue), and the counts are right; then none is due. */
static void idle_workers_read_an_index(itest_ctx *t)
{
	skl_client *c = open_client(t);
	PQclear(itest_sql(t->admin,
	                  "INSERT INTO skiplock.jobs (queue, kind, run_at)"
	                  " SELECT CASE WHEN i <= 10 THEN 'small' ELSE 'big' END, 'k' || (i %% 13),"
	                  " now() - interval '1 hour' + i * interval '1 millisecond'"
	                  " FROM generate_series(1, 100000) i;"
	                  "INSERT INTO skiplock.workers (owner, kinds, queues, empty_at)"
	                  " SELECT 'w' || i, '{none}', CASE WHEN i %% 2 = 0 THEN '{small}'::text[] END,"
	                  " now() - i * interval '10 milliseconds' FROM generate_series(1, 20) i"));
	PQclear(itest_sql(t->admin, "VACUUM ANALYZE skiplock.jobs"));
	PQclear(itest_sql(t->admin, "ANALYZE skiplock.workers"));
	const char *q = "SELECT count(*) FROM skiplock.idle_workers()";
	itest_call_plans_use(t->admin, "jobs_claim_idx", NULL, "%s", q);
	itest_call_plans_use(t->admin, "jobs_queue_kind_state_idx", NULL, "%s", q);
	CHECK_STR(itest_text(t->admin, "SELECT string_agg(DISTINCT coalesce(queues::text, '*') || ' '"
	                               " || waiting || ' ' || cardinality(waiting_kinds), ', ')"
	                               " FROM skiplock.idle_workers()"),
	          "* 1000 10, {small} 10 10");
	double due_ms = exec_ms(t, q);
	PQclear(itest_sql(t->admin, "UPDATE skiplock.jobs SET run_at = now() + interval '1 day'"));
	PQclear(itest_sql(t->admin, "VACUUM ANALYZE skiplock.jobs"));
	double none_ms = exec_ms(t, q);
	char buf[64];
	CHECK_STR(idle_list(c, buf, sizeof(buf)), "");
	printf("idle_workers, 20 workers, 100000 available jobs: %.1f ms all due, %.1f ms none due\n",
	       due_ms, none_ms);
	CHECK(due_ms >= 0 && due_ms < 500);
	CHECK(none_ms >= 0 && none_ms < 500);
	skl_client_close(c);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"empty_claim_records_the_worker", empty_claim_records_the_worker, 30},
		{"second_empty_claim_writes_nothing", second_empty_claim_writes_nothing, 30},
		{"claim_that_takes_jobs_does_not_touch_it", claim_that_takes_jobs_does_not_touch_it, 30},
		{"idle_while_another_kind_waits", idle_while_another_kind_waits, 30},
		{"paused_queue_makes_its_worker_idle", paused_queue_makes_its_worker_idle, 30},
		{"empty_claim_after_a_mark_is_not_recorded", empty_claim_after_a_mark_is_not_recorded, 30},
		{"bad_windows_are_refused", bad_windows_are_refused, 30},
		{"idle_workers_read_an_index", idle_workers_read_an_index, 120},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
