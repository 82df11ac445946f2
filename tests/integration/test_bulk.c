/*
 * Integration tests of what a bulk action may touch (skiplock/control.h),
 * direct and through PgBouncer: never more jobs than it counted, even when
 * older jobs enter the filter while it runs; with a count's mark, none
 * enqueued after the count, and a refusal when more match up to the mark
 * than were counted; a filter that matches every job only when asked for
 * by name (all), and which filters those are.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "itest.h"
#include "skiplock.h"

static const skl_actor who = {.name = "alice@host", .role = "cli"};

static skl_client *open_client(itest_ctx *t)
{
	return itest_client(t, "itest-bulk", true);
}

static int64_t enqueue(skl_client *c, const char *queue, const char *kind)
{
	skl_enqueue_opts o;
	skl_enqueue_opts_init(&o);
	o.queue = queue;
	skl_error err;
	int64_t id = 0;
	if (skl_enqueue(c, kind, "{}", &o, &id, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "enqueue: %s", err.message);
	return id;
}

typedef struct entering {
	itest_ctx *t;
	int64_t id;                  /* an older job made to match after batch 1 */
	int calls;
} entering;

static bool enter_after_first(const skl_bulk_result *sofar, void *ctx)
{
	entering *e = ctx;
	(void)sofar;
	if (e->calls++ == 0)
		PQclear(itest_sql(e->t->admin, "UPDATE skiplock.finished_jobs SET state = 'discarded'"
		                               " WHERE id = %" PRId64, e->id));
	return true;
}

/* Five discarded jobs counted; after the first batch an older completed
 * job becomes discarded (it enters the filter): the action still changes
 * five jobs, never six. */
static void never_more_than_counted(itest_ctx *t)
{
	skl_client *c = open_client(t);
	PQclear(itest_sql(t->admin,
	                  "INSERT INTO skiplock.finished_jobs (kind, state, attempt, finished_at,"
	                  " expires_at) SELECT 'cap', CASE WHEN i = 1 THEN 'completed' ELSE"
	                  " 'discarded' END, 1, now(), 'infinity' FROM generate_series(1, 6) i"));
	entering e = {.t = t, .id = itest_int(t->admin, "SELECT min(id) FROM skiplock.all_jobs")};
	skl_list_opts f = {.kind = "cap", .state = "discarded"};
	skl_bulk_opts o = {.action = SKL_BULK_RETRY, .filter = &f, .batch = 1,
	                   .progress = enter_after_first, .ctx = &e};
	skl_bulk_result r;
	skl_error err;
	CHECK_EQ(skl_jobs_bulk(c, &o, &who, &r, &err), SKL_OK);
	printf("matched %" PRId64 ", changed %" PRId64 ", batches %d\n", r.matched, r.changed,
	       r.batches);
	CHECK_EQ(r.matched, 5);
	CHECK_EQ(r.changed, 5);
	CHECK_EQ(r.skipped, 0);
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.all_jobs WHERE id = %" PRId64,
	                     e.id), "discarded");
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"
	                             " WHERE state = 'available'"), 5);
	CHECK_EQ(itest_int(t->admin, "SELECT changed FROM skiplock.actions"), 5);
	skl_client_close(c);
}

/* A count's mark: jobs enqueued after it are left alone and counted as
 * newer; more jobs up to the mark than counted: refused, nothing written. */
