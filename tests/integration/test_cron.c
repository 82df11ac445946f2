/*
 * Integration tests of cron schedules, direct and through PgBouncer: the
 * schedules table and its operations, three worker processes evaluating
 * one minutely schedule over 30 simulated minutes (exactly 30 jobs), the
 * catch-up policies after a simulated two-hour downtime, pause and resume,
 * a DST day through the database, schedules that cannot be evaluated, and
 * the plan of the tick's statement.  Simulated instants are passed as
 * `at`, so no test waits for real minutes.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coord/cron_int.h"
#include "itest.h"
#include "skiplock.h"

/* A fixed instant in the future of any real clock: simulated ticks never
 * depend on when the test runs. */
#define T0 "2031-01-06T00:00:00Z"

static skl_client *open_client(itest_ctx *t, bool install)
{
	return itest_client(t, "itest-cron", install);
}

static int64_t T(const char *iso)
{
	int64_t v = 0;
	if (!skl__cron_time_parse(iso, &v))
		itest_fail(__FILE__, __LINE__, "test bug: bad time %s", iso);
	return v;
}

/* ISO text of T0 + seconds (a static buffer per call site is enough). */
static const char *at(int64_t seconds, char *buf)
{
	skl_cron_format_utc(T(T0) + seconds, buf);
	return buf;
}

