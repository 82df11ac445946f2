/*
 * Integration tests of the maintenance's locks (sql/0018_maintenance_locks.sql,
 * src/lib/coord/maintain.c), direct and through PgBouncer.  The setting of
 * each: finished jobs of a queue kept past the partitions made ahead fill
 * the default partition (DEFAULT_ROWS rows expiring 8 to 9 days from now),
 * then the retention changes (queue slow kept 10 days) so that
 * maintenance must make partitions over those rows.  While maintenance
 * runs, a stream of claims and completes of jobs of queue slow (whose rows
 * go to the default partition) and of queue default (to a range
 * partition) measures how long each complete takes:
 *   - a whole run, with the partition width changed too (every partition
 *     ahead is reshaped): no complete waits a second, and every row of the
 *     default partition ends in its partition;
 *   - a maintainer stopped (SIGSTOP) while its statement runs: completes
 *     keep flowing;
 *   - a second maintainer that tries every 200 ms while the first runs
 *     neither waits nor does anything, and the lease keeps its token.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"
#include "skiplock.h"

#define DEFAULT_ROWS 100000
#define LATENCY_BOUND_MS 1000  /* generous: a loaded machine, ASan */

/* The setting above; width (NULL: unchanged) is the new partition width. */
static void setting(itest_ctx *t, const char *width)
{
	PQclear(itest_sql(t->admin,
		"INSERT INTO skiplock.finished_jobs (id, kind, queue, state, finished_at, expires_at)"
		" SELECT nextval('skiplock.jobs_id_seq'), 'old', 'slow', 'completed',"
		"        now() - interval '1 day',"
		"        now() + interval '8 days' + (g %% 86400) * interval '1 second'"
		"   FROM generate_series(1, %d) g", DEFAULT_ROWS));
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.finished_jobs_default"),
	         DEFAULT_ROWS);
	PQclear(itest_sql(t->admin, "SELECT skiplock.retention_set('slow', 'completed', '10 days')"));
	if (width)
		PQclear(itest_sql(t->admin, "SELECT skiplock.partition_width_set('%s')", width));
	PQclear(itest_sql(t->admin, "SELECT skiplock.enqueue('s', '{}', q) FROM generate_series(1,"
	                            " 20000), unnest(ARRAY['slow', 'default']) q"));
}

/* ---- the stream of completes ---- */

typedef struct stream {
	const char *url;
	volatile int stop;
	int64_t max_ms[2];     /* per queue: slow, default */
	long long done;
} stream;

static const char *const stream_queues[2] = {"slow", "default"};

static void *stream_main(void *p)
{
	stream *s = p;
	PGconn *c = itest_connect(s->url, "itest-stream");
	while (!s->stop) {
		for (int q = 0; q < 2; q++) {
			char sql[256];
			snprintf(sql, sizeof(sql), "SELECT count(skiplock.complete(id, fencing)) FROM"
			         " skiplock.claim('stream', ARRAY['s'], ARRAY['%s'], 1)", stream_queues[q]);
			int64_t t0 = itest_now_ms();
			PGresult *r = PQexec(c, sql);
			int64_t ms = itest_now_ms() - t0;
			if (PQresultStatus(r) != PGRES_TUPLES_OK)
				itest_fail(__FILE__, __LINE__, "stream: %s", PQerrorMessage(c));
			s->done += atoll(PQgetvalue(r, 0, 0));
			PQclear(r);
			if (ms > s->max_ms[q])
				s->max_ms[q] = ms;
		}
	}
	PQfinish(c);
	return NULL;
}

static void stream_start(stream *s, pthread_t *th, const char *url)
{
	*s = (stream){.url = url};
	CHECK_EQ(pthread_create(th, NULL, stream_main, s), 0);
}

static void stream_stop(stream *s, pthread_t th, const char *what)
{
	s->stop = 1;
	pthread_join(th, NULL);
	printf("%s: %lld completes; the longest took %lld ms (queue slow), %lld ms (queue default)\n",
	       what, s->done, (long long)s->max_ms[0], (long long)s->max_ms[1]);
	CHECK(s->done > 0);
	CHECK_INT(<, s->max_ms[0], LATENCY_BOUND_MS);
	CHECK_INT(<, s->max_ms[1], LATENCY_BOUND_MS);
}

/* skl_maintain to the end on a client of its own; returns its steps. */
static int maintain_all(itest_ctx *t, const char *owner)
{
	skl_client *c = itest_client(t, owner, false);
	skl_maintenance m;
	bool ran = false;
	skl_error err;
	skl_rc rc = skl_maintain(c, owner, 1000000, NULL, NULL, &m, &ran, &err);
	if (rc != SKL_OK)
		itest_fail(__FILE__, __LINE__, "maintain: %s", err.message);
	CHECK(ran);
	skl_client_close(c);
	return m.rounds;
}

/* The rows of the setting are all in range partitions, none lost. */
static void rows_moved(itest_ctx *t)
{
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.finished_jobs_default"
	                             " WHERE kind = 'old'"), 0);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.finished_jobs WHERE kind = 'old'"),
	         DEFAULT_ROWS);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.finished_tables"), 0);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM pg_constraint WHERE conrelid ="
	                             " 'skiplock.finished_jobs_default'::regclass"
	                             " AND conname = 'finished_jobs_default_area'"), 0);
}

