/*
 * dashboard_http.c — the dashboard's HTTP layer on libmicrohttpd: the Host
 * rule (every request), the bearer tokens (every request, when one is
 * configured) that give a request its role, the embedded page (one per
 * role) and assets, the JSON endpoints, and the CSRF token and the role
 * that guard every POST.  The connections are handed to dashboard_conns.c,
 * which bounds the slow ones.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

/* The page for one role: every "@NAME@" placeholder replaced. */
static char *fill_page(const dash_server *s, dash_role role, size_t *len)
{
	char stuck[24];
	snprintf(stuck, sizeof(stuck), "%" PRId64, s->stuck_after_ms);
	const char *const subst[][2] = {
		{"@CSRF_TOKEN@", s->csrf},
		{"@READ_ONLY@", s->read_only ? "true" : "false"},
		{"@ROLE@", role == DASH_VIEWER ? "viewer" : "operator"},
		{"@HIDE_PAYLOADS@", s->hide_payloads ? "true" : "false"},
		{"@STUCK_AFTER_MS@", stuck}};
	const dash_asset *page = find_asset("/index.html");
	size_t cap = page ? page->len + 1024 : 0, o = 0;
	char *out = page ? malloc(cap) : NULL;
	for (const char *p = page ? page->data : ""; out && *p; ) {
		size_t i = 0, klen = 0;
		while (i < sizeof(subst) / sizeof(subst[0]) &&
		       strncmp(p, subst[i][0], klen = strlen(subst[i][0])) != 0)
			i++;
		const char *val = i < sizeof(subst) / sizeof(subst[0]) ? subst[i][1] : NULL;
		if (val && o + strlen(val) < cap) {
			memcpy(out + o, val, strlen(val));
			o += strlen(val);
			p += klen;
		} else if (o < cap) {
			out[o++] = *p++;
		} else {
			free(out);
			return NULL;
		}
	}
	*len = o;
	return out;
}

bool dash_page_init(dash_server *s)
{
	unsigned char raw[32];
	if (RAND_bytes(raw, sizeof(raw)) != 1)
		return false;
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(s->csrf + 2 * i, 3, "%02x", raw[i]);
	for (int r = 0; r < DASH_NROLES; r++)
		if ((s->page[r] = fill_page(s, (dash_role)r, &s->page_len[r])) == NULL)
			return false;
	return true;
}

void dash_page_free(dash_server *s)
{
	for (int r = 0; r < DASH_NROLES; r++)
		free(s->page[r]);
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
	if (status == 401 || status == 403) /* a refused client keeps no slot */
		MHD_add_response_header(r, "Connection", "close");
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

/* The role of the request's bearer token: DASH_NROLES when no token
 * matches.  Both tokens are compared every time, each in constant time, so
 * the timing says nothing about which one (if any) matched.  Without
 * tokens, everyone on loopback is an operator.  --read-only makes every
 * role a viewer. */
static dash_role role_of(const dash_server *s, struct MHD_Connection *conn)
{
	dash_role ro = s->read_only ? DASH_VIEWER : DASH_OPERATOR;
	if (s->token == NULL && s->viewer_token == NULL)
		return ro;
	const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
	if (h == NULL || strncmp(h, "Bearer ", 7) != 0)
		return DASH_NROLES;
	bool op = s->token && dash_secret_equal(h + 7, s->token);
	bool viewer = s->viewer_token && dash_secret_equal(h + 7, s->viewer_token);
	return op ? ro : viewer ? DASH_VIEWER : DASH_NROLES;
}

bool dash_host_name_valid(const char *name)
{
	size_t n = strlen(name);
	return n >= 1 && n <= 253 &&
	       strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") == n;
}

bool dash_host_allowed(const dash_server *s, const char *name)
{
	unsigned char addr[sizeof(struct in6_addr)];
	char v6[INET6_ADDRSTRLEN + 1];
	size_t n = strlen(name);
	if (strcasecmp(name, "localhost") == 0 || inet_pton(AF_INET, name, addr) == 1)
		return true;
	if (n > 2 && n - 2 < sizeof(v6) && name[0] == '[' && name[n - 1] == ']') {
		memcpy(v6, name + 1, n - 2);
		v6[n - 2] = '\0';
		return inet_pton(AF_INET6, v6, addr) == 1;
	}
	for (size_t i = 0; i < s->nallow_hosts; i++)
		if (strcasecmp(name, s->allow_hosts[i]) == 0)
			return true;
	return false;
}

/* The host of a Host header ("name", "name:port", "[v6]:port") into name;
 * false when it has another shape or is longer than len allows. */
static bool host_name(const char *h, char *name, size_t len)
{
	const char *end = h[0] == '[' ? strchr(h, ']') : h + strcspn(h, ":");
	if (end == NULL)
		return false;
	end += h[0] == '[';
	size_t n = (size_t)(end - h);
	if (n == 0 || n >= len || (*end && (*end != ':' || strspn(end + 1, "0123456789") !=
	                                                       strlen(end + 1))))
		return false;
	memcpy(name, h, n);
	name[n] = '\0';
	return true;
}

/* The Host rule, with or without a token (a token does not make a rebound
 * page safe: the browser that holds it would send it): NULL when served,
 * else the refusal into msg. */
static const char *host_refused(const dash_server *s, struct MHD_Connection *conn, char *msg,
                                size_t len)
{
	char name[256];
	const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
	if (h == NULL || !host_name(h, name, sizeof(name)))
		return h ? "the Host header is not HOST[:PORT]" : "a Host header is required";
	if (dash_host_allowed(s, name))
		return NULL;
	for (char *p = name; *p; p++) /* said back: printable ASCII only */
		if (*p < ' ' || *p > '~')
			*p = '?';
	snprintf(msg, len, "the Host header \"%.100s\" is not accepted: name it with --allow-host",
	         name);
	return msg;
}

static const char *query_arg(void *ctx, const char *name)
{
	return MHD_lookup_connection_value(ctx, MHD_GET_ARGUMENT_KIND, name);
}

/* Who acts, for the action log: "dashboard@" and the peer's address (the
 * token says which role; the address, from where). */
static const char *peer_name(struct MHD_Connection *conn, char *buf, size_t len)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;
	char addr[INET6_ADDRSTRLEN] = "unknown";
	if (sa && sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, addr,
		          sizeof(addr));
	else if (sa && sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, addr,
		          sizeof(addr));
	snprintf(buf, len, "dashboard@%s", addr);
	return buf;
}

