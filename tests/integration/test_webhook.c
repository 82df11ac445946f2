/*
 * Integration tests of webhook handlers, direct and through PgBouncer,
 * against an HTTP server (libmicrohttpd) run inside the test process.
 *
 * Each answer leads to its documented outcome, checked in SQL: 2xx
 * completes and keeps the JSON body; 429 with Retry-After in seconds and as
 * an HTTP date puts run_at exactly there; 503 with Retry-After waits that
 * long and then completes; 410 discards at once; 500 retries; a timeout and
 * a refused connection retry until max_attempts.  Every request carries
 * Idempotency-Key: skiplock-<id> and a correct signature; the secret
 * appears in no log line and no error.  Consecutive jobs reuse connections
 * (the server counts them).
 */
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "itest.h"
#include "skiplock.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
/* Cases end with _exit: look for leaks (the handler threads' curl handles
 * included) while the process is still running. */
#define CHECK_NO_LEAKS() CHECK_EQ(__lsan_do_recoverable_leak_check(), 0)
#else
#define CHECK_NO_LEAKS() ((void)0)
#endif

#define SECRET "hook-secret-7f3a9c"
#define SECRET_VAR "SKL_ITEST_HOOK_SECRET"
#define MAX_SEEN 256

/* ---- the server ---- */

typedef struct seen {
	char path[32], key[64], sig[80], body[256];
	bool json_type;
} seen;

typedef struct hook_server {
	struct MHD_Daemon *d;
	int port;
	pthread_mutex_t mu;
	int connections;
	int hits[8];
	seen seen[MAX_SEEN];
	int nseen;
	long ra_date;              /* the instant sent in /ra-date's Retry-After */
	volatile int stopping;
} hook_server;

typedef struct upload {
	char body[4096];
	size_t len;
} upload;

static const char *const routes[] = {"/ok", "/ra-seconds", "/ra-date", "/busy",
                                     "/gone", "/boom", "/slow"};

static int route_of(const char *url)
{
	for (int i = 0; i < 7; i++)
		if (strcmp(url, routes[i]) == 0)
			return i;
	return -1;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode code)
{
	hook_server *s = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		pthread_mutex_lock(&s->mu);
		s->connections++;
		pthread_mutex_unlock(&s->mu);
	}
}

static void remember(hook_server *s, struct MHD_Connection *c, const char *url,
                     const upload *u)
{
	if (s->nseen == MAX_SEEN)
		return;
	seen *r = &s->seen[s->nseen++];
	const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Key");
	const char *sig = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Skiplock-Signature");
	const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	snprintf(r->path, sizeof(r->path), "%s", url);
	snprintf(r->key, sizeof(r->key), "%s", key ? key : "");
	snprintf(r->sig, sizeof(r->sig), "%s", sig ? sig : "");
	snprintf(r->body, sizeof(r->body), "%.*s", (int)u->len, u->body);
	r->json_type = ct && strcmp(ct, "application/json") == 0;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *body,
                             const char *retry_after)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
	MHD_add_response_header(r, "Content-Type", "application/json");
	if (retry_after)
		MHD_add_response_header(r, "Retry-After", retry_after);
	enum MHD_Result ok = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ok;
}