/* (a) A whole run with a width change: completes never wait long; every
 * row of the default partition ends in its partition (the rows the stream
 * left there once their range is no longer reached by any retention). */
static void completes_flow_during_a_run(itest_ctx *t)
{
	skl_client *c = itest_client(t, "itest-maint", true);
	skl_client_close(c);
	setting(t, "3 hours");
	stream s;
	pthread_t th;
	stream_start(&s, &th, t->url);
	int64_t t0 = itest_now_ms();
	int steps = maintain_all(t, "maint-a");
	printf("maintenance: %d steps in %lld ms\n", steps, (long long)(itest_now_ms() - t0));
	stream_stop(&s, th, "during the run");
	rows_moved(t);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.finished_partitions"
	                             " WHERE hi - lo > interval '3 hours' AND lo > now() + interval '25 hours'"
	                             "   AND hi < now() + interval '7 days' - interval '1 hour'"), 0);
	/* The stream's rows of queue slow wait in the default partition while
	 * their range is reached (10 days); kept 11 days, it no longer is. */
	PQclear(itest_sql(t->admin, "SELECT skiplock.retention_set('slow', 'completed', '11 days')"));
	maintain_all(t, "maint-a2");
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.finished_jobs_default"), 0);
	itest_no_leftovers(t);
}

/* (b) A maintainer stopped while its statement runs holds nothing: the
 * stream keeps going for three seconds. */
static void a_stopped_maintainer_blocks_nothing(itest_ctx *t)
{
	skl_client *c = itest_client(t, "itest-maint", true);
	skl_client_close(c);
	setting(t, NULL);
	fflush(stdout);
	pid_t child = fork();
	CHECK(child >= 0);
	if (child == 0) {
		maintain_all(t, "maint-b");
		_exit(0);
	}
	/* stop it while one of its statements is running, if one is seen */
	bool seen = false;
	for (int64_t end = itest_now_ms() + 20000; !seen && itest_now_ms() < end;)
		seen = itest_int(t->admin, "SELECT count(*) FROM pg_stat_activity WHERE state = 'active'"
		                           "   AND query LIKE '%%skiplock.maintain%%'"
		                           "   AND pid <> pg_backend_pid()") > 0;
	CHECK_EQ(kill(child, SIGSTOP), 0);
	printf("stopped the maintainer %s its statement ran\n", seen ? "while" : "after");
	stream s;
	pthread_t th;
	stream_start(&s, &th, t->url);
	for (int64_t end = itest_now_ms() + 3000; itest_now_ms() < end;)
		usleep(50000);
	stream_stop(&s, th, "while the maintainer was stopped");
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
}

typedef struct runner {
	itest_ctx *t;
	volatile int done;
	int steps;
} runner;

static void *runner_main(void *p)
{
	runner *r = p;
	r->steps = maintain_all(r->t, "maint-c1");
	r->done = 1;
	return NULL;
}

/* (c) While the first maintainer runs (longer than the 15-second lease
 * would allow a single round), a second one every 200 ms neither waits
 * nor runs, and the lease keeps the first one's token. */
static void a_second_maintainer_does_not_take_over(itest_ctx *t)
{
	skl_client *c = itest_client(t, "itest-maint", true);
	skl_client_close(c);
	setting(t, NULL);
	runner r = {.t = t};
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, runner_main, &r), 0);
	while (!r.done && itest_int(t->admin, "SELECT count(*) FROM skiplock.leases WHERE name ="
	                                      " 'skiplock.maintenance' AND owner = 'maint-c1'"
	                                      " AND expires_at > clock_timestamp()") == 0)
		usleep(10000);
	long long token = itest_int(t->admin, "SELECT fencing FROM skiplock.leases"
	                                      " WHERE name = 'skiplock.maintenance'");
	skl_client *b = itest_client(t, "maint-c2", false);
	int tries = 0;
	int64_t longest = 0;
	while (!r.done) {
		skl_maintenance m;
		bool ran = true;
		skl_error err;
		int64_t t0 = itest_now_ms();
		skl_rc rc = skl_maintain(b, "maint-c2", 1000000, NULL, NULL, &m, &ran, &err);
		int64_t ms = itest_now_ms() - t0;
		if (rc != SKL_OK)
			itest_fail(__FILE__, __LINE__, "second maintainer: %s", err.message);
		tries++;
		longest = ms > longest ? ms : longest;
		if (r.done) /* it may have run after the first released the lease */
			break;
		CHECK(!ran);
		CHECK_EQ(itest_int(t->admin, "SELECT fencing FROM skiplock.leases"
		                             " WHERE name = 'skiplock.maintenance'"), token);
		usleep(200000);
	}
	pthread_join(th, NULL);
	printf("the first maintainer did %d steps; the second tried %d times, the longest"
	       " try took %lld ms\n", r.steps, tries, (long long)longest);
	CHECK(tries > 0);
	CHECK_INT(<, longest, LATENCY_BOUND_MS);
	rows_moved(t);
	skl_client_close(b);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"completes_flow_during_a_run", completes_flow_during_a_run, 400},
		{"a_stopped_maintainer_blocks_nothing", a_stopped_maintainer_blocks_nothing, 200},
		{"a_second_maintainer_does_not_take_over", a_second_maintainer_does_not_take_over, 400},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
