/*
 * test_exactly_once.c — a job's effect and its completion in one
 * transaction (skiplock.job_complete, sql/0019_complete_in_tx.sql;
 * skl_job_complete_with), direct and through PgBouncer.
 *
 *   sql_job_complete          in the caller's transaction: commits with the
 *                             effect or not at all; stale, repeated and
 *                             NULL calls raise; the worker's own outcome
 *                             afterwards changes nothing
 *   heartbeat_held_then_gone a heartbeat while the effect's transaction
 *                             holds the row says "held" at once, then gone
 *   c_api_complete_with       skl_job_complete_with on a claimed job: one
 *                             effect, SKL_FENCED for a repeat and a stale
 *                             claim, a failed effect completes nothing
 *   worker_skips_its_outcome  an skl_worker whose handlers complete in their
 *                             own transactions: no outcome refused, no
 *                             lease taken for lost, counted as completed
 *   crash_window              a worker killed right after its effect's COMMIT:
 *                             with the fence only the next attempt applies
 *                             the effect again; completed in the effect's
 *                             transaction, it is applied once
 *   killed_and_terminated     3,000 jobs, workers SIGKILLed, drained by
 *                             SIGTERM and backends terminated mid-run:
 *                             every effect exactly once
 *   lanes_killed_and_terminated  the same with 3 connections per worker
 *                             (skl_worker_options.connections): a
 *                             terminated backend is one lane's; through
 *                             the pooler, 9 lanes share its 2 server
 *                             connections
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <skiplock.h>

#include "itest.h"

/* The effect: one more application of job $1 in the ledger. */
static const char *const effect_sql =
	"INSERT INTO public.ledger (job_id, n) VALUES ($1::bigint, 1) "
	"ON CONFLICT (job_id) DO UPDATE SET n = ledger.n + 1";

static PGconn *open_db(itest_ctx *t)
{
	skl_client_close(itest_client(t, "itest-exactly", true));
	PQclear(itest_sql(t->admin, "CREATE TABLE public.ledger (job_id bigint PRIMARY KEY, "
	                            "n int NOT NULL)"));
	return itest_connect(t->url, "itest-exactly");
}

/* Runs sql and fails the case unless it fails with SQLSTATE state and a
 * message containing what; rolls back. */
static void expect_error(PGconn *db, const char *state, const char *what, const char *sql)
{
	PGresult *r = PQexec(db, sql);
	const char *got = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	const char *msg = PQresultErrorMessage(r);
	if (PQresultStatus(r) != PGRES_FATAL_ERROR || got == NULL || strcmp(got, state) != 0 ||
	    strstr(msg, what) == NULL)
		itest_fail(__FILE__, __LINE__, "%s: want SQLSTATE %s with \"%s\", got %s (%s)", sql,
		           state, what, got ? got : "none", msg);
	printf("  %s -> %s: %s", state, sql, msg);
	PQclear(r);
	if (PQtransactionStatus(db) != PQTRANS_IDLE)
		PQclear(PQexec(db, "ROLLBACK"));
}

static void claim_one(PGconn *db, const char *kind, long long *id, long long *f)
{
	PGresult *r = itest_sql(db, "SELECT id, fencing FROM skiplock.claim('w1', '{%s}')", kind);
	CHECK_EQ(PQntuples(r), 1);
	*id = atoll(PQgetvalue(r, 0, 0));
	*f = atoll(PQgetvalue(r, 0, 1));
	PQclear(r);
}

