/*
 * feed.c — skl-bench-feed: an enqueuer that keeps workers supplied.
 *
 *   skl-bench-feed --url URL --counter FILE --seconds S [--backlog B]
 *                  [--kind K] [--batch N]
 *
 * For S seconds keeps about B jobs (default 20000) of kind K (default
 * "noop") waiting: the jobs started so far are slot 0 of the counter file
 * the workers share (skl-bench-worker --counter), so waiting = enqueued -
 * started, and whenever that is below B it enqueues the difference with
 * skl_enqueue_bulk, at most N (default 5000) per call; else it sleeps 5 ms.
 * It never reads the job tables, so it measures the same way whatever the
 * storage.  At the end prints one line:
 *   enqueued=… seconds=… rate=… short=…
 * where short counts the checks that found fewer than B/10 jobs waiting
 * (the enqueuer fell behind the workers).
 */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

int main(int argc, char **argv)
{
	const char *url = bench_opt(argc, argv, "--url", NULL);
	const char *path = bench_opt(argc, argv, "--counter", NULL);
	double secs = atof(bench_opt(argc, argv, "--seconds", "0"));
	long backlog = atol(bench_opt(argc, argv, "--backlog", "20000"));
	const char *kind = bench_opt(argc, argv, "--kind", "noop");
	int batch = atoi(bench_opt(argc, argv, "--batch", "5000"));
	if (url == NULL || path == NULL || secs <= 0 || backlog < 1 || batch < 1)
		bench_die("usage: skl-bench-feed --url URL --counter FILE --seconds S [--backlog B]"
		          " [--kind K] [--batch N]");

	_Atomic uint64_t *started = bench_counter(path, false);
	skl_client *c = bench_client(url, false, "skl-bench-feed");
	long enqueued = 0, shortfalls = 0;
	double t0 = bench_mono();
	while (bench_mono() - t0 < secs) {
		long waiting = enqueued - (long)atomic_load(&started[0]);
		if (waiting < backlog / 10)
			shortfalls++;
		if (waiting >= backlog) {
			bench_sleep(0.005);
			continue;
		}
		long n = backlog - waiting < batch ? backlog - waiting : batch;
		bench_enqueue(c, kind, n, batch);
		enqueued += n;
	}
	double el = bench_mono() - t0;
	printf("enqueued=%ld seconds=%.3f rate=%.0f short=%ld\n", enqueued, el, enqueued / el, shortfalls);
	skl_client_close(c);
	return 0;
}
