/*
 * cmd_worker.c — `skiplock worker`: run jobs with command, streaming and
 * webhook handlers until SIGTERM, SIGINT or SIGHUP, then drain.  Option bounds are
 * the library's (skl_worker_new: SKL_INVALID becomes exit 2).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "http/metrics_http.h"

static const char usage[] =
	"Usage: skiplock worker --handler KIND=COMMAND [--handler …] [OPTIONS]\n"
	"       skiplock worker --stream KIND=COMMAND [--stream …] [OPTIONS]\n"
	"       skiplock worker --webhook KIND=URL [--webhook …] [OPTIONS]\n"
	"\n"
	"Run jobs. The worker claims only the kinds it has a handler for, runs up to\n"
	"--concurrency of them at once, and uses one database connection whatever\n"
	"the concurrency (or --connections of them): no transaction or lock is held\n"
	"while a handler runs.\n"
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
	"COMMAND's environment is the worker's minus skiplock's own settings and\n"
	"secrets: every SKIPLOCK_* variable, DATABASE_URL, DIRECT_DATABASE_URL,\n"
	"PGPASSWORD and each --webhook-secret-env variable (--handler-env passes one\n"
	"on). If the worker dies, even by SIGKILL, its commands' process groups are\n"
	"killed at once (a small process, skiplock-reaper, watches the worker).\n"
	"\n"
	"Streaming handler (docs/protocol.md): COMMAND is started --stream-procs\n"
	"times, as a command handler is (same environment rule, own process group,\n"
	"killed with the worker), and kept running. Each job is one JSON line on its\n"
	"stdin: {\"id\", \"kind\", \"queue\", \"attempt\", \"fencing\", \"deadline\" (Unix\n"
	"ms), \"payload\"}; each outcome one JSON line on its stdout, in any order:\n"
	"{\"id\", \"outcome\": \"ok\"|\"retry\"|\"fail\"|\"discard\", \"result\", \"error\",\n"
	"\"retry_after\" (seconds)}. Its stderr goes to the log, a line at a time. If\n"
	"it dies, its jobs in flight fail (retried) and it is restarted after a\n"
	"backoff (100ms doubling to 10s). A job past its timeout fails and its\n"
	"process is restarted. A malformed line fails the job it names.\n"
	"\n"
	"Webhook handler: each attempt POSTs the payload to URL as application/json\n"
	"with Idempotency-Key: skiplock-<job id> (the same on every attempt),\n"
	"X-Skiplock-Kind, X-Skiplock-Attempt and, with --webhook-secret-env,\n"
	"X-Skiplock-Signature: sha256=<hex HMAC-SHA256 of the body>. 2xx: completed\n"
	"(a JSON body, up to 64 KiB, kept as the result). 429 and 503: retried after\n"
	"Retry-After (seconds or an HTTP date, at most --backoff-cap), else with\n"
	"backoff. Other 4xx: discarded. 5xx, 3xx (not followed), timeouts, DNS and\n"
	"connection errors: a failed attempt, retried. Connections are reused.\n"
	"\n"
	"SIGTERM, SIGINT or SIGHUP: stop claiming, let running jobs finish within\n"
	"--shutdown-timeout, then exit 0.\n"
	"\n"
	"Worker options:\n"
	"  --handler KIND=COMMAND  run jobs of KIND with COMMAND (repeatable)\n"
	"  --stream KIND=COMMAND   send jobs of KIND to COMMAND, kept running, as JSON\n"
	"                          lines (repeatable)\n"
	"  --stream-procs N        processes per --stream handler (default 1; 1 to 64)\n"
	"  --stream-inflight N     jobs sent to one process before it answered them\n"
	"                          (default 1; 1 to 4096)\n"
	"  --webhook KIND=URL      POST jobs of KIND to an http(s) URL (repeatable)\n"
	"  --webhook-timeout [KIND=]DUR\n"
	"                          request timeout of every webhook, or of KIND's\n"
	"                          (default: --timeout; a job's own timeout wins)\n"
	"  --webhook-secret-env [KIND=]VAR\n"
	"                          sign requests with the secret in environment\n"
	"                          variable VAR (every webhook, or KIND's)\n"
	"  --handler-env VAR       give command handlers VAR although the rule above\n"
	"                          withholds it, e.g. DATABASE_URL (repeatable)\n"
	"  --queue Q               take jobs from queue Q only (repeatable; default all;\n"
	"                          UTF-8, 1 to 128 bytes)\n"
	"  --concurrency N         jobs at once (default 8; at most 4096)\n"
	"  --prefetch N            claim up to N jobs beyond --concurrency; they wait\n"
	"                          in the worker, leased, for a free slot (default 0)\n"
	"  --connections N         database connections for claims, outcomes and\n"
	"                          heartbeats (default 1; 1 to 64, at most\n"
	"                          --concurrency + --prefetch). Each has its own thread\n"
	"                          and an equal share of --concurrency and --prefetch,\n"
	"                          and records and heartbeats the jobs it claimed. One\n"
	"                          connection's backend uses one core: when it is the\n"
	"                          bottleneck (short jobs, a busy worker), 2 drain as\n"
	"                          fast as two worker processes. Through a session\n"
	"                          pooler each takes a server connection for good\n"
	"                          (docs/performance.md)\n"
	"  --lease DUR             lease per claim, renewed every DUR/3 (default 30s;\n"
	"                          1s to 24h)\n"
	"  --poll DUR              first poll interval when idle (default 200ms; 10ms\n"
	"                          to 1h, as --poll-max and --rescue-every)\n"
	"  --poll-max DUR          idle polling slows down up to this (default 5s)\n"
	"  --poll-idle DUR         after 10 x --poll-max without a job the worker is\n"
	"                          idle: one statement every DUR to 1.25 x DUR at most\n"
	"                          (sooner when a delayed job, a cron fire time or a\n"
	"                          lease expiry is due; default 10m). On a direct\n"
	"                          connection (--pooler none) it also LISTENs and\n"
	"                          claims as soon as a job is enqueued; through a\n"
	"                          pooler, so does a second connection to\n"
	"                          --direct-url when given\n"
	"  --timeout DUR           default handler timeout (default 5m; at most 30d)\n"
	"  --kill-grace DUR        SIGTERM to SIGKILL (default 5s; at most 1h)\n"
	"  --shutdown-timeout DUR  drain bound after SIGTERM (default 30s; at most 24h)\n"
	"\n"
	"Retry options (docs/retry.md). Each takes VALUE for every kind, or\n"
	"KIND=VALUE for one kind (repeatable); a job's own settings from enqueue\n"
	"come first, then its kind's, then the worker's:\n"
	"  --backoff [KIND=]STRATEGY  delay before retry n (n = 0 after the first\n"
	"                          failure), c = min(cap, base*2^n):\n"
	"                            full          uniform in [0, c] (the default)\n"
	"                            equal         c/2 + uniform in [0, c/2]\n"
	"                            decorrelated  min(cap, uniform in [base, 3*previous])\n"
	"                            exponential   c, no jitter\n"
	"                            fixed         base every time\n"
	"  --backoff-base [KIND=]DUR  (default 1s)\n"
	"  --backoff-cap [KIND=]DUR   (default 1h)\n"
	"  --retry-budget [KIND=]PCT  retries a kind may make early, per worker process:\n"
	"                          PCT % of its first attempts in the last 10s plus 3 a\n"
	"                          second (default 10); past it a failed job is\n"
	"                          rescheduled at the cap (logged once per 10s).\n"
	"                          0 or off: no budget\n"
	"  --breaker KIND[=SETTINGS]  a fleet-wide circuit breaker for KIND (a row in\n"
	"                          skiplock.breakers; see skiplock breakers). SETTINGS:\n"
	"                          rate:PCT,min:N,calls:N,window:DUR,open:DUR,probes:N\n"
	"                          (defaults rate:50,min:10,calls:100,window:60s,\n"
	"                          open:60s,probes:3): opens when at least min of the\n"
	"                          window's calls were made and rate % of them failed;\n"
	"                          while open no worker claims KIND; after open,\n"
	"                          probes jobs run; all succeed: closed, one fails: open\n"
	"  A command handler that exits 75 may write \"retry-after: SECONDS\" on a line\n"
	"  of stderr: the next attempt waits that long instead (still counted by the\n"
	"  budget; over it, the job waits the larger of SECONDS and the cap).\n"
	"\n"
	"Other options:\n"
	"  --rescue-every DUR      how often to look for expired leases (default 5s)\n"
	"  --owner NAME            lease owner written on claims (default host:pid;\n"
	"                          UTF-8, 1 to 256 characters)\n"
	"  --no-cron               do not evaluate cron schedules (by default every\n"
	"                          worker does, about once a second, or at the next\n"
	"                          fire time when idle; see skiplock cron)\n"
	"  --metrics HOST:PORT     serve Prometheus metrics at http://HOST:PORT/metrics\n"
	"                          (e.g. 127.0.0.1:9187; port 0 picks a free one and logs\n"
	"                          it); queue gauges are read every --metrics-every\n"
	"  --metrics-every DUR     how often to read queue depth and age (default 5s)\n"
	"  --log-payloads          put job payloads in log lines about a job (never\n"
	"                          otherwise; payloads may hold personal data)\n"
	"\n";

static const char exit_help[] =
	"\nExit status: 0 drained after SIGTERM/SIGINT/SIGHUP, 1 cannot listen on the\n"
	"--metrics address, 2 bad usage (including an option outside its bounds, a\n"
	"queue, kind or owner that is not UTF-8, a webhook URL that is not http(s)\n"
	"with a host, or an unset secret variable), 3 database unreachable at start\n"
	"within 4 s (or --retry-for, if shorter). A refusal no retry cures (no such\n"
	"database or role, a wrong password) or a schema missing or older than this\n"
	"build: exit 1 at once, naming what to do.\n";

enum { O_HANDLER = OPT_COMMON_LAST + 1, O_QUEUE, O_CONC, O_PREFETCH, O_LEASE, O_POLL, O_POLLMAX,
       O_TIMEOUT, O_GRACE, O_POLLIDLE, O_SHUTDOWN, O_BACKOFF, O_BBASE, O_BCAP, O_RESCUE, O_OWNER,
       O_NO_CRON, O_WEBHOOK, O_WH_TIMEOUT, O_WH_SECRET, O_BUDGET, O_BREAKER,
       O_METRICS, O_METRICS_EVERY, O_LOG_PAYLOADS, O_HANDLER_ENV, O_STREAM, O_STREAM_PROCS,
       O_STREAM_INFLIGHT, O_CONNECTIONS };

#define MAX_KIND_OPTS 64

/* --backoff, --backoff-base, --backoff-cap, --retry-budget for one kind. */
typedef struct kind_opt {
	char kind[SKL_KIND_MAX + 1];
	skl_retry_policy policy;
	bool breaker;
	skl_breaker_config breaker_config;
} kind_opt;

