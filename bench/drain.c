/*
 * drain.c — skl-bench-drain: end-to-end throughput of skiplock workers.
 *
 *   skl-bench-drain --url URL --jobs N [--procs P] [--concurrency C] [--prefetch F]
 *                   [--connections K]
 *                   [--mode noop|cmd|stream [--stream CMD] [--inflight N]]
 *                   [--timeout S] [--worker-url URL [--pooled]] [--unretained]
 *   skl-bench-drain --url URL --sustain SECONDS [--backlog B] [--hold] ...
 *
 * Drain mode: empties skiplock.jobs, enqueues N jobs, VACUUM ANALYZE and
 * CHECKPOINT (so every run starts from the same state), then starts P
 * worker processes (skl-bench-worker) of concurrency C and waits until no
 * job is available or running; --connections K gives each worker K
 * connections (skl_worker_options.connections).  The rate is N divided by the time from
 * just before the first worker was started to the last finished_at, and
 * the run fails unless exactly N jobs are completed, checked in SQL.
 * --worker-url gives the workers another URL than the driver's (which must
 * be direct: it truncates, vacuums and counts); --pooled tells them it is
 * a transaction pooler's.  --mode stream runs the streaming handler CMD
 * in each worker (skl-bench-worker --mode stream), N jobs in flight.
 * --unretained is for a database whose completed jobs are kept 0 seconds
 * (skiplock retention set --state completed --retain 0: the outcome deletes
 * the job), where no finished_at is left to read: the run ends at the first
 * check (every 10 ms once the handlers started N jobs) that finds no job
 * available or running, and fails unless the handlers started exactly N
 * jobs and no job at all is left, live or finished (noop mode only).
 *
 * Sustain mode: the same workers for a fixed time while this program keeps
 * about B jobs waiting (bulk enqueue of up to 5000 at a time).  The rate is
 * the jobs completed within the window (finished_at, checked in SQL)
 * divided by its length.  --hold first opens a REPEATABLE READ transaction
 * on another connection and keeps its snapshot for the whole window, so
 * vacuum can remove nothing; dead tuples of skiplock.jobs are counted at
 * the end, before it is released.
 *
 * While it runs it samples each worker's VmRSS and RssAnon (its private,
 * anonymous memory; the rest of RSS is mostly shared library pages), VmHWM
 * (the peak) at the end, and the number of connections whose
 * application_name is that worker's.  Prints one line:
 *   rate=… seconds=… completed=… rss_kb=… hwm_kb=… anon_kb=… conns=…
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define MAX_PROCS 16

typedef struct run {
	const char *url, *worker_url;
	bool pooled;
	long jobs;
	int procs, conc, prefetch, connections;
	const char *mode, *kind, *stream, *inflight;
	double timeout;
	double sustain;
	long backlog;
	bool hold, unretained;
	char counter_path[256];
	const char *logpath;
	_Atomic uint64_t *counter;
	pid_t pids[MAX_PROCS];
	long rss_kb, hwm_kb, anon_kb;
	int conns;
} run;

static void prepare(run *r, PGconn *ctl, skl_client *c, long fill)
{
	bench_reset_jobs(ctl);
	bench_enqueue(c, r->kind, fill, 5000);
	bench_exec(ctl, "VACUUM ANALYZE skiplock.jobs");
	bench_exec(ctl, "CHECKPOINT");
}

static void start_workers(run *r)
{
	char conc[16], pre[16], app[64], conns[16];
	snprintf(conc, sizeof(conc), "%d", r->conc);
	snprintf(conns, sizeof(conns), "%d", r->connections);
	snprintf(pre, sizeof(pre), "%d", r->prefetch);
	for (int i = 0; i < r->procs; i++) {
		snprintf(app, sizeof(app), "skl-bench-w%d", i);
		char *args[20] = {"--url", (char *)r->worker_url, "--mode", (char *)r->mode,
		                  "--concurrency", conc, "--prefetch", pre, "--counter", r->counter_path,
		                  "--app", app};
		int n = 12;
		if (r->pooled)
			args[n++] = "--pooled";
		if (r->connections > 1) {
			args[n++] = "--connections";
			args[n++] = conns;
		}
		if (r->stream) {
			args[n++] = "--stream";
			args[n++] = (char *)r->stream;
			args[n++] = "--inflight";
			args[n++] = (char *)r->inflight;
		}
		args[n] = NULL;
		r->pids[i] = bench_spawn_worker(args, r->logpath);
	}
}

static void sample(run *r, PGconn *ctl, bool conns)
{
	for (int i = 0; i < r->procs; i++) {
		long kb = bench_proc_kb(r->pids[i], "VmRSS");
		if (kb > r->rss_kb)
			r->rss_kb = kb;
		kb = bench_proc_kb(r->pids[i], "RssAnon");
		if (kb > r->anon_kb)
			r->anon_kb = kb;
	}
	if (!conns)
		return;
	/* connections per worker process: the busiest one */
	int64_t n = bench_int(ctl,
		"SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM pg_stat_activity"
		" WHERE application_name LIKE 'skl-bench-w%' GROUP BY application_name) s");
	if (n > r->conns)
		r->conns = (int)n;
}