/* What each route answers on its n-th request (n from 1). */
static enum MHD_Result answer(hook_server *s, struct MHD_Connection *c, int route, int n,
                              const upload *u)
{
	char buf[4200], date[64];
	switch (route) {
	case 0:
		snprintf(buf, sizeof(buf), "{\"received\": %.*s}", (int)u->len, u->body);
		return reply(c, 200, buf, NULL);
	case 1: return n == 1 ? reply(c, 429, "{\"error\": \"slow down\"}", "30")
	                      : reply(c, 200, "{\"done\": true}", NULL);
	case 2:
		if (n > 1)
			return reply(c, 201, "{\"done\": true}", NULL);
		s->ra_date = (long)time(NULL) + 40;
		time_t t = (time_t)s->ra_date;
		struct tm tm;
		strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&t, &tm));
		return reply(c, 429, "{}", date);
	case 3: return n == 1 ? reply(c, 503, "maintenance", "1") : reply(c, 204, "", NULL);
	case 4: return reply(c, 410, "gone", NULL);
	case 5: return n <= 2 ? reply(c, 500, "database on fire", NULL)
	                      : reply(c, 200, "not json", NULL);
	case 6:
		for (int i = 0; i < 40 && !s->stopping; i++) /* 2 s, far past the 300 ms timeout */
			usleep(50000);
		return reply(c, 200, "{}", NULL);
	}
	return reply(c, 404, "no such route", NULL);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *data, size_t *data_len, void **ctx)
{
	hook_server *s = cls;
	upload *u = *ctx;
	if (u == NULL) {
		*ctx = calloc(1, sizeof(upload));
		return *ctx ? MHD_YES : MHD_NO;
	}
	if (*data_len > 0) {
		size_t take = *data_len < sizeof(u->body) - u->len ? *data_len : sizeof(u->body) - u->len;
		memcpy(u->body + u->len, data, take);
		u->len += take;
		*data_len = 0;
		return MHD_YES;
	}
	int route = route_of(url);
	pthread_mutex_lock(&s->mu);
	int n = route >= 0 ? ++s->hits[route] : 0;
	remember(s, c, url, u);
	pthread_mutex_unlock(&s->mu);
	return answer(s, c, route, n, u);
}

static void on_done(void *cls, struct MHD_Connection *c, void **ctx,
                    enum MHD_RequestTerminationCode code)
{
	free(*ctx);
	*ctx = NULL;
}

static hook_server *server_start(void)
{
	hook_server *s = calloc(1, sizeof(*s));
	CHECK(s != NULL);
	pthread_mutex_init(&s->mu, NULL);
	s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
	                            MHD_USE_ERROR_LOG,
	                        0, NULL, NULL, on_request, s, MHD_OPTION_NOTIFY_CONNECTION,
	                        on_connection, s, MHD_OPTION_NOTIFY_COMPLETED, on_done, s,
	                        MHD_OPTION_END);
	CHECK(s->d != NULL);
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
	CHECK(info != NULL && info->port > 0);
	s->port = info->port;
	return s;
}

static void server_stop(hook_server *s)
{
	s->stopping = 1;
	MHD_stop_daemon(s->d);
	pthread_mutex_destroy(&s->mu);
	free(s);
}

/* A port nothing listens on: bound once, then closed. */
static int closed_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, len) == 0 &&
	      getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* ---- the worker, on a thread of this process ---- */

typedef struct run {
	skl_worker *w;
	pthread_t thread;
	skl_rc rc;
	pthread_mutex_t mu;
	char log[65536];
	size_t loglen;
} run;

static void on_log(void *ctx, skl_log_level lvl, const char *msg)
{
	run *r = ctx;
	pthread_mutex_lock(&r->mu);
	int n = snprintf(r->log + r->loglen, sizeof(r->log) - r->loglen, "%s\n", msg);
	if (n > 0 && r->loglen + (size_t)n < sizeof(r->log))
		r->loglen += (size_t)n;
	pthread_mutex_unlock(&r->mu);
}

static void *run_main(void *arg)
{
	run *r = arg;
	skl_error err;
	r->rc = skl_worker_run(r->w, &err);
	if (r->rc != SKL_OK)
		fprintf(stderr, "worker: %s\n", err.message);
	return NULL;
}

