/*
 * Integration tests of an operator's fleet-wide actions (skiplock/control.h,
 * sql/0014_control.sql), direct and through PgBouncer: a paused queue or
 * kind is not claimed (nor probed) and its jobs keep their attempts; bulk
 * retry, cancel and discard by filter race real claimers and never act on
 * a job twice; a discarded running job's outcome is fenced out; bad input
 * writes nothing; run-now leaves the schedule's next fire alone; every
 * action writes one row of the log; the list and the count share one
 * filter, planned on the id indexes.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"
#include "skiplock.h"

static const skl_actor who = {.name = "alice@host", .role = "cli"};

static skl_client *open_client(itest_ctx *t)
{
	return itest_client(t, "itest-control", true);
}

static void enqueue_n(skl_client *c, const char *queue, const char *kind, int n)
{
	skl_enqueue_opts o;
	skl_enqueue_opts_init(&o);
	o.queue = queue;
	skl_error err;
	for (int i = 0; i < n; i++) {
		int64_t id;
		if (skl_enqueue(c, kind, "{}", &o, &id, &err) != SKL_OK)
			itest_fail(__FILE__, __LINE__, "enqueue: %s", err.message);
	}
}

/* Claims up to limit jobs of kind (every queue), completes none; returns
 * how many were claimed and how many of them were in queue. */
static size_t claim_count(skl_client *c, const char *kind, const char *queue, size_t *in_queue)
{
	const char *kinds[] = {kind};
	skl_claim_opts o = {.kinds = kinds, .nkinds = 1, .limit = 100, .lease_ms = 30000,
	                    .owner = "itest"};
	skl_job *jobs = NULL;
	size_t n = 0;
	skl_error err;
	skl_rc rc = skl_claim(c, &o, &jobs, &n, &err);
	if (rc != SKL_OK && rc != SKL_EMPTY)
		itest_fail(__FILE__, __LINE__, "claim: %s", err.message);
	*in_queue = 0;
	for (size_t i = 0; i < n; i++)
		*in_queue += queue && strcmp(jobs[i].queue, queue) == 0;
	skl_jobs_free(jobs, n);
	return n;
}

static long long actions(itest_ctx *t, const char *where)
{
	return itest_int(t->admin, "SELECT count(*) FROM skiplock.actions WHERE %s", where);
}

static void paused_queue_is_not_claimed(itest_ctx *t)
{
	skl_client *c = open_client(t);
	enqueue_n(c, "mail", "send", 3);
	enqueue_n(c, "other", "send", 1);
	bool changed = false;
	skl_error err;
	CHECK_EQ(skl_pause(c, "mail", NULL, &who, &changed, &err), SKL_OK);
	CHECK(changed);
	CHECK_EQ(skl_pause(c, "mail", NULL, &who, &changed, &err), SKL_OK);
	CHECK(!changed);
	size_t in_mail = 9;
	CHECK_EQ(claim_count(c, "send", "mail", &in_mail), 1);
	CHECK_EQ(in_mail, 0);
	CHECK_EQ(itest_int(t->admin, "SELECT max(attempt) FROM skiplock.jobs WHERE queue = 'mail'"),
	         0);
	skl_pause_info *p = NULL;
	size_t np = 0;
	CHECK_EQ(skl_pauses_list(c, &p, &np, &err), SKL_OK);
	CHECK_EQ(np, 1);
	CHECK_STR(p[0].queue, "mail");
	CHECK_STR(p[0].kind, "*");
	CHECK_STR(p[0].paused_by, "alice@host");
	skl_pauses_free(p, np);
	CHECK_EQ(skl_resume(c, "mail", NULL, &who, &changed, &err), SKL_OK);
	CHECK(changed);
	CHECK_EQ(claim_count(c, "send", "mail", &in_mail), 3);
	CHECK_EQ(in_mail, 3);
	CHECK_EQ(actions(t, "action = 'pause' AND target = '{\"queue\": \"mail\"}'"), 2);
	CHECK_EQ(actions(t, "action = 'pause' AND changed = 1 AND actor = 'alice@host'"), 1);
	CHECK_EQ(actions(t, "action = 'resume' AND changed = 1 AND role = 'cli'"), 1);
	skl_client_close(c);
}