static void sql_job_complete(itest_ctx *t)
{
	PGconn *db = open_db(t);
	PQclear(itest_sql(db, "SELECT skiplock.breaker_configure('k', 50, 10, 100, 60000, 60000, 3)"));
	PQclear(itest_sql(db, "SELECT skiplock.enqueue('k') FROM generate_series(1, 2)"));
	long long id, f;
	claim_one(db, "k", &id, &f);
	/* rolled back: no effect, the claim as it was */
	PQclear(itest_sql(db, "BEGIN; INSERT INTO public.ledger VALUES (%lld, 1); "
	                      "SELECT skiplock.job_complete(%lld, %lld, '{\"r\": 1}'); ROLLBACK",
	                  id, id, f));
	CHECK_STR(itest_text(t->admin, "SELECT state || ' ' || fencing FROM skiplock.all_jobs "
	                               "WHERE id = %lld", id), "running 1");
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM public.ledger"), 0);
	/* committed: the effect and the completion, its result kept, a success counted */
	PQclear(itest_sql(db, "BEGIN; INSERT INTO public.ledger VALUES (%lld, 1); "
	                      "SELECT skiplock.job_complete(%lld, %lld, '{\"r\": 1}'); COMMIT",
	                  id, id, f));
	CHECK_STR(itest_text(t->admin, "SELECT state || ' ' || result::text FROM skiplock.all_jobs "
	                               "WHERE id = %lld", id), "completed {\"r\": 1}");
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.jobs WHERE id = %lld", id), 0);
	CHECK_EQ(itest_int(t->admin, "SELECT calls FROM skiplock.breakers WHERE kind = 'k'"), 1);
	/* the same claim again (a retry after a lost COMMIT answer): refused */
	char sql[256];
	snprintf(sql, sizeof(sql), "BEGIN; UPDATE public.ledger SET n = n + 1; "
	         "SELECT skiplock.job_complete(%lld, %lld)", id, f);
	expect_error(db, "SK001", "already completed", sql);
	/* the worker's own outcome afterwards: a no-op either way */
	CHECK_STR(itest_text(db, "SELECT skiplock.complete(%lld, %lld)", id, f), "completed");
	CHECK_STR(itest_text(db, "SELECT skiplock.fail(%lld, %lld, 'x')", id, f), "fenced_out");
	CHECK_EQ(itest_int(db, "SELECT count(*) FROM skiplock.record('{%lld}', '{%lld}', '{ok}')",
	                   id, f), 0);
	CHECK_EQ(itest_int(t->admin, "SELECT n FROM public.ledger WHERE job_id = %lld", id), 1);
	/* a stale token, a job that does not exist, NULLs */
	long long id2, f2;
	claim_one(db, "k", &id2, &f2);
	snprintf(sql, sizeof(sql), "BEGIN; SELECT skiplock.job_complete(%lld, %lld)", id2, f2 + 1);
	expect_error(db, "SK001", "stale claim", sql);
	expect_error(db, "SK001", "does not exist", "SELECT skiplock.job_complete(-1, 1)");
	expect_error(db, "22004", "must not be NULL", "SELECT skiplock.job_complete(NULL, 1)");
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.all_jobs WHERE id = %lld", id2),
	          "running");
	PQfinish(db);
	itest_no_leftovers(t);
}

/* The worker's heartbeat while the effect's transaction holds the job
 * row: it answers at once that the row is held (locked, still ours, not
 * extended), and once that transaction committed, that the job is gone
 * (extended = false), without an error either time. */
static void heartbeat_held_then_gone(itest_ctx *t)
{
	PGconn *db = open_db(t);
	PQclear(itest_sql(db, "SELECT skiplock.enqueue('k')"));
	long long id, f;
	claim_one(db, "k", &id, &f);
	PGconn *fx = itest_connect(t->url, "itest-effect");
	PQclear(itest_sql(fx, "BEGIN; INSERT INTO public.ledger VALUES (%lld, 1); "
	                      "SELECT skiplock.job_complete(%lld, %lld)", id, id, f));
	char hb[128];
	snprintf(hb, sizeof(hb),
	         "SELECT extended::text || ' ' || locked::text FROM skiplock.heartbeat('{%lld}', '{%lld}')",
	         id, f);
	int64_t start = itest_now_ms();
	CHECK_STR(itest_text(db, "%s", hb), "true true");
	CHECK_INT(<, itest_now_ms() - start, 5000);
	PQclear(itest_sql(fx, "COMMIT"));
	CHECK_STR(itest_text(db, "%s", hb), "false false");
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.all_jobs"), "completed");
	PQfinish(fx);
	PQfinish(db);
}

