/*
 * Integration tests of bulk enqueue (skl_enqueue_bulk and
 * skiplock.enqueue_many), direct and through PgBouncer: a batch mixing
 * unique-keyed and plain jobs, every per-job option, a batch larger than
 * one statement's chunk (one transaction of several statements), all or
 * nothing when a late chunk fails, a retry after a lost COMMIT answer
 * returning the same ids across chunks, and whether each job was inserted
 * (skl_enqueue_bulk_ex), also after a lost COMMIT answer.
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"
#include "skiplock.h"

/* Larger than the library's chunk (5,000 jobs per statement): three chunks. */
#define BIG 12001

static skl_client *open_client(itest_ctx *t)
{
	return itest_client(t, "itest-enqueue-bulk", true);
}

static void mixed_unique_and_plain(itest_ctx *t)
{
	skl_client *c = open_client(t);
	skl_enqueue_opts o;
	skl_enqueue_opts_init(&o);
	o.unique_key = "held";
	int64_t holder = 0;
	skl_error err;
	CHECK_EQ(skl_enqueue(c, "k", "{\"holder\": true}", &o, &holder, &err), SKL_OK);
	skl_job_spec specs[] = {
		{.kind = "k", .payload = "{\"i\": 0}"},
		{.kind = "k", .payload = "{\"i\": 1}", .opts = {.unique_key = "a"}},
		{.kind = "k", .payload = "{\"i\": 2}",
		 .opts = {.queue = "q2", .priority = 7, .delay_ms = 3600000, .max_attempts = 3,
		          .timeout_ms = 1500, .backoff = SKL_BACKOFF_FIXED, .backoff_base_ms = 250,
		          .backoff_cap_ms = 9000}},
		{.kind = "k", .payload = "{\"i\": 3}", .opts = {.unique_key = "a"}},
		{.kind = "k", .payload = "{\"i\": 4}", .opts = {.unique_key = "held"}},
		{.kind = "k2", .payload = NULL, .opts = {.run_at = "2030-01-02T03:04:05Z"}},
	};
	int64_t ids[6];
	skl_enqueued how[6];
	CHECK_EQ(skl_enqueue_bulk_ex(c, specs, 6, ids, how, &err), SKL_OK);
	/* inserted, except a key repeated in the batch and the held key */
	static const skl_enqueued want[6] = {SKL_ENQUEUED_INSERTED, SKL_ENQUEUED_INSERTED,
	                                     SKL_ENQUEUED_INSERTED, SKL_ENQUEUED_EXISTING,
	                                     SKL_ENQUEUED_EXISTING, SKL_ENQUEUED_INSERTED};
	for (int i = 0; i < 6; i++)
		CHECK_EQ(how[i], want[i]);
	CHECK_EQ(ids[1], ids[3]);   /* one job per key, within the batch */
	CHECK_EQ(ids[4], holder);   /* the key's holder, from before */
	CHECK(ids[0] < ids[1] && ids[1] < ids[2] && ids[2] < ids[5]);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"), 5);
	CHECK_EQ(itest_int(t->admin, "SELECT (payload->>'i')::int FROM skiplock.all_jobs WHERE id = %"
	                             PRId64, ids[1]), 1);
	CHECK_STR(itest_text(t->admin, "SELECT concat_ws(',', queue, priority, max_attempts, "
	                               "timeout_ms, backoff, backoff_base_ms, backoff_cap_ms, "
	                               "run_at > now() + interval '59 minutes', unique_key IS NULL) "
	                               "FROM skiplock.all_jobs WHERE id = %" PRId64, ids[2]),
	          "q2,7,3,1500,fixed,250,9000,t,t");
	CHECK_STR(itest_text(t->admin, "SELECT concat_ws(',', queue, priority, max_attempts, "
	                               "coalesce(timeout_ms, -1), coalesce(backoff, '-'), payload, "
	                               "run_at = '2030-01-02T03:04:05Z') "
	                               "FROM skiplock.all_jobs WHERE id = %" PRId64, ids[5]),
	          "default,0,25,-1,-,{},t");
	CHECK_STR(itest_text(t->admin, "SELECT concat_ws(',', queue, priority, max_attempts, "
	                               "run_at <= now()) FROM skiplock.all_jobs WHERE id = %" PRId64,
	                     ids[0]),
	          "default,0,25,t");
	skl_client_close(c);
	itest_no_leftovers(t);
}