static void add(skl_client *c, const char *name, const char *expr, const char *zone,
                skl_catch_up cu, const char *when)
{
	skl_schedule_spec s = {.name = name, .expression = expr, .zone = zone, .kind = "tick",
	                       .payload = "{\"from\": \"cron\"}", .catch_up = cu};
	skl_error err;
	if (skl_cron_add(c, &s, when, NULL, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "add %s: %s", name, err.message);
}

static skl_cron_tick_result tick(skl_client *c, const char *when, int bound)
{
	skl_cron_tick_opts o = {.at = when, .catch_up_bound = bound};
	skl_cron_tick_result r;
	skl_error err;
	if (skl_cron_tick(c, &o, &r, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "tick at %s: %s", when, err.message);
	return r;
}

static long long jobs_of(itest_ctx *t, const char *name)
{
	return itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE unique_key LIKE "
	                           "'cron:%s:%%'", name);
}

/* ---- the table and its operations ---- */

static void add_list_pause_resume_remove(itest_ctx *t)
{
	skl_client *c = open_client(t, true);
	char b[SKL_CRON_TIME_LEN];
	skl_schedule_spec s = {.name = "nightly", .expression = "30 2 * * *",
	                       .zone = "Europe/Moscow", .kind = "report", .payload = "{\"n\": 1}",
	                       .queue = "reports", .priority = 4, .max_attempts = 3,
	                       .catch_up = SKL_CATCH_UP_ALL};
	int64_t next = 0;
	skl_error err;
	CHECK_EQ(skl_cron_add(c, &s, T0, &next, &err), SKL_OK);
	CHECK_STR(at(next - T(T0), b), "2031-01-06T23:30:00Z"); /* 02:30 MSK (+3) */
	s.expression = "* * * * *";
	CHECK_EQ(skl_cron_add(c, &s, T0, &next, &err), SKL_CONFLICT);
	CHECK_STR(err.message, "schedule \"nightly\" already exists");
	CHECK_STR(itest_text(t->admin, "SELECT expression FROM skiplock.schedules"), "30 2 * * *");
	s = (skl_schedule_spec){.name = "bad", .expression = "* * * * *", .zone = "Mars/Base",
	                        .kind = "k"};
	CHECK_EQ(skl_cron_add(c, &s, NULL, NULL, &err), SKL_INVALID);
	s.zone = NULL;
	s.expression = "61 * * * *";
	CHECK_EQ(skl_cron_add(c, &s, NULL, NULL, &err), SKL_INVALID);
	CHECK(strstr(err.message, "minute field, character 1") != NULL);
	s.expression = "@hourly";
	s.payload = "{\"a\":";
	CHECK_EQ(skl_cron_add(c, &s, NULL, NULL, &err), SKL_INVALID);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.schedules"), 1);
	add(c, "hourly", "@hourly", NULL, SKL_CATCH_UP_LATEST, T0);
	skl_schedule_info *list = NULL;
	size_t n = 0;
	CHECK_EQ(skl_cron_list(c, &list, &n, &err), SKL_OK);
	CHECK_EQ(n, 2);
	CHECK_STR(list[0].name, "hourly");
	CHECK_STR(list[1].name, "nightly");
	CHECK_STR(list[1].zone, "Europe/Moscow");
	CHECK_STR(list[1].queue, "reports");
	CHECK_STR(list[1].payload, "{\"n\": 1}");
	CHECK_EQ(list[1].priority, 4);
	CHECK_EQ(list[1].max_attempts, 3);
	CHECK_EQ(list[1].catch_up, SKL_CATCH_UP_ALL);
	CHECK(list[1].enabled && list[1].has_next_fire && !list[1].has_last_fire);
	CHECK_STR(at(list[1].next_fire - T(T0), b), "2031-01-06T23:30:00Z");
	CHECK_EQ(list[1].created_at, T(T0));
	skl_schedule_info_free(list, n);
	CHECK_EQ(skl_cron_pause(c, "nightly", &err), SKL_OK);
	CHECK_EQ(skl_cron_pause(c, "nightly", &err), SKL_OK);
	CHECK_EQ(skl_cron_pause(c, "nope", &err), SKL_EMPTY);
	CHECK_STR(err.message, "no schedule \"nope\"");
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.schedules WHERE enabled"), 1);
	CHECK_EQ(skl_cron_resume(c, "nightly", T0, &err), SKL_OK);
	CHECK_EQ(skl_cron_resume(c, "nightly", T0, &err), SKL_OK);
	CHECK_EQ(skl_cron_resume(c, "nope", T0, &err), SKL_EMPTY);
	CHECK_EQ(skl_cron_remove(c, "hourly", &err), SKL_OK);
	CHECK_EQ(skl_cron_remove(c, "hourly", &err), SKL_EMPTY);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.schedules"), 1);
	skl_client_close(c);
	itest_no_leftovers(t);
}

/* ---- three workers, one minutely schedule, 30 simulated minutes ---- */

enum { WORKERS = 3, MINUTES = 30 };

typedef struct sim_worker {
	pid_t pid;
	int go[2], done[2];
} sim_worker;

/* A worker process: for each minute the parent announces, ticks at two
 * instants within it (offsets differ per worker), then reports. */
static void sim_worker_main(itest_ctx *t, int id, int go, int done)
{
	skl_client *c = open_client(t, false);
	int fired = 0, lost = 0, minute;
	while (read(go, &minute, sizeof(minute)) == (ssize_t)sizeof(minute) && minute > 0) {
		for (int k = 0; k < 2; k++) {
			char b[SKL_CRON_TIME_LEN];
			skl_cron_tick_result r = tick(c, at(minute * 60 + k * 20 + id * 3, b), 0);
			fired += r.fired;
			lost += r.lost;
		}
		if (write(done, &fired, sizeof(fired)) != (ssize_t)sizeof(fired))
			_exit(1);
	}
	int counts[2] = {fired, lost};
	if (write(done, counts, sizeof(counts)) != (ssize_t)sizeof(counts))
		_exit(1);
	skl_client_close(c);
	_exit(0);
}

static void sim_start(itest_ctx *t, sim_worker *w, int id)
{
	CHECK_EQ(pipe(w->go), 0);
	CHECK_EQ(pipe(w->done), 0);
	w->pid = fork();
	CHECK(w->pid >= 0);
	if (w->pid == 0) {
		close(w->go[1]);
		close(w->done[0]);
		sim_worker_main(t, id, w->go[0], w->done[1]);
	}
	close(w->go[0]);
	close(w->done[1]);
}

static void read_exact(int fd, void *buf, size_t n)
{
	ssize_t got = read(fd, buf, n); /* the alarm of the case bounds the wait */
	CHECK_EQ(got, (ssize_t)n);
}

static void check_minutely_jobs(itest_ctx *t, const char *name, int minutes)
{
	CHECK_EQ(jobs_of(t, name), minutes);
	/* one job per fire time: keys and run_at are T0 + 1..minutes minutes */
	CHECK_EQ(itest_int(t->admin,
	                   "SELECT count(*) FROM skiplock.all_jobs j JOIN generate_series(1, %d) m ON"
	                   " j.unique_key = 'cron:%s:' || to_char((timestamptz '" T0 "' + m * interval"
	                   " '1 minute') AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
	                   " AND j.run_at = timestamptz '" T0 "' + m * interval '1 minute'"
	                   " AND j.kind = 'tick' AND j.payload = '{\"from\": \"cron\"}'",
	                   minutes, name), minutes);
	CHECK_EQ(itest_int(t->admin, "SELECT count(DISTINCT unique_key) FROM skiplock.all_jobs"),
	         itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"));
}

static void three_workers_thirty_minutes(itest_ctx *t)
{
	skl_client *c = open_client(t, true);
	add(c, "every-minute", "* * * * *", NULL, SKL_CATCH_UP_LATEST, T0);
	sim_worker w[WORKERS];
	for (int i = 0; i < WORKERS; i++)
		sim_start(t, &w[i], i);
	for (int minute = 1; minute <= MINUTES + 1; minute++) {
		int msg = minute <= MINUTES ? minute : 0, ack;
		for (int i = 0; i < WORKERS; i++)
			CHECK_EQ(write(w[i].go[1], &msg, sizeof(msg)), (ssize_t)sizeof(msg));
		for (int i = 0; i < WORKERS && msg; i++)
			read_exact(w[i].done[0], &ack, sizeof(ack));
	}
	int fired = 0, lost = 0;
	for (int i = 0; i < WORKERS; i++) {
		int counts[2];
		read_exact(w[i].done[0], counts, sizeof(counts));
		fired += counts[0];
		lost += counts[1];
		int st = 0;
		waitpid(w[i].pid, &st, 0);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	printf("  %d evaluations fired, %d found the schedule already moved\n", fired, lost);
	CHECK_EQ(fired, MINUTES);
	check_minutely_jobs(t, "every-minute", MINUTES);
	char b[SKL_CRON_TIME_LEN];
	CHECK_STR(itest_text(t->admin, "SELECT to_char(last_fire AT TIME ZONE 'UTC', "
	                               "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM skiplock.schedules"),
	          at(MINUTES * 60, b));
	skl_client_close(c);
	itest_no_leftovers(t);
}

/* The same without lockstep: each worker runs through the half hour at its
 * own pace (so one is often minutes ahead of another); with catch-up all,
 * every fire time still becomes exactly one job. */
static void free_running_workers_catch_up_all(itest_ctx *t)
{
	skl_client *c = open_client(t, true);
	add(c, "every-minute", "* * * * *", NULL, SKL_CATCH_UP_ALL, T0);
	pid_t pids[WORKERS];
	for (int i = 0; i < WORKERS; i++) {
		pids[i] = fork();
		CHECK(pids[i] >= 0);
		if (pids[i] == 0) {
			skl_client *wc = open_client(t, false);
			for (int s = 30 + i * 7; s <= MINUTES * 60 + 30; s += 23 + i * 11) {
				char b[SKL_CRON_TIME_LEN];
				tick(wc, at(s, b), 0);
			}
			skl_client_close(wc);
			_exit(0);
		}
	}
	for (int i = 0; i < WORKERS; i++) {
		int st = 0;
		waitpid(pids[i], &st, 0);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	/* A tick that finds the row locked by a peer's evaluation skips it
	 * (the peer may be at an earlier instant), so the last fire time may
	 * be left to a later tick, as it is in a fleet that keeps ticking:
	 * one more, after the others, at the end of the half hour. */
	char b[SKL_CRON_TIME_LEN];
	tick(c, at(MINUTES * 60 + 30, b), 0);
	check_minutely_jobs(t, "every-minute", MINUTES);
	skl_client_close(c);
	itest_no_leftovers(t);
}

/* ---- catch-up after downtime ---- */

static void catch_up_after_two_hours_down(itest_ctx *t)
{
	skl_client *c = open_client(t, true);
	add(c, "none", "* * * * *", NULL, SKL_CATCH_UP_NONE, T0);
	add(c, "latest", "* * * * *", NULL, SKL_CATCH_UP_LATEST, T0);
	add(c, "all", "* * * * *", NULL, SKL_CATCH_UP_ALL, T0);
	char b[SKL_CRON_TIME_LEN];
	skl_cron_tick_result r = tick(c, at(65, b), 0); /* on time: one job each */
	CHECK_EQ(r.fired, 3);
	CHECK_EQ(r.behind, 0);
	CHECK_EQ(r.enqueued, 3);
	/* down from T0+1m05s to T0+2h1m05s: fire times T0+2m .. T0+2h1m missed */
	r = tick(c, at(2 * 3600 + 65, b), 200);
	CHECK_EQ(r.fired, 3);
	CHECK_EQ(r.behind, 3);
	CHECK_EQ(jobs_of(t, "none") - 1, 0);
	CHECK_EQ(jobs_of(t, "latest") - 1, 1);
	CHECK_EQ(jobs_of(t, "all") - 1, 120);
	CHECK_STR(itest_text(t->admin, "SELECT unique_key FROM skiplock.all_jobs WHERE unique_key LIKE "
	                               "'cron:latest:%%' ORDER BY run_at DESC LIMIT 1"),
	          "cron:latest:2031-01-06T02:01:00Z");
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE unique_key LIKE "
	                             "'cron:all:%%' AND run_at BETWEEN timestamptz '" T0 "' + "
	                             "interval '2 minutes' AND timestamptz '" T0 "' + interval "
	                             "'121 minutes'"), 120);
	/* every policy is back on schedule: the next minute fires normally */
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.schedules WHERE last_fire = "
	                             "timestamptz '" T0 "' + interval '121 minutes' AND next_fire ="
	                             " timestamptz '" T0 "' + interval '122 minutes'"), 3);
	r = tick(c, at(2 * 3600 + 125, b), 0);
	CHECK_EQ(r.enqueued, 3);
	CHECK_EQ(r.behind, 0);
	skl_client_close(c);
}

