/*
 * Tests of the charges example service, direct and through PgBouncer: the
 * binary ($SKL_CHARGES) is started on 127.0.0.1 with a port of its own
 * choosing and spoken to over HTTP with libcurl.
 *
 * 32 concurrent identical requests write one charge and all answer 201
 * (byte-identical bodies) or 409; a different body under the same key is
 * 422 and writes nothing; a server SIGKILLed between claiming and
 * charging leaves a key that answers 409 within the recovery window and
 * is taken over after it, for one charge in total; expired keys are
 * pruned and reusable; bad input is 400 and writes nothing.  The passing
 * of windows and ttls is simulated by moving the key's instants back.
 */
#include <curl/curl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"

/* ---- the server ---- */

typedef struct server {
	pid_t pid;
	int port;
} server;

static void read_port(server *s, int fd)
{
	char line[256] = "";
	size_t n = 0;
	int64_t deadline = itest_now_ms() + 60000;
	while (strchr(line, '\n') == NULL && n + 1 < sizeof(line)) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		int64_t left = deadline - itest_now_ms();
		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			itest_fail(__FILE__, __LINE__, "the server did not start within 60 s");
		ssize_t got = read(fd, line + n, sizeof(line) - 1 - n);
		if (got <= 0)
			itest_fail(__FILE__, __LINE__, "the server exited at start: \"%s\"", line);
		n += (size_t)got;
		line[n] = '\0';
	}
	if (sscanf(line, "listening on http://127.0.0.1:%d", &s->port) != 1 || s->port <= 0)
		itest_fail(__FILE__, __LINE__, "unexpected start line \"%s\"", line);
}

/* Starts the server with extra options (NULL-terminated, up to 6). */
static server start(itest_ctx *t, const char *const *extra)
{
	const char *bin = getenv("SKL_CHARGES");
	CHECK(bin != NULL);
	const char *argv[16] = {bin, "--url", t->url, "--listen", "127.0.0.1:0"};
	for (int i = 0; extra && extra[i] && i < 6; i++)
		argv[5 + i] = extra[i];
	int out[2];
	CHECK(pipe(out) == 0);
	server s = {.pid = fork()};
	CHECK(s.pid >= 0);
	if (s.pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed case */
		dup2(out[1], 1);
		close(out[0]);
		close(out[1]);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	read_port(&s, out[0]);
	close(out[0]);
	return s;
}

static void stop(server *s, int sig)
{
	kill(s->pid, sig);
	int status = 0;
	for (int i = 0; i < 300 && waitpid(s->pid, &status, WNOHANG) == 0; i++)
		usleep(100000);
	if (waitpid(s->pid, &status, WNOHANG) == 0) {
		kill(s->pid, SIGKILL);
		waitpid(s->pid, &status, 0);
		itest_fail(__FILE__, __LINE__, "the server did not stop on signal %d", sig);
	}
	if (sig == SIGTERM)
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* ---- HTTP ---- */

typedef struct resp {
	long code;                /* 0: no response (connection failed) */
	char body[4096];
	size_t len;
	bool replayed;
	bool retry_after;
} resp;

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
	resp *r = ctx;
	size_t take = size * n;
	if (r->len + take >= sizeof(r->body))
		take = sizeof(r->body) - 1 - r->len;
	memcpy(r->body + r->len, p, take);
	r->len += take;
	r->body[r->len] = '\0';
	return size * n;
}

static size_t on_header(char *p, size_t size, size_t n, void *ctx)
{
	resp *r = ctx;
	if (strncasecmp(p, "Idempotent-Replayed: true", 25) == 0)
		r->replayed = true;
	if (strncasecmp(p, "Retry-After:", 12) == 0)
		r->retry_after = true;
	return size * n;
}

/* POST /charges with key (NULL: no header; "": an empty one). */
static resp post(const server *s, const char *key, const char *body)
{
	resp r = {0};
	char url[64], hdr[400];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/charges", s->port);
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
	if (key && *key)
		snprintf(hdr, sizeof(hdr), "Idempotency-Key: %s", key);
	else
		snprintf(hdr, sizeof(hdr), "Idempotency-Key;");
	if (key)
		h = curl_slist_append(h, hdr);
	CURL *c = curl_easy_init();
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.code);
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	return r;
}

static long long charges(itest_ctx *t)
{
	return itest_int(t->admin, "SELECT count(*) FROM charges");
}

static long long keys(itest_ctx *t)
{
	return itest_int(t->admin, "SELECT count(*) FROM skiplock.idempotency_keys");
}

static const char *const BODY = "{\"amount\": 1250, \"currency\": \"usd\"}";

/* ---- 32 concurrent identical requests ---- */

#define CONCURRENT 32

typedef struct client_thread {
	const server *s;
	pthread_barrier_t *go;
	resp r;
} client_thread;

static void *send_one(void *arg)
{
	client_thread *ct = arg;
	pthread_barrier_wait(ct->go);
	ct->r = post(ct->s, "order-42", BODY);
	return NULL;
}

