/*
 * Integration tests of dependencies between jobs through the C API
 * (skiplock/deps.h, the parents of skl_enqueue; sql/0030_dependencies.sql),
 * direct and through PgBouncer: a child enqueued with parents by id and by
 * unique key keeps every option and waits until the last parent completed;
 * skl_enqueue_bulk_ex says whether it was inserted; a batch's callback
 * runs after all of its jobs with their outcomes counted; an unknown
 * parent is SKL_INVALID with SQLSTATE 23503, and bad input is refused
 * before any statement, nothing written; skl_waits_count tells, per queue,
 * what holds each available job that is not running (sql/0031_waits.sql).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"
#include "skiplock.h"

static skl_client *open_client(itest_ctx *t)
{
	return itest_client(t, "itest-deps", true);
}

static int64_t enqueue_one(skl_client *c, const char *kind, const skl_enqueue_opts *o)
{
	int64_t id = 0;
	skl_error err;
	if (skl_enqueue(c, kind, "{}", o, &id, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "enqueue %s: %s", kind, err.message);
	return id;
}

/* Why job id waits, "-" when it does not ("" when the call failed). */
static const char *waits(skl_client *c, int64_t id, char *buf, size_t cap)
{
	char *reason = NULL;
	skl_error err;
	if (skl_job_waits_for(c, id, &reason, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "waits_for %" PRId64 ": %s", id, err.message);
	snprintf(buf, cap, "%s", reason ? reason : "-");
	skl_free(reason);
	return buf;
}

/* Claims and completes every due job of kind by SQL; returns how many. */
static long long complete_kind(itest_ctx *t, const char *kind)
{
	return itest_int(t->admin, "SELECT count(skiplock.complete(id, fencing))"
	                           " FROM skiplock.claim('t', ARRAY['%s'], NULL, 100)", kind);
}

static void child_waits_for_its_parents(itest_ctx *t)
{
	skl_client *c = open_client(t);
	skl_enqueue_opts o;
	skl_enqueue_opts_init(&o);
	int64_t a = enqueue_one(c, "p.a", &o);
	o.unique_key = "day-1";
	int64_t p = enqueue_one(c, "p.k", &o);
	const int64_t ids[] = {a, a};
	const char *const keys[] = {"day-1"};
	skl_job_spec spec = {.kind = "child", .payload = "{\"n\": 1}",
	                     .opts = {.queue = "q2", .priority = 7, .max_attempts = 3,
	                              .timeout_ms = 1500, .backoff = SKL_BACKOFF_FIXED,
	                              .backoff_base_ms = 250, .backoff_cap_ms = 9000,
	                              .unique_key = "child-1", .depends_on = ids, .ndepends_on = 2,
	                              .depends_on_keys = keys, .ndepends_on_keys = 1}};
	int64_t child = 0;
	skl_enqueued how = SKL_ENQUEUED_UNKNOWN;
	skl_error err;
	CHECK_EQ(skl_enqueue_bulk_ex(c, &spec, 1, &child, &how, &err), SKL_OK);
	CHECK_EQ(how, SKL_ENQUEUED_INSERTED);
	CHECK_STR(itest_text(t->admin, "SELECT concat_ws(',', kind, queue, priority, max_attempts, "
	                               "timeout_ms, backoff, backoff_base_ms, backoff_cap_ms, "
	                               "unique_key, payload->>'n', state, run_at > now()) "
	                               "FROM skiplock.all_jobs WHERE id = %" PRId64, child),
	          "child,q2,7,3,1500,fixed,250,9000,child-1,1,available,t");
	char buf[128];
	CHECK_STR(waits(c, child, buf, sizeof(buf)), "dependencies: 2 of 2 parent(s) not finished");
	/* the key held: the holder's id, not inserted, its parents unchanged */
	int64_t again = 0;
	CHECK_EQ(skl_enqueue_bulk_ex(c, &spec, 1, &again, &how, &err), SKL_OK);
	CHECK_EQ(again, child);
	CHECK_EQ(how, SKL_ENQUEUED_EXISTING);
	CHECK_EQ(complete_kind(t, "p.a"), 1);
	CHECK_STR(waits(c, child, buf, sizeof(buf)), "dependencies: 1 of 2 parent(s) not finished");
	CHECK_EQ(complete_kind(t, "p.k"), 1);
	CHECK_STR(waits(c, child, buf, sizeof(buf)), "due: waiting for a worker");
	CHECK_STR(waits(c, p, buf, sizeof(buf)), "-");       /* completed */
	CHECK_STR(waits(c, 987654321, buf, sizeof(buf)), "-"); /* no such job */
	skl_client_close(c);
	itest_no_leftovers(t);
}

static void batch_callback_after_all(itest_ctx *t)
{
	skl_client *c = open_client(t);
	const char *const payloads[] = {"{\"i\": 1}", NULL, "{\"i\": 3}"};
	skl_batch_spec b = {.kind = "item", .payloads = payloads, .n = 3,
	                    .callback_kind = "invoice", .callback_payload = "{\"invoice\": 7}",
	                    .queue = "billing", .priority = 2, .max_attempts = 4};
	int64_t ids[3] = {0}, cb = 0;
	skl_error err;
	CHECK_EQ(skl_enqueue_batch(c, &b, ids, &cb, &err), SKL_OK);
	CHECK(ids[0] < ids[1] && ids[1] < ids[2] && ids[2] < cb);
	CHECK_STR(itest_text(t->admin, "SELECT string_agg(concat_ws(':', kind, queue, priority, "
	                               "max_attempts, payload), ' ' ORDER BY id) FROM skiplock.all_jobs"),
	          "item:billing:2:4:{\"i\": 1} item:billing:2:4:{} item:billing:2:4:{\"i\": 3} "
	          "invoice:billing:2:4:{\"invoice\": 7}");
	char buf[128];
	CHECK_STR(waits(c, cb, buf, sizeof(buf)), "dependencies: 3 of 3 parent(s) not finished");
	itest_sql(t->admin, "SELECT skiplock.job_cancel(%" PRId64 ")", ids[1]);
	CHECK_EQ(complete_kind(t, "item"), 2);
	CHECK_STR(itest_text(t->admin, "SELECT payload FROM skiplock.all_jobs WHERE id = %" PRId64
	                               " AND run_at <= now()", cb),
	          "{\"batch\": {\"size\": 3, \"cancelled\": 1, \"completed\": 2, \"discarded\": 0}, "
	          "\"invoice\": 7}");
	skl_client_close(c);
	itest_no_leftovers(t);
}

/* rc and SQLSTATE of a refused skl_enqueue with o; nothing written. */
static void refused(itest_ctx *t, skl_client *c, const skl_enqueue_opts *o, skl_rc want_rc,
                    const char *want_state)
{
	int64_t id = -1;
	skl_error err;
	CHECK_EQ(skl_enqueue(c, "bad", "{}", o, &id, &err), want_rc);
	CHECK_STR(err.sqlstate, want_state);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'bad'"), 0);
}

static void bad_input_writes_nothing(itest_ctx *t)
{
	skl_client *c = open_client(t);
	int64_t a = enqueue_one(c, "p.a", NULL);
	const int64_t unknown[] = {a, 987654321}, zero[] = {0};
	const char *const no_key[] = {"no-such-key"}, *const null_key[] = {NULL};
	refused(t, c, &(skl_enqueue_opts){.depends_on = unknown, .ndepends_on = 2}, SKL_INVALID,
	        "23503");
	refused(t, c, &(skl_enqueue_opts){.depends_on_keys = no_key, .ndepends_on_keys = 1},
	        SKL_INVALID, "23503");
	/* refused before any statement: no SQLSTATE */
	refused(t, c, &(skl_enqueue_opts){.depends_on = zero, .ndepends_on = 1}, SKL_INVALID, "");
	refused(t, c, &(skl_enqueue_opts){.depends_on_keys = null_key, .ndepends_on_keys = 1},
	        SKL_INVALID, "");
	refused(t, c, &(skl_enqueue_opts){.depends_on = unknown, .ndepends_on = 1,
	                                  .on_parent_failure = (skl_parent_failure)2},
	        SKL_INVALID, "");
	refused(t, c, &(skl_enqueue_opts){.depends_on = unknown, .ndepends_on = SKL_PARENTS_MAX + 1},
	        SKL_INVALID, "");
	/* with parents, alone only */
	skl_job_spec two[2] = {{.kind = "bad"},
	                       {.kind = "bad", .opts = {.depends_on = unknown, .ndepends_on = 1}}};
	int64_t ids[2];
	skl_error err;
	CHECK_EQ(skl_enqueue_bulk(c, two, 2, ids, &err), SKL_INVALID);
	const char *const payloads[] = {"{}"}, *const not_json[] = {"{"};
	skl_batch_spec b = {.kind = "bad", .payloads = payloads, .n = 0, .callback_kind = "bad"};
	CHECK_EQ(skl_enqueue_batch(c, &b, ids, NULL, &err), SKL_INVALID);
	b.n = SKL_BATCH_MAX + 1;
	CHECK_EQ(skl_enqueue_batch(c, &b, ids, NULL, &err), SKL_INVALID);
	b = (skl_batch_spec){.kind = "bad", .payloads = payloads, .n = 1};
	CHECK_EQ(skl_enqueue_batch(c, &b, ids, NULL, &err), SKL_INVALID);
	b = (skl_batch_spec){.kind = "bad", .payloads = not_json, .n = 1, .callback_kind = "bad"};
	CHECK_EQ(skl_enqueue_batch(c, &b, ids, NULL, &err), SKL_INVALID);
	CHECK_STR(err.sqlstate, "22P02");
	/* a bad policy is refused without parents too (step 0031) */
	PGresult *r = PQexec(t->admin, "SELECT skiplock.enqueue_after(NULL, 'bad',"
	                               " on_parent_failure => 'later')");
	CHECK_STR(PQresultErrorField(r, PG_DIAG_SQLSTATE), "22023");
	PQclear(r);
	CHECK_EQ(itest_int(t->admin, "SELECT (SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'bad')"
	                             " + (SELECT count(*) FROM skiplock.job_waits)"), 0);
	skl_client_close(c);
	itest_no_leftovers(t);
}

/* The counts of queue q as "reason=jobs ..." in the rows' order. */
static const char *counts_of(const skl_wait_count *w, size_t n, const char *q, char *buf,
                             size_t cap)
{
	size_t off = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < n && off < cap; i++)
		if (strcmp(w[i].queue, q) == 0)
			off += (size_t)snprintf(buf + off, cap - off, "%s%s=%" PRId64, off ? " " : "",
			                        w[i].reason, w[i].jobs);
	return buf;
}