static skl_client *client(itest_ctx *t)
{
	skl_client_options o;
	skl_client_options_init(&o);
	o.url = t->url;
	o.application_name = "itest-exactly-c";
	skl_client *c = NULL;
	skl_error err;
	if (skl_client_open(&o, &c, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "open: %s", err.message);
	return c;
}

static skl_job *claim_c(skl_client *c, const char *kind)
{
	const char *kinds[] = {kind};
	skl_claim_opts o = {.kinds = kinds, .nkinds = 1, .limit = 1, .lease_ms = 30000,
	                    .owner = "itest-c"};
	skl_job *jobs = NULL;
	size_t n = 0;
	skl_error err;
	if (skl_claim(c, &o, &jobs, &n, &err) != SKL_OK || n != 1)
		itest_fail(__FILE__, __LINE__, "claim: %zu jobs: %s", n, err.message);
	return jobs;
}

static void c_api_complete_with(itest_ctx *t)
{
	PGconn *db = open_db(t);
	skl_client *c = client(t);
	PQclear(itest_sql(db, "SELECT skiplock.enqueue('k') FROM generate_series(1, 2)"));
	skl_job *j = claim_c(c, "k");
	char id[24];
	snprintf(id, sizeof(id), "%" PRId64, j->id);
	const char *params[] = {id};
	int64_t rows = -1;
	skl_error err;
	CHECK_EQ(skl_job_complete_with(c, j, "{\"done\": true}", effect_sql, 1, params, &rows, &err),
	         SKL_OK);
	CHECK_EQ(rows, 1);
	CHECK_STR(itest_text(t->admin, "SELECT state || ' ' || result::text FROM skiplock.all_jobs "
	                               "WHERE id = %s", id), "completed {\"done\": true}");
	/* again, as after a lost answer: refused, and the effect rolled back */
	CHECK_EQ(skl_job_complete_with(c, j, NULL, effect_sql, 1, params, &rows, &err), SKL_FENCED);
	printf("  again: %s\n", err.message);
	CHECK_EQ(rows, 0);
	CHECK_EQ(itest_int(t->admin, "SELECT n FROM public.ledger WHERE job_id = %s", id), 1);
	/* a stale claim: the job was rescued and claimed again */
	skl_job *stale = claim_c(c, "k");
	PQclear(itest_sql(t->admin, "UPDATE skiplock.jobs SET lease_expires_at = now() - "
	                            "interval '1 s' WHERE id = %" PRId64, stale->id));
	CHECK_EQ(itest_int(db, "SELECT count(*) FROM skiplock.rescue()"), 1);
	skl_job *now = claim_c(c, "k");
	CHECK_EQ(now->id, stale->id);
	snprintf(id, sizeof(id), "%" PRId64, stale->id);
	CHECK_EQ(skl_job_complete_with(c, stale, NULL, effect_sql, 1, params, NULL, &err),
	         SKL_FENCED);
	CHECK_STR(err.sqlstate, "SK001");
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM public.ledger WHERE job_id = %s", id), 0);
	/* a failed effect completes nothing; a statement-less completion works */
	CHECK_EQ(skl_job_complete_with(c, now, NULL, "SELECT 1 / 0", 0, NULL, NULL, &err), SKL_DB);
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.jobs WHERE id = %s", id),
	          "running");
	CHECK_EQ(skl_job_complete_with(c, now, NULL, NULL, 1, params, NULL, &err), SKL_MISUSE);
	CHECK_EQ(skl_job_complete_with(c, now, NULL, NULL, 0, NULL, NULL, &err), SKL_OK);
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.all_jobs WHERE id = %s", id),
	          "completed");
	skl_jobs_free(j, 1);
	skl_jobs_free(stale, 1);
	skl_jobs_free(now, 1);
	skl_client_close(c);
	PQfinish(db);
	itest_no_leftovers(t);
}

/* ---- an skl_worker whose handlers complete in their own transactions ---- */

static const char *handler_url;
static __thread skl_client *handler_db;
static atomic_int handler_lost, handler_errors, lost_logged;

