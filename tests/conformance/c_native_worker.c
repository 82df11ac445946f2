/*
 * c_native_worker.c — the conformance suite's worker on the C API
 * (README.md): an skl_worker with one C handler per conf.* kind, run until
 * SIGTERM, then drained.  Configured by DATABASE_URL, DIRECT_DATABASE_URL,
 * CONFORMANCE_OWNER, CONFORMANCE_CONCURRENCY and CONFORMANCE_LEASE; the
 * adapter impl/c-native.sh execs it.
 *
 * Each handler thread makes its effect on a libpq connection of its own
 * (opened on first use, reopened when broken), never on the worker's.
 */
#include <skiplock.h>

#include <errno.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const EFFECT = "SELECT conformance.effect($1, $2, $3, $4)";

static const char *db_url;
static const char *owner;
static skl_worker *worker;

/* The handler threads' connections, closed at exit. */
static struct {
	pthread_mutex_t mu;
	PGconn *conn[SKL_WORKER_CONCURRENCY_MAX];
	size_t n;
} conns = {.mu = PTHREAD_MUTEX_INITIALIZER};
static _Thread_local PGconn **my_conn;

/* This thread's connection, connected (or failed: the statement says why). */
static PGconn *thread_conn(void)
{
	if (my_conn == NULL) {
		pthread_mutex_lock(&conns.mu);
		my_conn = &conns.conn[conns.n++];
		pthread_mutex_unlock(&conns.mu);
	}
	if (*my_conn == NULL || PQstatus(*my_conn) != CONNECTION_OK) {
		PQfinish(*my_conn);
		*my_conn = PQconnectdb(db_url);
	}
	return *my_conn;
}

/* The job's fenced effect; false (and the attempt's error set) when the
 * database refused it (SK001: the job is no longer ours) or failed. */
static bool effect(const skl_job *job)
{
	char id[24], fencing[24], error[512];
	snprintf(id, sizeof(id), "%lld", (long long)job->id);
	snprintf(fencing, sizeof(fencing), "%lld", (long long)job->fencing);
	const char *params[] = {id, fencing, owner, job->payload};
	PGconn *c = thread_conn();
	PGresult *r = PQexecParams(c, EFFECT, 4, NULL, params, NULL, NULL, 0);
	bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
	if (!ok) {
		const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
		snprintf(error, sizeof(error), "conformance.effect: SQLSTATE %s: %s",
		         state ? state : "none", PQerrorMessage(c));
		error[strcspn(error, "\n")] = '\0';
		skl_job_set_error(job, error);
	}
	PQclear(r);
	return ok;
}

/* Completes with the result {"kind", "attempt"}, after the effect if asked. */
static int complete(const skl_job *job, bool with_effect)
{
	if (with_effect && !effect(job))
		return 1;
	char result[256];
	snprintf(result, sizeof(result), "{\"kind\": \"%s\", \"attempt\": %d}", job->kind,
	         job->attempt);
	skl_job_set_result(job, result);
	return SKL_JOB_OK;
}

/* Ends the attempt with rc and the error "KIND attempt A". */
static int refuse(const skl_job *job, int rc)
{
	char error[256];
	snprintf(error, sizeof(error), "%s attempt %d", job->kind, job->attempt);
	skl_job_set_error(job, error);
	return rc;
}

/* The integer field name of the job's payload; 0 when there is none. */
static long long payload_int(const skl_job *job, const char *name)
{
	json_t *doc = json_loads(job->payload, 0, NULL);
	long long v = json_integer_value(json_object_get(doc, name));
	json_decref(doc);
	return v;
}

/* Sleeps ms milliseconds of the monotonic clock, whatever signals come. */
static void nap(long long ms)
{
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	long long ns = until.tv_nsec + ms % 1000 * 1000000;
	until.tv_sec += ms / 1000 + ns / 1000000000;
	until.tv_nsec = ns % 1000000000;
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
		;
}

static int conf_ok(const skl_job *job, void *ctx)
{
	(void)ctx;
	return complete(job, true);
}

static int conf_retry(const skl_job *job, void *ctx)
{
	(void)ctx;
	if (job->attempt >= payload_int(job, "until"))
		return complete(job, true);
	return refuse(job, SKL_JOB_RETRY);
}

static int conf_fail(const skl_job *job, void *ctx)
{
	(void)ctx;
	return refuse(job, 1);
}

static int conf_discard(const skl_job *job, void *ctx)
{
	(void)ctx;
	return refuse(job, SKL_JOB_DISCARD);
}

static int conf_sleep(const skl_job *job, void *ctx)
{
	(void)ctx;
	nap(payload_int(job, "ms"));
	return complete(job, true);
}

/* Attempt 1 is always overtaken in the suite: its completion, without an
 * effect, must change nothing. */
