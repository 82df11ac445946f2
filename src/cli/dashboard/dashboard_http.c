/*
 * dashboard_http.c — the dashboard's HTTP layer on libmicrohttpd: the
 * bearer token (every request, when one is configured), the embedded page
 * and assets, the JSON endpoints, and the CSRF token and read-only switch
 * that guard every POST.
 */
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dashboard/dashboard.h"
#include "http/mhd_lazy.h"

bool dash_secret_equal(const char *a, const char *b)
{
	unsigned char da[SHA256_DIGEST_LENGTH], db[SHA256_DIGEST_LENGTH];
	SHA256((const unsigned char *)a, strlen(a), da);
	SHA256((const unsigned char *)b, strlen(b), db);
	return CRYPTO_memcmp(da, db, sizeof(da)) == 0;
}

static const dash_asset *find_asset(const char *path)
{
	for (int i = 0; i < dash_nassets; i++)
		if (strcmp(dash_assets[i].path, path) == 0)
			return &dash_assets[i];
	return NULL;
}

/* Replaces every "@CSRF_TOKEN@" and "@READ_ONLY@" in the page. */
bool dash_page_init(dash_server *s)
{
	unsigned char raw[32];
	if (RAND_bytes(raw, sizeof(raw)) != 1)
		return false;
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(s->csrf + 2 * i, 3, "%02x", raw[i]);
	const dash_asset *page = find_asset("/index.html");
	if (page == NULL || (s->index_html = malloc(page->len + 1024)) == NULL)
		return false;
	size_t o = 0;
	for (const char *p = page->data; *p; ) {
		const char *val = NULL;
		size_t skip = 0;
		if (strncmp(p, "@CSRF_TOKEN@", 12) == 0) val = s->csrf, skip = 12;
		else if (strncmp(p, "@READ_ONLY@", 11) == 0) val = s->read_only ? "true" : "false", skip = 11;
		if (val && o + strlen(val) < page->len + 1024) {
			memcpy(s->index_html + o, val, strlen(val));
			o += strlen(val);
			p += skip;
		} else {
			s->index_html[o++] = *p++;
		}
	}
	s->index_len = o;
	return true;
}

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, const char *type,
                            void *data, size_t len, enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, data, mode);
	if (r == NULL)
		return MHD_NO;
	MHD_add_response_header(r, "Content-Type", type);
	MHD_add_response_header(r, "Cache-Control", "no-store");
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(r, "X-Frame-Options", "DENY");
	MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
	MHD_add_response_header(r, "Content-Security-Policy",
	                        "default-src 'self'; frame-ancestors 'none'; form-action 'none'");
	if (status == 401)
		MHD_add_response_header(r, "WWW-Authenticate", "Bearer realm=\"skiplock\"");
	enum MHD_Result ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *conn, dash_reply rep)
{
	char *text = rep.body ? json_dumps(rep.body, JSON_COMPACT) : NULL;
	json_decref(rep.body);
	if (text == NULL)
		return respond(conn, 500, "text/plain", "out of memory\n", 14, MHD_RESPMEM_PERSISTENT);
	return respond(conn, rep.status, "application/json", text, strlen(text),
	            MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result send_error(struct MHD_Connection *conn, unsigned status, const char *msg)
{
	return send_json(conn, (dash_reply){status, json_pack("{s:s}", "error", msg)});
}

static bool authorized(const dash_server *s, struct MHD_Connection *conn)
{
	if (s->token == NULL)
		return true;
	const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
	if (h == NULL || strncmp(h, "Bearer ", 7) != 0)
		return false;
	return dash_secret_equal(h + 7, s->token);
}

/* Without a token, only a loopback Host is served: a page from another
 * site whose name was made to resolve to 127.0.0.1 (DNS rebinding) sends
 * its own name and is refused. */
static bool host_allowed(const dash_server *s, struct MHD_Connection *conn)
{
	if (s->token != NULL)
		return true;
	const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
	if (h == NULL)
		return false;
	size_t n = strcspn(h, "]") < strlen(h) ? strcspn(h, "]") + 1 : strcspn(h, ":");
	return (n == 9 && strncmp(h, "localhost", 9) == 0) ||
	       (n == 5 && strncmp(h, "[::1]", 5) == 0) ||
	       (n >= 9 && n <= 15 && strncmp(h, "127.", 4) == 0 && strspn(h, "0123456789.") == n);
}

static const char *query_arg(void *ctx, const char *name)
{
	return MHD_lookup_connection_value(ctx, MHD_GET_ARGUMENT_KIND, name);
}

static enum MHD_Result do_get(dash_server *s, struct MHD_Connection *conn, const char *url)
{
	if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0)
		return respond(conn, 200, "text/html; charset=utf-8", s->index_html, s->index_len,
		            MHD_RESPMEM_PERSISTENT);
	if (strncmp(url, "/api/", 5) == 0)
		return send_json(conn, dash_api_get(s, url, query_arg, conn));
	const dash_asset *a = find_asset(url);
	if (a == NULL)
		return send_error(conn, 404, "no such page");
	return respond(conn, 200, a->content_type, (void *)a->data, a->len, MHD_RESPMEM_PERSISTENT);
}

static enum MHD_Result do_post(dash_server *s, struct MHD_Connection *conn, const char *url)
{
	if (s->read_only)
		return send_error(conn, 403, "the dashboard is read-only");
	const char *t = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-CSRF-Token");
	if (t == NULL || !dash_secret_equal(t, s->csrf))
		return send_error(conn, 403, "missing or wrong CSRF token");
	return send_json(conn, dash_api_post(s, url));
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **state)
{
	static int started;
	if (*state == NULL) {      /* headers only so far */
		*state = &started;
		return MHD_YES;
	}
	if (*upload_size > 0) {    /* a request body: not used, skipped */
		*upload_size = 0;
		return MHD_YES;
	}
	dash_server *s = cls;
	if (!authorized(s, conn))
		return send_error(conn, 401, "a valid bearer token is required");
	if (!host_allowed(s, conn))
		return send_error(conn, 403, "the Host header must name a loopback address");
	if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)
		return do_get(s, conn, url);
	if (strcmp(method, "POST") == 0)
		return do_post(s, conn, url);
	return send_error(conn, 405, "method not allowed");
}

