/*
 * charges.c — an example HTTP service that takes payments idempotently.
 *
 *   POST /charges  {"amount": 1250, "currency": "usd"}
 *   Idempotency-Key: <1 to 255 bytes>
 *
 * The key is claimed (skl_idem_claim) before anything is written; the
 * charge row and the stored response commit in one transaction with
 * idem_complete (skl_idem_complete_with), under the holder token the claim
 * returned, so only the attempt that acquired the key can store its
 * response.  So however often a request is
 * retried, and however many servers receive it at once, one charge is
 * written and every retry gets the first response:
 *
 *   201  first time; and the same 201 with the same body on every replay
 *        (marked by the header Idempotent-Replayed: true)
 *   409  another attempt with this key is in progress (Retry-After)
 *   422  the key was used for a different request (method, path or body)
 *   400  no key, an empty key or one over 255 bytes, or a body that is not
 *        a JSON object with a positive integer amount and a currency
 *   503  the database was unreachable or the outcome is unknown: retry
 *
 * A server that dies after claiming and before completing leaves the key
 * in progress; retries get 409 until the recovery window passes, then one
 * of them takes the claim over and charges once (nothing was written by
 * the dead attempt: the charge commits only with the completion).
 *
 * Usage: charges --url URL [--listen HOST:PORT] [--connections N]
 *                [--ttl DUR] [--recovery DUR] [--pause-after-claim DUR]
 * Prints "listening on http://HOST:PORT" once it accepts requests (port 0
 * picks a free one); SIGTERM or SIGINT stops it.  --pause-after-claim
 * sleeps between claiming and charging, so a test can kill the server
 * there.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pool.h"

#define BODY_MAX 65536

typedef struct config {
	const char *url;
	const char *host;
	int port;
	int connections;
	skl_idem_claim_opts claim;
	int64_t pause_ms;
} config;

static config cfg = {.host = "127.0.0.1", .port = 8080, .connections = 4};
static pool clients;

/* ---- one request ---- */

typedef struct request {
	char *body;
	size_t len;
	bool too_big;
} request;

typedef struct reply {
	unsigned int status;
	char *body;            /* malloc'd JSON text */
	bool replayed;
	bool retry_after;
} reply;

static reply error_reply(unsigned int status, const char *message)
{
	json_t *o = json_pack("{s:s}", "error", message);
	reply r = {.status = status, .body = json_dumps(o, JSON_COMPACT)};
	json_decref(o);
	r.retry_after = status == 409 || status == 503;
	return r;
}

static reply from_claim(const skl_idem_result *res)
{
	switch (res->outcome) {
	case SKL_IDEM_REPLAY:
		return (reply){.status = (unsigned int)res->response_code,
		               .body = strdup(res->response_body), .replayed = true};
	case SKL_IDEM_IN_PROGRESS:
		return error_reply(409, "a request with this idempotency key is in progress");
	case SKL_IDEM_CONFLICT:
		return error_reply(422, "this idempotency key was used for a different request");
	default: return error_reply(500, "unexpected claim outcome");
	}
}

/* The amount and currency of a well-formed body; false otherwise. */
static bool parse_charge(const request *rq, char *amount, size_t asz, char *currency, size_t csz)
{
	json_t *doc = json_loadb(rq->body ? rq->body : "", rq->len, 0, NULL);
	json_t *a = json_object_get(doc, "amount"), *c = json_object_get(doc, "currency");
	bool ok = json_is_object(doc) && json_is_integer(a) && json_integer_value(a) > 0 &&
	          json_is_string(c) && json_string_length(c) >= 1 && json_string_length(c) <= 8;
	if (ok) {
		snprintf(amount, asz, "%lld", (long long)json_integer_value(a));
		snprintf(currency, csz, "%s", json_string_value(c));
	}
	json_decref(doc);
	return ok;
}

static const char *const charge_sql =
	"WITH c AS (INSERT INTO charges (idempotency_key, amount, currency)"
	"           VALUES ($1, $2::bigint, $3) RETURNING id, amount, currency, created_at)"
	" SELECT jsonb_build_object('id', 'ch_' || id, 'amount', amount, 'currency', currency,"
	"        'created_at', to_char(created_at AT TIME ZONE 'UTC',"
	"                              'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'))::text FROM c";