/* A paused kind is neither claimed nor admitted as a breaker probe. */
static void paused_kind_is_not_claimed_nor_probed(itest_ctx *t)
{
	skl_client *c = open_client(t);
	enqueue_n(c, "default", "charge", 2);
	skl_error err;
	CHECK_EQ(skl_pause(c, NULL, "charge", &who, NULL, &err), SKL_OK);
	size_t q;
	CHECK_EQ(claim_count(c, "charge", NULL, &q), 0);
	/* an open breaker whose open interval is over would admit a probe */
	PQclear(itest_sql(t->admin, "INSERT INTO skiplock.breakers (kind, state, open_until)"
	                            " VALUES ('charge', 'open', now() - interval '1 second')"));
	CHECK_EQ(claim_count(c, "charge", NULL, &q), 0);
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.breakers"), "open");
	CHECK_EQ(itest_int(t->admin, "SELECT max(attempt) FROM skiplock.jobs"), 0);
	/* a paused queue's jobs are not probes either */
	CHECK_EQ(skl_resume(c, NULL, "charge", &who, NULL, &err), SKL_OK);
	CHECK_EQ(skl_pause(c, "default", NULL, &who, NULL, &err), SKL_OK);
	CHECK_EQ(claim_count(c, "charge", NULL, &q), 0);
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.breakers"), "open");
	CHECK_EQ(skl_resume(c, "default", NULL, &who, NULL, &err), SKL_OK);
	CHECK_EQ(claim_count(c, "charge", NULL, &q), 1); /* the probe */
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.breakers"), "half_open");
	skl_client_close(c);
}

/* ---- a claimer racing the bulk actions ---- */

typedef struct claimer {
	itest_ctx *t;
	const char *kind;
	atomic_bool stop;
	atomic_long completed, refused;
} claimer;

static void *claimer_main(void *arg)
{
	claimer *w = arg;
	skl_client *c = itest_client(w->t, "itest-claimer", false);
	const char *kinds[] = {w->kind};
	skl_claim_opts o = {.kinds = kinds, .nkinds = 1, .limit = 20, .lease_ms = 30000,
	                    .owner = "claimer"};
	while (!atomic_load(&w->stop)) {
		skl_job *jobs = NULL;
		size_t n = 0;
		skl_error err;
		skl_rc rc = skl_claim(c, &o, &jobs, &n, &err);
		if (rc != SKL_OK && rc != SKL_EMPTY)
			itest_fail(__FILE__, __LINE__, "claim: %s", err.message);
		skl_outcome outs[20];
		bool ok[20];
		if (n > 0)
			usleep(3000); /* the handlers run: an operator may act meanwhile */
		for (size_t i = 0; i < n; i++)
			outs[i] = (skl_outcome){.id = jobs[i].id, .fencing = jobs[i].fencing};
		if (n > 0 && skl_record(c, outs, n, ok, &err) != SKL_OK)
			itest_fail(__FILE__, __LINE__, "record: %s", err.message);
		for (size_t i = 0; i < n; i++)
			atomic_fetch_add(ok[i] ? &w->completed : &w->refused, 1);
		skl_jobs_free(jobs, n);
	}
	skl_client_close(c);
	return NULL;
}

static void wait_for(itest_ctx *t, const char *sql, long long want, int seconds)
{
	for (int i = 0; i < seconds * 20; i++) {
		if (itest_int(t->admin, "%s", sql) == want)
			return;
		usleep(50000);
	}
	CHECK_EQ(itest_int(t->admin, "%s", sql), want);
}