static skl_client *handler_client(void)
{
	if (handler_db == NULL) {
		skl_client_options o;
		skl_client_options_init(&o);
		o.url = handler_url;
		o.application_name = "itest-exactly-handler";
		o.retry_max_ms = 5000;
		skl_error err;
		if (skl_client_open(&o, &handler_db, &err) != SKL_OK)
			handler_db = NULL;
	}
	return handler_db;
}

/* Payload {"sleep_ms": MS} sleeps after the commit (heartbeats find the
 * job gone meanwhile); {"then": "retry"} returns a failure all the same;
 * {"fail_first": true} has its first effect fail. */
static int exactly_handler(const skl_job *job, void *ctx)
{
	(void)ctx;
	skl_client *c = handler_client();
	if (c == NULL)
		return SKL_JOB_RETRY;
	char id[24];
	snprintf(id, sizeof(id), "%" PRId64, job->id);
	const char *params[] = {id};
	bool fail_first = strstr(job->payload, "fail_first") && job->attempt == 1;
	skl_error err;
	skl_rc rc = skl_job_complete_with(c, job, "{\"in_tx\": true}",
	                                  fail_first ? "SELECT 1 / 0" : effect_sql,
	                                  fail_first ? 0 : 1, fail_first ? NULL : params, NULL, &err);
	if (rc != SKL_OK) {
		skl_job_set_error(job, err.message);
		handler_errors++;
		return SKL_JOB_RETRY;
	}
	const char *sleep = strstr(job->payload, "sleep_ms");
	if (sleep)
		usleep(1000 * (useconds_t)atoi(sleep + 10));
	if (skl_job_lost(job))
		handler_lost++;
	return strstr(job->payload, "\"retry\"") ? SKL_JOB_RETRY : SKL_JOB_OK;
}

static void count_lost_logs(void *ctx, skl_log_level level, const char *msg)
{
	(void)ctx;
	if (level >= SKL_LOG_WARNING && strstr(msg, "lost"))
		lost_logged++;
}

static skl_worker *stop_me;

static void *run_worker(void *arg)
{
	skl_error err;
	if (skl_worker_run(arg, &err) != SKL_OK)
		fprintf(stderr, "worker: %s\n", err.message);
	return NULL;
}

static void worker_skips_its_outcome(itest_ctx *t)
{
	PGconn *db = open_db(t);
	PQclear(itest_sql(db, "SELECT skiplock.enqueue('x', '{}') FROM generate_series(1, 20);"
	                      "SELECT skiplock.enqueue('x', '{\"sleep_ms\": 1500}') "
	                      "  FROM generate_series(1, 3);"
	                      "SELECT skiplock.enqueue('x', '{\"then\": \"retry\"}');"
	                      "SELECT skiplock.enqueue('x', '{\"fail_first\": true}', "
	                      "  backoff => 'fixed', backoff_base => '50 ms')"));
	handler_url = t->url;
	skl_client_options co;
	skl_client_options_init(&co);
	co.url = t->url;
	skl_worker_options wo;
	skl_worker_options_init(&wo);
	wo.concurrency = 4;
	wo.lease_ms = 1000; /* a heartbeat every 333 ms */
	wo.poll_ms = 20;
	wo.poll_max_ms = 100;
	wo.log = count_lost_logs;
	skl_worker *w = NULL;
	skl_error err;
	CHECK_EQ(skl_worker_new(&co, &wo, &w, &err), SKL_OK);
	CHECK_EQ(skl_worker_handle(w, "x", exactly_handler, NULL, &err), SKL_OK);
	pthread_t th;
	CHECK_EQ(pthread_create(&th, NULL, run_worker, w), 0);
	int64_t start = itest_now_ms();
	while (itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE state = "
	                           "'completed'") < 25) {
		CHECK_INT(<, itest_now_ms() - start, 60000);
		usleep(50000);
	}
	skl_worker_stop(w);
	pthread_join(th, NULL);
	skl_worker_stats st;
	skl_worker_get_stats(w, &st);
	printf("  claimed %" PRIu64 ", completed %" PRIu64 ", retried %" PRIu64 ", fenced out %"
	       PRIu64 ", heartbeats %" PRIu64 "\n", st.claimed, st.completed, st.retried,
	       st.fenced_out, st.heartbeats);
	CHECK_EQ(st.completed, 25);
	CHECK_EQ(st.fenced_out, 0);
	CHECK_EQ(st.retried, 1); /* the failed effect, retried */
	CHECK_EQ(st.claimed, 26);
	CHECK_INT(>, st.heartbeats, 0);
	CHECK_EQ(handler_lost, 0);
	CHECK_EQ(lost_logged, 0);
	CHECK_EQ(handler_errors, 1);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM public.ledger WHERE n = 1"), 25);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE result = "
	                             "'{\"in_tx\": true}'"), 25);
	skl_worker_free(w);
	PQfinish(db);
	itest_no_leftovers(t);
}