static run *worker_new(itest_ctx *t, int concurrency)
{
	run *r = calloc(1, sizeof(*r));
	CHECK(r != NULL);
	pthread_mutex_init(&r->mu, NULL);
	skl_client_options co;
	skl_client_options_init(&co);
	co.url = t->url;
	skl_worker_options wo;
	skl_worker_options_init(&wo);
	wo.concurrency = concurrency;
	wo.poll_ms = 50;
	wo.poll_max_ms = 200;
	wo.backoff_base_ms = 50;
	wo.backoff_cap_ms = 60000;
	wo.no_cron = true;
	wo.log = on_log;
	wo.log_ctx = r;
	skl_error err;
	if (skl_worker_new(&co, &wo, &r->w, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "worker: %s", err.message);
	return r;
}

static void hook(run *r, const char *kind, const char *url, int64_t timeout_ms, bool signed_)
{
	skl_webhook_opts o;
	skl_webhook_opts_init(&o);
	o.timeout_ms = timeout_ms;
	o.secret_env = signed_ ? SECRET_VAR : NULL;
	skl_error err;
	if (skl_worker_handle_webhook(r->w, kind, url, &o, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "webhook %s: %s", kind, err.message);
}

static void worker_stop(run *r)
{
	skl_worker_stop(r->w);
	pthread_join(r->thread, NULL);
	CHECK_EQ(r->rc, SKL_OK);
	skl_worker_free(r->w);
	pthread_mutex_destroy(&r->mu);
}

static skl_client *open_client(itest_ctx *t)
{
	return itest_client(t, NULL, true);
}

static int64_t enqueue(skl_client *c, const char *kind, const char *payload, int max_attempts)
{
	skl_enqueue_opts o;
	skl_enqueue_opts_init(&o);
	o.max_attempts = max_attempts;
	int64_t id = 0;
	skl_error err;
	if (skl_enqueue(c, kind, payload, &o, &id, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "enqueue %s: %s", kind, err.message);
	return id;
}

/* Polls until the SQL's first value is `want`; fails after timeout_s. */
static void wait_for(itest_ctx *t, const char *sql, const char *want, int timeout_s)
{
	int64_t end = itest_now_ms() + timeout_s * 1000LL;
	while (strcmp(itest_text(t->admin, "%s", sql), want) != 0) {
		if (itest_now_ms() > end)
			itest_fail(__FILE__, __LINE__, "waited %d s for \"%s\" from %s; jobs: %s", timeout_s,
			           want, sql,
			           itest_text(t->admin, "SELECT string_agg(kind || ':' || state || ':' || "
			                                "attempt, ' ' ORDER BY id) FROM skiplock.all_jobs"));
		usleep(100000);
	}
}

#define JOB(kind, what) \
	itest_text(t->admin, "SELECT " what " FROM skiplock.all_jobs WHERE kind = '%s'", kind)

static void expect_signature(const seen *r)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned n = 0;
	HMAC(EVP_sha256(), SECRET, (int)strlen(SECRET), (const unsigned char *)r->body,
	     strlen(r->body), md, &n);
	char want[80] = "sha256=";
	for (unsigned i = 0; i < n; i++)
		snprintf(want + 7 + 2 * i, 3, "%02x", md[i]);
	CHECK_STR(r->sig, want);
}

/* The requests /ok saw: the right key, type and signature for each job. */
static void check_ok_requests(itest_ctx *t, hook_server *s)
{
	int ok = 0;
	for (int i = 0; i < s->nseen; i++) {
		const seen *r = &s->seen[i];
		CHECK(r->json_type);
		if (strcmp(r->path, "/ok") != 0) {
			CHECK_STR(r->sig, ""); /* only the signed kind is signed */
			continue;
		}
		ok++;
		expect_signature(r);
		CHECK_STR(r->key, itest_text(t->admin, "SELECT 'skiplock-' || id FROM skiplock.all_jobs "
		                                       "WHERE kind = 'ok' AND payload = '%s'::jsonb",
		                             r->body));
	}
	CHECK_EQ(ok, 3);
}

/* True when some "retry in N ms" in log has lo <= N <= hi. */
static bool logged_retry_between(const char *log, long lo, long hi)
{
	for (const char *p = log; (p = strstr(p, "retry in ")) != NULL; p++) {
		long n = strtol(p + 9, NULL, 10);
		if (n >= lo && n <= hi)
			return true;
	}
	return false;
}

static void outcomes_by_status(itest_ctx *t)
{
	CHECK(setenv(SECRET_VAR, SECRET, 1) == 0);
	hook_server *s = server_start();
	skl_client *c = open_client(t);
	run *r = worker_new(t, 8);
	char url[128];
	const char *kinds[] = {"ok", "ra_seconds", "ra_date", "busy", "gone", "boom", "slow"};
	for (int i = 0; i < 7; i++) {
		snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", s->port, routes[i]);
		hook(r, kinds[i], url, i == 6 ? 300 : 0, i == 0);
	}
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", closed_port());
	hook(r, "refused", url, 0, false);
	for (int i = 1; i <= 3; i++) {
		char p[32];
		snprintf(p, sizeof(p), "{\"n\": %d}", i);
		enqueue(c, "ok", p, 0);
	}
	for (int i = 1; i < 7; i++)
		enqueue(c, kinds[i], "{}", i == 6 ? 2 : 0);
	enqueue(c, "refused", "{}", 2);
	CHECK(pthread_create(&r->thread, NULL, run_main, r) == 0);

	wait_for(t, "SELECT count(*) FROM skiplock.all_jobs WHERE state IN ('completed', 'discarded')",
	         "8", 40);
	wait_for(t, "SELECT count(*) FROM skiplock.all_jobs WHERE kind LIKE 'ra_%' AND attempt = 1 "
	            "AND state = 'available' AND jsonb_array_length(errors) = 1", "2", 20);

	/* 2xx: completed at once, the JSON body kept */
	CHECK_STR(itest_text(t->admin, "SELECT string_agg(state || ' ' || attempt || ' ' || "
	                               "result::text, ',' ORDER BY id) FROM skiplock.all_jobs "
	                               "WHERE kind = 'ok'"),
	          "completed 1 {\"received\": {\"n\": 1}},completed 1 {\"received\": {\"n\": 2}},"
	          "completed 1 {\"received\": {\"n\": 3}}");
	check_ok_requests(t, s);
	/* 429 + Retry-After: 30 => run_at 30 s after the failure, plus the
	 * worker's spread of at most 10 % (docs/retry.md) */
	CHECK_STR(JOB("ra_seconds", "errors->0->>'error'"),
	          "HTTP 429 (Retry-After: 30): {\"error\": \"slow down\"}");
	CHECK_STR(JOB("ra_seconds", "extract(epoch FROM run_at - (errors->0->>'at')::"
	                            "timestamptz) BETWEEN 29.95 AND 33.05"), "t");
	/* 429 + an HTTP date => run_at at that instant (1 s resolution), plus
	 * at most 10 % of the ~40 s delay */
	CHECK_INT(>=, itest_int(t->admin, "SELECT floor(extract(epoch FROM run_at) - %ld)::bigint FROM "
	                                  "skiplock.jobs WHERE kind = 'ra_date'", s->ra_date), -1);
	CHECK_INT(<=, itest_int(t->admin, "SELECT floor(extract(epoch FROM run_at) - %ld)::bigint FROM "
	                                  "skiplock.jobs WHERE kind = 'ra_date'", s->ra_date), 5);
	CHECK(strstr(JOB("ra_date", "errors->0->>'error'"), "HTTP 429 (Retry-After: ") != NULL);
	/* 503 + Retry-After: 1 => waited 1 s, then completed */
	CHECK_STR(JOB("busy", "state || ' ' || attempt || ' ' || (errors->0->>'error')"),
	          "completed 2 HTTP 503 (Retry-After: 1): maintenance");
	CHECK_STR(JOB("busy", "extract(epoch FROM run_at - (errors->0->>'at')::timestamptz) "
	                      "BETWEEN 0.995 AND 1.105"), "t");
	CHECK_INT(>=, itest_int(t->admin, "SELECT extract(epoch FROM attempted_at - (errors->0->>"
	                                  "'at')::timestamptz) * 1000 FROM skiplock.all_jobs WHERE "
	                                  "kind = 'busy'"), 1000);
	/* 410: discarded at once */
	CHECK_STR(JOB("gone", "state || ' ' || attempt || ' ' || (errors->0->>'error')"),
	          "discarded 1 HTTP 410: gone");
	/* 500: retried (backoff), completed on the third try; non-JSON body not kept */
	CHECK_STR(JOB("boom", "state || ' ' || attempt || ' ' || jsonb_array_length(errors) || ' ' "
	                      "|| (errors->1->>'error') || ' ' || (result IS NULL)"),
	          "completed 3 2 HTTP 500: database on fire true");
	/* timeout and refused connection: failed attempts until max_attempts */
	CHECK_STR(JOB("slow", "state || ' ' || attempt || ' ' || jsonb_array_length(errors)"),
	          "discarded 2 2");
	CHECK(strstr(JOB("slow", "errors->1->>'error'"), "Timeout was reached") != NULL);
	CHECK_STR(JOB("refused", "state || ' ' || attempt || ' ' || jsonb_array_length(errors)"),
	          "discarded 2 2");
	CHECK(strstr(JOB("refused", "errors->0->>'error'"), "Couldn't connect") != NULL);

	/* bring the Retry-After jobs forward: they complete on the next attempt */
	PQclear(itest_sql(t->admin, "UPDATE skiplock.jobs SET run_at = now() WHERE kind LIKE 'ra_%%'"));
	wait_for(t, "SELECT string_agg(state || ' ' || attempt, ',') FROM skiplock.all_jobs WHERE "
	            "kind LIKE 'ra_%'", "completed 2,completed 2", 20);
	worker_stop(r);
	CHECK(logged_retry_between(r->log, 30000, 33000)); /* Retry-After: 30, spread */
	CHECK(strstr(r->log, SECRET) == NULL);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.all_jobs WHERE errors::text LIKE "
	                             "'%%" SECRET "%%' OR result::text LIKE '%%" SECRET "%%'"), 0);
	free(r);
	skl_client_close(c);
	server_stop(s);
	CHECK_NO_LEAKS();
}