/* Idle connections must not lock others out.  A few event-loop threads
 * (epoll) serve every connection, so an idle one costs a descriptor, not a
 * thread, and the limit can be far above what one page opens; a connection
 * silent for DASH_IDLE_S seconds is closed; one address may hold at most
 * half the slots (a remote one, behind a token, cannot take them all).
 * The pool lets a static asset be served while another thread waits on the
 * database mutex. */
enum {
	DASH_THREADS = 4,
	DASH_IDLE_S = 5,
	DASH_MAX_CONNECTIONS = 512,
	DASH_MAX_PER_IP = DASH_MAX_CONNECTIONS / 2
};

void *dash_http_start(dash_server *s, const void *addr, bool v6, unsigned *port)
{
	if (!cli_mhd_load(NULL))
		return NULL;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL;
	if (v6)
		flags |= MHD_USE_IPv6;
	struct MHD_Daemon *d = MHD_start_daemon(
		flags, 0, NULL, NULL, handle, s, MHD_OPTION_SOCK_ADDR, addr,
		MHD_OPTION_THREAD_POOL_SIZE, (unsigned)DASH_THREADS,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)DASH_IDLE_S,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned)DASH_MAX_CONNECTIONS,
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)DASH_MAX_PER_IP, MHD_OPTION_END);
	if (d == NULL)
		return NULL;
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	*port = info ? info->port : 0;
	return d;
}

void dash_http_stop(void *daemon)
{
	MHD_stop_daemon(daemon);
}
