/*
 * Integration tests of the retry policy against a stand-in HTTP dependency
 * in the test process (tests/support/depserver.h), run direct and through
 * PgBouncer:
 *  - breaker: the dependency fails every call; the kind's breaker opens
 *    fleet-wide (two workers, one direct and one through PgBouncer), no
 *    job of the kind is claimed while it is open (a claim log kept by a
 *    trigger, checked in SQL), half-open admits exactly `probes` jobs, it
 *    closes once the dependency is back, and every job completes without
 *    attempts spent while open;
 *  - retry storm: 200 jobs, the dependency down for 10 s, 4 workers per
 *    policy: exponential without budget against the defaults (full jitter,
 *    10 % budget).  Prints both per-100 ms histograms of the attempts the
 *    dependency saw; retries during the outage stay within the budget with
 *    the defaults; every job completes after recovery.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "depserver.h"
#include "core/internal.h"
#include "itest.h"
#include "skiplock.h"

/* ---- worker processes whose handler calls the dependency ---- */

typedef struct wspec {
	const char *url;
	const char *kind;
	const char *owner;
	int port;                    /* the dependency */
	int concurrency;
	skl_backoff backoff;
	int64_t base_ms, cap_ms;
	int budget_pct;
	const skl_breaker_config *breaker;
	const char *log_path;        /* the worker's warnings, appended; NULL: none */
} wspec;

static int dep_port;
static skl_worker *stop_me;
static int log_fd = -1;