static void catch_up_all_respects_its_bound(itest_ctx *t)
{
	skl_client *c = open_client(t, true);
	add(c, "all", "* * * * *", NULL, SKL_CATCH_UP_ALL, T0);
	char b[SKL_CRON_TIME_LEN];
	skl_cron_tick_result r = tick(c, at(2 * 3600 + 5, b), 50);
	CHECK_EQ(r.behind, 1);
	CHECK_EQ(r.enqueued, 50);
	CHECK_EQ(jobs_of(t, "all"), 50);
	/* the newest 50: T0+71m .. T0+120m; older ones are skipped for good */
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE run_at BETWEEN "
	                             "timestamptz '" T0 "' + interval '71 minutes' AND "
	                             "timestamptz '" T0 "' + interval '120 minutes'"), 50);
	r = tick(c, at(2 * 3600 + 10, b), 50);
	CHECK_EQ(r.due, 0);
	/* the default bound is 100 */
	r = tick(c, at(5 * 3600 + 5, b), 0);
	CHECK_EQ(r.enqueued, 100);
	CHECK_EQ(jobs_of(t, "all"), 150);
	skl_client_close(c);
}

/* ---- pause and resume ---- */

static void pause_skips_and_resume_does_not_burst(itest_ctx *t)
{
	skl_client *c = open_client(t, true);
	add(c, "m", "* * * * *", NULL, SKL_CATCH_UP_ALL, T0);
	char b[SKL_CRON_TIME_LEN];
	skl_error err;
	CHECK_EQ(tick(c, at(65, b), 0).enqueued, 1);
	CHECK_EQ(skl_cron_pause(c, "m", &err), SKL_OK);
	CHECK_EQ(tick(c, at(600, b), 0).due, 0);
	CHECK_EQ(skl_cron_resume(c, "m", at(30 * 60 + 10, b), &err), SKL_OK);
	skl_cron_tick_result r = tick(c, at(30 * 60 + 20, b), 0);
	CHECK_EQ(r.due, 0);
	CHECK_EQ(tick(c, at(31 * 60 + 5, b), 0).enqueued, 1);
	CHECK_EQ(jobs_of(t, "m"), 2);
	CHECK_STR(itest_text(t->admin, "SELECT string_agg(unique_key, ' ' ORDER BY run_at) FROM "
	                               "skiplock.jobs"),
	          "cron:m:2031-01-06T00:01:00Z cron:m:2031-01-06T00:31:00Z");
	skl_client_close(c);
}

