/*
 * test_throughput.c — skl_queue_throughput, the dashboard's sparklines:
 * jobs land in the bucket of their finished_at counted back from the
 * database's now(), per queue and kind; unfinished and old jobs are not
 * counted; the statement reads the finished-jobs index; bad arguments are
 * refused before any statement.
 */
#include <stdlib.h>
#include <string.h>

#include "itest.h"
#include "skiplock.h"

/* Finished jobs with finished_at set `ago` seconds back, kept forever
 * (in skiplock.finished_jobs_forever). */
static void finished(itest_ctx *t, const char *queue, const char *kind, const char *state,
                     int n, int ago)
{
	PQclear(itest_sql(t->admin,
	                  "INSERT INTO skiplock.finished_jobs (id, queue, kind, state, attempt,"
	                  "                                    finished_at, expires_at)"
	                  " SELECT nextval('skiplock.jobs_id_seq'), '%s', '%s', '%s', 1,"
	                  "        now() - %d * interval '1 second', 'infinity'"
	                  "   FROM generate_series(1, %d)",
	                  queue, kind, state, ago, n));
}

static void buckets(itest_ctx *t)
{
	skl_client *c = itest_client(t, "test_throughput", true);
	finished(t, "mail", "send", "completed", 3, 5);       /* bucket 9 (the last) */
	finished(t, "mail", "send", "completed", 2, 65);      /* bucket 8 */
	finished(t, "mail", "send", "discarded", 1, 65);      /* bucket 8 */
	finished(t, "mail", "send", "completed", 4, 595);     /* bucket 0 */
	finished(t, "mail", "send", "completed", 7, 700);     /* outside the window */
	finished(t, "mail", "send", "cancelled", 5, 5);       /* never counted */
	finished(t, "default", "bill", "completed", 1, 125);  /* bucket 7 */
	PQclear(itest_sql(t->admin, "INSERT INTO skiplock.jobs (kind) VALUES ('bill')")); /* unfinished */

	skl_queue_rate *rows;
	size_t n;
	skl_error err;
	CHECK_EQ(skl_queue_throughput(c, 10, 60000, &rows, &n, &err), SKL_OK);
	CHECK_EQ(n, 2);
	CHECK_STR(rows[0].queue, "default");
	CHECK_STR(rows[0].kind, "bill");
	CHECK_EQ(rows[0].completed[7], 1);
	CHECK_STR(rows[1].queue, "mail");
	CHECK_STR(rows[1].kind, "send");
	const int64_t want_done[10] = {4, 0, 0, 0, 0, 0, 0, 0, 2, 3};
	const int64_t want_bad[10] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 0};
	for (int i = 0; i < 10; i++) {
		CHECK_EQ(rows[1].completed[i], want_done[i]);
		CHECK_EQ(rows[1].discarded[i], want_bad[i]);
	}
	skl_queue_rate_free(rows, n);
	finished(t, "old", "x", "completed", 20000, 86400); /* a day back: the index wins */
	PQclear(itest_sql(t->admin, "INSERT INTO skiplock.jobs (kind, run_at) SELECT 'later', now()"
	                            " + interval '1 day' FROM generate_series(1, 20000);"
	                            " ANALYZE skiplock.jobs; ANALYZE skiplock.finished_jobs"));
	/* the 20,000 old ones are skipped by the finish-time index */
	itest_call_plans_use(t->admin, "finished_at_idx", "Seq Scan on finished_jobs_forever",
	                "SELECT queue, kind, count(*) FROM skiplock.all_jobs"
	                " WHERE state IN ('completed', 'discarded', 'cancelled')"
	                "   AND finished_at > now() - interval '1 hour' GROUP BY 1, 2");
	itest_no_leftovers(t);
	skl_client_close(c);
}

static void bad_arguments(itest_ctx *t)
{
	skl_client *c = itest_client(t, "test_throughput", true);
	skl_queue_rate *rows = (skl_queue_rate *)&rows;
	size_t n = 7;
	skl_error err;
	CHECK_EQ(skl_queue_throughput(c, 0, 60000, &rows, &n, &err), SKL_INVALID);
	CHECK(rows == NULL && n == 0);
	CHECK_EQ(skl_queue_throughput(c, 60, 10, &rows, &n, &err), SKL_INVALID);
	CHECK_EQ(skl_queue_throughput(c, 1441, 60000, &rows, &n, &err), SKL_INVALID);
	CHECK(strstr(err.message, "buckets") != NULL);
	CHECK_EQ(skl_queue_throughput(c, 60, 60000, &rows, &n, &err), SKL_OK); /* no jobs */
	CHECK(rows == NULL && n == 0);
	skl_client_close(c);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"buckets", buckets, 60},
		{"bad_arguments", bad_arguments, 60},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