/* Warnings of a worker process, one line each, to its log file. */
static void log_line(void *ctx, skl_log_level level, const char *msg)
{
	(void)ctx;
	char line[1200];
	int n = snprintf(line, sizeof(line), "%s\n", msg);
	if (level >= SKL_LOG_WARNING && log_fd >= 0 && n > 0)
		(void)!write(log_fd, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
}

static int call_handler(const skl_job *job, void *ctx)
{
	(void)ctx;
	int status = dep_call(dep_port, job->attempt);
	if (status == 200)
		return SKL_JOB_OK;
	char msg[64];
	snprintf(msg, sizeof(msg), "dependency answered %d", status);
	skl_job_set_error(job, msg);
	return SKL_JOB_RETRY;
}

static void on_term(int sig)
{
	(void)sig;
	skl_worker_stop(stop_me);
}

static pid_t worker_start(const wspec *s, int listen_fd)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	close(listen_fd);
	dep_port = s->port;
	skl_client_options co;
	skl_client_options_init(&co);
	co.url = s->url;
	co.retry_max_ms = 60000;
	skl_worker_options wo;
	skl_worker_options_init(&wo);
	wo.concurrency = s->concurrency;
	wo.poll_ms = 50;
	wo.poll_max_ms = 200;
	wo.no_cron = true;
	wo.owner = s->owner;
	wo.backoff = s->backoff;
	wo.backoff_base_ms = s->base_ms;
	wo.backoff_cap_ms = s->cap_ms;
	wo.retry_budget_pct = s->budget_pct;
	if (s->log_path) {
		log_fd = open(s->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		wo.log = log_line;
	}
	skl_worker *w = NULL;
	skl_error err;
	if (skl_worker_new(&co, &wo, &w, &err) != SKL_OK ||
	    skl_worker_handle(w, s->kind, call_handler, NULL, &err) != SKL_OK ||
	    (s->breaker && skl_worker_breaker(w, s->kind, s->breaker, &err) != SKL_OK))
		_exit(3);
	stop_me = w;
	signal(SIGTERM, on_term);
	skl_rc rc = skl_worker_run(w, &err);
	if (rc != SKL_OK)
		fprintf(stderr, "worker %s: %s\n", s->owner, err.message);
	skl_worker_free(w);
	_exit(rc == SKL_OK ? 0 : 4);
}

static void workers_stop(pid_t *pids, int n)
{
	for (int i = 0; i < n; i++)
		kill(pids[i], SIGTERM);
	for (int i = 0; i < n; i++) {
		int st = 0;
		waitpid(pids[i], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			itest_fail(__FILE__, __LINE__, "worker %d ended with status 0x%x", i, st);
	}
}

static skl_client *open_client(itest_ctx *t)
{
	return itest_client(t, NULL, true);
}

static void enqueue_n(skl_client *c, const char *kind, int n)
{
	skl_job_spec *specs = calloc((size_t)n, sizeof(*specs));
	int64_t *ids = calloc((size_t)n, sizeof(int64_t));
	CHECK(specs && ids);
	for (int i = 0; i < n; i++)
		specs[i] = (skl_job_spec){.kind = kind, .opts = {.max_attempts = 100}};
	skl_error err;
	if (skl_enqueue_bulk(c, specs, (size_t)n, ids, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "enqueue: %s", err.message);
	free(specs);
	free(ids);
}

/* Waits until SQL returns want, up to timeout_s; fails the case otherwise. */
static void wait_for(itest_ctx *t, const char *sql, long long want, int timeout_s,
                     const char *what)
{
	int64_t end = itest_now_ms() + timeout_s * 1000LL;
	long long got = -1;
	while (itest_now_ms() < end) {
		if ((got = itest_int(t->admin, "%s", sql)) == want)
			return;
		usleep(50000);
	}
	itest_fail(__FILE__, __LINE__, "%s: still %lld (want %lld) after %d s", what, got, want,
	           timeout_s);
}

/* ---- breaker ---- */

/* Every claim of a job (a change of its fencing token), with the time its
 * statement ended.  The trigger fires inside skiplock.claim, whose
 * search_path is pg_catalog only: it names its table with the schema. */
static const char claim_log_sql[] =
	"CREATE TABLE public.claims (job_id bigint, fencing bigint, at timestamptz);"
	"CREATE FUNCTION log_claim() RETURNS trigger LANGUAGE plpgsql AS $$"
	" BEGIN INSERT INTO public.claims VALUES (NEW.id, NEW.fencing, clock_timestamp());"
	" RETURN NULL; END $$;"
	"CREATE TRIGGER log_claim AFTER UPDATE ON skiplock.jobs FOR EACH ROW"
	" WHEN (NEW.fencing <> OLD.fencing) EXECUTE FUNCTION log_claim();";

/* Claims in each breaker interval: an event and the next one. */
static const char intervals_sql[] =
	"WITH e AS (SELECT to_state, at, lead(at) OVER (ORDER BY id) AS until,"
	"                  lead(to_state) OVER (ORDER BY id) AS next"
	"             FROM skiplock.breaker_events WHERE kind = 'dep')"
	" SELECT e.to_state, coalesce(e.next, '-'),"
	"        (SELECT count(*) FROM public.claims c WHERE c.at >= e.at + CASE WHEN e.to_state = 'open'"
	"            THEN $1::interval ELSE '0 s' END AND c.at < coalesce(e.until, 'infinity')),"
	"        round(extract(epoch FROM coalesce(e.until, now()) - e.at) * 1000)"
	"   FROM e ORDER BY e.at";

static void check_intervals(itest_ctx *t, int probes, int *opens, int *closes)
{
	/* a claim whose snapshot predates the opening may end just after it */
	const char *slack[] = {"500 milliseconds"};
	PGresult *r = PQexecParams(t->admin, intervals_sql, 1, NULL, slack, NULL, NULL, 0);
	CHECK(PQresultStatus(r) == PGRES_TUPLES_OK);
	*opens = *closes = 0;
	for (int i = 0; i < PQntuples(r); i++) {
		const char *st = PQgetvalue(r, i, 0), *next = PQgetvalue(r, i, 1);
		long long claims = atoll(PQgetvalue(r, i, 2)), ms = atoll(PQgetvalue(r, i, 3));
		printf("  breaker %-9s for %5lld ms, then %-9s: %lld claim(s)%s\n", st, ms, next, claims,
		       strcmp(st, "open") == 0 ? " after its first 500 ms" : "");
		if (strcmp(st, "open") == 0) {
			(*opens)++;
			CHECK_EQ(claims, 0);
		} else if (strcmp(st, "half_open") == 0) {
			CHECK_INT(<=, claims, probes);
			if (strcmp(next, "closed") == 0)
				CHECK_EQ(claims, probes);
		} else if (strcmp(st, "closed") == 0 && i > 0) {
			(*closes)++;
		}
	}
	PQclear(r);
}

static void breaker_fleet_wide(itest_ctx *t)
{
	skl_client *c = open_client(t);
	PQclear(itest_sql(t->admin, "%s", claim_log_sql));
	const int njobs = 60, probes = 3;
	enqueue_n(c, "dep", njobs);
	depserver d;
	dep_listen(&d);
	atomic_store(&d.failing, 1);
	d.slow_ms = 600; /* probes take a while: a fourth one would have time to slip in */
	skl_breaker_config bc;
	skl_breaker_config_init(&bc);
	bc.open_ms = 2500;
	bc.probes = probes;
	wspec s = {.kind = "dep", .port = d.port, .concurrency = 4, .backoff = SKL_BACKOFF_FIXED,
	           .base_ms = 100, .cap_ms = 1000, .budget_pct = 0, .breaker = &bc};
	pid_t pids[2];
	s.url = t->direct_url;
	s.owner = "itest-direct";
	pids[0] = worker_start(&s, d.fd);
	s.url = t->pooled_url;
	s.owner = "itest-pooled";
	pids[1] = worker_start(&s, d.fd);
	dep_start(&d);
	/* min 10 calls at 50 %: opens within the first dozen failures */
	wait_for(t, "SELECT count(*) FROM skiplock.breakers WHERE kind = 'dep' AND state = 'open'",
	         1, 30, "breaker open");
	/* a probe fails and opens it again; then the dependency comes back */
	wait_for(t, "SELECT count(*) FROM skiplock.breaker_events WHERE kind = 'dep'"
	            " AND from_state = 'half_open' AND to_state = 'open'", 1, 30, "probe failed");
	atomic_store(&d.slow_successes, probes);
	atomic_store(&d.failing, 0);
	wait_for(t, "SELECT count(*) FROM skiplock.all_jobs WHERE state <> 'completed'", 0, 60,
	         "jobs completed");
	workers_stop(pids, 2);
	dep_stop(&d);
	int opens, closes;
	check_intervals(t, probes, &opens, &closes);
	CHECK_INT(>=, opens, 2);
	CHECK_EQ(closes, 1);
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.breakers WHERE kind = 'dep'"),
	          "closed");
	/* attempts: the claims until it first opened, at most `probes` per
	 * half-open interval, then one success each; none while open */
	long long attempts = itest_int(t->admin, "SELECT sum(attempt) FROM skiplock.all_jobs");
	long long claims = itest_int(t->admin, "SELECT count(*) FROM claims");
	long long before = itest_int(t->admin,
		"SELECT count(*) FROM claims WHERE at < (SELECT min(at) + interval '500 ms'"
		"  FROM skiplock.breaker_events WHERE kind = 'dep' AND to_state = 'open')");
	printf("  %d jobs, %lld claims until it opened, %lld attempts in all\n", njobs, before,
	       attempts);
	CHECK_EQ(attempts, claims);
	CHECK_INT(<=, attempts - njobs, before + (long long)probes * (opens - 1));
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed'"),
	         njobs);
	itest_no_leftovers(t);
	skl_client_close(c);
}

/* ---- retry storm ---- */

#define STORM_JOBS 200
#define STORM_DOWN_MS 10000
#define STORM_WORKERS 4
#define HIST_MS 100

typedef struct storm {
	const char *name;
	depserver d;
	pid_t pids[STORM_WORKERS];
	char logs[STORM_WORKERS][64];
	int total, retries_down;
} storm;

/* Lines of a worker's log that report the budget spent. */
static int budget_lines(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[1200];
	int n = 0;
	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, "retry budget spent") != NULL;
	if (f)
		fclose(f);
	unlink(path);
	return n;
}