/* BIG jobs with payload {"i": i}; every 1,000th has the unique key "u",
 * so the key's jobs span all chunks. */
static skl_job_spec *big_batch(char (**payloads)[32])
{
	skl_job_spec *s = calloc(BIG, sizeof(*s));
	*payloads = calloc(BIG, sizeof(**payloads));
	CHECK(s != NULL && *payloads != NULL);
	for (int i = 0; i < BIG; i++) {
		snprintf((*payloads)[i], 32, "{\"i\": %d}", i);
		s[i] = (skl_job_spec){.kind = "big", .payload = (*payloads)[i]};
		if (i % 1000 == 999)
			s[i].opts.unique_key = "u";
	}
	return s;
}

/* ids[i] holds job i (or, for the keyed ones, the key's first job). */
static void check_big(itest_ctx *t, const int64_t *ids)
{
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"), BIG - 11);
	CHECK_EQ(itest_int(t->admin, "SELECT count(DISTINCT id) FROM skiplock.all_jobs"), BIG - 11);
	for (int i = 0; i < BIG; i += 997)
		if (i % 1000 != 999)
			CHECK_EQ(itest_int(t->admin, "SELECT (payload->>'i')::int FROM skiplock.all_jobs "
			                             "WHERE id = %" PRId64, ids[i]), i);
	for (int i = 999; i < BIG; i += 1000)
		CHECK_EQ(ids[i], ids[999]);
	CHECK_EQ(itest_int(t->admin, "SELECT (payload->>'i')::int FROM skiplock.all_jobs WHERE "
	                             "unique_key = 'u'"), 999);
	for (int i = 1; i < BIG; i++)
		if (i % 1000 != 999 && (i - 1) % 1000 != 999)
			CHECK(ids[i] > ids[i - 1]); /* ids in input order */
}

static void batch_over_chunk_size(itest_ctx *t)
{
	skl_client *c = open_client(t);
	char(*payloads)[32];
	skl_job_spec *specs = big_batch(&payloads);
	int64_t *ids = calloc(BIG, sizeof(*ids));
	skl_error err;
	CHECK_EQ(skl_enqueue_bulk(c, specs, BIG, ids, &err), SKL_OK);
	check_big(t, ids);
	/* All or nothing: a bad job in the last chunk leaves no job of the
	 * batch, and no retry token. */
	PQclear(itest_sql(t->admin, "TRUNCATE skiplock.jobs, skiplock.finished_jobs, skiplock.enqueue_tokens"));
	specs[BIG - 1].opts.run_at = "not a time";
	CHECK(skl_enqueue_bulk(c, specs, BIG, ids, &err) != SKL_OK);
	CHECK(strstr(err.message, "not a time") != NULL);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"), 0);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.enqueue_tokens"), 0);
	free(ids);
	free(specs);
	free(payloads);
	skl_client_close(c);
	itest_no_leftovers(t);
}

/* The COMMIT of a three-chunk batch goes through but its answer is lost:
 * the library reconnects and runs the transaction again; every chunk finds
 * its token and returns the first run's ids, inserting nothing. */
