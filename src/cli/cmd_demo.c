/*
 * cmd_demo.c — `skiplock demo`: a crash, and every job done exactly once.
 *
 * The demo enqueues jobs, runs worker processes (this binary's `worker`),
 * SIGKILLs one of them while it runs jobs, lets the survivors rescue and
 * finish its jobs, and then checks in SQL that every job completed and took
 * effect exactly once.  Without a URL it runs on a private cluster
 * (pgembed.c).
 *
 * The effect of a job is one row in skiplock_demo.ledger, written by the
 * handler through psql in one statement that
 *  - is fenced: it locks the job row FOR SHARE and requires the job to be
 *    running under the handler's own fencing token, so a handler whose
 *    claim was lost (rescued, claimed again) writes nothing; and
 *  - is at most once per job: it writes nothing when the job already has a
 *    row.  That is what a crash needs: a killed worker's handler may have
 *    written its row after the worker died (handlers outlive their worker)
 *    or just before, with the outcome never recorded; the rescued job then
 *    runs again and must not repeat the effect.  The check is safe without
 *    a constraint because every run of a job holds the job row lock while it
 *    writes, and the next run's claim (an UPDATE of that row) cannot commit
 *    before the previous run's write did.
 * The ledger deliberately has no unique key: it is the instrument that
 * would show a duplicate effect, so a constraint must not hide one.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "cli.h"
#include "demo/pgembed.h"

#define DEMO_QUEUE "skiplock_demo"
#define DEMO_DB "skiplock_demo"
#define MAX_WORKERS 16

static const char usage[] =
	"Usage: skiplock demo [--url URL] [--jobs N] [--workers N] [--dir DIR]\n"
	"                     [--keep-running] [OPTIONS]\n"
	"\n"
	"Show skiplock surviving a crash: enqueue jobs of two kinds (resize and\n"
	"notify), run worker processes, SIGKILL one of them while it runs jobs, and\n"
	"check that the survivors finish every job exactly once in effect.\n"
	"\n"
	"Without --url (and without $DATABASE_URL) no database is needed: the demo\n"
	"creates a private PostgreSQL cluster in ./.skiplock/pg with initdb (found\n"
	"via pg_config --bindir, /usr/lib/postgresql/N/bin or PATH), listening on a\n"
	"unix socket inside that directory and on no TCP port, starts it with\n"
	"pg_ctl, uses the database " DEMO_DB " in it, and stops it at the end. A\n"
	"later run reuses the cluster. As root, PostgreSQL runs as the OS user\n"
	"\"" PGEMBED_USER "\" (created with useradd when missing).\n"
	"\n"
	"With --url the demo runs in that database and touches only its own\n"
	"objects: skiplock's schema (installed as by skiplock init), the schema\n"
	DEMO_DB " (dropped and created again) and the jobs of the queue\n"
	DEMO_QUEUE " (deleted first). Run one demo per database at a time.\n"
	"\n"
	"Steps:\n"
	"  1. Install skiplock's schema; create the table " DEMO_DB ".ledger.\n"
	"  2. Enqueue the jobs in one transaction (skl_enqueue_bulk).\n"
	"  3. Start the workers: \"skiplock worker\" processes, 4 jobs at once each,\n"
	"     lease 2s, rescue every 1s, each with a known --owner; the URL\n"
	"     reaches them in $DATABASE_URL, not in argv, and the handlers with\n"
	"     --handler-env DATABASE_URL. A job's handler\n"
	"     sleeps 50-300 ms, then records the job's effect with psql: one ledger\n"
	"     row, written only while the job is still running under the handler's\n"
	"     fencing token, and only if the job has no row yet.\n"
	"  4. Once a third of the jobs are done, SIGKILL one worker at a moment it\n"
	"     runs jobs. Its leases expire after 2s; a survivor's rescue returns\n"
	"     those jobs to the queue and they run again.\n"
	"  5. Stop the survivors (SIGTERM: they drain) and print one summary line\n"
	"     on stdout, computed in SQL: jobs completed exactly once, jobs lost,\n"
	"     job ids with more than one ledger row (duplicate effects), attempts,\n"
	"     jobs rescued from the killed worker, elapsed time.\n"
	"While it runs, a progress line on stderr: done/total, running, rescued,\n"
	"elapsed. Worker logs are kept when the demo fails. SIGINT or SIGTERM\n"
	"stops the workers and the private cluster, then exits 128+signal.\n"
	"\n"
	"Requires psql (Debian package postgresql-client) and, without --url, the\n"
	"server programs (Debian package postgresql).\n"
	"\n"
	"Demo options:\n"
	"  --jobs N          jobs to enqueue (default 300; 20 to 100000)\n"
	"  --workers N       worker processes, one of which is killed (default 2;\n"
	"                    2 to 16)\n"
	"  --dir DIR         the private cluster's directory (default ./.skiplock/pg)\n"
	"  --keep-running    leave the private cluster running; print how to connect\n"
	"  --time-limit DUR  give up after this long (default 2m)\n"
	"\n";

static const char exit_help[] =
	"\nExit status: 0 every job completed exactly once in effect; 1 something\n"
	"did not hold (each failed check is named on stderr), the time limit passed\n"
	"or the private cluster could not be set up; 2 bad usage; 3 database\n"
	"unreachable within --retry-for.\n";

/* The job's effect (see the file header).  Runs inside double quotes in
 * /bin/sh: the shell fills in the job's id and fencing token. */