/* ---- zones through the database ---- */

static void dst_day_through_the_database(itest_ctx *t)
{
	/* the server's own TimeZone setting must not matter */
	PQclear(itest_sql(t->admin, "ALTER DATABASE \"%s\" SET timezone = 'Asia/Tokyo'", t->dbname));
	skl_client *c = open_client(t, true);
	add(c, "ny", "30 2 * * *", "America/New_York", SKL_CATCH_UP_LATEST, "2024-03-08T12:00:00Z");
	const char *days[] = {"2024-03-09T07:35:00Z", "2024-03-10T07:05:00Z", "2024-03-11T06:35:00Z"};
	for (size_t i = 0; i < 3; i++)
		CHECK_EQ(tick(c, days[i], 0).enqueued, 1);
	CHECK_STR(itest_text(t->admin, "SELECT string_agg(unique_key, ' ' ORDER BY run_at) FROM "
	                               "skiplock.jobs WHERE unique_key LIKE 'cron:ny:%%'"),
	          "cron:ny:2024-03-09T07:30:00Z cron:ny:2024-03-10T07:00:00Z "
	          "cron:ny:2024-03-11T06:30:00Z");
	skl_error err;
	CHECK_EQ(skl_cron_remove(c, "ny", &err), SKL_OK);
	add(c, "berlin", "*/15 * * * *", "Europe/Berlin", SKL_CATCH_UP_LATEST,
	    "2024-10-27T00:20:00Z");
	const char *ticks[] = {"2024-10-27T00:30:05Z", "2024-10-27T00:45:05Z", "2024-10-27T01:00:05Z",
	                       "2024-10-27T01:15:05Z", "2024-10-27T01:30:05Z", "2024-10-27T01:45:05Z",
	                       "2024-10-27T02:00:05Z"};
	for (size_t i = 0; i < sizeof(ticks) / sizeof(ticks[0]); i++)
		tick(c, ticks[i], 0);
	CHECK_STR(itest_text(t->admin, "SELECT string_agg(unique_key, ' ' ORDER BY run_at) FROM "
	                               "skiplock.jobs WHERE unique_key LIKE 'cron:berlin:%%'"),
	          "cron:berlin:2024-10-27T00:30:00Z cron:berlin:2024-10-27T00:45:00Z "
	          "cron:berlin:2024-10-27T02:00:00Z");
	skl_client_close(c);
}