static void the_count_mark_bounds_the_action(itest_ctx *t)
{
	skl_client *c = open_client(t);
	int64_t first = enqueue(c, "m", "k");
	enqueue(c, "m", "k");
	enqueue(c, "m", "k");
	skl_list_opts f = {.queue = "m"};
	int64_t n = 0, mark = 0;
	skl_error err;
	CHECK_EQ(skl_jobs_count_mark(c, &f, &n, &mark, &err), SKL_OK);
	CHECK_EQ(n, 3);
	CHECK_EQ(mark, itest_int(t->admin, "SELECT max(id) FROM skiplock.jobs"));
	enqueue(c, "m", "k");
	enqueue(c, "m", "k");
	skl_bulk_opts o = {.action = SKL_BULK_CANCEL, .filter = &f, .up_to = mark, .expect = n};
	skl_bulk_result r;
	CHECK_EQ(skl_jobs_bulk(c, &o, &who, &r, &err), SKL_OK);
	CHECK_EQ(r.matched, 3);
	CHECK_EQ(r.changed, 3);
	CHECK_EQ(r.newer, 2);
	CHECK_EQ(r.mark, mark);
	CHECK_STR(itest_text(t->admin, "SELECT string_agg(state, ' ' ORDER BY id)"
	                               " FROM skiplock.all_jobs"),
	          "cancelled cancelled cancelled available available");
	char want[80];
	snprintf(want, sizeof(want), "{\"queue\": \"m\", \"up_to\": %" PRId64 "}", mark);
	CHECK_STR(itest_text(t->admin, "SELECT target::text FROM skiplock.actions"), want);
	/* two available counted; an older one is retried in between: refused */
	skl_list_opts avail = {.queue = "m", .state = "available"};
	CHECK_EQ(skl_jobs_count_mark(c, &avail, &n, &mark, &err), SKL_OK);
	CHECK_EQ(n, 2);
	PQclear(itest_sql(t->admin, "SELECT skiplock.job_retry(%" PRId64 ")", first));
	o = (skl_bulk_opts){.action = SKL_BULK_DISCARD, .filter = &avail, .up_to = mark, .expect = n};
	CHECK_EQ(skl_jobs_bulk(c, &o, &who, &r, &err), SKL_CONFLICT);
	printf("refused: %s\n", err.message);
	CHECK_EQ(r.matched, 3);
	CHECK_EQ(r.action_id, 0);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.actions"), 1);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"
	                             " WHERE state = 'discarded'"), 0);
	/* with ids, a mark is bad input */
	o = (skl_bulk_opts){.action = SKL_BULK_DISCARD, .ids = &first, .nids = 1, .up_to = mark};
	CHECK_EQ(skl_jobs_bulk(c, &o, &who, &r, &err), SKL_INVALID);
	skl_client_close(c);
}

/* Which filters match every job, and that such a filter acts only with
 * all (a dry run counts without). */
static void every_job_only_by_name(itest_ctx *t)
{
	static const struct {
		skl_list_opts f;
		bool narrows;
		const char *why;
	} cases[] = {
		{{0}, false, "no filter"},
		{{.time_field = "created"}, false, "a time field without a bound"},
		{{.payload_contains = "{}"}, false, "an empty payload filter"},
		{{.payload_contains = " [ ] "}, false, "an empty payload filter"},
		{{.time_field = "run", .payload_contains = "{ }"}, false,
		 "a time field without a bound, an empty payload filter"},
		{{.time_field = "created", .from = "1h"}, true, NULL},
		{{.payload_contains = "{\"a\": {}}"}, true, NULL},
		{{.payload_contains = "[1]"}, true, NULL},
		{{.payload_contains = "{"}, true, NULL}, /* not JSON: refused by the check */
		{{.queue = "q", .payload_contains = "{}"}, true, NULL},
		{{.error_contains = " "}, true, NULL},
		{{.state = "available", .time_field = "created"}, true, NULL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *why = "unset";
		CHECK_EQ(skl_list_opts_narrows(&cases[i].f, &why), cases[i].narrows);
		if (cases[i].why)
			CHECK_STR(why, cases[i].why);
		else
			CHECK(why == NULL);
	}
	CHECK(!skl_list_opts_narrows(NULL, NULL));
	skl_client *c = open_client(t);
	enqueue(c, "a", "k");
	enqueue(c, "b", "k");
	skl_list_opts f = {.time_field = "created"};
	skl_bulk_opts o = {.action = SKL_BULK_CANCEL, .filter = &f};
	skl_bulk_result r;
	skl_error err;
	CHECK_EQ(skl_jobs_bulk(c, &o, &who, &r, &err), SKL_INVALID);
	printf("refused: %s\n", err.message);
	CHECK(strstr(err.message, "the filter matches every job (a time field without a bound)"));
	o.filter = NULL;
	CHECK_EQ(skl_jobs_bulk(c, &o, &who, &r, &err), SKL_INVALID);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.actions"), 0);
	o.dry_run = true;
	CHECK_EQ(skl_jobs_bulk(c, &o, &who, &r, &err), SKL_OK);
	CHECK_EQ(r.matched, 2);
	o = (skl_bulk_opts){.action = SKL_BULK_CANCEL, .filter = &f, .all = true};
	CHECK_EQ(skl_jobs_bulk(c, &o, &who, &r, &err), SKL_OK);
	CHECK_EQ(r.changed, 2);
	CHECK_STR(itest_text(t->admin, "SELECT target::text FROM skiplock.actions"),
	          "{\"all\": true, \"time_field\": \"created\"}");
	skl_client_close(c);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"never_more_than_counted", never_more_than_counted, 30},
		{"the_count_mark_bounds_the_action", the_count_mark_bounds_the_action, 30},
		{"every_job_only_by_name", every_job_only_by_name, 30},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
