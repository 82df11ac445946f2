/*
 * latency.c — skl-bench-latency: enqueue -> handler-start latency at a
 * steady arrival rate.
 *
 *   skl-bench-latency --url URL --control-url URL [--pooled] [--rate R]
 *                     [--seconds S] [--concurrency C] [--timeout S]
 *
 * Starts one worker process (skl-bench-worker --mode stamp) on URL, waits
 * until it has run a warm-up job, then enqueues on URL at R jobs/s for S
 * seconds: job i is due at start + i/R, and every job that is due is
 * enqueued at once (one skl_enqueue_bulk call for all due jobs, usually
 * one), so the rate holds even when a commit is slow.
 *
 * Clocks: a job's enqueue time is its created_at, the server's now() at the
 * start of the enqueue statement (the server reads CLOCK_REALTIME); the
 * handler's first act is clock_gettime(CLOCK_REALTIME), kept as the job's
 * result.  Both are the same host's realtime clock.  The latency therefore
 * includes the enqueue's own commit, the wait for the worker's next claim,
 * the claim, and the hand-off to a handler thread.
 *
 * Prints: n=… rate=… p50_ms=… p95_ms=… p99_ms=… max_ms=…
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench.h"

static void wait_count(_Atomic uint64_t *counter, uint64_t want, double seconds, pid_t w)
{
	double until = bench_mono() + seconds;
	while (atomic_load(&counter[0]) < want) {
		if (bench_mono() > until)
			bench_die("worker ran %llu of %llu jobs within %.0f s",
			          (unsigned long long)atomic_load(&counter[0]), (unsigned long long)want,
			          seconds);
		if (!bench_alive(w))
			bench_die("the worker process exited");
		bench_sleep(0.005);
	}
}

static void wait_recorded(PGconn *ctl, double seconds)
{
	double until = bench_mono() + seconds;
	while (bench_int(ctl, "SELECT count(*) FROM skiplock.jobs WHERE state <> 'completed'") > 0) {
		if (bench_mono() > until)
			bench_die("outcomes not recorded within %.0f s", seconds);
		bench_sleep(0.05);
	}
}

int main(int argc, char **argv)
{
	const char *url = bench_opt(argc, argv, "--url", NULL);
	const char *ctl_url = bench_opt(argc, argv, "--control-url", url);
	bool pooled = bench_flag(argc, argv, "--pooled");
	double rate = atof(bench_opt(argc, argv, "--rate", "500"));
	double seconds = atof(bench_opt(argc, argv, "--seconds", "10"));
	const char *conc = bench_opt(argc, argv, "--concurrency", "8");
	const char *logpath = bench_opt(argc, argv, "--log", NULL);
	if (url == NULL || rate <= 0 || seconds <= 0)
		bench_die("usage: skl-bench-latency --url URL [--control-url URL] [--pooled]"
		          " [--rate R] [--seconds S]");

	PGconn *ctl = bench_connect(ctl_url, "skl-bench-control");
	bench_reset_jobs(ctl);
	bench_exec(ctl, "CHECKPOINT");
	const char *tmp = getenv("TMPDIR");
	char counter_path[256];
	snprintf(counter_path, sizeof(counter_path), "%s/skl-bench-lat.%d",
	         tmp && *tmp ? tmp : "/tmp", (int)getpid());
	_Atomic uint64_t *counter = bench_counter(counter_path, true);

	skl_client *c = bench_client(url, pooled, "skl-bench-enqueue");
	char *args[] = {"--url", (char *)url, "--mode", "stamp", "--concurrency", (char *)conc,
	                "--counter", counter_path, "--app", "skl-bench-lat",
	                pooled ? "--pooled" : NULL, NULL};
	pid_t w = bench_spawn_worker(args, logpath);

	/* Warm-up: the worker is connected and polling at its first interval. */
	bench_enqueue(c, "lat", 1, 1);
	wait_count(counter, 1, 30, w);
	int64_t first_id = bench_int(ctl, "SELECT coalesce(max(id), 0) FROM skiplock.jobs");

	long total = (long)(rate * seconds), sent = 0;
	double start = bench_mono();
	while (sent < total) {
		double now = bench_mono();
		long due = (long)((now - start) * rate) + 1;
		if (due > total)
			due = total;
		if (due > sent) {
			bench_enqueue(c, "lat", due - sent, 1000);
			sent = due;
		} else {
			bench_sleep(start + (double)sent / rate - now);
		}
		if (!bench_alive(w))
			bench_die("the worker process exited");
	}
	double achieved = (double)total / (bench_mono() - start);
	wait_count(counter, (uint64_t)total + 1, 60, w);
	wait_recorded(ctl, 60);
	bench_stop(w, 30);

	char sql[640];
	snprintf(sql, sizeof(sql),
	         "SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY ms),"
	         " percentile_cont(0.95) WITHIN GROUP (ORDER BY ms),"
	         " percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), max(ms)"
	         " FROM (SELECT ((result->>'t')::float8 - extract(epoch FROM created_at)::float8)"
	         " * 1000 AS ms FROM skiplock.all_jobs WHERE id > %lld AND state = 'completed') s",
	         (long long)first_id);
	PGresult *res = PQexec(ctl, sql);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		bench_die("latency query: %s", PQerrorMessage(ctl));
	long n = atol(PQgetvalue(res, 0, 0));
	if (n != total)
		bench_die("expected %ld stamped jobs, found %ld", total, n);
	printf("n=%ld rate=%.1f p50_ms=%s p95_ms=%s p99_ms=%s max_ms=%s\n", n, achieved,
	       PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2), PQgetvalue(res, 0, 3),
	       PQgetvalue(res, 0, 4));
	PQclear(res);
	unlink(counter_path);
	skl_client_close(c);
	PQfinish(ctl);
	return 0;
}