/* ---- a schedule that cannot be evaluated does not stop the others ---- */

static void unusable_schedule_is_skipped(itest_ctx *t)
{
	skl_client *c = open_client(t, true);
	add(c, "good", "* * * * *", NULL, SKL_CATCH_UP_LATEST, T0);
	PQclear(itest_sql(t->admin,
	                  "INSERT INTO skiplock.schedules (name, expression, zone, kind, next_fire,"
	                  " created_at) VALUES ('bad-zone', '* * * * *', 'Atlantis/Capital', 'k',"
	                  " timestamptz '" T0 "', timestamptz '" T0 "'), ('bad-expr', '* * *', 'UTC',"
	                  " 'k', timestamptz '" T0 "', timestamptz '" T0 "'),"
	                  " ('bad-payload', '* * * * *', 'UTC', 'k', timestamptz '" T0 "',"
	                  "  timestamptz '" T0 "')"));
	/* a payload over the enqueue limit fails the tick's one batch: each
	 * schedule is then fired alone, and only that one fails */
	PQclear(itest_sql(t->admin, "UPDATE skiplock.schedules SET payload = jsonb_build_object('x',"
	                            " repeat('y', 1100000)) WHERE name = 'bad-payload'"));
	char b[SKL_CRON_TIME_LEN];
	skl_cron_tick_result r = tick(c, at(65, b), 0);
	CHECK_EQ(r.due, 4);
	CHECK_EQ(r.failed, 3);
	CHECK_EQ(r.fired, 1);
	CHECK(strstr(r.failure, "schedule \"bad-") != NULL);
	CHECK_EQ(jobs_of(t, "good"), 1);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"), 1);
	/* the failed schedule did not move past a fire time it did not enqueue */
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.schedules"
	                             " WHERE name = 'bad-payload' AND last_fire IS NULL"), 1);
	skl_client_close(c);
}