static bool all_alive(run *r)
{
	for (int i = 0; i < r->procs; i++)
		if (!bench_alive(r->pids[i]))
			return false;
	return true;
}

static bool drained(PGconn *ctl)
{
	return bench_int(ctl,
		"SELECT (EXISTS (SELECT 1 FROM skiplock.jobs WHERE state = 'available')"
		"     OR EXISTS (SELECT 1 FROM skiplock.jobs WHERE state = 'running'))::int") == 0;
}

static void stop_workers(run *r)
{
	for (int i = 0; i < r->procs; i++) {
		long kb = bench_proc_kb(r->pids[i], "VmHWM");
		if (kb > r->hwm_kb)
			r->hwm_kb = kb;
	}
	for (int i = 0; i < r->procs; i++)
		kill(r->pids[i], SIGTERM);
	for (int i = 0; i < r->procs; i++)
		bench_stop(r->pids[i], 30);
}

static void drain(run *r, PGconn *ctl)
{
	double t0 = bench_wall(), deadline = bench_mono() + r->timeout, next_conn = 0, t_seen = 0;
	start_workers(r);
	for (;;) {
		double now = bench_mono();
		if (now > deadline) {
			stop_workers(r);
			bench_die("drain of %ld jobs did not finish within %.0f s", r->jobs, r->timeout);
		}
		if (!all_alive(r)) {
			stop_workers(r);
			bench_die("a worker process exited during the drain");
		}
		sample(r, ctl, now >= next_conn);
		if (now >= next_conn)
			next_conn = now + 0.25;
		/* noop handlers count starts; command jobs are only seen in SQL */
		bool maybe = strcmp(r->mode, "noop") != 0 || atomic_load(&r->counter[0]) >= (uint64_t)r->jobs;
		if (maybe && drained(ctl)) {
			t_seen = bench_wall();
			break;
		}
		bench_sleep(maybe ? 0.01 : 0.05);
	}
	stop_workers(r);
	if (r->unretained) {
		uint64_t started = atomic_load(&r->counter[0]);
		int64_t left = bench_int(ctl, "SELECT count(*) FROM skiplock.all_jobs");
		if (started != (uint64_t)r->jobs || left != 0)
			bench_die("retention 0: expected %ld handler starts and no job left, found %" PRIu64
			          " starts and %" PRId64 " jobs", r->jobs, started, left);
		double secs = t_seen - t0;
		printf("rate=%.1f seconds=%.3f completed=%ld rss_kb=%ld hwm_kb=%ld anon_kb=%ld conns=%d\n",
		       (double)r->jobs / secs, secs, r->jobs, r->rss_kb, r->hwm_kb, r->anon_kb, r->conns);
		return;
	}
	PGresult *res = PQexec(ctl,
		"SELECT count(*) FILTER (WHERE state = 'completed'), count(*),"
		" extract(epoch FROM max(finished_at))::float8 FROM skiplock.all_jobs");
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		bench_die("final count: %s", PQerrorMessage(ctl));
	long completed = atol(PQgetvalue(res, 0, 0)), total = atol(PQgetvalue(res, 0, 1));
	double last = strtod(PQgetvalue(res, 0, 2), NULL);
	PQclear(res);
	if (completed != r->jobs || total != r->jobs)
		bench_die("expected %ld completed jobs, found %ld of %ld", r->jobs, completed, total);
	double secs = last - t0;
	printf("rate=%.1f seconds=%.3f completed=%ld rss_kb=%ld hwm_kb=%ld anon_kb=%ld conns=%d\n",
	       (double)completed / secs, secs, completed, r->rss_kb, r->hwm_kb, r->anon_kb, r->conns);
}

static PGconn *hold_snapshot(const char *url)
{
	PGconn *h = bench_connect(url, "skl-bench-hold");
	bench_exec(h, "BEGIN ISOLATION LEVEL REPEATABLE READ");
	/* the first query takes the snapshot, and its xmin stays until COMMIT */
	bench_int(h, "SELECT count(*) FROM skiplock.jobs WHERE id = -1");
	return h;
}

static void dead_tuples(PGconn *ctl, int64_t *exact, int64_t *stats)
{
	*exact = -1;
	PGresult *res = PQexec(ctl, "SELECT dead_tuple_count FROM pgstattuple('skiplock.jobs')");
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		*exact = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	*stats = -1;
	if (*exact >= 0)
		return;
	/* without pgstattuple: the statistics, which reach the view within
	 * about a second */
	bench_sleep(1.0);
	bench_exec(ctl, "SELECT pg_stat_clear_snapshot()");
	*stats = bench_int(ctl, "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables"
	                        " WHERE schemaname = 'skiplock' AND relname = 'jobs'");
}