static void bulk_retry_races_a_worker(itest_ctx *t)
{
	skl_client *c = open_client(t);
	PQclear(itest_sql(t->admin,
	                  "INSERT INTO skiplock.finished_jobs (kind, state, attempt, max_attempts,"
	                  " errors, finished_at, expires_at)"
	                  " SELECT 'bulk', 'discarded', 1, 1, '[{\"attempt\": 1, \"error\": \"boom\"}]',"
	                  " now(), 'infinity' FROM generate_series(1, 500)"));
	claimer w = {.t = t, .kind = "bulk"};
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, claimer_main, &w), 0);
	skl_list_opts f = {.kind = "bulk", .state = "discarded", .error_contains = "BOOM"};
	skl_bulk_opts o = {.action = SKL_BULK_RETRY, .filter = &f, .batch = 100};
	skl_bulk_result r;
	skl_error err;
	CHECK_EQ(skl_jobs_bulk(c, &o, &who, &r, &err), SKL_OK);
	CHECK_EQ(r.matched, 500);
	CHECK_EQ(r.changed, 500);
	CHECK_EQ(r.skipped, 0);
	CHECK_EQ(r.batches, 5);
	wait_for(t, "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed'", 500, 60);
	atomic_store(&w.stop, true);
	pthread_join(th, NULL);
	CHECK_EQ(atomic_load(&w.completed), 500);
	CHECK_EQ(atomic_load(&w.refused), 0);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"), 500);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE attempt = 2"), 500);
	CHECK_EQ(actions(t, "action = 'retry' AND matched = 500 AND changed = 500"), 1);
	CHECK_STR(itest_text(t->admin, "SELECT target::text FROM skiplock.actions"),
	          "{\"kind\": \"bulk\", \"error\": \"BOOM\", \"state\": \"discarded\"}");
	skl_client_close(c);
}

static void bulk_cancel_races_a_worker(itest_ctx *t)
{
	skl_client *c = open_client(t);
	enqueue_n(c, "default", "race", 300);
	claimer w = {.t = t, .kind = "race"};
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, claimer_main, &w), 0);
	usleep(20000);
	skl_list_opts f = {.kind = "race"};
	skl_bulk_opts o = {.action = SKL_BULK_CANCEL, .filter = &f, .batch = 7};
	skl_bulk_result r;
	skl_error err;
	CHECK_EQ(skl_jobs_bulk(c, &o, &who, &r, &err), SKL_OK);
	atomic_store(&w.stop, true);
	pthread_join(th, NULL);
	long long completed = itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"
	                                          " WHERE state = 'completed'");
	long long cancelled = itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"
	                                          " WHERE state = 'cancelled'");
	printf("matched %" PRId64 ", cancelled %" PRId64 ", completed %lld, refused %ld\n",
	       r.matched, r.changed, completed, atomic_load(&w.refused));
	CHECK_EQ(r.matched, 300);
	CHECK_EQ(completed + cancelled, 300);
	CHECK_EQ(itest_int(t->admin, "SELECT count(DISTINCT id) FROM skiplock.all_jobs"), 300);
	CHECK_EQ(cancelled, r.changed);
	CHECK_EQ(r.skipped, 300 - r.changed);
	CHECK_EQ(atomic_load(&w.completed), completed); /* a cancelled job's outcome was refused */
	CHECK_EQ(actions(t, "action = 'cancel' AND matched = 300"), 1);
	CHECK_EQ(itest_int(t->admin, "SELECT changed FROM skiplock.actions"), r.changed);
	skl_client_close(c);
}