/* ---- worker processes, killed ---- */

static __thread PGconn *fence_db;

static void quiet(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

/* The fence only (the pattern of step 0011): the effect commits in a
 * transaction of its own that starts with job_fence; the worker records
 * the outcome afterwards. */
static int fence_only_handler(const skl_job *job, void *ctx)
{
	(void)ctx;
	if (fence_db == NULL || PQstatus(fence_db) != CONNECTION_OK) {
		PQfinish(fence_db);
		fence_db = PQconnectdb(handler_url);
		PQsetNoticeProcessor(fence_db, quiet, NULL);
	}
	char sql[320];
	snprintf(sql, sizeof(sql), "BEGIN; SELECT skiplock.job_fence(%" PRId64 ", %" PRId64 "); "
	         "INSERT INTO public.ledger (job_id, n) VALUES (%" PRId64 ", 1) ON CONFLICT (job_id) "
	         "DO UPDATE SET n = ledger.n + 1; COMMIT", job->id, job->fencing, job->id);
	PGresult *r = PQexec(fence_db, sql);
	bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
	if (!ok)
		skl_job_set_error(job, PQerrorMessage(fence_db));
	PQclear(r);
	PQclear(PQexec(fence_db, "ROLLBACK")); /* after an error: out of the failed block */
	return ok ? SKL_JOB_OK : SKL_JOB_RETRY;
}

/* The effect and the completion in one transaction. */
static int in_tx_handler(const skl_job *job, void *ctx)
{
	(void)ctx;
	skl_client *c = handler_client();
	if (c == NULL)
		return SKL_JOB_RETRY;
	char id[24];
	snprintf(id, sizeof(id), "%" PRId64, job->id);
	const char *params[] = {id};
	skl_error err;
	if (skl_job_complete_with(c, job, NULL, effect_sql, 1, params, NULL, &err) != SKL_OK) {
		skl_job_set_error(job, err.message);
		return SKL_JOB_RETRY;
	}
	return SKL_JOB_OK;
}

static skl_handler_fn child_handler;
static bool crash_after_effect;
static int child_connections = 1; /* skl_worker_options.connections */

/* The handler of a worker process: with crash_after_effect, the first
 * attempt of a job dies by SIGKILL right after its effect committed. */
static int child_run(const skl_job *job, void *ctx)
{
	int code = child_handler(job, ctx);
	if (crash_after_effect && job->attempt == 1 && code == SKL_JOB_OK)
		kill(getpid(), SIGKILL);
	return code;
}

static volatile sig_atomic_t term_early;

static void on_term(int sig)
{
	(void)sig;
	if (stop_me)
		skl_worker_stop(stop_me);
	else
		term_early = 1;
}

/* Forks a worker process running h on kind k; SIGTERM drains it. */
static pid_t worker_process(itest_ctx *t, int n, const char *k, skl_handler_fn h, bool crash)
{
	/* SIGTERM stays blocked until the child's handler is in place: a
	 * stop sent right after the fork drains the worker, never kills it. */
	sigset_t term, old;
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, &old);
	pid_t pid = fork();
	if (pid != 0) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		return pid;
	}
	signal(SIGTERM, on_term); /* before the worker exists: it stops at once */
	sigprocmask(SIG_SETMASK, &old, NULL);
	handler_url = t->url;
	child_handler = h;
	crash_after_effect = crash;
	skl_client_options co;
	skl_client_options_init(&co);
	co.url = t->url;
	co.retry_max_ms = 60000;
	skl_worker_options wo;
	skl_worker_options_init(&wo);
	wo.concurrency = 8;
	wo.lease_ms = 2000;
	wo.poll_ms = 50;
	wo.poll_max_ms = 200;
	wo.rescue_every_ms = 300;
	wo.no_cron = true;
	wo.connections = child_connections;
	char owner[32];
	snprintf(owner, sizeof(owner), "itest-exactly-w%d", n);
	wo.owner = owner;
	skl_worker *w = NULL;
	skl_error err;
	if (skl_worker_new(&co, &wo, &w, &err) != SKL_OK ||
	    skl_worker_handle(w, k, child_run, NULL, &err) != SKL_OK)
		_exit(3);
	stop_me = w;
	if (term_early)
		skl_worker_stop(w);
	skl_rc rc = skl_worker_run(w, &err);
	if (rc != SKL_OK)
		fprintf(stderr, "worker %d: %s\n", n, err.message);
	skl_worker_free(w);
	_exit(rc == SKL_OK ? 0 : 4);
}