#define EFFECT_SQL                                                                         \
	"WITH fence AS (SELECT id FROM skiplock.jobs WHERE id = $SKIPLOCK_JOB_ID"              \
	" AND fencing = $SKIPLOCK_FENCING AND state = 'running' FOR SHARE),"                   \
	" effect AS (INSERT INTO " DEMO_DB ".ledger (job_id, fencing, worker)"                 \
	" SELECT id, $SKIPLOCK_FENCING, '$SKL_DEMO_WORKER' FROM fence WHERE NOT EXISTS"        \
	" (SELECT FROM " DEMO_DB ".ledger WHERE job_id = $SKIPLOCK_JOB_ID) RETURNING job_id)"  \
	" SELECT CASE WHEN EXISTS (SELECT FROM effect) THEN 'applied'"                         \
	" WHEN EXISTS (SELECT FROM fence) THEN 'already applied' ELSE 'fenced out' END"

/* A handler: work for LO to LO+SPAN-1 ms (varied by job id), then the
 * effect; exit 75 (retry) when psql fails.  stdout is kept as the result. */
#define HANDLER(lo, span)                                                                   \
	"sleep \"$(printf '0.%03d' $((SKIPLOCK_JOB_ID * 37 % " span " + " lo ")))\" &&"         \
	" r=$(\"$SKL_DEMO_PSQL\" -X -q -At -v ON_ERROR_STOP=1 -d \"$DATABASE_URL\" -c \""       \
	EFFECT_SQL "\") || exit 75; printf '{\"effect\": \"%s\"}\\n' \"$r\""

static const char resize_handler[] = "resize=" HANDLER("100", "201");
static const char notify_handler[] = "notify=" HANDLER("50", "101");

static const char reset_sql[] =
	"DROP SCHEMA IF EXISTS " DEMO_DB " CASCADE;"
	"CREATE SCHEMA " DEMO_DB ";"
	"COMMENT ON SCHEMA " DEMO_DB " IS 'skiplock demo: dropped and created again by every run';"
	"CREATE TABLE " DEMO_DB ".ledger (job_id bigint NOT NULL, fencing bigint NOT NULL,"
	"  worker text NOT NULL, at timestamptz NOT NULL DEFAULT now());"
	"CREATE INDEX ledger_job_id_idx ON " DEMO_DB ".ledger (job_id);"
	"DELETE FROM skiplock.jobs WHERE queue = '" DEMO_QUEUE "';"
	"DELETE FROM skiplock.finished_jobs WHERE queue = '" DEMO_QUEUE "'";

/* $1: an owner.  done, running, failed for good, running on $1, rescued. */
static const char *const progress_sql =
	"SELECT count(*) FILTER (WHERE state = 'completed'),"
	"       count(*) FILTER (WHERE state = 'running'),"
	"       count(*) FILTER (WHERE state IN ('discarded', 'cancelled')),"
	"       count(*) FILTER (WHERE state = 'running' AND lease_owner = $1),"
	"       count(*) FILTER (WHERE EXISTS (SELECT FROM jsonb_array_elements(errors) e"
	"                                      WHERE e->>'error' LIKE 'lease expired%'))"
	"  FROM skiplock.all_jobs WHERE queue = '" DEMO_QUEUE "'";