/* A running job discarded by id: the worker's outcome is refused. */
static void discard_fences_a_running_claim(itest_ctx *t)
{
	skl_client *c = open_client(t);
	enqueue_n(c, "default", "slow", 1);
	const char *kinds[] = {"slow"};
	skl_claim_opts co = {.kinds = kinds, .nkinds = 1, .limit = 1, .lease_ms = 30000,
	                     .owner = "w"};
	skl_job *jobs = NULL;
	size_t n = 0;
	skl_error err;
	CHECK_EQ(skl_claim(c, &co, &jobs, &n, &err), SKL_OK);
	int64_t ids[] = {jobs[0].id, jobs[0].id, 999999};
	skl_bulk_opts o = {.action = SKL_BULK_DISCARD, .ids = ids, .nids = 3};
	skl_bulk_result r;
	CHECK_EQ(skl_jobs_bulk(c, &o, &who, &r, &err), SKL_OK);
	CHECK_EQ(r.matched, 1);
	CHECK_EQ(r.changed, 1);
	skl_outcome out = {.id = jobs[0].id, .fencing = jobs[0].fencing};
	bool ok = true;
	CHECK_EQ(skl_record(c, &out, 1, &ok, &err), SKL_OK);
	CHECK(!ok);
	CHECK_STR(itest_text(t->admin, "SELECT state || ' ' || (fencing > %" PRId64 ")"
	                               " FROM skiplock.all_jobs", jobs[0].fencing), "discarded true");
	char want[64];
	snprintf(want, sizeof(want), "{\"ids\": [999999, %" PRId64 "]}", jobs[0].id);
	CHECK_STR(itest_text(t->admin, "SELECT target::text FROM skiplock.actions"), want);
	skl_jobs_free(jobs, n);
	/* a dry run counts and writes nothing */
	o.dry_run = true;
	CHECK_EQ(skl_jobs_bulk(c, &o, &who, &r, &err), SKL_OK);
	CHECK_EQ(r.matched, 1);
	CHECK_EQ(r.action_id, 0);
	CHECK_EQ(actions(t, "true"), 1);
	skl_client_close(c);
}

static void bad_input_writes_nothing(itest_ctx *t)
{
	skl_client *c = open_client(t);
	enqueue_n(c, "default", "k", 2);
	skl_error err;
	skl_list_opts bad[] = {{.payload_contains = "{"}, {.state = "done"},
	                       {.time_field = "when", .from = "1h"}, {.from = "1h"},
	                       {.time_field = "run", .to = "2026-13-01"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		skl_bulk_opts o = {.action = SKL_BULK_CANCEL, .filter = &bad[i]};
		CHECK_EQ(skl_jobs_bulk(c, &o, &who, NULL, &err), SKL_INVALID);
		int64_t n;
		CHECK_EQ(skl_jobs_count(c, &bad[i], &n, &err), SKL_INVALID);
	}
	skl_bulk_opts o = {.action = SKL_BULK_CANCEL, .batch = 10001};
	CHECK_EQ(skl_jobs_bulk(c, &o, &who, NULL, &err), SKL_INVALID);
	o = (skl_bulk_opts){.action = (skl_bulk_action)7};
	CHECK_EQ(skl_jobs_bulk(c, &o, &who, NULL, &err), SKL_INVALID);
	o = (skl_bulk_opts){.action = SKL_BULK_CANCEL};
	skl_actor nobody = {.name = "", .role = "cli"};
	CHECK_EQ(skl_jobs_bulk(c, &o, &nobody, NULL, &err), SKL_INVALID);
	CHECK_EQ(skl_pause(c, "q", "k", &who, NULL, &err), SKL_INVALID);
	CHECK_EQ(skl_pause(c, NULL, NULL, &who, NULL, &err), SKL_INVALID);
	CHECK_EQ(skl_pause(c, "*", NULL, &who, NULL, &err), SKL_INVALID);
	CHECK_EQ(actions(t, "true"), 0);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.pauses"), 0);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.jobs WHERE state = 'available'"),
	         2);
	skl_client_close(c);
}