static void concurrent_identical_requests(itest_ctx *t)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	/* The winner lingers after its claim, so the others find it in progress. */
	const char *opts[] = {"--pause-after-claim", "500ms", NULL};
	server s = start(t, opts);
	static client_thread ct[CONCURRENT];
	pthread_t th[CONCURRENT];
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, CONCURRENT);
	for (int i = 0; i < CONCURRENT; i++) {
		ct[i] = (client_thread){.s = &s, .go = &go};
		CHECK(pthread_create(&th[i], NULL, send_one, &ct[i]) == 0);
	}
	const char *first = NULL;
	int created = 0, busy = 0;
	for (int i = 0; i < CONCURRENT; i++) {
		pthread_join(th[i], NULL);
		if (ct[i].r.code == 409) {
			CHECK(ct[i].r.retry_after);
			busy++;
			continue;
		}
		CHECK_EQ(ct[i].r.code, 201);
		created++;
		if (first == NULL)
			first = ct[i].r.body;
		CHECK_STR(ct[i].r.body, first);
	}
	pthread_barrier_destroy(&go);
	printf("  %d answered 201, %d answered 409\n", created, busy);
	CHECK_EQ(created + busy, CONCURRENT);
	CHECK_INT(>=, created, 1);
	CHECK_EQ(charges(t), 1);
	/* After completion every replay is the original 201, byte for byte. */
	resp again = post(&s, "order-42", BODY);
	CHECK_EQ(again.code, 201);
	CHECK(again.replayed);
	if (first)
		CHECK_STR(again.body, first);
	for (int i = 0; i < 5; i++)
		CHECK_STR(post(&s, "order-42", BODY).body, again.body);
	CHECK(strstr(again.body, "\"amount\": 1250") != NULL);
	CHECK_EQ(charges(t), 1);
	stop(&s, SIGTERM);
	itest_no_leftovers(t);
}

/* ---- same key, different body ---- */

static void different_body_is_refused(itest_ctx *t)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	server s = start(t, NULL);
	resp a = post(&s, "k-1", BODY);
	CHECK_EQ(a.code, 201);
	CHECK(!a.replayed);
	resp b = post(&s, "k-1", "{\"amount\": 9999, \"currency\": \"usd\"}");
	CHECK_EQ(b.code, 422);
	CHECK_EQ(charges(t), 1);
	CHECK_EQ(keys(t), 1);
	CHECK_STR(itest_text(t->admin, "SELECT response_body::text FROM skiplock.idempotency_keys"),
	          a.body);
	/* Byte-different but the same JSON is a different request too. */
	CHECK_EQ(post(&s, "k-1", "{\"amount\":1250,\"currency\":\"usd\"}").code, 422);
	CHECK_EQ(post(&s, "k-1", BODY).code, 201);
	CHECK_EQ(charges(t), 1);
	stop(&s, SIGTERM);
}

/* ---- a server killed between claiming and charging ---- */

static void *send_doomed(void *arg)
{
	client_thread *ct = arg;
	ct->r = post(ct->s, "crash-1", BODY);
	return NULL;
}

static void killed_after_claim_recovers(itest_ctx *t)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const char *paused[] = {"--pause-after-claim", "10min", "--recovery", "1h", NULL};
	server s = start(t, paused);
	client_thread ct = {.s = &s};
	pthread_t th;
	CHECK(pthread_create(&th, NULL, send_doomed, &ct) == 0);
	int64_t deadline = itest_now_ms() + 60000;
	while (itest_int(t->admin, "SELECT count(*) FROM skiplock.idempotency_keys"
	                           " WHERE key = 'crash-1' AND state = 'in_progress'") == 0) {
		if (itest_now_ms() > deadline)
			itest_fail(__FILE__, __LINE__, "the request was not claimed within 60 s");
		usleep(20000);
	}
	stop(&s, SIGKILL);
	pthread_join(th, NULL);
	CHECK_EQ(ct.r.code, 0); /* the client saw the connection die */
	CHECK_EQ(charges(t), 0);
	const char *normal[] = {"--recovery", "1h", NULL};
	s = start(t, normal);
	/* Within the recovery window: in progress. */
	resp r = post(&s, "crash-1", BODY);
	CHECK_EQ(r.code, 409);
	CHECK(r.retry_after);
	CHECK_EQ(charges(t), 0);
	/* The window passes (simulated): the retry takes the claim over. */
	PQclear(itest_sql(t->admin, "UPDATE skiplock.idempotency_keys"
	                            " SET locked_until = clock_timestamp() - interval '1 second'"));
	r = post(&s, "crash-1", BODY);
	CHECK_EQ(r.code, 201);
	CHECK(!r.replayed);
	CHECK_EQ(post(&s, "crash-1", BODY).code, 201);
	CHECK_STR(post(&s, "crash-1", BODY).body, r.body);
	CHECK_EQ(charges(t), 1);
	CHECK_EQ(itest_int(t->admin, "SELECT claims FROM skiplock.idempotency_keys"), 2);
	stop(&s, SIGTERM);
	itest_no_leftovers(t);
}