/* 30 jobs, 2 handler threads: at most 2 connections, one per thread. */
static void connections_are_reused(itest_ctx *t)
{
	CHECK(setenv(SECRET_VAR, SECRET, 1) == 0);
	hook_server *s = server_start();
	skl_client *c = open_client(t);
	run *r = worker_new(t, 2);
	char url[128];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/ok", s->port);
	hook(r, "ok", url, 5000, true);
	skl_job_spec specs[30];
	int64_t ids[30];
	char payloads[30][32];
	for (int i = 0; i < 30; i++) {
		snprintf(payloads[i], sizeof(payloads[i]), "{\"n\": %d}", i);
		specs[i] = (skl_job_spec){.kind = "ok", .payload = payloads[i]};
	}
	skl_error err;
	CHECK_EQ(skl_enqueue_bulk(c, specs, 30, ids, &err), SKL_OK);
	CHECK(pthread_create(&r->thread, NULL, run_main, r) == 0);
	wait_for(t, "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed' AND attempt = 1",
	         "30", 40);
	worker_stop(r);
	free(r);
	pthread_mutex_lock(&s->mu);
	int conns = s->connections, hits = s->hits[0];
	pthread_mutex_unlock(&s->mu);
	printf("30 jobs over %d connection(s)\n", conns);
	CHECK_EQ(hits, 30);
	CHECK_INT(>=, conns, 1);
	CHECK_INT(<=, conns, 2);
	skl_client_close(c);
	server_stop(s);
	CHECK_NO_LEAKS();
}