static void run_now_leaves_the_schedule_alone(itest_ctx *t)
{
	skl_client *c = open_client(t);
	skl_schedule_spec s = {.name = "nightly", .expression = "0 3 * * *", .kind = "report",
	                       .payload = "{\"full\": true}", .queue = "reports", .priority = 2};
	skl_error err;
	CHECK_EQ(skl_cron_add(c, &s, NULL, NULL, &err), SKL_OK);
	char before[64];
	snprintf(before, sizeof(before), "%s",
	         itest_text(t->admin, "SELECT next_fire || ' ' || coalesce(last_fire::text, '-')"
	                              " FROM skiplock.schedules"));
	int64_t id = 0;
	CHECK_EQ(skl_schedule_run_now(c, "nightly", &who, &id, &err), SKL_OK);
	CHECK(id > 0);
	CHECK_STR(itest_text(t->admin, "SELECT kind || ' ' || queue || ' ' || priority || ' ' ||"
	                               " payload::text || ' ' || state FROM skiplock.jobs WHERE id = %"
	                               PRId64, id), "report reports 2 {\"full\": true} available");
	CHECK_STR(itest_text(t->admin, "SELECT next_fire || ' ' || coalesce(last_fire::text, '-')"
	                               " FROM skiplock.schedules"), before);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.jobs"), 1);
	CHECK_EQ(skl_schedule_run_now(c, "nope", &who, &id, &err), SKL_EMPTY);
	CHECK_EQ(actions(t, "action = 'schedule_run' AND target ->> 'schedule' = 'nightly'"), 1);
	CHECK_EQ(actions(t, "action = 'schedule_add'"), 1); /* skl_cron_add, logged since step 0032 */
	CHECK_EQ(actions(t, "true"), 2);
	/* pause and resume, logged */
	bool changed = false;
	CHECK_EQ(skl_schedule_set_paused(c, "nightly", true, &who, &changed, &err), SKL_OK);
	CHECK(changed);
	CHECK_STR(itest_text(t->admin, "SELECT enabled FROM skiplock.schedules"), "f");
	CHECK_EQ(skl_schedule_set_paused(c, "nightly", false, &who, &changed, &err), SKL_OK);
	CHECK(changed);
	/* a resume skips the fire times that passed while paused (step 0032) */
	CHECK_STR(itest_text(t->admin, "SELECT enabled AND next_fire > now() FROM skiplock.schedules"),
	          "t");
	CHECK_EQ(skl_schedule_set_paused(c, "nope", true, &who, &changed, &err), SKL_EMPTY);
	CHECK_EQ(actions(t, "action IN ('schedule_pause', 'schedule_resume') AND changed = 1"), 2);
	/* breakers, logged */
	CHECK_EQ(skl_breaker_set(c, "report", true, &who, &err), SKL_OK);
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.breakers"), "open");
	CHECK_EQ(skl_breaker_set(c, "report", false, &who, &err), SKL_OK);
	CHECK_EQ(skl_breaker_set(c, "other", false, &who, &err), SKL_EMPTY);
	CHECK_EQ(actions(t, "action IN ('breaker_open', 'breaker_close')"), 2);
	skl_action_info *a = NULL;
	size_t n = 0;
	CHECK_EQ(skl_actions_list(c, 2, 0, &a, &n, &err), SKL_OK);
	CHECK_EQ(n, 2);
	CHECK_STR(a[0].action, "breaker_close");
	CHECK_STR(a[0].target, "{\"breaker\": \"report\"}");
	CHECK_STR(a[1].action, "breaker_open");
	CHECK_STR(a[1].actor, "alice@host");
	int64_t older = a[1].id;
	skl_actions_free(a, n);
	CHECK_EQ(skl_actions_list(c, 0, older, &a, &n, &err), SKL_OK);
	CHECK_EQ(n, 4); /* add, run, pause, resume: closing a breaker that is not there is not logged */
	skl_actions_free(a, n);
	skl_client_close(c);
}

/* The list and the count read one filter (skiplock.jobs_matching), which
 * the planner inlines: newest first along the id indexes. */