static void chunked_retry_after_lost_commit(itest_ctx *t)
{
	skl_client *setup = open_client(t);
	skl_client_close(setup);
	char dir[64], url[512];
	pid_t proxy = itest_start_proxy(t, dir, url, sizeof(url));
	skl_client_options o;
	skl_client_options_init(&o);
	o.url = url;
	o.application_name = "itest-bulk-lost-commit";
	skl_client *c = NULL;
	skl_error err;
	CHECK_EQ(skl_client_open(&o, &c, &err), SKL_OK);
	CHECK_EQ(skl_client_ping(c, &err), SKL_OK);
	CHECK_EQ(itest_sh("%s ctl %s/ctl drop-commit-reply >/dev/null", getenv("SKL_CUTPROXY"),
	                  dir), 0);
	char(*payloads)[32];
	skl_job_spec *specs = big_batch(&payloads);
	int64_t *ids = calloc(BIG, sizeof(*ids));
	skl_enqueued *how = calloc(BIG, sizeof(*how));
	CHECK_EQ(skl_enqueue_bulk_ex(c, specs, BIG, ids, how, &err), SKL_OK);
	CHECK_EQ(skl_client_connects(c), 2); /* the answer was lost; it reconnected */
	/* The retry found the lost run's tokens: plain jobs were inserted by
	 * it, the key's first job may have been, its repeats were not. */
	for (int i = 0; i < BIG; i++)
		CHECK_EQ(how[i], i % 1000 != 999 ? SKL_ENQUEUED_INSERTED
		                 : i == 999      ? SKL_ENQUEUED_UNKNOWN
		                                 : SKL_ENQUEUED_EXISTING);
	free(how);
	CHECK_EQ(itest_sh("%s ctl %s/ctl stats | grep -q 'commit_drops=1'", getenv("SKL_CUTPROXY"),
	                  dir), 0);
	check_big(t, ids);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.enqueue_tokens"), 3);
	free(ids);
	free(specs);
	free(payloads);
	skl_client_close(c);
	kill(proxy, SIGTERM);
	waitpid(proxy, NULL, 0);
	itest_sh("rm -rf %s", dir);
}

/* With the inserted check a small batch is a transaction too: its COMMIT's
 * answer lost, the retry returns the same ids; the plain job was inserted
 * by the run that committed, the keyed one cannot be told. */
static void inserted_after_lost_commit(itest_ctx *t)
{
	skl_client *setup = open_client(t);
	skl_client_close(setup);
	char dir[64], url[512];
	pid_t proxy = itest_start_proxy(t, dir, url, sizeof(url));
	skl_client_options o;
	skl_client_options_init(&o);
	o.url = url;
	o.application_name = "itest-inserted-lost-commit";
	skl_client *c = NULL;
	skl_error err;
	CHECK_EQ(skl_client_open(&o, &c, &err), SKL_OK);
	CHECK_EQ(skl_client_ping(c, &err), SKL_OK);
	CHECK_EQ(itest_sh("%s ctl %s/ctl drop-commit-reply >/dev/null", getenv("SKL_CUTPROXY"),
	                  dir), 0);
	skl_job_spec specs[] = {{.kind = "k"}, {.kind = "k", .opts = {.unique_key = "lost"}}};
	int64_t ids[2];
	skl_enqueued how[2];
	CHECK_EQ(skl_enqueue_bulk_ex(c, specs, 2, ids, how, &err), SKL_OK);
	CHECK_EQ(skl_client_connects(c), 2);
	CHECK_EQ(how[0], SKL_ENQUEUED_INSERTED);
	CHECK_EQ(how[1], SKL_ENQUEUED_UNKNOWN);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs"), 2);
	/* Asked again, the key is found: exact once the answer arrives. */
	CHECK_EQ(skl_enqueue_bulk_ex(c, specs + 1, 1, ids, how, &err), SKL_OK);
	CHECK_EQ(how[0], SKL_ENQUEUED_EXISTING);
	skl_client_close(c);
	kill(proxy, SIGTERM);
	waitpid(proxy, NULL, 0);
	itest_sh("rm -rf %s", dir);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"mixed_unique_and_plain", mixed_unique_and_plain, 30},
		{"batch_over_chunk_size", batch_over_chunk_size, 120},
		{"chunked_retry_after_lost_commit", chunked_retry_after_lost_commit, 120},
		{"inserted_after_lost_commit", inserted_after_lost_commit, 60},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