static int conf_hang(const skl_job *job, void *ctx)
{
	(void)ctx;
	if (job->attempt > 1)
		return complete(job, true);
	nap(payload_int(job, "ms"));
	return complete(job, false);
}

static const struct {
	const char *kind;
	skl_handler_fn fn;
} HANDLERS[] = {
	{"conf.ok", conf_ok},       {"conf.retry", conf_retry}, {"conf.fail", conf_fail},
	{"conf.discard", conf_discard}, {"conf.sleep", conf_sleep}, {"conf.hang", conf_hang},
};

/* The library's messages on stderr, one line each. */
static void log_line(void *ctx, skl_log_level level, const char *msg)
{
	static const char *const LEVELS[] = {"debug", "info", "warning", "error"};
	char line[2048];
	size_t n = 0;
	(void)ctx;
	for (; msg[n] != '\0' && n < sizeof(line) - 1; n++)
		line[n] = (unsigned char)msg[n] < 0x20 ? ' ' : msg[n];
	line[n] = '\0';
	if (level > SKL_LOG_DEBUG)
		fprintf(stderr, "%s: %s: %s\n", owner, LEVELS[level], line);
}

/* The worker's options from the suite's variables; false on bad input. */
static bool read_options(skl_worker_options *wo)
{
	const char *conc = getenv("CONFORMANCE_CONCURRENCY");
	const char *lease = getenv("CONFORMANCE_LEASE");
	skl_error err;
	char *end = NULL;
	skl_worker_options_init(wo);
	wo->concurrency = conc ? (int)strtol(conc, &end, 10) : 4;
	if (conc && (*conc == '\0' || *end != '\0' || wo->concurrency < 1 ||
	             wo->concurrency > SKL_WORKER_CONCURRENCY_MAX)) {
		fprintf(stderr, "c_native_worker: CONFORMANCE_CONCURRENCY: not 1 to %d: %s\n",
		        SKL_WORKER_CONCURRENCY_MAX, conc);
		return false;
	}
	if (skl_duration_parse(lease ? lease : "2s", &wo->lease_ms, &err) != SKL_OK) {
		fprintf(stderr, "c_native_worker: CONFORMANCE_LEASE: %s\n", err.message);
		return false;
	}
	/* Poll and rescue often enough for the suite's 1 s bounds; no cron. */
	wo->poll_ms = 50;
	wo->poll_max_ms = 200;
	wo->rescue_every_ms = 250;
	wo->shutdown_timeout_ms = 20000;
	wo->no_cron = true;
	wo->owner = owner;
	wo->log = log_line;
	return true;
}

/* A worker with the six handlers, or NULL (the reason on stderr). */
static skl_worker *new_worker(const skl_worker_options *wo)
{
	skl_client_options co;
	skl_client_options_init(&co);
	co.url = db_url;
	co.direct_url = getenv("DIRECT_DATABASE_URL");
	co.log = log_line;
	skl_error err;
	skl_worker *w = NULL;
	skl_rc rc = skl_worker_new(&co, wo, &w, &err);
	for (size_t i = 0; rc == SKL_OK && i < sizeof(HANDLERS) / sizeof(HANDLERS[0]); i++)
		rc = skl_worker_handle(w, HANDLERS[i].kind, HANDLERS[i].fn, NULL, &err);
	if (rc != SKL_OK) {
		fprintf(stderr, "c_native_worker: %s\n", err.message);
		skl_worker_free(w);
		return NULL;
	}
	return w;
}

static void on_signal(int sig)
{
	(void)sig;
	skl_worker_stop(worker);
}

/* Runs w until SIGTERM or SIGINT and its drain; the worker's verdict. */
static skl_rc run(skl_worker *w)
{
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	worker = w;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	skl_error err;
	skl_rc rc = skl_worker_run(w, &err);
	if (rc != SKL_OK)
		fprintf(stderr, "c_native_worker: %s\n", err.message);
	skl_worker_stats st;
	skl_worker_get_stats(w, &st);
	fprintf(stderr, "%s: stopped: claimed %llu, completed %llu, fenced out %llu\n", owner,
	        (unsigned long long)st.claimed, (unsigned long long)st.completed,
	        (unsigned long long)st.fenced_out);
	return rc;
}

int main(void)
{
	db_url = getenv("DATABASE_URL");
	owner = getenv("CONFORMANCE_OWNER");
	if (db_url == NULL || owner == NULL) {
		fprintf(stderr, "c_native_worker: DATABASE_URL and CONFORMANCE_OWNER must be set\n");
		return 2;
	}
	skl_worker_options wo;
	if (!read_options(&wo))
		return 2;
	skl_worker *w = new_worker(&wo);
	if (w == NULL)
		return 2;
	skl_rc rc = run(w);
	skl_worker_free(w);
	for (size_t i = 0; i < conns.n; i++)
		PQfinish(conns.conn[i]);
	return rc == SKL_OK ? 0 : 1;
}