/* ---- the tick reads only due schedules ---- */

/* 50,000 schedules, 10 of them due: skiplock.cron_tick's statements use
 * the partial index on next_fire and never scan the table (auto_explain
 * of the call), and the tick fires exactly the 10. */
static void due_plan_uses_partial_index(itest_ctx *t)
{
	skl_client *c = open_client(t, true);
	PQclear(itest_sql(t->admin,
	                  "INSERT INTO skiplock.schedules (name, expression, kind, enabled, next_fire,"
	                  "                                created_at)"
	                  " SELECT 's' || g, '* * * * *', 'k', g %% 10 <> 0,"
	                  "        CASE WHEN g %% 5000 = 1 THEN now() - interval '30 seconds'"
	                  "             ELSE now() + g * interval '1 minute' END,"
	                  "        now() - interval '70 seconds'"
	                  "   FROM generate_series(1, 50000) g;"
	                  " ANALYZE skiplock.schedules"));
	itest_call_plans_use(t->admin, "schedules_due_idx", "Seq Scan on schedules",
	                     "SELECT * FROM skiplock.cron_tick()");
	int64_t start = itest_now_ms();
	skl_cron_tick_result res = tick(c, NULL, 0);
	CHECK_EQ(res.due, 10);
	CHECK_EQ(res.fired, 10);
	CHECK_EQ(res.enqueued, 10);
	printf("  tick over 50000 schedules, 10 due: %lld ms\n",
	       (long long)(itest_now_ms() - start));
	skl_client_close(c);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"add_list_pause_resume_remove", add_list_pause_resume_remove, 30},
		{"three_workers_thirty_minutes", three_workers_thirty_minutes, 120},
		{"free_running_workers_catch_up_all", free_running_workers_catch_up_all, 120},
		{"catch_up_after_two_hours_down", catch_up_after_two_hours_down, 60},
		{"catch_up_all_respects_its_bound", catch_up_all_respects_its_bound, 60},
		{"pause_skips_and_resume_does_not_burst", pause_skips_and_resume_does_not_burst, 30},
		{"dst_day_through_the_database", dst_day_through_the_database, 30},
		{"unusable_schedule_is_skipped", unusable_schedule_is_skipped, 30},
		{"due_plan_uses_partial_index", due_plan_uses_partial_index, 60},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