static enum MHD_Result do_get(dash_server *s, dash_role role, struct MHD_Connection *conn,
                              const char *url)
{
	if (strcmp(url, "/") == 0 || strcmp(url, "/index.html") == 0)
		return respond(conn, 200, "text/html; charset=utf-8", s->page[role], s->page_len[role],
		               MHD_RESPMEM_PERSISTENT);
	if (strncmp(url, "/api/", 5) == 0)
		return send_json(conn, dash_api_get(s, role, url, query_arg, conn));
	const dash_asset *a = find_asset(url);
	if (a == NULL)
		return send_error(conn, 404, "no such page");
	return respond(conn, 200, a->content_type, (void *)a->data, a->len, MHD_RESPMEM_PERSISTENT);
}

static enum MHD_Result do_post(dash_server *s, dash_role role, struct MHD_Connection *conn,
                               const char *url)
{
	if (role == DASH_VIEWER)
		return send_error(conn, 403, s->read_only ? "the dashboard is read-only"
		                                          : "a viewer cannot act");
	const char *t = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-CSRF-Token");
	if (t == NULL || !dash_secret_equal(t, s->csrf))
		return send_error(conn, 403, "missing or wrong CSRF token");
	char name[INET6_ADDRSTRLEN + 16];
	skl_actor who = {peer_name(conn, name, sizeof(name)), "operator"};
	return send_json(conn, dash_api_post(s, url, query_arg, conn, &who));
}

/* The connection's record of dashboard_conns.c (NULL: untracked). */
static dash_conn *conn_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci ? ci->socket_context : NULL;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
	dash_server *s = cls;
	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		*socket_context = ci ? dash_conn_opened(&s->conns, ci->connect_fd) : NULL;
	} else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
		dash_conn_closed(&s->conns, *socket_context);
		*socket_context = NULL;
	}
}

/* A request is over (answered, or given up): the connection waits for the
 * next one. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **state,
                         enum MHD_RequestTerminationCode toe)
{
	dash_server *s = cls;
	(void)state;
	(void)toe;
	dash_conn_answered(&s->conns, conn_of(conn));
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
	dash_conn_whole(&s->conns, conn_of(conn));
	char msg[200];
	const char *refused = host_refused(s, conn, msg, sizeof(msg));
	if (refused)
		return send_error(conn, 403, refused);
	dash_role role = role_of(s, conn);
	if (role == DASH_NROLES)
		return send_error(conn, 401, "a valid bearer token is required");
	if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)
		return do_get(s, role, conn, url);
	if (strcmp(method, "POST") == 0)
		return do_post(s, role, conn, url);
	return send_error(conn, 405, "method not allowed");
}

/* Idle and slow connections must not lock others out.  A few event-loop
 * threads (epoll) serve every connection, so an idle one costs a
 * descriptor, not a thread, and the limit can be far above what one page
 * opens; a connection silent for DASH_IDLE_S seconds is closed; one
 * address may hold at most half the slots (a remote one, behind a token,
 * cannot take them all).  Silence is all libmicrohttpd measures, so a
 * client trickling its request a byte at a time is bounded by
 * dashboard_conns.c (DASH_REQUEST_S, DASH_MAX_WAITING), every client of a
 * loopback dashboard sharing one address.  The pool lets a static asset be
 * served while another thread waits on the database mutex. */
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
		MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)DASH_MAX_PER_IP,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
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