/* One job per reason in queue w.q, two due unheld in w.r: each counted
 * under its reason, the queue filter and the cap obeyed, bad bounds
 * refused. */
static void waits_counted_per_reason(itest_ctx *t)
{
	skl_client *c = open_client(t);
	skl_enqueue_opts o;
	skl_enqueue_opts_init(&o);
	o.queue = "w.q";
	int64_t free_job = enqueue_one(c, "w.free", &o);
	enqueue_one(c, "w.limited", &o);
	enqueue_one(c, "w.paused", &o);
	enqueue_one(c, "w.broken", &o);
	o.delay_ms = 3600000;
	enqueue_one(c, "w.later", &o);
	skl_enqueue_opts_init(&o);
	o.queue = "w.q";
	o.depends_on = &free_job;
	o.ndepends_on = 1;
	enqueue_one(c, "w.child", &o);
	skl_enqueue_opts_init(&o);
	o.queue = "w.r";
	enqueue_one(c, "w.free", &o);
	enqueue_one(c, "w.free", &o);
	PQclear(itest_sql(t->admin, "SELECT skiplock.limit_set('w.limited', rate => 5)"));
	PQclear(itest_sql(t->admin, "SELECT skiplock.pause('*', 'w.paused', 'itest', 'sql')"));
	PQclear(itest_sql(t->admin, "SELECT skiplock.breaker_set('w.broken', true, 'itest', 'sql')"));

	skl_wait_count *w;
	size_t n;
	skl_error err;
	char buf[256];
	CHECK_EQ(skl_waits_count(c, NULL, 0, 0, &w, &n, &err), SKL_OK);
	CHECK_STR(counts_of(w, n, "w.q", buf, sizeof(buf)),
	          "breaker=1 dependency=1 limit=1 paused=1 scheduled=1 worker=1");
	CHECK_STR(counts_of(w, n, "w.r", buf, sizeof(buf)), "worker=2");
	skl_wait_counts_free(w, n);
	const char *const only[] = {"w.r", "no.such.queue"};
	CHECK_EQ(skl_waits_count(c, only, 2, 1, &w, &n, &err), SKL_OK);
	CHECK_EQ(n, 1);
	CHECK_STR(counts_of(w, n, "w.r", buf, sizeof(buf)), "worker=1"); /* cap 1 */
	skl_wait_counts_free(w, n);
	CHECK_EQ(skl_waits_count(c, NULL, 0, -1, &w, &n, &err), SKL_INVALID);
	CHECK_EQ(skl_waits_count(c, NULL, 0, 1000001, &w, &n, &err), SKL_INVALID);
	PGresult *r = PQexec(t->admin, "SELECT * FROM skiplock.waits_summary(0)");
	CHECK_STR(PQresultErrorField(r, PG_DIAG_SQLSTATE), "22023");
	PQclear(r);
	skl_client_close(c);
	itest_no_leftovers(t);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"child_waits_for_its_parents", child_waits_for_its_parents, 30},
		{"batch_callback_after_all", batch_callback_after_all, 30},
		{"bad_input_writes_nothing", bad_input_writes_nothing, 30},
		{"waits_counted_per_reason", waits_counted_per_reason, 30},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
