/*
 * worker.c — skl-bench-worker: one skiplock worker process for the
 * benchmarks, run until SIGTERM.
 *
 *   skl-bench-worker --url URL [--pooled] --mode noop|sleep|cmd|stamp|stream
 *                    [--concurrency N] [--connections K] [--counter FILE] [--app NAME]
 *                    [--poll-ms MS] [--stream CMD] [--inflight N] [--sleep-ms MS]
 *                    [--queues Q1,Q2,...]
 *
 * Modes (the kinds it claims):
 *   noop   kind "noop": a C handler that only counts (skl_worker_handle)
 *   sleep  kind "sleep": a C handler that counts, then sleeps --sleep-ms
 *          (default 5) on its handler thread, a stand-in for short real work
 *   cmd    kind "cmd": the command handler `true` (fork/exec per job)
 *   stamp  kind "lat": a C handler that first reads CLOCK_REALTIME and keeps
 *          it as the job's result {"t": seconds}, for enqueue->start latency
 *   stream kind "stream": the streaming handler, one process running CMD
 *          (--stream) with up to --inflight N jobs in flight (default 64);
 *          only against a library that has it (skl_worker_handle_stream)
 * --queues limits the worker to these queues (skl_worker_options.queues,
 * up to 64, comma-separated); without it the worker claims from every queue.
 * The counter (slot 0 of a shared file) counts handler starts, so the
 * driver can watch progress without querying the database.  Its counts go
 * to stderr at exit; stdout stays the driver's.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

static _Atomic uint64_t fallback_counter[1];
static _Atomic uint64_t *counter = fallback_counter;
static skl_worker *the_worker;

static int noop_handler(const skl_job *job, void *ctx)
{
	(void)job;
	(void)ctx;
	atomic_fetch_add(&counter[0], 1);
	return SKL_JOB_OK;
}

static int sleep_handler(const skl_job *job, void *ctx)
{
	(void)job;
	atomic_fetch_add(&counter[0], 1);
	bench_sleep(*(const double *)ctx);
	return SKL_JOB_OK;
}

static int stamp_handler(const skl_job *job, void *ctx)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	(void)ctx;
	char buf[64];
	snprintf(buf, sizeof(buf), "{\"t\": %lld.%06ld}", (long long)ts.tv_sec, ts.tv_nsec / 1000);
	skl_job_set_result(job, buf);
	atomic_fetch_add(&counter[0], 1);
	return SKL_JOB_OK;
}

static skl_rc handle_stream(int argc, char **argv, skl_error *err)
{
	const char *cmd = bench_opt(argc, argv, "--stream", NULL);
	if (cmd == NULL)
		bench_die("worker: --mode stream needs --stream CMD");
#ifdef SKL_STREAM_PROCS_MAX
	skl_stream_opts so;
	skl_stream_opts_init(&so);
	so.inflight = atoi(bench_opt(argc, argv, "--inflight", "64"));
	return skl_worker_handle_stream(the_worker, "stream", cmd, &so, err);
#else
	(void)err;
	bench_die("worker: this library has no streaming handler");
#endif
}

static void on_signal(int sig)
{
	(void)sig;
	if (the_worker)
		skl_worker_stop(the_worker);
}

static void log_sink(void *ctx, skl_log_level level, const char *msg)
{
	(void)ctx;
	if (level >= SKL_LOG_WARNING)
		fprintf(stderr, "skl-bench-worker: %s\n", msg);
}

int main(int argc, char **argv)
{
	const char *url = bench_opt(argc, argv, "--url", NULL);
	const char *mode = bench_opt(argc, argv, "--mode", "noop");
	const char *counter_path = bench_opt(argc, argv, "--counter", NULL);
	if (url == NULL)
		bench_die("worker: --url is required");
	if (counter_path)
		counter = bench_counter(counter_path, false);

	skl_client_options co;
	skl_client_options_init(&co);
	co.url = url;
	co.pooler = bench_flag(argc, argv, "--pooled") ? SKL_POOLER_TRANSACTION : SKL_POOLER_NONE;
	co.application_name = bench_opt(argc, argv, "--app", "skl-bench-worker");
	co.call_timeout_ms = 60000;
	co.retry_max_ms = 60000;
	skl_worker_options wo;
	skl_worker_options_init(&wo);
	wo.concurrency = atoi(bench_opt(argc, argv, "--concurrency", "8"));
	wo.prefetch = atoi(bench_opt(argc, argv, "--prefetch", "0"));
#ifdef SKL_WORKER_CONNECTIONS_MAX /* a library that has it (not the baseline's) */
	wo.connections = atoi(bench_opt(argc, argv, "--connections", "1"));
#endif
	const char *poll = bench_opt(argc, argv, "--poll-ms", NULL);
	if (poll)
		wo.poll_ms = atoll(poll);
	wo.log = log_sink;
	static const char *queues[64];
	static char qbuf[4096];
	const char *qlist = bench_opt(argc, argv, "--queues", NULL);
	if (qlist) {
		if (strlen(qlist) >= sizeof(qbuf))
			bench_die("worker: --queues is too long");
		strcpy(qbuf, qlist);
		size_t n = 0;
		for (char *save = NULL, *q = strtok_r(qbuf, ",", &save); q; q = strtok_r(NULL, ",", &save)) {
			if (n == sizeof(queues) / sizeof(queues[0]))
				bench_die("worker: more than 64 --queues");
			queues[n++] = q;
		}
		if (n == 0)
			bench_die("worker: --queues names no queue");
		wo.queues = queues;
		wo.nqueues = n;
	}

	skl_error err;
	if (skl_worker_new(&co, &wo, &the_worker, &err) != SKL_OK)
		bench_die("worker: %s", err.message);
	skl_rc rc;
	static double sleep_s;
	sleep_s = atof(bench_opt(argc, argv, "--sleep-ms", "5")) / 1000.0;
	if (strcmp(mode, "noop") == 0)
		rc = skl_worker_handle(the_worker, "noop", noop_handler, NULL, &err);
	else if (strcmp(mode, "sleep") == 0)
		rc = skl_worker_handle(the_worker, "sleep", sleep_handler, &sleep_s, &err);
	else if (strcmp(mode, "stamp") == 0)
		rc = skl_worker_handle(the_worker, "lat", stamp_handler, NULL, &err);
	else if (strcmp(mode, "cmd") == 0)
		rc = skl_worker_handle_command(the_worker, "cmd", "true", &err);
	else if (strcmp(mode, "stream") == 0)
		rc = handle_stream(argc, argv, &err);
	else
		bench_die("worker: unknown --mode %s", mode);
	if (rc != SKL_OK)
		bench_die("worker: %s", err.message);

	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	rc = skl_worker_run(the_worker, &err);
	skl_worker_stats st;
	skl_worker_get_stats(the_worker, &st);
	fprintf(stderr, "skl-bench-worker: claimed=%llu completed=%llu fenced_out=%llu rescued=%llu\n",
	       (unsigned long long)st.claimed, (unsigned long long)st.completed,
	       (unsigned long long)st.fenced_out, (unsigned long long)st.rescued);
	skl_worker_free(the_worker);
	if (rc != SKL_OK)
		bench_die("worker: %s", err.message);
	return 0;
}
