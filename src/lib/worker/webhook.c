/*
 * webhook.c — webhook handlers (see skiplock/webhook.h): one HTTP POST per
 * attempt with libcurl, the status mapped to a job outcome.  libcurl is
 * opened on first use (curl_lazy.h): a worker without webhooks never maps it.
 *
 * Each handler thread keeps one CURL easy handle in thread-specific data
 * (freed when the thread ends); curl_easy_reset between requests keeps its
 * connection cache, so consecutive jobs to the same host reuse a
 * connection.  A lost lease or a worker shutting down aborts the transfer
 * through the progress callback.  Registered through handler_ops: the loop
 * calls webhook_run and knows nothing else of this file.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "worker/curl_lazy.h"
#include "skiplock/webhook.h"
#include "worker/webhook_int.h"
#include "worker/worker_int.h"

#define ERROR_BODY_MAX 256 /* bytes of a failed response kept in the error */

/* A webhook handler's state (its handler_ops ctx). */
typedef struct webhook {
	char *url;                   /* POST the payload here */
	int64_t timeout_ms;          /* 0 = the job's or worker's timeout */
	int64_t connect_ms;          /* 0 = min(timeout, 10 s) */
	char *secret;                /* HMAC secret or NULL; never logged */
} webhook;

static void webhook_free(void *ctx)
{
	webhook *wh = ctx;
	if (wh == NULL)
		return;
	free(wh->url);
	if (wh->secret) {
		explicit_bzero(wh->secret, strlen(wh->secret));
		free(wh->secret);
	}
	free(wh);
}

static int webhook_run(skl_worker *w, slot *s);
static const handler_ops webhook_ops = {.name = "webhook", .run = webhook_run,
                                        .free = webhook_free};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static pthread_key_t curl_key;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void free_handle(void *c)
{
	curl_easy_cleanup(c);
}

static void init_curl(void)
{
	if (!skl__curl_load(NULL))
		return;
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
	if (curl_init_rc == CURLE_OK && pthread_key_create(&curl_key, free_handle) != 0)
		curl_init_rc = CURLE_FAILED_INIT;
}

/* The calling thread's handle, created on first use. */
static CURL *thread_handle(void)
{
	CURL *c = pthread_getspecific(curl_key);
	if (c == NULL) {
		c = curl_easy_init();
		if (c && pthread_setspecific(curl_key, c) != 0) {
			curl_easy_cleanup(c);
			c = NULL;
		}
	}
	return c;
}

void skl_webhook_opts_init(skl_webhook_opts *o)
{
	memset(o, 0, sizeof(*o));
}

skl_rc skl_webhook_url_check(const char *url, skl_error *err)
{
	if (url == NULL || *url == '\0')
		return skl__seterr(err, SKL_INVALID, "webhook URL is empty");
	const char *why;
	if (!skl__curl_load(&why))
		return skl__seterr(err, SKL_IO, "webhooks need libcurl: %s", why);
	CURLU *u = curl_url();
	if (u == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	char *scheme = NULL, *host = NULL;
	skl_rc rc = SKL_OK;
	const char *sep = strstr(url, "://");
	if (sep == NULL)
		rc = skl__seterr(err, SKL_INVALID, "webhook URL must start with http:// or https://");
	else if (strchr("/?#@:", sep[3]) != NULL) /* also the end of the string */
		rc = skl__seterr(err, SKL_INVALID, "webhook URL has no host");
	else if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK ||
	         curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK)
		rc = skl__seterr(err, SKL_INVALID, "webhook URL does not parse");
	else if (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0)
		rc = skl__seterr(err, SKL_INVALID, "webhook URL scheme must be http or https, not %.16s",
		                 scheme);
	else if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || host[0] == '\0')
		rc = skl__seterr(err, SKL_INVALID, "webhook URL has no host");
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}

static skl_rc read_secret(const char *var, char **out, skl_error *err)
{
	*out = NULL;
	if (var == NULL)
		return SKL_OK;
	const char *v = *var ? getenv(var) : NULL;
	if (v == NULL || *v == '\0')
		return skl__seterr(err, SKL_INVALID,
		                   "webhook secret variable \"%.64s\" is not set or empty", var);
	*out = strdup(v);
	return *out ? SKL_OK : skl__seterr(err, SKL_NOMEM, "out of memory");
}

