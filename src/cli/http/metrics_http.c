/*
 * metrics_http.c — `worker --metrics HOST:PORT`: GET /metrics answers with
 * skl_worker_metrics (Prometheus text format) from libmicrohttpd's own
 * thread.  The scrape never touches the worker's database connection: the
 * queue gauges it shows were read by the worker's loop a few seconds ago.
 *
 * The listening socket is bound here (so a bad address or a port in use is
 * reported before the worker starts, and port 0 picks a free port that is
 * logged) and handed to libmicrohttpd.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli.h"
#include "http/metrics_http.h"
#include "http/mhd_lazy.h"

struct cli_metrics {
	struct MHD_Daemon *d;
	skl_worker *w;
};

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *type,
                             char *body)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	if (r == NULL) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", type);
	enum MHD_Result ok = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ok;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *data,
                              size_t *data_size, void **state)
{
	cli_metrics *m = cls;
	(void)version, (void)data, (void)data_size, (void)state;
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain; charset=utf-8",
		             strdup("only GET /metrics\n"));
	if (strcmp(url, "/metrics") != 0)
		return reply(conn, MHD_HTTP_NOT_FOUND, "text/plain; charset=utf-8",
		             strdup("not found: the metrics are at /metrics\n"));
	char *text = NULL;
	skl_error err;
	if (skl_worker_metrics(m->w, &text, &err) != SKL_OK)
		return reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8",
		             strdup("out of memory\n"));
	/* skl_free and free are the same allocator (skiplock/error.h). */
	return reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text);
}

/* Splits HOST:PORT ([V6]:PORT for IPv6) into host and port. */
static bool split(const char *addr, char *host, size_t hcap, const char **port)
{
	const char *colon = strrchr(addr, ':');
	if (colon == NULL || colon == addr || colon[1] == '\0')
		return false;
	size_t hl = (size_t)(colon - addr);
	if (addr[0] == '[') {
		if (hl < 3 || addr[hl - 1] != ']')
			return false;
		addr++;
		hl -= 2;
	}
	if (hl >= hcap)
		return false;
	memcpy(host, addr, hl);
	host[hl] = '\0';
	*port = colon + 1;
	return strspn(*port, "0123456789") == strlen(*port) && strlen(*port) <= 5 &&
	       atoi(*port) <= 65535;
}

/* A listening socket on addr, or -1 after printing why (*rc set). */
static int listen_on(const cli_common *cc, const char *addr, int *rc)
{
	char host[256];
	const char *port;
	*rc = CLI_USAGE;
	if (!split(addr, host, sizeof(host), &port)) {
		cli_error(cc, "--metrics: expected HOST:PORT (e.g. 127.0.0.1:9187), got \"%s\"", addr);
		return -1;
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
	                         .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai = NULL;
	int gai = getaddrinfo(host, port, &hints, &ai);
	if (gai != 0) {
		cli_error(cc, "--metrics: cannot resolve \"%s\": %s", host, gai_strerror(gai));
		return -1;
	}
	/* non-blocking: a client gone between poll and accept must not stall
	 * the server's thread */
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
	                ai->ai_protocol);
	int one = 1;
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
		cli_error(cc, "--metrics: cannot listen on %s: %s", addr, strerror(errno));
		*rc = CLI_PROBLEM;
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	return fd;
}

static int bound_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		return 0;
	char port[16];
	if (getnameinfo((struct sockaddr *)&ss, len, NULL, 0, port, sizeof(port),
	                NI_NUMERICSERV) != 0)
		return 0;
	return atoi(port);
}

int cli_metrics_start(const cli_common *cc, const char *addr, skl_worker *w, cli_metrics **out)
{
	*out = NULL;
	int rc;
	int fd = listen_on(cc, addr, &rc);
	if (fd < 0)
		return rc;
	cli_metrics *m = calloc(1, sizeof(*m));
	if (m == NULL) {
		close(fd);
		cli_error(cc, "out of memory");
		return CLI_PROBLEM;
	}
	m->w = w;
	int port = bound_port(fd);
	const char *why = NULL;
	if (!cli_mhd_load(&why)) {
		close(fd);
		free(m);
		cli_error(cc, "--metrics: %s", why);
		return CLI_PROBLEM;
	}
	m->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, handle, m,
	                        MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
	                        (unsigned)16, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
	                        MHD_OPTION_END);
	if (m->d == NULL) {
		close(fd);
		free(m);
		cli_error(cc, "--metrics: cannot start the HTTP server on %s", addr);
		return CLI_PROBLEM;
	}
	const char *colon = strrchr(addr, ':');
	cli_log(SKL_LOG_INFO, "metrics: serving http://%.*s:%d/metrics", (int)(colon - addr), addr,
	        port);
	*out = m;
	return CLI_OK;
}

void cli_metrics_stop(cli_metrics *m)
{
	if (m == NULL)
		return;
	MHD_stop_daemon(m->d);
	free(m);
}
