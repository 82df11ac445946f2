/*
 * cmd_dashboard.c — `skiplock dashboard`: a small web page over the
 * database (queues, jobs, one job, schedules, leases) with retry and
 * cancel buttons.  Options and the listen address are checked before
 * anything starts; dashboard_http.c serves, dashboard_api.c answers.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "dashboard/dashboard.h"

static const char usage[] =
	"Usage: skiplock dashboard [--listen ADDR:PORT] [--read-only]\n"
	"                          [--auth-token-file FILE] [--idle-for DUR]\n"
	"\n"
	"Serve a web dashboard of the queue: jobs by state per queue and kind, jobs\n"
	"finished per minute over the last hour (a sparkline per queue and kind),\n"
	"the job list with state, queue and kind filters, each job with its\n"
	"payload, attempts, errors, lease and fencing token, cron schedules with\n"
	"their next fire time, leases, circuit breakers, and the findings of\n"
	"`skiplock doctor locks`. Retry and cancel buttons act on one job (POST with\n"
	"a per-process CSRF token). The page, script and style sheet are built\n"
	"into the command; nothing is loaded from elsewhere. Prints \"listening on\n"
	"http://ADDR:PORT/\" once ready, and serves until SIGINT or SIGTERM.\n"
	"\n"
	"Dashboard options:\n"
	"  --listen ADDR:PORT     address to listen on (default 127.0.0.1:8080);\n"
	"                         an IPv4 address, [IPv6] or localhost; port 0\n"
	"                         picks a free port. An address other than loopback\n"
	"                         is refused without --auth-token-file\n"
	"  --read-only            no retry or cancel: the buttons are hidden and\n"
	"                         every POST is refused with 403\n"
	"  --auth-token-file FILE every request must carry \"Authorization: Bearer\n"
	"                         TOKEN\", TOKEN being the file's first line\n"
	"                         (compared in constant time); else 401\n"
	"  --idle-for DUR         the age that makes an advisory-lock holder a\n"
	"                         finding, as in doctor locks (default 60s)\n"
	"\n";

static const char exit_help[] =
	"\nExit status: 0 stopped by a signal, 1 could not listen, 2 bad usage or bad\n"
	"input, 3 database unreachable within --retry-for.\n";

enum { O_LISTEN = OPT_COMMON_LAST + 1, O_READ_ONLY, O_TOKEN_FILE, O_IDLE_FOR };

typedef struct dash_args {
	cli_common *cc;
	const char *listen;
	const char *token_file;
	int64_t idle_for_ms;
	bool read_only;
} dash_args;

static int own_option(int code, const char *arg, void *ctx)
{
	dash_args *a = ctx;
	switch (code) {
	case O_LISTEN: a->listen = arg; return CLI_OK;
	case O_READ_ONLY: a->read_only = true; return CLI_OK;
	case O_TOKEN_FILE: a->token_file = arg; return CLI_OK;
	case O_IDLE_FOR:
		if (!cli_duration(a->cc, "--idle-for", arg, &a->idle_for_ms))
			return CLI_USAGE;
		if (a->idle_for_ms > 0)
			return CLI_OK;
		cli_error(a->cc, "--idle-for must be longer than 0");
		return CLI_USAGE;
	default: return CLI_USAGE;
	}
}

typedef struct listen_addr {
	struct sockaddr_in v4;
	struct sockaddr_in6 v6;
	bool is_v6;
	bool loopback;
} listen_addr;

/* "127.0.0.1:8080", "[::1]:8080", "localhost:8080". */
static bool parse_listen(const cli_common *cc, const char *text, listen_addr *la)
{
	char host[64];
	const char *colon = strrchr(text, ':');
	size_t hl = colon ? (size_t)(colon - text) : 0;
	char *end = NULL;
	long port = colon ? strtol(colon + 1, &end, 10) : -1;
	if (!colon || hl == 0 || hl >= sizeof(host) || !colon[1] || *end || port < 0 || port > 65535) {
		cli_error(cc, "--listen: \"%s\" is not ADDR:PORT", text);
		return false;
	}
	memcpy(host, text, hl);
	host[hl] = '\0';
	memset(la, 0, sizeof(*la));
	if (strcmp(host, "localhost") == 0)
		strcpy(host, "127.0.0.1");
	if (host[0] == '[' && host[hl - 1] == ']') {
		host[hl - 1] = '\0';
		la->is_v6 = inet_pton(AF_INET6, host + 1, &la->v6.sin6_addr) == 1;
		la->v6.sin6_family = AF_INET6;
		la->v6.sin6_port = htons((uint16_t)port);
		la->loopback = IN6_IS_ADDR_LOOPBACK(&la->v6.sin6_addr);
		if (la->is_v6)
			return true;
	} else if (inet_pton(AF_INET, host, &la->v4.sin_addr) == 1) {
		la->v4.sin_family = AF_INET;
		la->v4.sin_port = htons((uint16_t)port);
		la->loopback = (ntohl(la->v4.sin_addr.s_addr) >> 24) == 127;
		return true;
	}
	cli_error(cc, "--listen: \"%s\" is not an IPv4 address, [IPv6] or localhost", host);
	return false;
}

