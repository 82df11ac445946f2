/*
 * ledger.c — see ledger.h.
 */
#include "ledger.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static __thread PGconn *ledger_conn;

static void quiet(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}
static const char *ledger_url;

/* The handler's effect: one ledger row, written only while the claim is
 * current (a fenced insert). */
static int ledger_handler(const skl_job *job, void *ctx)
{
	(void)ctx;
	if (ledger_conn == NULL || PQstatus(ledger_conn) != CONNECTION_OK) {
		PQfinish(ledger_conn);
		ledger_conn = PQconnectdb(ledger_url);
		PQsetNoticeProcessor(ledger_conn, quiet, NULL);
	}
	char id[24], fencing[24];
	snprintf(id, sizeof(id), "%" PRId64, job->id);
	snprintf(fencing, sizeof(fencing), "%" PRId64, job->fencing);
	const char *vals[] = {id, fencing};
	PGresult *r = PQexecParams(ledger_conn,
	                           "INSERT INTO ledger (job_id, fencing) SELECT $1, $2 WHERE EXISTS "
	                           "(SELECT 1 FROM skiplock.all_jobs WHERE id = $1 AND fencing = $2 "
	                           "AND state = 'running')",
	                           2, NULL, vals, NULL, NULL, 0);
	int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? SKL_JOB_OK : 1;
	if (rc != SKL_JOB_OK)
		skl_job_set_error(job, PQerrorMessage(ledger_conn));
	PQclear(r);
	return rc;
}

void ledger_setup(itest_ctx *t, skl_client *c, int n)
{
	PQclear(itest_sql(t->admin, "CREATE TABLE ledger (job_id bigint, fencing bigint)"));
	skl_job_spec *specs = calloc((size_t)n, sizeof(*specs));
	int64_t *ids = calloc((size_t)n, sizeof(*ids));
	CHECK(specs && ids);
	for (int i = 0; i < n; i++)
		specs[i] = (skl_job_spec){.kind = "ledger", .payload = "{}",
		                          .opts = {.backoff_base_ms = 50, .backoff_cap_ms = 500}};
	skl_error err;
	if (skl_enqueue_bulk(c, specs, (size_t)n, ids, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "enqueue: %s", err.message);
	free(specs);
	free(ids);
}

static skl_worker *stop_me;

static void on_term(int sig)
{
	(void)sig;
	skl_worker_stop(stop_me);
}

pid_t ledger_worker_start(const char *url, int n, int lease_ms)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	ledger_url = url;
	skl_client_options co;
	skl_client_options_init(&co);
	co.url = url;
	co.retry_max_ms = 60000;
	skl_worker_options wo;
	skl_worker_options_init(&wo);
	wo.concurrency = 8;
	wo.lease_ms = lease_ms;
	wo.poll_ms = 50;
	wo.poll_max_ms = 200;
	wo.rescue_every_ms = 500;
	char owner[32];
	snprintf(owner, sizeof(owner), "itest-w%d", n);
	wo.owner = owner;
	skl_worker *w = NULL;
	skl_error err;
	if (skl_worker_new(&co, &wo, &w, &err) != SKL_OK ||
	    skl_worker_handle(w, "ledger", ledger_handler, NULL, &err) != SKL_OK)
		_exit(3);
	stop_me = w;
	signal(SIGTERM, on_term);
	skl_rc rc = skl_worker_run(w, &err);
	if (rc != SKL_OK)
		fprintf(stderr, "worker %d: %s\n", n, err.message);
	skl_worker_free(w);
	_exit(rc == SKL_OK ? 0 : 4);
}

long long ledger_wait(itest_ctx *t, int timeout_s)
{
	int64_t start = itest_now_ms();
	while (itest_now_ms() - start < timeout_s * 1000LL) {
		PGresult *r = PQexec(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE state <> "
		                               "'completed'");
		bool done = PQresultStatus(r) == PGRES_TUPLES_OK && atoll(PQgetvalue(r, 0, 0)) == 0;
		PQclear(r);
		if (done)
			break;
		if (PQstatus(t->admin) != CONNECTION_OK)
			PQreset(t->admin); /* the server may have been restarted */
		usleep(100000);
	}
	return itest_now_ms() - start;
}

void ledger_stop(pid_t *pids, int n)
{
	for (int i = 0; i < n; i++) {
		int st = 0;
		kill(pids[i], SIGTERM);
		waitpid(pids[i], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			itest_fail(__FILE__, __LINE__, "worker %d ended with status 0x%x", i, st);
	}
}

void ledger_check(itest_ctx *t, int n)
{
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed'"),
	         n);
	/* at-least-once execution, exactly one accepted effect: a claim (job,
	 * fencing) never wrote twice, and exactly one row per job carries the
	 * token of the claim that completed it */
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM (SELECT job_id FROM ledger GROUP BY "
	                             "job_id, fencing HAVING count(*) > 1) d"), 0);
	CHECK_EQ(itest_int(t->admin, "SELECT count(DISTINCT job_id) FROM ledger"), n);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs j JOIN ledger l ON "
	                             "l.job_id = j.id AND l.fencing = j.fencing"), n);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE attempt > "
	                             "max_attempts"), 0);
	itest_no_leftovers(t);
}