skl_rc skl_worker_handle_webhook(skl_worker *w, const char *kind, const char *url,
                                 const skl_webhook_opts *opts, skl_error *err)
{
	skl_webhook_opts o;
	skl_webhook_opts_init(&o);
	if (opts)
		o = *opts;
	if (o.timeout_ms < 0 || o.connect_timeout_ms < 0)
		return skl__seterr(err, SKL_INVALID, "webhook timeouts must not be negative");
	skl_rc rc = skl_webhook_url_check(url, err);
	if (rc != SKL_OK)
		return rc;
	pthread_once(&curl_once, init_curl);
	if (curl_init_rc != CURLE_OK)
		return skl__seterr(err, SKL_IO, "cannot initialise libcurl: %s",
		                   skl__curl_load(NULL) ? curl_easy_strerror(curl_init_rc)
		                                        : "libcurl.so.4 not loaded");
	webhook *wh = calloc(1, sizeof(*wh));
	if (wh)
		*wh = (webhook){.url = strdup(url), .timeout_ms = o.timeout_ms,
		                .connect_ms = o.connect_timeout_ms};
	rc = wh && wh->url ? read_secret(o.secret_env, &wh->secret, err)
	                   : skl__seterr(err, SKL_NOMEM, "out of memory");
	if (rc == SKL_OK && wh->secret && !skl__cmd_env_add(&w->cmd_env.hide, o.secret_env))
		rc = skl__seterr(err, SKL_NOMEM, "out of memory"); /* never in a command's env */
	if (rc != SKL_OK) {
		webhook_free(wh);
		return rc;
	}
	return skl__handler_add(w, kind, &webhook_ops, wh, err);
}

int skl__webhook_outcome(long status, bool *honour_retry_after)
{
	*honour_retry_after = status == 429 || status == 503;
	if (status >= 200 && status <= 299)
		return SKL_JOB_OK;
	if (*honour_retry_after)
		return SKL_JOB_RETRY;
	if (status >= 400 && status <= 499)
		return SKL_JOB_DISCARD;
	return 1; /* 5xx, 3xx (not followed), anything odd: a failed attempt */
}

bool skl__webhook_sign(const char *key, const char *msg, size_t len, char out[72])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	if (HMAC(EVP_sha256(), key, (int)strlen(key), (const unsigned char *)msg, len, md, &n) ==
	        NULL || n != 32)
		return false;
	memcpy(out, "sha256=", 7);
	for (unsigned i = 0; i < n; i++)
		snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
	return true;
}

/* ---- one request ---- */

typedef struct reply {
	char *body;
	size_t len;
	bool truncated;
	char retry_after[129];
	slot *s;
} reply;

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
	reply *r = ctx;
	size_t take = size * n;
	if (r->len + take > SKL_WEBHOOK_BODY_MAX) {
		r->truncated = true;
		take = SKL_WEBHOOK_BODY_MAX - r->len;
	}
	if (take > 0) {
		if (r->body == NULL)
			r->body = malloc(SKL_WEBHOOK_BODY_MAX + 1);
		if (r->body == NULL)
			return 0; /* aborts the transfer */
		memcpy(r->body + r->len, p, take);
		r->len += take;
		r->body[r->len] = '\0';
	}
	return size * n;
}

/* Keeps the final response's Retry-After (a new status line resets it). */
static size_t on_header(char *p, size_t size, size_t n, void *ctx)
{
	reply *r = ctx;
	size_t len = size * n;
	if (len >= 5 && strncmp(p, "HTTP/", 5) == 0)
		r->retry_after[0] = '\0';
	else if (len > 12 && strncasecmp(p, "Retry-After:", 12) == 0) {
		size_t at = 12;
		while (at < len && (p[at] == ' ' || p[at] == '\t'))
			at++;
		size_t v = len - at < sizeof(r->retry_after) - 1 ? len - at : sizeof(r->retry_after) - 1;
		memcpy(r->retry_after, p + at, v);
		r->retry_after[v] = '\0';
		r->retry_after[strcspn(r->retry_after, "\r\n")] = '\0';
	}
	return len;
}

static int on_progress(void *ctx, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
	reply *r = ctx;
	return r->s->lost ? 1 : 0; /* non-zero aborts: lease lost or shutting down */
}