static void stop_process(pid_t pid)
{
	int st = 0;
	kill(pid, SIGTERM);
	waitpid(pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		itest_fail(__FILE__, __LINE__, "worker %d ended with status 0x%x", (int)pid, st);
}

/* Waits up to s seconds until no job of kind k is unfinished. */
static void wait_finished(itest_ctx *t, const char *k, int s)
{
	int64_t start = itest_now_ms();
	while (itest_int(t->admin, "SELECT count(*) FROM skiplock.jobs WHERE kind = '%s'", k) > 0) {
		if (itest_now_ms() - start > s * 1000LL)
			itest_fail(__FILE__, __LINE__, "jobs of kind %s unfinished after %d s", k, s);
		usleep(100000);
	}
}

/* One job of kind k whose first attempt dies right after its effect's
 * COMMIT; a second worker finishes it.  Returns how often the effect was
 * applied. */
static long long crash_once(itest_ctx *t, const char *k, skl_handler_fn h)
{
	long long id = itest_int(t->admin, "SELECT skiplock.enqueue('%s')", k);
	pid_t first = worker_process(t, 1, k, h, true);
	int st = 0;
	waitpid(first, &st, 0);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	CHECK_EQ(itest_int(t->admin, "SELECT n FROM public.ledger WHERE job_id = %lld", id), 1);
	pid_t second = worker_process(t, 2, k, h, false);
	wait_finished(t, k, 30);
	stop_process(second);
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.all_jobs WHERE id = %lld", id),
	          "completed");
	long long applied = itest_int(t->admin, "SELECT n FROM public.ledger WHERE job_id = %lld", id);
	printf("  %s: killed after the effect's COMMIT; the effect was applied %lld time(s), "
	       "the job completed at attempt %lld\n", k, applied,
	       itest_int(t->admin, "SELECT attempt FROM skiplock.all_jobs WHERE id = %lld", id));
	return applied;
}

/* The window the fence leaves open, made deterministic: the worker dies
 * between the effect's COMMIT and its outcome.  The fence cannot stop the
 * next attempt (a new claim, a new token): the effect is applied twice.
 * Completed in the effect's own transaction, it is applied once. */
static void crash_window(itest_ctx *t)
{
	PQfinish(open_db(t));
	CHECK_EQ(crash_once(t, "fence_only", fence_only_handler), 2);
	CHECK_EQ(crash_once(t, "in_tx", in_tx_handler), 1);
	itest_no_leftovers(t);
}

enum { FAULT_JOBS = 3000, FAULT_WORKERS = 3 };

