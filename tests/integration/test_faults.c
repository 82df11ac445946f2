/*
 * Fault tests of the worker, direct and through PgBouncer: its connections
 * terminated again and again, PostgreSQL crash-restarted, PgBouncer
 * restarted — mid-run, with jobs in flight.  After each: every job
 * completed, exactly one accepted effect per job, nothing running, no lock
 * or open transaction left.  These cases disturb the shared servers, so the
 * suite runs alone.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"
#include "itest.h"
#include "skiplock.h"
#include "ledger.h"

enum { JOBS = 3000, WORKERS = 2 };

static skl_client *setup(itest_ctx *t)
{
	/* every commit durable, so a crash-restart loses nothing committed */
	PQclear(itest_sql(t->admin, "ALTER DATABASE \"%s\" SET synchronous_commit = on",
	                  t->dbname));
	skl_client_options o;
	skl_client_options_init(&o);
	o.url = t->url;
	skl_client *c = NULL;
	skl_error err;
	if (skl_client_open(&o, &c, &err) != SKL_OK || skl_schema_install(c, NULL, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "open/init: %s", err.message);
	ledger_setup(t, c, JOBS);
	return c;
}

static void start_workers(itest_ctx *t, pid_t *pids)
{
	for (int i = 0; i < WORKERS; i++)
		pids[i] = ledger_worker_start(t->url, i, 3000);
	while (itest_int(t->admin, "SELECT count(*) FROM ledger") < JOBS / 10)
		usleep(20000);
}

static void finish(itest_ctx *t, skl_client *c, pid_t *pids, const char *what)
{
	long long waited = ledger_wait(t, 120);
	ledger_stop(pids, WORKERS);
	ledger_check(t, JOBS);
	printf("  %s: all %d jobs completed once in effect (%lld ms after the faults)\n", what, JOBS,
	       waited);
	skl_client_close(c);
}

static void terminated_worker_connections(itest_ctx *t)
{
	skl_client *c = setup(t);
	pid_t pids[WORKERS];
	start_workers(t, pids);
	long long killed = 0;
	for (int round = 0; round < 10; round++) {
		killed += itest_int(t->admin, "SELECT count(pg_terminate_backend(pid)) FROM "
		                              "pg_stat_activity WHERE datname = current_database() AND "
		                              "pid <> pg_backend_pid()");
		usleep(300000);
	}
	printf("  terminated %lld backends in 10 rounds\n", killed);
	CHECK_INT(>, killed, 10);
	finish(t, c, pids, "terminated backends");
}

static void postgres_crash_restart(itest_ctx *t)
{
	skl_client *c = setup(t);
	pid_t pids[WORKERS];
	start_workers(t, pids);
	for (int round = 0; round < 2; round++) {
		itest_ctl("pg-restart-immediate");
		PQreset(t->admin);
		usleep(800000);
	}
	finish(t, c, pids, "two crash-restarts");
}

static void pgbouncer_restart(itest_ctx *t)
{
	if (!t->pooled) {
		printf("  direct connections do not pass through PgBouncer: nothing to restart\n");
		return;
	}
	skl_client *c = setup(t);
	pid_t pids[WORKERS];
	start_workers(t, pids);
	itest_ctl("bouncer-restart");
	usleep(500000);
	itest_ctl("bouncer-pause");
	usleep(1500000);
	itest_ctl("bouncer-resume");
	finish(t, c, pids, "PgBouncer restarted and frozen");
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"terminated_worker_connections", terminated_worker_connections, 180},
		{"postgres_crash_restart", postgres_crash_restart, 180},
		{"pgbouncer_restart", pgbouncer_restart, 180},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