static void storm_start(itest_ctx *t, storm *s, const char *kind, skl_backoff b, int budget)
{
	dep_listen(&s->d);
	s->d.down_for_ms = STORM_DOWN_MS;
	wspec w = {.url = t->url, .kind = kind, .port = s->d.port, .concurrency = 8, .backoff = b,
	           .base_ms = 500, .cap_ms = 2 * STORM_DOWN_MS + 2000, .budget_pct = budget};
	char owner[STORM_WORKERS][32];
	for (int i = 0; i < STORM_WORKERS; i++) {
		snprintf(owner[i], sizeof(owner[i]), "%s-%d", kind, i);
		snprintf(s->logs[i], sizeof(s->logs[i]), "/tmp/skl-storm-%d-%s-%d.log", (int)getpid(),
		         kind, i);
		unlink(s->logs[i]);
		w.owner = owner[i];
		w.log_path = s->logs[i];
		s->pids[i] = worker_start(&w, s->d.fd);
	}
}

/* Prints the histogram of requests per 100 ms and counts them. */
static void storm_report(storm *s)
{
	dep_request *r;
	int n = dep_snapshot(&s->d, &r);
	int nb = 0;
	for (int i = 0; i < n; i++)
		if (r[i].t_ms / HIST_MS + 1 > nb)
			nb = (int)(r[i].t_ms / HIST_MS) + 1;
	int *all = calloc((size_t)nb + 1, sizeof(int)), *re = calloc((size_t)nb + 1, sizeof(int));
	CHECK(all && re);
	s->total = n;
	for (int i = 0; i < n; i++) {
		all[r[i].t_ms / HIST_MS]++;
		if (r[i].attempt > 1) {
			re[r[i].t_ms / HIST_MS]++;
			s->retries_down += r[i].t_ms < STORM_DOWN_MS;
		}
	}
	printf("%s: %d requests, %d retries during the %d s outage\n"
	       "  attempts per 100 ms (first attempts + retries), one line per second:\n",
	       s->name, n, s->retries_down, STORM_DOWN_MS / 1000);
	for (int sec = 0; sec * 10 < nb; sec++) {
		printf("  %3d s |", sec);
		for (int b = sec * 10; b < sec * 10 + 10 && b < nb; b++)
			printf(" %3d", all[b]);
		printf("\n");
	}
	free(all);
	free(re);
	free(r);
}