/* The same crash with a real two-second window: retries get 409 until it
 * passes, then one charges.  Only an upper bound is waited for. */
static void killed_after_claim_real_window(itest_ctx *t)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const char *paused[] = {"--pause-after-claim", "10min", "--recovery", "2s", NULL};
	server s = start(t, paused);
	client_thread ct = {.s = &s};
	pthread_t th;
	CHECK(pthread_create(&th, NULL, send_doomed, &ct) == 0);
	int64_t deadline = itest_now_ms() + 60000;
	while (itest_int(t->admin, "SELECT count(*) FROM skiplock.idempotency_keys") == 0) {
		if (itest_now_ms() > deadline)
			itest_fail(__FILE__, __LINE__, "the request was not claimed within 60 s");
		usleep(20000);
	}
	stop(&s, SIGKILL);
	pthread_join(th, NULL);
	const char *normal[] = {"--recovery", "2s", NULL};
	s = start(t, normal);
	int busy = 0;
	resp r;
	deadline = itest_now_ms() + 60000;
	while ((r = post(&s, "crash-1", BODY)).code == 409) {
		busy++;
		if (itest_now_ms() > deadline)
			itest_fail(__FILE__, __LINE__, "still in progress after 60 s");
		usleep(200000);
	}
	printf("  %d retries answered 409 before the takeover\n", busy);
	CHECK_EQ(r.code, 201);
	CHECK_EQ(charges(t), 1);
	CHECK_EQ(itest_int(t->admin, "SELECT claims FROM skiplock.idempotency_keys"), 2);
	CHECK_STR(post(&s, "crash-1", BODY).body, r.body);
	stop(&s, SIGTERM);
}

/* ---- expiry ---- */

static void expired_keys_pruned_and_reusable(itest_ctx *t)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const char *opts[] = {"--ttl", "1h", NULL};
	server s = start(t, opts);
	CHECK_EQ(post(&s, "old-key", BODY).code, 201);
	CHECK_EQ(post(&s, "fresh-key", BODY).code, 201);
	CHECK_EQ(itest_int(t->admin, "SELECT round(extract(epoch FROM expires_at - created_at))"
	                             " FROM skiplock.idempotency_keys WHERE key = 'old-key'"), 3600);
	PQclear(itest_sql(t->admin, "UPDATE skiplock.idempotency_keys"
	                            " SET expires_at = clock_timestamp() - interval '1 second'"
	                            " WHERE key = 'old-key'"));
	CHECK_EQ(itest_sh("'%s' idem prune --url '%s' >/dev/null", itest_bin(), t->url), 0);
	CHECK_STR(itest_text(t->admin, "SELECT string_agg(key, ',') FROM skiplock.idempotency_keys"),
	          "fresh-key");
	resp r = post(&s, "old-key", "{\"amount\": 5, \"currency\": \"eur\"}");
	CHECK_EQ(r.code, 201);
	CHECK(!r.replayed);
	CHECK_EQ(charges(t), 3);
	CHECK_EQ(post(&s, "fresh-key", BODY).code, 201);
	CHECK_EQ(charges(t), 3);
	stop(&s, SIGTERM);
}

/* ---- bad input ---- */

static void bad_input_is_400(itest_ctx *t)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	server s = start(t, NULL);
	char long_key[300];
	memset(long_key, 'k', 256);
	long_key[256] = '\0';
	CHECK_EQ(post(&s, NULL, BODY).code, 400);
	CHECK_EQ(post(&s, "", BODY).code, 400);
	CHECK_EQ(post(&s, long_key, BODY).code, 400);
	CHECK_EQ(post(&s, "k", "{\"amount\": 12").code, 400);
	CHECK_EQ(post(&s, "k", "").code, 400);
	CHECK_EQ(post(&s, "k", "[1250, \"usd\"]").code, 400);
	CHECK_EQ(post(&s, "k", "{\"amount\": -5, \"currency\": \"usd\"}").code, 400);
	resp r = post(&s, "k", "not json");
	CHECK_EQ(r.code, 400);
	CHECK(strstr(r.body, "\"error\"") != NULL);
	CHECK_EQ(charges(t), 0);
	CHECK_EQ(keys(t), 0);
	/* The boundary: 255 bytes is a key. */
	long_key[255] = '\0';
	CHECK_EQ(post(&s, long_key, BODY).code, 201);
	CHECK_EQ(charges(t), 1);
	stop(&s, SIGTERM);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"concurrent_identical_requests", concurrent_identical_requests, 180},
		{"different_body_is_refused", different_body_is_refused, 60},
		{"killed_after_claim_recovers", killed_after_claim_recovers, 120},
		{"killed_after_claim_real_window", killed_after_claim_real_window, 180},
		{"expired_keys_pruned_and_reusable", expired_keys_pruned_and_reusable, 60},
		{"bad_input_is_400", bad_input_is_400, 60},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