static struct curl_slist *headers_for(const slot *s, const char *body, size_t len)
{
	char id[64], kind[SKL_KIND_MAX + 24], attempt[48], sig[72 + 24];
	snprintf(id, sizeof(id), "Idempotency-Key: skiplock-%" PRId64, s->job.id);
	snprintf(kind, sizeof(kind), "X-Skiplock-Kind: %s", s->job.kind);
	for (char *p = kind; *p; p++) /* a kind is any text: keep the header one line */
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '_';
	snprintf(attempt, sizeof(attempt), "X-Skiplock-Attempt: %d", s->job.attempt);
	const char *lines[] = {"Content-Type: application/json", "Accept: application/json",
	                       "Expect:", id, kind, attempt};
	struct curl_slist *h = NULL;
	for (size_t i = 0; i < SKL_ARRAY_LEN(lines); i++) {
		struct curl_slist *next = curl_slist_append(h, lines[i]);
		if (next == NULL) {
			curl_slist_free_all(h);
			return NULL;
		}
		h = next;
	}
	const webhook *wh = s->h->ctx;
	if (wh->secret) {
		memcpy(sig, "X-Skiplock-Signature: ", 22);
		struct curl_slist *next = skl__webhook_sign(wh->secret, body, len, sig + 22)
		                              ? curl_slist_append(h, sig)
		                              : NULL;
		explicit_bzero(sig, sizeof(sig));
		if (next == NULL) {
			curl_slist_free_all(h);
			return NULL;
		}
		h = next;
	}
	return h;
}

static int64_t timeout_of(const skl_worker *w, const slot *s)
{
	const webhook *wh = s->h->ctx;
	if (s->job.timeout_ms > 0)
		return s->job.timeout_ms;
	return wh->timeout_ms > 0 ? wh->timeout_ms : w->wo.job_timeout_ms;
}

static void set_options(CURL *c, const skl_worker *w, slot *s, struct curl_slist *h,
                        reply *r, char *errbuf)
{
	const webhook *wh = s->h->ctx;
	int64_t timeout = timeout_of(w, s);
	int64_t connect = wh->connect_ms > 0 ? wh->connect_ms : (timeout < 10000 ? timeout : 10000);
	curl_easy_setopt(c, CURLOPT_URL, wh->url);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
	curl_easy_setopt(c, CURLOPT_POST, 1L);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, s->job.payload);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(s->job.payload));
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "skiplock/" SKL_VERSION_STRING);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)connect);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, r);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
}

static void set_error(slot *s, const char *fmt, ...) SKL_PRINTF(2, 3);
static void set_error(slot *s, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	free(s->error);
	s->error = strdup(msg);
}

/* Printable start of a response body, for the error text. */
static void excerpt(const reply *r, char *out, size_t cap)
{
	size_t n = r->len < cap - 1 ? r->len : cap - 1;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)r->body[i];
		out[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : ' ';
	}
	out[n] = '\0';
}

static bool is_json(const char *s, size_t len)
{
	json_error_t e;
	json_t *v = json_loadb(s, len, JSON_DECODE_ANY, &e);
	json_decref(v);
	return v != NULL;
}

/* Maps a response to the outcome, the error text and a Retry-After delay. */
static int settle_response(const skl_worker *w, slot *s, long status, const reply *r)
{
	bool honour;
	int code = skl__webhook_outcome(status, &honour);
	if (code == SKL_JOB_OK) {
		if (r->len > 0 && !r->truncated && is_json(r->body, r->len))
			s->result = strdup(r->body);
		return code;
	}
	char body[ERROR_BODY_MAX + 1];
	excerpt(r, body, sizeof(body));
	int64_t delay;
	if (honour && r->retry_after[0] &&
	    skl_retry_after_ms(r->retry_after, (int64_t)time(NULL), &delay)) {
		/* the database caps it at the job's backoff cap */
		s->retry_delay_ms = delay < 1 ? 1 : delay;
		set_error(s, "HTTP %ld (Retry-After: %.64s)%s%s", status, r->retry_after,
		          body[0] ? ": " : "", body);
	} else {
		set_error(s, "HTTP %ld%s%s", status, body[0] ? ": " : "", body);
	}
	return code;
}

static int webhook_run(skl_worker *w, slot *s)
{
	CURL *c = thread_handle();
	size_t len = strlen(s->job.payload);
	struct curl_slist *h = c ? headers_for(s, s->job.payload, len) : NULL;
	if (h == NULL) {
		set_error(s, "webhook: out of memory preparing the request");
		return 1;
	}
	reply r = {.s = s};
	char errbuf[CURL_ERROR_SIZE] = "";
	curl_easy_reset(c);
	set_options(c, w, s, h, &r, errbuf);
	CURLcode cc = curl_easy_perform(c);
	long status = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_reset(c); /* drops the pointers to this call's buffers; keeps connections */
	curl_slist_free_all(h);
	int code;
	if (cc == CURLE_ABORTED_BY_CALLBACK) {
		set_error(s, "webhook: stopped: lease lost or worker shutting down");
		code = 1;
	} else if (cc != CURLE_OK) {
		set_error(s, "webhook: %s%s%s", curl_easy_strerror(cc), errbuf[0] ? ": " : "", errbuf);
		code = 1;
	} else {
		code = settle_response(w, s, status, &r);
	}
	free(r.body);
	return code;
}