static void pause_ms(int64_t ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* The claim is ours (holder is its token): charge and complete in one
 * transaction. */
static reply charge(skl_client *c, const char *key, const char *holder, const char *hash,
                    const char *amount, const char *currency)
{
	if (cfg.pause_ms > 0)
		pause_ms(cfg.pause_ms);
	const char *params[] = {key, amount, currency};
	skl_idem_effect e = {.sql = charge_sql, .nparams = 3, .params = params};
	char *body = NULL;
	skl_error err;
	skl_rc rc = skl_idem_complete_with(c, key, holder, 201, &e, &body, &err);
	if (rc == SKL_OK)
		return (reply){.status = 201, .body = body};
	if (rc == SKL_FENCED) { /* completed by another attempt, or by a lost COMMIT of ours */
		skl_idem_result res;
		if (skl_idem_claim(c, key, hash, &cfg.claim, &res, &err) == SKL_OK) {
			if (res.outcome == SKL_IDEM_ACQUIRED) /* expired meanwhile: start over later */
				skl_idem_release(c, key, res.holder, NULL);
			reply r = res.outcome == SKL_IDEM_ACQUIRED
			              ? error_reply(503, "the key expired while charging; retry")
			              : from_claim(&res);
			skl_idem_result_free(&res);
			return r;
		}
	} else if (!err.indeterminate) {
		/* Nothing was written: let a retry run at once. */
		skl_error ignored;
		skl_idem_release(c, key, holder, &ignored);
	}
	fprintf(stderr, "charges: key %s: %s\n", key, err.message);
	return error_reply(503, "the charge could not be recorded; retry with the same key");
}

static reply handle_charge(const request *rq, const char *key)
{
	size_t klen = key ? strlen(key) : 0;
	if (key == NULL)
		return error_reply(400, "the Idempotency-Key header is required");
	if (klen == 0 || klen > SKL_IDEM_KEY_MAX)
		return error_reply(400, "the Idempotency-Key header must be 1 to 255 bytes");
	char amount[32], currency[16], hash[SKL_IDEM_HASH_LEN];
	if (!parse_charge(rq, amount, sizeof(amount), currency, sizeof(currency)))
		return error_reply(400, "the body must be a JSON object with a positive integer "
		                        "\"amount\" and a \"currency\" of 1 to 8 characters");
	if (skl_idem_fingerprint("POST", "/charges", rq->body, rq->len, hash, NULL) != SKL_OK)
		return error_reply(500, "cannot fingerprint the request");
	skl_client *c = pool_get(&clients, 10000);
	if (c == NULL)
		return error_reply(503, "the server is busy; retry with the same key");
	skl_idem_result res;
	skl_error err;
	reply r;
	if (skl_idem_claim(c, key, hash, &cfg.claim, &res, &err) != SKL_OK) {
		fprintf(stderr, "charges: key %s: claim: %s\n", key, err.message);
		r = error_reply(503, "the key could not be claimed; retry with the same key");
	} else if (res.outcome == SKL_IDEM_ACQUIRED) {
		r = charge(c, key, res.holder, hash, amount, currency);
	} else {
		r = from_claim(&res);
	}
	skl_idem_result_free(&res);
	pool_put(&clients, c);
	return r;
}

/* ---- HTTP ---- */

static enum MHD_Result send_reply(struct MHD_Connection *conn, reply r)
{
	const char *body = r.body ? r.body : "{}";
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
	free(r.body);
	if (resp == NULL)
		return MHD_NO;
	MHD_add_response_header(resp, "Content-Type", "application/json");
	if (r.replayed)
		MHD_add_response_header(resp, "Idempotent-Replayed", "true");
	if (r.retry_after)
		MHD_add_response_header(resp, "Retry-After", "1");
	enum MHD_Result ok = MHD_queue_response(conn, r.status, resp);
	MHD_destroy_response(resp);
	return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **state)
{
	(void)cls, (void)version;
	request *rq = *state;
	if (rq == NULL) {
		if ((rq = calloc(1, sizeof(*rq))) == NULL)
			return MHD_NO;
		*state = rq;
		return MHD_YES;
	}
	if (*upload_size > 0) {
		size_t n = *upload_size;
		char *grown = rq->too_big || rq->len + n > BODY_MAX ? NULL
		                                                   : realloc(rq->body, rq->len + n + 1);
		if (grown) {
			memcpy(grown + rq->len, upload, n);
			rq->body = grown;
			rq->len += n;
			rq->body[rq->len] = '\0';
		} else {
			rq->too_big = true;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (strcmp(url, "/charges") != 0)
		return send_reply(conn, error_reply(404, "no such resource"));
	if (strcmp(method, "POST") != 0)
		return send_reply(conn, error_reply(405, "use POST"));
	if (rq->too_big)
		return send_reply(conn, error_reply(413, "the body is over 64 KiB"));
	const char *key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Idempotency-Key");
	return send_reply(conn, handle_charge(rq, key));
}

static void on_done(void *cls, struct MHD_Connection *conn, void **state,
                    enum MHD_RequestTerminationCode code)
{
	(void)cls, (void)conn, (void)code;
	request *rq = *state;
	if (rq)
		free(rq->body);
	free(rq);
	*state = NULL;
}

/* ---- start-up ---- */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "charges: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(2);
}

static int64_t duration(const char *opt, const char *arg)
{
	int64_t ms = 0;
	if (skl_duration_parse(arg, &ms, NULL) != SKL_OK || ms <= 0)
		die("bad duration \"%s\" for %s", arg, opt);
	return ms;
}

static void parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{"url", required_argument, NULL, 'u'},        {"listen", required_argument, NULL, 'l'},
		{"connections", required_argument, NULL, 'n'}, {"ttl", required_argument, NULL, 't'},
		{"recovery", required_argument, NULL, 'r'},
		{"pause-after-claim", required_argument, NULL, 'p'}, {0}};
	static char host[64];
	int ch;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		char *colon = ch == 'l' ? strrchr(optarg, ':') : NULL;
		switch (ch) {
		case 'u': cfg.url = optarg; break;
		case 'l':
			if (colon == NULL || colon - optarg >= (long)sizeof(host))
				die("--listen wants HOST:PORT, got \"%s\"", optarg);
			snprintf(host, sizeof(host), "%.*s", (int)(colon - optarg), optarg);
			cfg.host = host;
			cfg.port = atoi(colon + 1);
			break;
		case 'n': cfg.connections = atoi(optarg); break;
		case 't': cfg.claim.ttl_ms = duration("--ttl", optarg); break;
		case 'r': cfg.claim.recovery_ms = duration("--recovery", optarg); break;
		case 'p': cfg.pause_ms = duration("--pause-after-claim", optarg); break;
		default: exit(2);
		}
	}
	if (cfg.url == NULL && (cfg.url = getenv("DATABASE_URL")) == NULL)
		die("--url URL (or DATABASE_URL) is required");
	if (cfg.connections < 1 || cfg.connections > 64 || cfg.port < 0 || cfg.port > 65535)
		die("--connections must be 1 to 64 and the port 0 to 65535");
}

static struct MHD_Daemon *start_http(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg.port)};
	if (inet_pton(AF_INET, cfg.host, &sa.sin_addr) != 1)
		die("--listen: \"%s\" is not an IPv4 address", cfg.host);
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL,
		on_request, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
		MHD_OPTION_NOTIFY_COMPLETED, on_done, NULL, MHD_OPTION_CONNECTION_TIMEOUT,
		(unsigned int)60, MHD_OPTION_END);
	if (d == NULL)
		die("cannot listen on %s", cfg.host);
	return d;
}

int main(int argc, char **argv)
{
	parse_args(argc, argv);
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	pthread_sigmask(SIG_BLOCK, &stop, NULL); /* every thread inherits the mask */
	signal(SIGPIPE, SIG_IGN);
	char why[512];
	if (pool_open(&clients, cfg.url, cfg.connections, why, sizeof(why)) != 0) {
		fprintf(stderr, "charges: %s\n", why);
		return 3;
	}
	struct MHD_Daemon *d = start_http();
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	printf("listening on http://%s:%u\n", cfg.host, info ? info->port : 0);
	fflush(stdout);
	int sig = 0;
	sigwait(&stop, &sig);
	MHD_stop_daemon(d);
	pool_close(&clients);
	return 0;
}