/* $1: the killed worker's owner.  Every number of the summary. */
static const char *const summary_sql =
	"WITH j AS (SELECT id, state, attempt, result, errors FROM skiplock.all_jobs"
	"            WHERE queue = '" DEMO_QUEUE "'),"
	" l AS (SELECT job_id, count(*) AS n FROM " DEMO_DB ".ledger GROUP BY job_id),"
	" victim AS (SELECT 'lease expired: ' || $1 || ' ' AS prefix)"
	" SELECT (SELECT count(*) FROM j),"
	"  (SELECT count(*) FROM j JOIN l ON l.job_id = j.id WHERE j.state = 'completed' AND l.n = 1),"
	"  (SELECT count(*) FROM j WHERE j.state <> 'completed'),"
	"  (SELECT count(*) FROM l WHERE l.n > 1),"
	"  (SELECT count(*) FROM j WHERE j.state = 'completed'"
	"      AND NOT EXISTS (SELECT FROM l WHERE l.job_id = j.id)),"
	"  (SELECT coalesce(sum(j.attempt), 0) FROM j),"
	"  (SELECT count(*) FROM j WHERE EXISTS (SELECT FROM jsonb_array_elements(j.errors) e"
	"      WHERE e->>'error' LIKE 'lease expired%')),"
	"  (SELECT count(*) FROM j, victim WHERE EXISTS (SELECT FROM jsonb_array_elements(j.errors) e"
	"      WHERE left(e->>'error', length(victim.prefix)) = victim.prefix)),"
	"  (SELECT count(*) FROM j WHERE j.result->>'effect' = 'already applied'),"
	"  (SELECT count(*) FROM j WHERE j.state = 'running')";

typedef struct worker_proc {
	char owner[64];
	pid_t pid;
	bool alive;
	int status;          /* wait status once reaped */
} worker_proc;

typedef struct demo {
	cli_common *cc;
	long long jobs, nworkers;
	const char *dir;
	bool keep_running;
	int64_t limit_ms;
	bool embedded;
	pgembed pg;
	bool cluster_up;     /* the private cluster started and has the database */
	char url[PATH_MAX * 3];
	char psql[PATH_MAX];
	char logdir[PATH_MAX];
	worker_proc w[MAX_WORKERS];
	int victim;          /* index of the killed worker, -1 before the kill */
	long long orphaned;  /* its jobs left running when it died */
	PGconn *conn;
	char err[600];
	bool tty;
	size_t progress_len; /* characters of the progress line on a tty */
	int64_t t0;
} demo;

enum { O_JOBS = OPT_COMMON_LAST + 1, O_WORKERS, O_DIR, O_KEEP, O_LIMIT };

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void on_signal(int sig)
{
	pgembed_interrupted = sig;
}

static int own_option(int code, const char *arg, void *ctx)
{
	demo *d = ctx;
	switch (code) {
	case O_JOBS: return cli_int(d->cc, "--jobs", arg, 20, 100000, &d->jobs) ? CLI_OK : CLI_USAGE;
	case O_WORKERS:
		return cli_int(d->cc, "--workers", arg, 2, MAX_WORKERS, &d->nworkers) ? CLI_OK : CLI_USAGE;
	case O_DIR:
		if (*arg == '\0') {
			cli_error(d->cc, "--dir: empty path");
			return CLI_USAGE;
		}
		d->dir = arg;
		return CLI_OK;
	case O_KEEP: d->keep_running = true; return CLI_OK;
	case O_LIMIT:
		if (!cli_duration(d->cc, "--time-limit", arg, &d->limit_ms))
			return CLI_USAGE;
		if (d->limit_ms < 10000) {
			cli_error(d->cc, "--time-limit: \"%s\" is under 10s", arg);
			return CLI_USAGE;
		}
		return CLI_OK;
	default: return CLI_USAGE;
	}
}

/* ---- the demo's own SQL: a connection with deadlines and retries ---- */

static void db_drop(demo *d)
{
	PQfinish(d->conn);
	d->conn = NULL;
}