typedef struct worker_args {
	cli_common *cc;
	skl_worker_options wo;
	const char *handlers[64];
	int nhandlers;
	const char *webhooks[64];
	int nwebhooks;
	const char *streams[64];
	int nstreams;
	skl_stream_opts stream;
	const char *wh_timeouts[64];  /* [KIND=]DUR, in order: the last match wins */
	int nwh_timeouts;
	const char *wh_secrets[64];   /* [KIND=]VAR */
	int nwh_secrets;
	const char *queues[64];
	size_t nqueues;
	const char *handler_env[64];
	size_t nhandler_env;
	kind_opt kinds[MAX_KIND_OPTS];
	size_t nkinds;
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

/* [KIND=]VALUE options: checked for shape here, applied per kind later. */
static int keep_per_kind(worker_args *a, const char *name, const char *arg, const char **list,
                         int *n)
{
	const char *eq = strchr(arg, '=');
	const char *value = eq ? eq + 1 : arg;
	if (*n == 64 || *value == '\0' || arg[0] == '=') {
		cli_error(a->cc, "%s: expected [KIND=]VALUE, got \"%s\"", name, arg);
		return CLI_USAGE;
	}
	int64_t ms;
	if (strcmp(name, "--webhook-timeout") == 0 && !dur(a, name, value, &ms))
		return CLI_USAGE;
	list[(*n)++] = arg;
	return CLI_OK;
}

/* The settings entry of a kind named by its first kl bytes; NULL after
 * an error. */
static kind_opt *find_kind(worker_args *a, const char *name, const char *kind, size_t kl)
{
	if (kl == 0 || kl > SKL_KIND_MAX) {
		cli_error(a->cc, "%s: kind must be 1 to %d bytes", name, SKL_KIND_MAX);
		return NULL;
	}
	for (size_t i = 0; i < a->nkinds; i++)
		if (strlen(a->kinds[i].kind) == kl && strncmp(a->kinds[i].kind, kind, kl) == 0)
			return &a->kinds[i];
	if (a->nkinds == MAX_KIND_OPTS) {
		cli_error(a->cc, "%s: settings for more than %d kinds", name, MAX_KIND_OPTS);
		return NULL;
	}
	kind_opt *k = &a->kinds[a->nkinds++];
	memcpy(k->kind, kind, kl);
	k->kind[kl] = '\0';
	skl_retry_policy_init(&k->policy);
	return k;
}

/* Splits "KIND=VALUE" (returns the kind's entry, *value after the '=') or
 * "VALUE" (returns NULL with *value = arg).  *bad after an error. */
static kind_opt *kind_of(worker_args *a, const char *name, const char *arg, const char **value,
                         bool *bad)
{
	const char *eq = strchr(arg, '=');
	*value = eq ? eq + 1 : arg;
	if (eq == NULL) {
		*bad = false;
		return NULL;
	}
	kind_opt *k = find_kind(a, name, arg, (size_t)(eq - arg));
	*bad = k == NULL;
	return k;
}

static bool backoff_option(worker_args *a, const char *arg)
{
	const char *v;
	bool bad;
	kind_opt *k = kind_of(a, "--backoff", arg, &v, &bad);
	skl_backoff b;
	if (bad)
		return false;
	if (skl_backoff_parse(v, &b) != SKL_OK) {
		cli_error(a->cc, "--backoff: unknown strategy \"%s\" (expected full, equal, "
		          "decorrelated, exponential or fixed)", v);
		return false;
	}
	*(k ? &k->policy.backoff : &a->wo.backoff) = b;
	return true;
}

static bool backoff_dur(worker_args *a, const char *name, const char *arg, bool cap)
{
	const char *v;
	bool bad;
	kind_opt *k = kind_of(a, name, arg, &v, &bad);
	int64_t ms;
	if (bad || !dur(a, name, v, &ms))
		return false;
	if (k)
		*(cap ? &k->policy.backoff_cap_ms : &k->policy.backoff_base_ms) = ms;
	else
		*(cap ? &a->wo.backoff_cap_ms : &a->wo.backoff_base_ms) = ms;
	return true;
}

static bool budget_option(worker_args *a, const char *arg)
{
	const char *v;
	bool bad;
	kind_opt *k = kind_of(a, "--retry-budget", arg, &v, &bad);
	long long pct = 0;
	if (bad)
		return false;
	if (strcmp(v, "off") != 0) {
		char buf[16];
		size_t n = strlen(v);
		if (n > 0 && n < sizeof(buf) && v[n - 1] == '%')
			n--;
		snprintf(buf, sizeof(buf), "%.*s", (int)(n < sizeof(buf) ? n : 0), v);
		if (!cli_int(a->cc, "--retry-budget", buf, 0, 10000, &pct))
			return false;
	}
	*(k ? &k->policy.retry_budget_pct : &a->wo.retry_budget_pct) = (int)pct;
	return true;
}

static bool breaker_option(worker_args *a, const char *arg)
{
	const char *eq = strchr(arg, '=');
	kind_opt *k = find_kind(a, "--breaker", arg, eq ? (size_t)(eq - arg) : strlen(arg));
	if (k == NULL)
		return false;
	if (!k->breaker)
		skl_breaker_config_init(&k->breaker_config);
	k->breaker = true;
	skl_error err;
	if (eq && skl_breaker_config_parse(eq + 1, &k->breaker_config, &err) != SKL_OK) {
		cli_error(a->cc, "--breaker %s: %s", k->kind, err.message);
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
	case O_STREAM:
		if (a->nstreams == 64 || strchr(arg, '=') == NULL || arg[0] == '=') {
			cli_error(a->cc, "--stream: expected KIND=COMMAND, got \"%s\"", arg);
			return CLI_USAGE;
		}
		a->streams[a->nstreams++] = arg;
		break;
	case O_STREAM_PROCS:
		ok = cli_int(a->cc, "--stream-procs", arg, 1, SKL_STREAM_PROCS_MAX, &v);
		a->stream.procs = (int)v;
		break;
	case O_STREAM_INFLIGHT:
		ok = cli_int(a->cc, "--stream-inflight", arg, 1, SKL_STREAM_INFLIGHT_MAX, &v);
		a->stream.inflight = (int)v;
		break;
	case O_WEBHOOK:
		if (a->nwebhooks == 64 || strchr(arg, '=') == NULL || arg[0] == '=') {
			cli_error(a->cc, "--webhook: expected KIND=URL, got \"%s\"", arg);
			return CLI_USAGE;
		}
		a->webhooks[a->nwebhooks++] = arg;
		break;
	case O_WH_TIMEOUT:
		return keep_per_kind(a, "--webhook-timeout", arg, a->wh_timeouts, &a->nwh_timeouts);
	case O_WH_SECRET:
		return keep_per_kind(a, "--webhook-secret-env", arg, a->wh_secrets, &a->nwh_secrets);
	case O_QUEUE:
		if (a->nqueues == 64 || *arg == '\0') {
			cli_error(a->cc, "--queue: empty name or too many queues");
			return CLI_USAGE;
		}
		a->queues[a->nqueues++] = arg;
		break;
	case O_HANDLER_ENV:
		if (a->nhandler_env == 64) {
			cli_error(a->cc, "--handler-env: more than 64 variables");
			return CLI_USAGE;
		}
		a->handler_env[a->nhandler_env++] = arg;
		break;
	case O_CONC:
		ok = cli_int(a->cc, "--concurrency", arg, 1, 4096, &v);
		o->concurrency = (int)v;
		break;
	case O_PREFETCH:
		ok = cli_int(a->cc, "--prefetch", arg, 0, 4096, &v);
		o->prefetch = (int)v;
		break;
	case O_CONNECTIONS:
		ok = cli_int(a->cc, "--connections", arg, 1, 64, &v);
		o->connections = (int)v;
		break;
	case O_LEASE: ok = dur(a, "--lease", arg, &o->lease_ms); break;
	case O_POLL: ok = dur(a, "--poll", arg, &o->poll_ms); break;
	case O_POLLMAX: ok = dur(a, "--poll-max", arg, &o->poll_max_ms); break;
	case O_POLLIDLE: ok = dur(a, "--poll-idle", arg, &o->poll_idle_ms); break;
	case O_TIMEOUT: ok = dur(a, "--timeout", arg, &o->job_timeout_ms); break;
	case O_GRACE: ok = dur(a, "--kill-grace", arg, &o->kill_grace_ms); break;
	case O_SHUTDOWN: ok = dur(a, "--shutdown-timeout", arg, &o->shutdown_timeout_ms); break;
	case O_BACKOFF: ok = backoff_option(a, arg); break;
	case O_BBASE: ok = backoff_dur(a, "--backoff-base", arg, false); break;
	case O_BCAP: ok = backoff_dur(a, "--backoff-cap", arg, true); break;
	case O_BUDGET: ok = budget_option(a, arg); break;
	case O_BREAKER: ok = breaker_option(a, arg); break;
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

static bool split_kind(worker_args *a, const char *opt, const char *arg, char *kind);

/* --handler KIND=COMMAND and --stream KIND=COMMAND. */
static int add_handlers(worker_args *a, skl_worker *w)
{
	for (int i = 0; i < a->nhandlers + a->nstreams; i++) {
		bool stream = i >= a->nhandlers;
		const char *opt = stream ? "--stream" : "--handler";
		const char *arg = stream ? a->streams[i - a->nhandlers] : a->handlers[i];
		char kind[SKL_KIND_MAX + 2];
		if (!split_kind(a, opt, arg, kind))
			return CLI_USAGE;
		skl_error err;
		const char *cmd = strchr(arg, '=') + 1;
		if ((stream ? skl_worker_handle_stream(w, kind, cmd, &a->stream, &err)
		            : skl_worker_handle_command(w, kind, cmd, &err)) != SKL_OK) {
			cli_error(a->cc, "%s %s: %s", opt, kind, err.message);
			return CLI_USAGE;
		}
	}
	return CLI_OK;
}

/* The value of a [KIND=]VALUE list for kind: the last entry naming kind,
 * else the last one without a kind, else NULL. */
static const char *per_kind(const char *const *list, int n, const char *kind)
{
	const char *any = NULL, *own = NULL;
	size_t kl = strlen(kind);
	for (int i = 0; i < n; i++) {
		const char *eq = strchr(list[i], '=');
		if (eq == NULL)
			any = list[i];
		else if ((size_t)(eq - list[i]) == kl && strncmp(list[i], kind, kl) == 0)
			own = eq + 1;
	}
	return own ? own : any;
}

static bool split_kind(worker_args *a, const char *opt, const char *arg, char *kind)
{
	size_t kl = (size_t)(strchr(arg, '=') - arg);
	if (kl > SKL_KIND_MAX) {
		cli_error(a->cc, "%s: kind is over %d bytes", opt, SKL_KIND_MAX);
		return false;
	}
	memcpy(kind, arg, kl);
	kind[kl] = '\0';
	return true;
}

/* Every KIND= in a per-kind option must name a --webhook kind. */
static int known_kinds(worker_args *a, const char *opt, const char *const *list, int n)
{
	for (int i = 0; i < n; i++) {
		const char *eq = strchr(list[i], '=');
		bool found = eq == NULL;
		for (int j = 0; !found && j < a->nwebhooks; j++)
			found = strncmp(a->webhooks[j], list[i], (size_t)(eq - list[i]) + 1) == 0;
		if (!found) {
			cli_error(a->cc, "%s: \"%.*s\" is not a --webhook kind", opt,
			          (int)(eq - list[i]), list[i]);
			return CLI_USAGE;
		}
	}
	return CLI_OK;
}

/* Bad URLs, unknown kinds in per-kind options and unset secret variables
 * are usage errors, found before anything connects. */
static int check_webhooks(worker_args *a)
{
	char kind[SKL_KIND_MAX + 2];
	for (int i = 0; i < a->nwebhooks; i++) {
		skl_error err;
		if (!split_kind(a, "--webhook", a->webhooks[i], kind))
			return CLI_USAGE;
		if (skl_webhook_url_check(strchr(a->webhooks[i], '=') + 1, &err) != SKL_OK) {
			cli_error(a->cc, "--webhook %s: %s", kind, err.message);
			return CLI_USAGE;
		}
		const char *var = per_kind(a->wh_secrets, a->nwh_secrets, kind);
		if (var && (getenv(var) == NULL || *getenv(var) == '\0')) {
			cli_error(a->cc, "--webhook-secret-env: variable \"%s\" is not set or empty", var);
			return CLI_USAGE;
		}
	}
	if ((a->nwh_timeouts || a->nwh_secrets) && a->nwebhooks == 0) {
		cli_error(a->cc, "--webhook-timeout and --webhook-secret-env need a --webhook");
		return CLI_USAGE;
	}
	return known_kinds(a, "--webhook-timeout", a->wh_timeouts, a->nwh_timeouts) == CLI_OK
	               ? known_kinds(a, "--webhook-secret-env", a->wh_secrets, a->nwh_secrets)
	               : CLI_USAGE;
}

static int add_webhooks(worker_args *a, skl_worker *w)
{
	for (int i = 0; i < a->nwebhooks; i++) {
		char kind[SKL_KIND_MAX + 2];
		if (!split_kind(a, "--webhook", a->webhooks[i], kind))
			return CLI_USAGE;
		skl_webhook_opts o;
		skl_webhook_opts_init(&o);
		const char *t = per_kind(a->wh_timeouts, a->nwh_timeouts, kind);
		if (t && !dur(a, "--webhook-timeout", t, &o.timeout_ms))
			return CLI_USAGE;
		o.secret_env = per_kind(a->wh_secrets, a->nwh_secrets, kind);
		skl_error err;
		if (skl_worker_handle_webhook(w, kind, strchr(a->webhooks[i], '=') + 1, &o, &err) !=
		    SKL_OK) {
			cli_error(a->cc, "--webhook %s: %s", kind, err.message);
			return CLI_USAGE;
		}
	}
	return CLI_OK;
}

static int add_retry_settings(worker_args *a, skl_worker *w)
{
	for (size_t i = 0; i < a->nkinds; i++) {
		kind_opt *k = &a->kinds[i];
		skl_error err;
		if (skl_worker_retry_policy(w, k->kind, &k->policy, &err) != SKL_OK ||
		    (k->breaker && skl_worker_breaker(w, k->kind, &k->breaker_config, &err) != SKL_OK)) {
			cli_error(a->cc, "kind %s: %s", k->kind, err.message);
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
	sigaction(SIGHUP, &sa, NULL); /* a closed terminal or ssh session: drain too */
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
		{"webhook", required_argument, NULL, O_WEBHOOK},
		{"stream", required_argument, NULL, O_STREAM},
		{"stream-procs", required_argument, NULL, O_STREAM_PROCS},
		{"stream-inflight", required_argument, NULL, O_STREAM_INFLIGHT},
		{"webhook-timeout", required_argument, NULL, O_WH_TIMEOUT},
		{"webhook-secret-env", required_argument, NULL, O_WH_SECRET},
		{"queue", required_argument, NULL, O_QUEUE},
		{"concurrency", required_argument, NULL, O_CONC},
		{"prefetch", required_argument, NULL, O_PREFETCH},
		{"connections", required_argument, NULL, O_CONNECTIONS},
		{"lease", required_argument, NULL, O_LEASE},
		{"poll", required_argument, NULL, O_POLL},
		{"poll-max", required_argument, NULL, O_POLLMAX},
		{"poll-idle", required_argument, NULL, O_POLLIDLE},
		{"timeout", required_argument, NULL, O_TIMEOUT},
		{"kill-grace", required_argument, NULL, O_GRACE},
		{"shutdown-timeout", required_argument, NULL, O_SHUTDOWN},
		{"backoff", required_argument, NULL, O_BACKOFF},
		{"backoff-base", required_argument, NULL, O_BBASE},
		{"backoff-cap", required_argument, NULL, O_BCAP},
		{"rescue-every", required_argument, NULL, O_RESCUE},
		{"owner", required_argument, NULL, O_OWNER},
		{"no-cron", no_argument, NULL, O_NO_CRON},
		{"retry-budget", required_argument, NULL, O_BUDGET},
		{"breaker", required_argument, NULL, O_BREAKER},
		{"metrics", required_argument, NULL, O_METRICS},
		{"metrics-every", required_argument, NULL, O_METRICS_EVERY},
		{"log-payloads", no_argument, NULL, O_LOG_PAYLOADS},
		{"handler-env", required_argument, NULL, O_HANDLER_ENV},
		{0}};
	cli_common cc;
	cli_common_init(&cc, "worker");
	cc.settings = true; /* SKIPLOCK_<OPTION> and --config FILE (settings.c) */
	worker_args a = {.cc = &cc};
	skl_worker_options_init(&a.wo);
	skl_stream_opts_init(&a.stream);
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, usage, exit_help, 0, &done);
	if (done)
		return rc;
	if (a.nhandlers == 0 && a.nstreams == 0 && a.nwebhooks == 0) {
		cli_error(&cc, "no handlers: give at least one --handler KIND=COMMAND, "
		               "--stream KIND=COMMAND or --webhook KIND=URL");
		return CLI_USAGE;
	}
	if (check_webhooks(&a) != CLI_OK)
		return CLI_USAGE;
	a.wo.queues = a.queues;
	a.wo.nqueues = a.nqueues;
	a.wo.handler_env = a.handler_env;
	a.wo.nhandler_env = a.nhandler_env;
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
		rc = add_webhooks(&a, w);
	if (rc == CLI_OK)
		rc = add_retry_settings(&a, w);
	if (rc == CLI_OK)
		rc = run(&a, w);
	cli_metrics_stop(m);
	skl_worker_free(w);
	return rc;
}