static void registration_checks(itest_ctx *t)
{
	run *r = worker_new(t, 1);
	skl_error err;
	unsetenv("SKL_ITEST_UNSET_VAR");
	skl_webhook_opts o;
	skl_webhook_opts_init(&o);
	CHECK_EQ(skl_worker_handle_webhook(r->w, "a", "ftp://example.com/", NULL, &err), SKL_INVALID);
	CHECK_EQ(skl_worker_handle_webhook(r->w, "a", "http:///x", NULL, &err), SKL_INVALID);
	o.secret_env = "SKL_ITEST_UNSET_VAR";
	CHECK_EQ(skl_worker_handle_webhook(r->w, "a", "http://127.0.0.1/", &o, &err), SKL_INVALID);
	CHECK(strstr(err.message, "SKL_ITEST_UNSET_VAR") != NULL);
	o.secret_env = NULL;
	o.timeout_ms = -1;
	CHECK_EQ(skl_worker_handle_webhook(r->w, "a", "http://127.0.0.1/", &o, &err), SKL_INVALID);
	CHECK_EQ(skl_worker_handle_webhook(r->w, "a", "http://127.0.0.1/", NULL, &err), SKL_OK);
	CHECK_EQ(skl_worker_handle_webhook(r->w, "a", "http://127.0.0.1/", NULL, &err), SKL_CONFLICT);
	CHECK_EQ(skl_worker_handle_command(r->w, "a", "true", &err), SKL_CONFLICT);
	skl_worker_free(r->w);
	pthread_mutex_destroy(&r->mu);
	free(r);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"outcomes_by_status", outcomes_by_status, 90},
		{"connections_are_reused", connections_are_reused, 60},
		{"registration_checks", registration_checks, 30},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