static void retry_storm(itest_ctx *t)
{
	skl_client *c = open_client(t);
	enqueue_n(c, "storm_exp", STORM_JOBS);
	enqueue_n(c, "storm_default", STORM_JOBS);
	storm x = {.name = "exponential, no budget"}, f = {.name = "defaults (full jitter, 10% budget)"};
	skl_worker_options defaults;
	skl_worker_options_init(&defaults);
	storm_start(t, &x, "storm_exp", SKL_BACKOFF_EXPONENTIAL, 0);
	storm_start(t, &f, "storm_default", defaults.backoff, defaults.retry_budget_pct);
	int64_t started = itest_now_ms();
	dep_start(&x.d);
	dep_start(&f.d);
	wait_for(t, "SELECT count(*) FROM skiplock.all_jobs WHERE state <> 'completed'", 0, 80,
	         "every job completed after the outage");
	workers_stop(x.pids, STORM_WORKERS);
	workers_stop(f.pids, STORM_WORKERS);
	int64_t ran_s = (itest_now_ms() - started) / 1000;
	storm_report(&x);
	storm_report(&f);
	/* a spent budget is logged once per 10 s window and kind, not per job */
	int lines = 0;
	for (int i = 0; i < STORM_WORKERS; i++) {
		int n = budget_lines(f.logs[i]);
		CHECK_INT(<=, n, ran_s / (SKL_RETRY_BUDGET_WINDOW_MS / 1000) + 1);
		CHECK_EQ(budget_lines(x.logs[i]), 0);
		lines += n;
	}
	printf("budget-spent log lines: %d from %d workers in %" PRId64 " s\n", lines,
	       STORM_WORKERS, ran_s);
	CHECK_INT(>=, lines, 1);
	/* Per worker and window the budget is 3/s * 10 s + 10 % of its first
	 * attempts; the outage may span two windows (1 s buckets). */
	int bound = 2 * (STORM_WORKERS * SKL_RETRY_BUDGET_MIN_PER_S *
	                 (SKL_RETRY_BUDGET_WINDOW_MS / 1000) + STORM_JOBS * 10 / 100);
	printf("budget bound during the outage: %d retries\n", bound);
	CHECK_INT(<=, f.retries_down, bound);
	CHECK_INT(>, x.retries_down, bound);
	CHECK_INT(<, f.total, x.total);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed'"),
	         2 * STORM_JOBS);
	dep_stop(&x.d);
	dep_stop(&f.d);
	itest_no_leftovers(t);
	skl_client_close(c);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"breaker_fleet_wide", breaker_fleet_wide, 120},
		{"retry_storm", retry_storm, 150},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