static void ignore_notice(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

static bool db_connect(demo *d, int64_t deadline)
{
	const char *const keys[] = {"dbname", "application_name", NULL};
	const char *const vals[] = {d->url, "skiplock demo", NULL};
	PGconn *c = PQconnectStartParams(keys, vals, 1);
	PostgresPollingStatusType ps = PGRES_POLLING_WRITING;
	while (c && PQstatus(c) != CONNECTION_BAD && ps != PGRES_POLLING_FAILED) {
		if (ps == PGRES_POLLING_OK) {
			PQsetNoticeProcessor(c, ignore_notice, NULL);
			d->conn = c;
			return true;
		}
		int64_t left = deadline - now_ms();
		struct pollfd p = {.fd = PQsocket(c),
		                   .events = ps == PGRES_POLLING_READING ? POLLIN : POLLOUT};
		if (left <= 0 || pgembed_interrupted || poll(&p, 1, (int)left) == 0) {
			snprintf(d->err, sizeof(d->err), "connecting timed out");
			PQfinish(c);
			return false;
		}
		ps = PQconnectPoll(c);
	}
	snprintf(d->err, sizeof(d->err), "%s", c ? PQerrorMessage(c) : "out of memory");
	PQfinish(c);
	return false;
}

/* Waits for the result of the query sent on d->conn: the first error, else
 * the last result.  NULL (and no connection) when the connection was lost,
 * the deadline passed (the query is cancelled) or the demo was interrupted. */
static PGresult *db_wait(demo *d, int64_t deadline)
{
	PGresult *keep = NULL;
	for (;;) {
		while (!PQisBusy(d->conn)) {
			PGresult *r = PQgetResult(d->conn);
			if (r == NULL)
				return keep;
			if (keep && PQresultStatus(keep) == PGRES_FATAL_ERROR) {
				PQclear(r);
			} else {
				PQclear(keep);
				keep = r;
			}
		}
		int64_t left = deadline - now_ms();
		if (left <= 0 || pgembed_interrupted) {
			PGcancel *cancel = PQgetCancel(d->conn);
			char ignored[256];
			if (cancel)
				PQcancel(cancel, ignored, sizeof(ignored));
			PQfreeCancel(cancel);
			snprintf(d->err, sizeof(d->err), "%s",
			         pgembed_interrupted ? "interrupted" : "the query timed out");
			break;
		}
		struct pollfd p = {.fd = PQsocket(d->conn), .events = POLLIN};
		if ((poll(&p, 1, (int)(left < 200 ? left : 200)) < 0 && errno != EINTR) ||
		    !PQconsumeInput(d->conn)) {
			snprintf(d->err, sizeof(d->err), "%s", PQerrorMessage(d->conn));
			break;
		}
	}
	PQclear(keep);
	db_drop(d);
	return NULL;
}

/* Runs one statement (params) or a script (n == 0), retrying transient
 * failures within 30 s; every statement of the demo may be repeated.
 * Returns the result, or NULL with d->err set. */
static PGresult *db_query(demo *d, const char *sql, int n, const char *const *params)
{
	int64_t deadline = now_ms() + 30000;
	for (int attempt = 0;; attempt++) {
		PGresult *r = NULL;
		bool transient = true;
		if (d->conn || db_connect(d, deadline)) {
			int sent = n ? PQsendQueryParams(d->conn, sql, n, NULL, params, NULL, NULL, 0)
			             : PQsendQuery(d->conn, sql);
			if (!sent) {
				snprintf(d->err, sizeof(d->err), "%s", PQerrorMessage(d->conn));
				db_drop(d);
			} else if ((r = db_wait(d, deadline)) != NULL) {
				ExecStatusType st = PQresultStatus(r);
				if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
					return r;
				const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
				snprintf(d->err, sizeof(d->err), "%s%s%s%s", PQresultErrorMessage(r),
				         state ? " (SQLSTATE " : "", state ? state : "", state ? ")" : "");
				transient = skl_sqlstate_is_transient(state);
				PQclear(r);
				db_drop(d);
			}
		}
		d->err[strcspn(d->err, "\n")] = '\0';
		int64_t pause = 100LL << (attempt < 4 ? attempt : 4);
		if (!transient || pgembed_interrupted || now_ms() + pause > deadline)
			return NULL;
		poll(NULL, 0, (int)(pause / 2 + rand() % (pause / 2 + 1)));
	}
}

static long long field(const PGresult *r, int col)
{
	return strtoll(PQgetvalue(r, 0, col), NULL, 10);
}

/* ---- output ---- */

static double elapsed(const demo *d)
{
	return (double)(now_ms() - d->t0) / 1000.0;
}

static void clear_progress(demo *d)
{
	if (d->tty && d->progress_len) {
		fprintf(stderr, "\r%*s\r", (int)d->progress_len, "");
		d->progress_len = 0;
	}
}

static void say(demo *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(demo *d, const char *fmt, ...)
{
	clear_progress(d);
	va_list ap;
	va_start(ap, fmt);
	fputs("demo: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static void progress(demo *d, long long done, long long running, long long rescued)
{
	char line[160];
	int n = snprintf(line, sizeof(line), "demo: %lld/%lld done, %lld running, %lld rescued, "
	                 "%.1f s", done, d->jobs, running, rescued, elapsed(d));
	if (n < 0)
		return;
	if (d->tty) {
		int pad = d->progress_len > (size_t)n ? (int)(d->progress_len - (size_t)n) : 0;
		fprintf(stderr, "\r%s%*s", line, pad, "");
		d->progress_len = (size_t)n;
	} else {
		fprintf(stderr, "%s\n", line);
	}
	fflush(stderr);
}

/* ---- setup ---- */

/* skiplock's schema, as `skiplock init` installs it, and the demo's own
 * objects, reset in one transaction. */
static int setup_database(demo *d, skl_client **client)
{
	skl_client_options co = d->cc->client;
	co.url = d->url;
	co.log = NULL; /* the steps it applies are summed up below */
	skl_error err;
	int applied = 0;
	if (skl_client_open(&co, client, &err) != SKL_OK ||
	    skl_schema_install(*client, &applied, &err) != SKL_OK)
		return cli_fail(d->cc, &err);
	if (applied > 0)
		say(d, "installed skiplock's schema (version %d)", skl_schema_latest());
	PGresult *r = db_query(d, reset_sql, 0, NULL);
	if (r == NULL) {
		cli_error(d->cc, "cannot reset the demo's tables: %s", d->err);
		return CLI_PROBLEM;
	}
	PQclear(r);
	return CLI_OK;
}

/* The jobs: two kinds, payloads with an index, all in one transaction. */
static int enqueue_jobs(demo *d, skl_client *c)
{
	enum { PAYLOAD_MAX = 96 };
	size_t n = (size_t)d->jobs;
	skl_job_spec *specs = calloc(n, sizeof(*specs));
	int64_t *ids = calloc(n, sizeof(*ids));
	char *payloads = calloc(n, PAYLOAD_MAX);
	int rc = CLI_OK;
	skl_error err;
	if (specs == NULL || ids == NULL || payloads == NULL) {
		cli_error(d->cc, "out of memory");
		rc = CLI_PROBLEM;
	}
	for (size_t i = 0; rc == CLI_OK && i < n; i++) {
		char *p = payloads + i * PAYLOAD_MAX;
		unsigned long long k = i + 1;
		if (i % 2 == 0)
			snprintf(p, PAYLOAD_MAX, "{\"i\": %llu, \"image\": \"photo-%05llu.jpg\", "
			         "\"width\": 640}", k, k);
		else
			snprintf(p, PAYLOAD_MAX, "{\"i\": %llu, \"user\": %llu, \"channel\": \"email\"}",
			         k, 1000 + k);
		specs[i].kind = i % 2 == 0 ? "resize" : "notify";
		specs[i].payload = p;
		skl_enqueue_opts_init(&specs[i].opts);
		specs[i].opts.queue = DEMO_QUEUE;
	}
	d->t0 = now_ms();
	if (rc == CLI_OK && skl_enqueue_bulk(c, specs, n, ids, &err) != SKL_OK)
		rc = cli_fail(d->cc, &err);
	if (rc == CLI_OK)
		say(d, "enqueued %zu jobs (%zu resize, %zu notify) in one transaction", n,
		    (n + 1) / 2, n / 2);
	free(specs);
	free(ids);
	free(payloads);
	return rc;
}

/* ---- workers ---- */

static bool spawn_worker(demo *d, int i)
{
	worker_proc *w = &d->w[i];
	char log[PATH_MAX + 32];
	snprintf(w->owner, sizeof(w->owner), "demo-%ld-%c", (long)getpid(), 'a' + i);
	snprintf(log, sizeof(log), "%s/worker-%c.log", d->logdir, 'a' + i);
	const char *argv[32] = {"skiplock", "worker", "--queue", DEMO_QUEUE, "--owner", w->owner,
	                        "--handler", resize_handler, "--handler", notify_handler,
	                        "--concurrency", "4", "--lease", "2s", "--rescue-every", "1s",
	                        "--poll", "100ms", "--poll-max", "500ms", "--timeout", "30s",
	                        "--shutdown-timeout", "10s", "--handler-env", "DATABASE_URL"};
	int k = 26;
	if (d->cc->client.pooler != SKL_POOLER_AUTO) {
		argv[k++] = "--pooler";
		argv[k++] = skl_pooler_name(d->cc->client.pooler);
	}
	argv[k] = NULL;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		cli_error(d->cc, "cannot start a worker: %s", strerror(errno));
		return false;
	}
	if (pid == 0) {
		/* The URL goes through the environment, not argv, where every local
		 * user could read a password in it. */
		setenv("DATABASE_URL", d->url, 1);
		setenv("SKL_DEMO_WORKER", w->owner, 1);
		setenv("SKL_DEMO_PSQL", d->psql, 1);
		setenv("PGCONNECT_TIMEOUT", "10", 0);
		setenv("PGAPPNAME", "skiplock demo handler", 1);
		FILE *f = freopen(log, "a", stdout);
		if (f == NULL || dup2(STDOUT_FILENO, STDERR_FILENO) < 0 || !freopen("/dev/null", "r", stdin))
			_exit(127);
		execv("/proc/self/exe", (char *const *)argv);
		fprintf(stderr, "cannot run /proc/self/exe: %s\n", strerror(errno));
		_exit(127);
	}
	w->pid = pid;
	w->alive = true;
	return true;
}

static void reap(demo *d)
{
	for (int i = 0; i < d->nworkers; i++)
		if (d->w[i].alive && waitpid(d->w[i].pid, &d->w[i].status, WNOHANG) == d->w[i].pid)
			d->w[i].alive = false;
}

static void status_text(int st, char *buf, size_t n)
{
	if (WIFEXITED(st))
		snprintf(buf, n, "exited with status %d", WEXITSTATUS(st));
	else
		snprintf(buf, n, "was killed by signal %d", WTERMSIG(st));
}

/* SIGTERM every live worker, wait for the drain, SIGKILL stragglers. */
static void stop_workers(demo *d)
{
	for (int i = 0; i < d->nworkers; i++)
		if (d->w[i].alive)
			kill(d->w[i].pid, SIGTERM);
	int64_t deadline = now_ms() + 15000;
	for (;;) {
		reap(d);
		bool any = false;
		for (int i = 0; i < d->nworkers; i++)
			any |= d->w[i].alive;
		if (!any)
			return;
		if (now_ms() > deadline)
			break;
		poll(NULL, 0, 50);
	}
	for (int i = 0; i < d->nworkers; i++)
		if (d->w[i].alive) {
			kill(d->w[i].pid, SIGKILL);
			waitpid(d->w[i].pid, &d->w[i].status, 0);
			d->w[i].alive = false;
		}
}

/* Kills the first worker at a moment it holds running jobs: stopped
 * (SIGSTOP) so nothing changes while the database is asked, then SIGKILL,
 * or SIGCONT to try again later.  False on a database error. */
static bool try_kill(demo *d, bool *killed)
{
	worker_proc *w = &d->w[0];
	const char *p[1] = {w->owner};
	kill(w->pid, SIGSTOP);
	poll(NULL, 0, 50); /* a statement it had in flight finishes meanwhile */
	PGresult *r = db_query(d, progress_sql, 1, p);
	long long running = r ? field(r, 3) : 0;
	PQclear(r);
	if (r == NULL || running == 0) {
		kill(w->pid, SIGCONT);
		return r != NULL;
	}
	kill(w->pid, SIGKILL);
	waitpid(w->pid, &w->status, 0);
	w->alive = false;
	d->victim = 0;
	*killed = true;
	r = db_query(d, progress_sql, 1, p);
	d->orphaned = r ? field(r, 3) : running;
	PQclear(r);
	say(d, "killed worker %c (pid %ld) with SIGKILL while it ran %lld job%s; their leases "
	    "expire in 2s", 'a', (long)w->pid, d->orphaned, d->orphaned == 1 ? "" : "s");
	return true;
}

/* Runs until every job finished, a check fails, or the time limit. */
static int watch(demo *d)
{
	int64_t deadline = d->t0 + d->limit_ms, next_line = 0;
	bool killed = false;
	const char *p[1] = {d->w[0].owner};
	for (;;) {
		if (pgembed_interrupted) {
			clear_progress(d);
			cli_error(d->cc, "interrupted");
			return 128 + pgembed_interrupted;
		}
		reap(d);
		for (int i = 0; i < d->nworkers; i++)
			if (!d->w[i].alive && i != d->victim) {
				char why[64];
				status_text(d->w[i].status, why, sizeof(why));
				clear_progress(d);
				cli_error(d->cc, "worker %c (pid %ld) %s; its log is %s/worker-%c.log", 'a' + i,
				          (long)d->w[i].pid, why, d->logdir, 'a' + i);
				return CLI_PROBLEM;
			}
		PGresult *r = db_query(d, progress_sql, 1, p);
		if (r == NULL) {
			clear_progress(d);
			cli_error(d->cc, "cannot read the jobs' progress: %s", d->err);
			return CLI_PROBLEM;
		}
		long long done = field(r, 0), running = field(r, 1), failed = field(r, 2);
		long long rescued = field(r, 4);
		PQclear(r);
		if (!killed && done * 3 >= d->jobs && !try_kill(d, &killed)) {
			cli_error(d->cc, "cannot read the jobs' progress: %s", d->err);
			return CLI_PROBLEM;
		}
		int64_t now = now_ms();
		bool finished = done + failed >= d->jobs;
		if (d->tty || now >= next_line || finished) {
			progress(d, done, running, rescued);
			next_line = now + 1000;
		}
		if (finished) {
			if (d->tty) {
				fputc('\n', stderr);
				d->progress_len = 0;
			}
			if (killed)
				return CLI_OK;
			cli_error(d->cc, "every job finished before a worker could be killed mid-job");
			return CLI_PROBLEM;
		}
		if (now > deadline) {
			clear_progress(d);
			cli_error(d->cc, "gave up after %.0f s: %lld of %lld jobs done, %lld running",
			          (double)d->limit_ms / 1000.0, done, d->jobs, running);
			return CLI_PROBLEM;
		}
		poll(NULL, 0, 200);
	}
}

/* ---- the verdict ---- */

#define PLURAL(n) ((n) == 1 ? "" : "s")

/* Prints a check that failed; returns whether it held. */
static bool holds(demo *d, bool ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool holds(demo *d, bool ok, const char *fmt, ...)
{
	if (ok)
		return true;
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	cli_error(d->cc, "failed: %s", msg);
	return false;
}

static int summarize(demo *d, int rc)
{
	const char *p[1] = {d->w[d->victim >= 0 ? d->victim : 0].owner};
	PGresult *r = db_query(d, summary_sql, 1, p);
	if (r == NULL) {
		cli_error(d->cc, "cannot compute the summary: %s", d->err);
		return CLI_PROBLEM;
	}
	long long total = field(r, 0), once = field(r, 1), lost = field(r, 2), dups = field(r, 3);
	long long missing = field(r, 4), attempts = field(r, 5), rescued = field(r, 6);
	long long from_victim = field(r, 7), already = field(r, 8), stuck = field(r, 9);
	PQclear(r);
	char crash[160] = "no worker was killed";
	if (d->victim >= 0)
		snprintf(crash, sizeof(crash), "%lld rescued from the killed worker (pid %ld)",
		         from_victim, (long)d->w[d->victim].pid);
	if (already > 0)
		snprintf(crash + strlen(crash), sizeof(crash) - strlen(crash),
		         ": %lld had already taken effect and %s not repeated", already,
		         already == 1 ? "was" : "were");
	printf("demo: %lld jobs, %lld completed exactly once, %lld lost, %lld duplicate effect%s; "
	       "%lld attempts; %s; %.1f s\n", total, once, lost, dups, PLURAL(dups), attempts,
	       crash, elapsed(d));
	fflush(stdout);
	bool ok = rc == CLI_OK;
	ok &= holds(d, total == d->jobs, "%lld jobs in the queue, %lld enqueued", total, d->jobs);
	ok &= holds(d, lost == 0, "%lld job%s not completed (%lld still running)", lost,
	            PLURAL(lost), stuck);
	ok &= holds(d, dups == 0, "%lld job%s took effect more than once", dups, PLURAL(dups));
	ok &= holds(d, missing == 0, "%lld completed job%s left no effect", missing,
	            PLURAL(missing));
	ok &= holds(d, d->victim < 0 || from_victim > 0, "no job of the killed worker was rescued");
	for (int i = 0; i < d->nworkers; i++) {
		int st = d->w[i].status;
		char why[64];
		status_text(st, why, sizeof(why));
		ok &= holds(d, i == d->victim || (WIFEXITED(st) && WEXITSTATUS(st) == 0),
		            "worker %c (pid %ld) %s after SIGTERM", 'a' + i, (long)d->w[i].pid, why);
	}
	if (rescued > from_victim)
		say(d, "note: %lld job%s of live workers lost their lease (a stalled worker?)",
		    rescued - from_victim, PLURAL(rescued - from_victim));
	return ok ? CLI_OK : rc == CLI_OK ? CLI_PROBLEM : rc;
}

/* ---- the command ---- */

static void remove_logs(demo *d)
{
	char path[PATH_MAX + 32];
	for (int i = 0; i < d->nworkers; i++) {
		snprintf(path, sizeof(path), "%s/worker-%c.log", d->logdir, 'a' + i);
		unlink(path);
	}
	rmdir(d->logdir);
}

static int prepare(demo *d)
{
	const char *env = getenv("DATABASE_URL");
	const char *url = d->cc->client.url ? d->cc->client.url : env && *env ? env : NULL;
	d->embedded = url == NULL;
	if (!d->embedded && (d->dir || d->keep_running)) {
		cli_error(d->cc, "--dir and --keep-running apply only to the private cluster, not to --url "
		                 "or $DATABASE_URL");
		return CLI_USAGE;
	}
	if (!d->embedded && (size_t)snprintf(d->url, sizeof(d->url), "%s", url) >= sizeof(d->url)) {
		cli_error(d->cc, "--url: too long");
		return CLI_USAGE;
	}
	if (d->embedded) {
		int rc = pgembed_open(&d->pg, d->cc, d->dir ? d->dir : ".skiplock/pg");
		if (rc == CLI_OK)
			rc = pgembed_start(&d->pg, DEMO_DB);
		if (rc != CLI_OK)
			return rc;
		d->cluster_up = true;
		pgembed_url(&d->pg, DEMO_DB, d->url, sizeof(d->url));
	}
	if (!pgembed_find_psql(d->embedded ? d->pg.bindir : NULL, d->psql, sizeof(d->psql))) {
		cli_error(d->cc, "psql not found (the job handlers use it); install the Debian package "
		                 "postgresql-client");
		return CLI_PROBLEM;
	}
	return CLI_OK;
}

static int make_logdir(demo *d)
{
	const char *tmp = getenv("TMPDIR");
	if ((size_t)snprintf(d->logdir, sizeof(d->logdir), "%s/skiplock-demo.XXXXXX",
	                     tmp && *tmp ? tmp : "/tmp") >= sizeof(d->logdir) ||
	    mkdtemp(d->logdir) == NULL) {
		cli_error(d->cc, "cannot create a directory for the worker logs: %s", strerror(errno));
		d->logdir[0] = '\0';
		return CLI_PROBLEM;
	}
	return CLI_OK;
}

static int run(demo *d)
{
	int rc = prepare(d);
	if (rc != CLI_OK)
		return rc;
	skl_client *c = NULL;
	rc = setup_database(d, &c);
	if (rc == CLI_OK)
		rc = enqueue_jobs(d, c);
	skl_client_close(c);
	if (rc == CLI_OK)
		rc = make_logdir(d);
	if (rc != CLI_OK)
		return rc;
	char pids[MAX_WORKERS * 24] = "";
	for (int i = 0; i < d->nworkers; i++) {
		if (!spawn_worker(d, i))
			return CLI_PROBLEM;
		size_t n = strlen(pids);
		snprintf(pids + n, sizeof(pids) - n, "%s%c (pid %ld)", i ? ", " : "", 'a' + i,
		         (long)d->w[i].pid);
	}
	say(d, "started %lld workers: %s; one is killed once a third of the jobs are done",
	    d->nworkers, pids);
	rc = watch(d);
	stop_workers(d);
	if (rc == CLI_OK || rc == CLI_PROBLEM)
		rc = summarize(d, rc);
	return rc;
}

static void finish(demo *d, int rc)
{
	pgembed_interrupted = 0; /* an interrupted demo still cleans up, bounded */
	stop_workers(d);
	db_drop(d);
	if (d->logdir[0]) {
		if (rc == CLI_OK)
			remove_logs(d);
		else
			fprintf(stderr, "demo: worker logs kept in %s\n", d->logdir);
	}
	if (!d->embedded || d->pg.lock_fd < 0)
		return;
	if (d->keep_running && d->cluster_up) {
		char stop[PATH_MAX * 3];
		snprintf(stop, sizeof(stop), "%s%s/pg_ctl stop -D '%s'",
		         d->pg.as_user ? "runuser -u " PGEMBED_USER " -- " : "", d->pg.bindir, d->pg.data);
		printf("demo: PostgreSQL keeps running\n  connect: psql '%s'\n  stop:    %s\n", d->url,
		       stop);
	} else if (pgembed_stop(&d->pg) == CLI_OK) {
		fprintf(stderr, "demo: stopped PostgreSQL\n");
	}
	pgembed_close(&d->pg);
}

int cmd_demo(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_LONGOPTS,
		{"jobs", required_argument, NULL, O_JOBS},
		{"workers", required_argument, NULL, O_WORKERS},
		{"dir", required_argument, NULL, O_DIR},
		{"keep-running", no_argument, NULL, O_KEEP},
		{"time-limit", required_argument, NULL, O_LIMIT},
		{0}};
	cli_common cc;
	cli_common_init(&cc, "demo");
	static demo d;
	memset(&d, 0, sizeof(d));
	d.cc = &cc;
	d.jobs = 300;
	d.nworkers = 2;
	d.limit_ms = 120000;
	d.victim = -1;
	d.pg.lock_fd = -1;
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &d, usage, exit_help, 0, &done);
	if (done)
		return rc;
	d.tty = isatty(STDERR_FILENO);
	srand((unsigned)getpid());
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	rc = run(&d);
	finish(&d, rc);
	return rc;
}
