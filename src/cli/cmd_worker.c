/*
 * cmd_worker.c — `skiplock worker`: run jobs with command handlers until
 * SIGTERM or SIGINT, then drain.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "metrics_http.h"

static const char usage[] =
	"Usage: skiplock worker --handler KIND=COMMAND [--handler …] [OPTIONS]\n"
	"\n"
	"Run jobs. The worker claims only the kinds it has a handler for, runs up to\n"
	"--concurrency of them at once, and uses one database connection whatever\n"
	"the concurrency: no transaction or lock is held while a handler runs.\n"
	"Leases are renewed every lease/3; a job whose worker died or froze is\n"
	"returned to the queue by any worker when its lease expires, and the late\n"
	"worker's outcome is refused by the fencing token.\n"
	"\n"
	"Command handler protocol: COMMAND runs under /bin/sh -c in its own process\n"
	"group with the job's JSON payload on stdin and SKIPLOCK_JOB_ID,\n"
	"SKIPLOCK_JOB_KIND, SKIPLOCK_QUEUE, SKIPLOCK_ATTEMPT, SKIPLOCK_FENCING in its\n"
	"environment. Exit 0: completed (stdout, up to 64 KiB, kept as the result\n"
	"when it is JSON). Exit 75: retry with backoff. Exit 65: discard, no retry.\n"
	"Any other exit, a signal or the timeout: a failed attempt, retried until\n"
	"max_attempts, then discarded. The last 4 KiB of stderr is kept as the\n"
	"attempt's error. On timeout: SIGTERM to the group, SIGKILL after a grace.\n"
	"\n"
	"SIGTERM or SIGINT: stop claiming, let running jobs finish within\n"
	"--shutdown-timeout, then exit 0.\n"
	"\n"
	"Worker options:\n"
	"  --handler KIND=COMMAND  run jobs of KIND with COMMAND (repeatable)\n"
	"  --queue Q               take jobs from queue Q only (repeatable; default all)\n"
	"  --concurrency N         jobs at once (default 8); connections: 1\n"
	"  --lease DUR             lease per claim, renewed every DUR/3 (default 30s)\n"
	"  --poll DUR              first poll interval when idle (default 200ms)\n"
	"  --poll-max DUR          idle polling slows down up to this (default 5s)\n"
	"  --timeout DUR           default handler timeout (default 5m)\n"
	"  --kill-grace DUR        SIGTERM to SIGKILL (default 5s)\n"
	"  --shutdown-timeout DUR  drain bound after SIGTERM (default 30s)\n"
	"  --backoff full          retry delay strategy (full jitter, the default)\n"
	"  --backoff-base DUR      retry n waits up to min(cap, base*2^n) (default 1s)\n"
	"  --backoff-cap DUR       (default 1h)\n"
	"  --rescue-every DUR      how often to look for expired leases (default 5s)\n"
	"  --owner NAME            lease owner written on claims (default host:pid)\n"
	"  --no-cron               do not evaluate cron schedules (by default every\n"
	"                          worker does, about once a second; see skiplock cron)\n"
	"  --metrics HOST:PORT     serve Prometheus metrics at http://HOST:PORT/metrics\n"
	"                          (e.g. 127.0.0.1:9187; port 0 picks a free one and logs\n"
	"                          it); queue gauges are read every --metrics-every\n"
	"  --metrics-every DUR     how often to read queue depth and age (default 5s)\n"
	"  --log-payloads          put job payloads in log lines about a job (never\n"
	"                          otherwise; payloads may hold personal data)\n"
	"\n";

static const char exit_help[] =
	"\nExit status: 0 drained after SIGTERM/SIGINT, 1 cannot listen on the\n"
	"--metrics address, 2 bad usage, 3 database unreachable at start within\n"
	"--retry-for.\n";

enum { O_HANDLER = OPT_COMMON_LAST + 1, O_QUEUE, O_CONC, O_LEASE, O_POLL, O_POLLMAX,
       O_TIMEOUT, O_GRACE, O_SHUTDOWN, O_BACKOFF, O_BBASE, O_BCAP, O_RESCUE, O_OWNER,
       O_NO_CRON, O_METRICS, O_METRICS_EVERY, O_LOG_PAYLOADS };

typedef struct worker_args {
	cli_common *cc;
	skl_worker_options wo;
	const char *handlers[64];
	int nhandlers;
	const char *queues[64];
	size_t nqueues;
	const char *metrics;
	int64_t metrics_every_ms;
} worker_args;

static bool dur(worker_args *a, const char *name, const char *arg, int64_t *out)
{
	if (!cli_duration(a->cc, name, arg, out))
		return false;
	if (*out <= 0) {
		cli_error(a->cc, "%s must be positive", name);
		return false;
	}
	return true;
}

static int own_option(int code, const char *arg, void *ctx)
{
	worker_args *a = ctx;
	long long v;
	skl_worker_options *o = &a->wo;
	bool ok = true;
	switch (code) {
	case O_HANDLER:
		if (a->nhandlers == 64 || strchr(arg, '=') == NULL || arg[0] == '=') {
			cli_error(a->cc, "--handler: expected KIND=COMMAND, got \"%s\"", arg);
			return CLI_USAGE;
		}
		a->handlers[a->nhandlers++] = arg;
		break;
	case O_QUEUE:
		if (a->nqueues == 64 || *arg == '\0') {
			cli_error(a->cc, "--queue: empty name or too many queues");
			return CLI_USAGE;
		}
		a->queues[a->nqueues++] = arg;
		break;
	case O_CONC:
		ok = cli_int(a->cc, "--concurrency", arg, 1, 4096, &v);
		o->concurrency = (int)v;
		break;
	case O_LEASE: ok = dur(a, "--lease", arg, &o->lease_ms); break;
	case O_POLL: ok = dur(a, "--poll", arg, &o->poll_ms); break;
	case O_POLLMAX: ok = dur(a, "--poll-max", arg, &o->poll_max_ms); break;
	case O_TIMEOUT: ok = dur(a, "--timeout", arg, &o->job_timeout_ms); break;
	case O_GRACE: ok = dur(a, "--kill-grace", arg, &o->kill_grace_ms); break;
	case O_SHUTDOWN: ok = dur(a, "--shutdown-timeout", arg, &o->shutdown_timeout_ms); break;
	case O_BACKOFF:
		if (strcmp(arg, "full") != 0) {
			cli_error(a->cc, "--backoff: unknown strategy \"%s\" (expected full)", arg);
			return CLI_USAGE;
		}
		break;
	case O_BBASE: ok = dur(a, "--backoff-base", arg, &o->backoff_base_ms); break;
	case O_BCAP: ok = dur(a, "--backoff-cap", arg, &o->backoff_cap_ms); break;
	case O_RESCUE: ok = dur(a, "--rescue-every", arg, &o->rescue_every_ms); break;
	case O_OWNER: o->owner = arg; break;
	case O_NO_CRON: o->no_cron = true; break;
	case O_METRICS: a->metrics = arg; break;
	case O_METRICS_EVERY: ok = dur(a, "--metrics-every", arg, &a->metrics_every_ms); break;
	case O_LOG_PAYLOADS: o->log_payloads = true; break;
	default: return CLI_USAGE;
	}
	return ok ? CLI_OK : CLI_USAGE;
}

static skl_worker *running_worker;

static void on_signal(int sig)
{
	(void)sig;
	if (running_worker)
		skl_worker_stop(running_worker);
}

static int add_handlers(worker_args *a, skl_worker *w)
{
	for (int i = 0; i < a->nhandlers; i++) {
		char kind[SKL_KIND_MAX + 2];
		const char *eq = strchr(a->handlers[i], '=');
		size_t kl = (size_t)(eq - a->handlers[i]);
		if (kl > SKL_KIND_MAX) {
			cli_error(a->cc, "--handler: kind is over %d bytes", SKL_KIND_MAX);
			return CLI_USAGE;
		}
		memcpy(kind, a->handlers[i], kl);
		kind[kl] = '\0';
		skl_error err;
		if (skl_worker_handle_command(w, kind, eq + 1, &err) != SKL_OK) {
			cli_error(a->cc, "--handler %s: %s", kind, err.message);
			return CLI_USAGE;
		}
	}
	return CLI_OK;
}

static int run(worker_args *a, skl_worker *w)
{
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	running_worker = w;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	skl_error err;
	skl_rc rc = skl_worker_run(w, &err);
	running_worker = NULL;
	skl_worker_stats st;
	skl_worker_get_stats(w, &st);
	cli_log(SKL_LOG_INFO,
	        "worker stopped: claimed %llu, completed %llu, retried %llu, discarded %llu, "
	        "fenced out %llu, rescued %llu",
	        (unsigned long long)st.claimed, (unsigned long long)st.completed,
	        (unsigned long long)st.retried, (unsigned long long)st.discarded,
	        (unsigned long long)st.fenced_out, (unsigned long long)st.rescued);
	return rc == SKL_OK ? CLI_OK : cli_fail(a->cc, &err);
}

int cmd_worker(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_LONGOPTS,
		{"handler", required_argument, NULL, O_HANDLER},
		{"queue", required_argument, NULL, O_QUEUE},
		{"concurrency", required_argument, NULL, O_CONC},
		{"lease", required_argument, NULL, O_LEASE},
		{"poll", required_argument, NULL, O_POLL},
		{"poll-max", required_argument, NULL, O_POLLMAX},
		{"timeout", required_argument, NULL, O_TIMEOUT},
		{"kill-grace", required_argument, NULL, O_GRACE},
		{"shutdown-timeout", required_argument, NULL, O_SHUTDOWN},
		{"backoff", required_argument, NULL, O_BACKOFF},
		{"backoff-base", required_argument, NULL, O_BBASE},
		{"backoff-cap", required_argument, NULL, O_BCAP},
		{"rescue-every", required_argument, NULL, O_RESCUE},
		{"owner", required_argument, NULL, O_OWNER},
		{"no-cron", no_argument, NULL, O_NO_CRON},
		{"metrics", required_argument, NULL, O_METRICS},
		{"metrics-every", required_argument, NULL, O_METRICS_EVERY},
		{"log-payloads", no_argument, NULL, O_LOG_PAYLOADS},
		{0}};
	cli_common cc;
	cli_common_init(&cc, "worker");
	worker_args a = {.cc = &cc};
	skl_worker_options_init(&a.wo);
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, usage, exit_help, 0, &done);
	if (done)
		return rc;
	if (a.nhandlers == 0) {
		cli_error(&cc, "no handlers: give at least one --handler KIND=COMMAND");
		return CLI_USAGE;
	}
	a.wo.queues = a.queues;
	a.wo.nqueues = a.nqueues;
	a.wo.log_record = cli_log_record;
	if (a.metrics)
		a.wo.queue_stats_every_ms = a.metrics_every_ms > 0 ? a.metrics_every_ms : 5000;
	skl_worker *w = NULL;
	skl_error err;
	if (skl_worker_new(&cc.client, &a.wo, &w, &err) != SKL_OK)
		return cli_fail(&cc, &err);
	rc = add_handlers(&a, w);
	cli_metrics *m = NULL;
	if (rc == CLI_OK && a.metrics)
		rc = cli_metrics_start(&cc, a.metrics, w, &m);
	if (rc == CLI_OK)
		rc = run(&a, w);
	cli_metrics_stop(m);
	skl_worker_free(w);
	return rc;
}