/* SKL_EXACTLY_PATTERN=fence runs the same faults over the fence-only
 * handler: it then fails with jobs whose effect was applied twice.  Every
 * round a random backend is terminated; every second a worker is
 * SIGKILLed and every third one is stopped by SIGTERM (it must drain and
 * exit 0), each replaced at once. */
static void faults_with(itest_ctx *t, int connections)
{
	child_connections = connections;
	const char *pattern = getenv("SKL_EXACTLY_PATTERN");
	bool fence = pattern && strcmp(pattern, "fence") == 0;
	skl_handler_fn h = fence ? fence_only_handler : in_tx_handler;
	PQfinish(open_db(t));
	PQclear(itest_sql(t->admin, "SELECT count(skiplock.enqueue('fx', max_attempts => 1000, "
	                            "backoff => 'fixed', backoff_base => '50 ms')) "
	                            "FROM generate_series(1, %d)", FAULT_JOBS));
	pid_t pids[FAULT_WORKERS];
	int started = 0;
	for (int i = 0; i < FAULT_WORKERS; i++)
		pids[i] = worker_process(t, started++, "fx", h, false);
	int kills = 0, terminated = 0, drained = 0;
	int64_t start = itest_now_ms();
	srand((unsigned)getpid());
	for (int round = 1; itest_now_ms() - start < 40000; round++) {
		usleep(200000);
		if (itest_int(t->admin, "SELECT count(*) FROM skiplock.jobs") < FAULT_JOBS / 10)
			break; /* leave the tail to the survivors */
		terminated += (int)itest_int(t->admin,
			"SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity "
			"WHERE datname = current_database() AND pid <> pg_backend_pid() AND "
			"backend_type = 'client backend' ORDER BY random() LIMIT 1) x");
		if (round % 2 == 0) { /* a worker dies mid-effect, another takes its place */
			int i = rand() % FAULT_WORKERS;
			kill(pids[i], SIGKILL);
			waitpid(pids[i], NULL, 0);
			pids[i] = worker_process(t, started++, "fx", h, false);
			kills++;
		}
		if (round % 3 == 0) { /* a worker drains and exits, another takes its place */
			int i = rand() % FAULT_WORKERS;
			stop_process(pids[i]);
			pids[i] = worker_process(t, started++, "fx", h, false);
			drained++;
		}
	}
	wait_finished(t, "fx", 150);
	for (int i = 0; i < FAULT_WORKERS; i++)
		stop_process(pids[i]);
	long long retried = itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE "
	                                        "attempt > 1");
	long long doubled = itest_int(t->admin, "SELECT count(*) FROM public.ledger WHERE n > 1");
	printf("  %s, %d connection(s) per worker: %d workers SIGKILLed, %d drained by SIGTERM, "
	       "%d backends terminated in %.1f s; %lld jobs ran more than once, %lld effects "
	       "applied more than once\n",
	       fence ? "fence only" : "completed in the effect's transaction", connections, kills,
	       drained, terminated, (double)(itest_now_ms() - start) / 1000.0, retried, doubled);
	CHECK_INT(>, kills, 2);
	CHECK_INT(>, drained, 1);
	CHECK_INT(>, terminated, 7);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE state = "
	                             "'completed'"), FAULT_JOBS);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM public.ledger"), FAULT_JOBS);
	CHECK_EQ(doubled, 0);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.jobs"), 0); /* no lease left */
	itest_no_leftovers(t);
}

static void killed_and_terminated(itest_ctx *t)
{
	faults_with(t, 1);
}

static void lanes_killed_and_terminated(itest_ctx *t)
{
	faults_with(t, 3);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"sql_job_complete", sql_job_complete, 0},
		{"heartbeat_held_then_gone", heartbeat_held_then_gone, 0},
		{"c_api_complete_with", c_api_complete_with, 0},
		{"worker_skips_its_outcome", worker_skips_its_outcome, 120},
		{"crash_window", crash_window, 120},
		{"killed_and_terminated", killed_and_terminated, 240},
		{"lanes_killed_and_terminated", lanes_killed_and_terminated, 240},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