static void sustain(run *r, PGconn *ctl, skl_client *c)
{
	PGconn *h = r->hold ? hold_snapshot(r->url) : NULL;
	long produced = r->backlog;
	double t0 = bench_wall(), start = bench_mono(), next_conn = 0;
	start_workers(r);
	while (bench_mono() - start < r->sustain) {
		double now = bench_mono();
		if (!all_alive(r)) {
			stop_workers(r);
			bench_die("a worker process exited during the run");
		}
		sample(r, ctl, now >= next_conn);
		if (now >= next_conn)
			next_conn = now + 0.5;
		long waiting = produced - (long)atomic_load(&r->counter[0]);
		if (waiting < r->backlog) {
			long k = r->backlog - waiting;
			if (k > 5000)
				k = 5000;
			bench_enqueue(c, r->kind, k, 5000);
			produced += k;
		} else {
			bench_sleep(0.01);
		}
	}
	double t1 = t0 + r->sustain;
	stop_workers(r);
	char sql[256];
	snprintf(sql, sizeof(sql),
	         "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed'"
	         " AND finished_at <= to_timestamp(%.6f)", t1);
	int64_t done = bench_int(ctl, sql);
	int64_t exact, stats;
	dead_tuples(ctl, &exact, &stats);
	int64_t xmin_held = h ? bench_int(ctl, "SELECT count(*) FROM pg_stat_activity"
	                                       " WHERE application_name = 'skl-bench-hold'"
	                                       " AND backend_xmin IS NOT NULL") : 0;
	if (h) {
		bench_exec(h, "COMMIT");
		PQfinish(h);
		if (xmin_held != 1)
			bench_die("the REPEATABLE READ session did not hold its snapshot");
	}
	printf("rate=%.1f seconds=%.3f completed=%" PRId64 " produced=%ld dead_exact=%" PRId64
	       " dead_stats=%" PRId64 " rss_kb=%ld hwm_kb=%ld conns=%d\n",
	       (double)done / r->sustain, r->sustain, done, produced, exact, stats, r->rss_kb,
	       r->hwm_kb, r->conns);
}

int main(int argc, char **argv)
{
	run r = {
		.url = bench_opt(argc, argv, "--url", NULL),
		.jobs = atol(bench_opt(argc, argv, "--jobs", "10000")),
		.procs = atoi(bench_opt(argc, argv, "--procs", "1")),
		.conc = atoi(bench_opt(argc, argv, "--concurrency", "8")),
		.prefetch = atoi(bench_opt(argc, argv, "--prefetch", "0")),
		.connections = atoi(bench_opt(argc, argv, "--connections", "1")),
		.mode = bench_opt(argc, argv, "--mode", "noop"),
		.timeout = atof(bench_opt(argc, argv, "--timeout", "600")),
		.sustain = atof(bench_opt(argc, argv, "--sustain", "0")),
		.backlog = atol(bench_opt(argc, argv, "--backlog", "20000")),
		.hold = bench_flag(argc, argv, "--hold"),
		.unretained = bench_flag(argc, argv, "--unretained"),
		.logpath = bench_opt(argc, argv, "--log", NULL),
		.pooled = bench_flag(argc, argv, "--pooled"),
		.stream = bench_opt(argc, argv, "--stream", NULL),
		.inflight = bench_opt(argc, argv, "--inflight", "64"),
	};
	r.worker_url = bench_opt(argc, argv, "--worker-url", r.url);
	if (r.url == NULL || r.jobs < 1 || r.procs < 1 || r.procs > MAX_PROCS || r.conc < 1 ||
	    r.connections < 1)
		bench_die("usage: skl-bench-drain --url URL --jobs N [--procs P] [--concurrency C]"
		          " [--prefetch F] [--connections K]"
		          " [--mode noop|cmd|stream [--stream CMD] [--inflight N]]"
		          " [--worker-url URL [--pooled]] [--unretained]"
		          " [--sustain S [--backlog B] [--hold]]");
	if (strcmp(r.mode, "noop") == 0)
		r.kind = "noop";
	else if (strcmp(r.mode, "cmd") == 0)
		r.kind = "cmd";
	else if (strcmp(r.mode, "stream") == 0 && r.stream != NULL)
		r.kind = "stream";
	else
		bench_die("unknown --mode %s (stream needs --stream CMD)", r.mode);
	if (r.sustain > 0 && strcmp(r.mode, "noop") != 0)
		bench_die("--sustain needs --mode noop");
	if (r.unretained && (r.sustain > 0 || strcmp(r.mode, "noop") != 0))
		bench_die("--unretained is for a drain in --mode noop");
	const char *tmp = getenv("TMPDIR");
	snprintf(r.counter_path, sizeof(r.counter_path), "%s/skl-bench-counter.%d",
	         tmp && *tmp ? tmp : "/tmp", (int)getpid());
	r.counter = bench_counter(r.counter_path, true);

	PGconn *ctl = bench_connect(r.url, "skl-bench-control");
	skl_client *c = bench_client(r.url, false, "skl-bench-enqueue");
	prepare(&r, ctl, c, r.sustain > 0 ? r.backlog : r.jobs);
	if (r.sustain > 0)
		sustain(&r, ctl, c);
	else
		drain(&r, ctl);
	unlink(r.counter_path);
	skl_client_close(c);
	PQfinish(ctl);
	return 0;
}