static void list_and_count_share_the_filter(itest_ctx *t)
{
	skl_client *c = open_client(t);
	PQclear(itest_sql(t->admin,
	                  "INSERT INTO skiplock.finished_jobs (kind, state, errors, finished_at,"
	                  " expires_at, payload) SELECT 'k', 'completed', CASE WHEN i %% 3 = 0 THEN"
	                  " '[{\"error\": \"Timeout\"}]'::jsonb ELSE '[]' END, now(), 'infinity',"
	                  " jsonb_build_object('n', i %% 7) FROM generate_series(1, 20000) i;"
	                  "INSERT INTO skiplock.jobs (kind, run_at) SELECT 'later', now() + interval"
	                  " '1 day' FROM generate_series(1, 20000);"
	                  "ANALYZE skiplock.jobs; ANALYZE skiplock.finished_jobs"));
	skl_list_opts f = {.error_contains = "timeout", .payload_contains = "{\"n\": 3}",
	                   .limit = 10000};
	int64_t n = 0;
	skl_error err;
	CHECK_EQ(skl_jobs_count(c, &f, &n, &err), SKL_OK);
	skl_job_info *jobs = NULL;
	size_t m = 0;
	CHECK_EQ(skl_jobs_list(c, &f, &jobs, &m, &err), SKL_OK);
	skl_job_info_free(jobs, m);
	CHECK_EQ(n, itest_int(t->admin, "SELECT count(*) FROM generate_series(1, 20000) i"
	                                " WHERE i %% 3 = 0 AND i %% 7 = 3"));
	CHECK_EQ((long long)m, n);
	itest_plan_uses(t->admin, "finished_jobs_forever_id_idx",
	                "SELECT j.id FROM skiplock.jobs_matching(NULL, NULL, NULL, NULL, 'timeout',"
	                " NULL, NULL, NULL, NULL, NULL) j ORDER BY j.id DESC LIMIT 50");
	skl_client_close(c);
}

/* skl_breaker_force writes through the operators' function, as
 * skl_breaker_set does: the state, the breaker's event and the action log. */
static void breaker_force_is_the_logged_path(itest_ctx *t)
{
	skl_client *c = open_client(t);
	skl_error err;
	CHECK_EQ(skl_breaker_force(c, "report", true, &err), SKL_OK);
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.breakers WHERE kind = 'report'"),
	          "open");
	CHECK_EQ(skl_breaker_force(c, "report", false, &err), SKL_OK);
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.breakers WHERE kind = 'report'"),
	          "closed");
	CHECK_EQ(skl_breaker_force(c, "other", false, &err), SKL_EMPTY);
	CHECK_EQ(skl_breaker_force(c, "", true, &err), SKL_INVALID);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.breaker_events"
	                             " WHERE kind = 'report' AND reason LIKE '%% by skl_breaker_force (api)'"),
	         2);
	CHECK_EQ(actions(t, "action IN ('breaker_open', 'breaker_close')"
	                    " AND actor = 'skl_breaker_force' AND role = 'api'"), 2);
	skl_client_close(c);
	itest_no_leftovers(t);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"paused_queue_is_not_claimed", paused_queue_is_not_claimed, 30},
		{"paused_kind_is_not_claimed_nor_probed", paused_kind_is_not_claimed_nor_probed, 30},
		{"bulk_retry_races_a_worker", bulk_retry_races_a_worker, 120},
		{"bulk_cancel_races_a_worker", bulk_cancel_races_a_worker, 120},
		{"discard_fences_a_running_claim", discard_fences_a_running_claim, 30},
		{"bad_input_writes_nothing", bad_input_writes_nothing, 30},
		{"run_now_leaves_the_schedule_alone", run_now_leaves_the_schedule_alone, 30},
		{"list_and_count_share_the_filter", list_and_count_share_the_filter, 90},
		{"breaker_force_is_the_logged_path", breaker_force_is_the_logged_path, 30},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
