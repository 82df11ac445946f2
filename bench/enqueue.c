/*
 * enqueue.c — skl-bench-enqueue: bulk enqueue through the C API.
 *
 *   skl-bench-enqueue --url URL --jobs N [--batch B] [--kind K]
 *
 * Empties skiplock.jobs, then enqueues N small jobs ({"n": 1}) with
 * skl_enqueue_bulk, B per call (default 1000, the row count of the
 * multi-row INSERT ceiling), on one connection, and prints
 *   jobs=N seconds=S rate=JOBS_PER_S
 * The clock runs from the first call to the last answer (the connection is
 * opened before it starts), each call a durable commit.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

int main(int argc, char **argv)
{
	const char *url = bench_opt(argc, argv, "--url", NULL);
	long n = atol(bench_opt(argc, argv, "--jobs", "10000"));
	int batch = atoi(bench_opt(argc, argv, "--batch", "1000"));
	const char *kind = bench_opt(argc, argv, "--kind", "bench");
	if (url == NULL || n < 1)
		bench_die("usage: skl-bench-enqueue --url URL --jobs N [--batch B] [--kind K]");

	PGconn *ctl = bench_connect(url, "skl-bench-control");
	bench_reset_jobs(ctl);
	bench_exec(ctl, "CHECKPOINT");
	skl_client *c = bench_client(url, false, "skl-bench-enqueue");
	skl_error err;
	if (skl_client_ping(c, &err) != SKL_OK)
		bench_die("ping: %s", err.message);

	double t0 = bench_mono();
	bench_enqueue(c, kind, n, batch);
	double secs = bench_mono() - t0;

	int64_t rows = bench_int(ctl, "SELECT count(*) FROM skiplock.jobs");
	if (rows != n)
		bench_die("enqueued %ld jobs but the table holds %lld", n, (long long)rows);
	printf("jobs=%ld seconds=%.3f rate=%.1f\n", n, secs, (double)n / secs);
	skl_client_close(c);
	PQfinish(ctl);
	return 0;
}