/* The token: the file's first line, 16 to 4096 printable characters. */
static char *read_token(const cli_common *cc, const char *path)
{
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		cli_error(cc, "--auth-token-file: cannot read %s", path);
		return NULL;
	}
	char *tok = calloc(1, 4098);
	if (tok && fgets(tok, 4098, f) == NULL)
		tok[0] = '\0';
	fclose(f);
	if (tok == NULL)
		return NULL;
	tok[strcspn(tok, "\r\n")] = '\0';
	size_t n = strlen(tok);
	bool printable = true;
	for (size_t i = 0; i < n; i++)
		printable = printable && tok[i] > ' ' && tok[i] < 127;
	if (n < 16 || n > 4096 || !printable) {
		cli_error(cc, "--auth-token-file: the first line of %s must be a token of 16 to "
		              "4096 printable characters without spaces", path);
		free(tok);
		return NULL;
	}
	return tok;
}

static int serve(const cli_common *cc, dash_server *s, const listen_addr *la, const char *listen)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL); /* the server's threads inherit it */
	unsigned port = 0;
	void *d = dash_http_start(s, la->is_v6 ? (const void *)&la->v6 : (const void *)&la->v4,
	                          la->is_v6, &port);
	if (d == NULL) {
		cli_error(cc, "cannot listen on %s (in use, or not an address of this host)", listen);
		return CLI_PROBLEM;
	}
	char host[INET6_ADDRSTRLEN];
	inet_ntop(la->is_v6 ? AF_INET6 : AF_INET,
	          la->is_v6 ? (const void *)&la->v6.sin6_addr : (const void *)&la->v4.sin_addr,
	          host, sizeof(host));
	printf(la->is_v6 ? "listening on http://[%s]:%u/\n" : "listening on http://%s:%u/\n",
	       host, port);
	fflush(stdout);
	cli_log(SKL_LOG_INFO, "dashboard: listening on port %u%s", port,
	        s->read_only ? " (read-only)" : "");
	int sig = 0;
	sigwait(&set, &sig);
	cli_log(SKL_LOG_INFO, "dashboard: stopping on signal %d", sig);
	dash_http_stop(d);
	return CLI_OK;
}

static int run(cli_common *cc, dash_args *a, const listen_addr *la)
{
	dash_server s = {.read_only = a->read_only, .idle_for_ms = a->idle_for_ms};
	char *token = NULL;
	if (a->token_file && (token = read_token(cc, a->token_file)) == NULL)
		return CLI_USAGE;
	s.token = token;
	int rc = cli_open(cc, &s.client);
	if (rc != CLI_OK) {
		free(token);
		return rc;
	}
	skl_error err;
	pthread_mutex_init(&s.lock, NULL);
	if (skl_client_ping(s.client, &err) != SKL_OK) {
		rc = cli_fail(cc, &err);
	} else if (!dash_page_init(&s)) {
		cli_error(cc, "cannot prepare the page (out of memory or randomness)");
		rc = CLI_PROBLEM;
	} else {
		rc = serve(cc, &s, la, a->listen);
	}
	pthread_mutex_destroy(&s.lock);
	skl_client_close(s.client);
	free(s.index_html);
	free(token);
	return rc;
}

int cmd_dashboard(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_LONGOPTS,
		{"listen", required_argument, NULL, O_LISTEN},
		{"read-only", no_argument, NULL, O_READ_ONLY},
		{"auth-token-file", required_argument, NULL, O_TOKEN_FILE},
		{"idle-for", required_argument, NULL, O_IDLE_FOR},
		{0}};
	cli_common cc;
	cli_common_init(&cc, "dashboard");
	dash_args a = {.cc = &cc, .listen = "127.0.0.1:8080", .idle_for_ms = 60000};
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, usage, exit_help, 0, &done);
	if (done)
		return rc;
	listen_addr la;
	if (!parse_listen(&cc, a.listen, &la))
		return CLI_USAGE;
	if (!la.loopback && a.token_file == NULL) {
		cli_error(&cc, "--listen %s is not a loopback address: refusing to serve it "
		               "without --auth-token-file", a.listen);
		return CLI_USAGE;
	}
	return run(&cc, &a, &la);
}
