/*
 * cmd_dashboard.c — `skiplock dashboard`: a small web page over the
 * database (what is wrong now, queues, jobs, one job, schedules, leases)
 * with retry and cancel buttons, for operators and viewers.  Options and the listen address are checked before
 * anything starts; dashboard_http.c serves, dashboard_api.c answers.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "dashboard/dashboard.h"

static const char usage[] =
	"Usage: skiplock dashboard [--listen ADDR:PORT] [--read-only] [--hide-payloads]\n"
	"                          [--operator-token-file FILE] [--viewer-token-file FILE]\n"
	"                          [--idle-for DUR] [--stuck-after DUR] [--allow-host NAME]\n"
	"\n"
	"Serve a web dashboard of the queue. At the top, what is wrong now: jobs\n"
	"whose lease expired, jobs stuck in running, the oldest due job's age and\n"
	"the failure rate over 5 and 60 minutes per queue and kind, open circuit\n"
	"breakers and lock-doctor findings, each linking to the list that explains\n"
	"it (green when nothing is wrong). Then jobs by state per queue and kind,\n"
	"jobs finished per minute over the last hour, the job list (state, queue,\n"
	"kind, payload containing JSON, error text, and a window on the created,\n"
	"run, attempted, finished or lease time; the filters and the open job are\n"
	"in the page's URL), each job with its payload, attempts, errors, lease and\n"
	"fencing token, cron schedules, leases, circuit breakers, and the findings\n"
	"of `skiplock doctor locks`. Retry and cancel buttons act on one job (POST\n"
	"with a per-process CSRF token). The page, script and style sheet are built\n"
	"into the command; nothing is loaded from elsewhere. Prints \"listening on\n"
	"http://ADDR:PORT/\" once ready, and serves until SIGINT or SIGTERM.\n"
	"\n"
	"Dashboard options:\n"
	"  --listen ADDR:PORT     address to listen on (default 127.0.0.1:8080);\n"
	"                         an IPv4 address, [IPv6] or localhost; port 0\n"
	"                         picks a free port. An address other than loopback\n"
	"                         is refused without a token file\n"
	"  --read-only            no action (retry, cancel, bulk, pause, breakers,\n"
	"                         schedules) for anyone: the buttons are hidden and\n"
	"                         every POST is refused with 403\n"
	"  --operator-token-file FILE\n"
	"                         a request carrying \"Authorization: Bearer TOKEN\",\n"
	"                         TOKEN being the file's first line (compared in\n"
	"                         constant time), may act. With a token file, a\n"
	"                         request without a valid token gets 401\n"
	"  --auth-token-file FILE the older name of --operator-token-file\n"
	"  --viewer-token-file FILE\n"
	"                         a request carrying this token may only read: the\n"
	"                         page hides the actions and every POST gets 403\n"
	"  --allow-host NAME      serve requests whose Host header names NAME (any\n"
	"                         case, any port; repeatable), besides localhost and\n"
	"                         address literals (127.0.0.1, [::1], 192.0.2.7),\n"
	"                         which are always served: the name a reverse proxy\n"
	"                         passes on, or this host's. Any other Host is refused\n"
	"                         with 403, with or without a token (DNS rebinding)\n"
	"  --hide-payloads        job payloads and results are not sent unless an\n"
	"                         operator asks for one (never to a viewer)\n"
	"  --idle-for DUR         the age that makes an advisory-lock holder a\n"
	"                         finding, as in doctor locks (default 60s)\n"
	"  --stuck-after DUR      a running attempt older than this is stuck\n"
	"                         (default 15m)\n"
	"\n";

static const char exit_help[] =
	"\nExit status: 0 stopped by a signal, 1 could not listen, 2 bad usage or bad\n"
	"input, 3 database unreachable within --retry-for.\n";

enum { O_LISTEN = OPT_COMMON_LAST + 1, O_READ_ONLY, O_TOKEN_FILE, O_VIEWER_FILE, O_HIDE,
       O_IDLE_FOR, O_STUCK_AFTER, O_ALLOW_HOST };

enum { MAX_ALLOW_HOSTS = 32 };

typedef struct dash_args {
	cli_common *cc;
	const char *listen;
	const char *token_file;
	const char *viewer_file;
	int64_t idle_for_ms;
	int64_t stuck_after_ms;
	bool read_only;
	bool hide_payloads;
	const char *allow_hosts[MAX_ALLOW_HOSTS];
	size_t nallow_hosts;
} dash_args;

static int allow_host(dash_args *a, const char *name)
{
	if (!dash_host_name_valid(name)) {
		cli_error(a->cc, "--allow-host: \"%s\" is not a host name (letters, digits, dots and "
		          "hyphens, no port)", name);
		return CLI_USAGE;
	}
	if (a->nallow_hosts == MAX_ALLOW_HOSTS) {
		cli_error(a->cc, "--allow-host: at most %d names", MAX_ALLOW_HOSTS);
		return CLI_USAGE;
	}
	a->allow_hosts[a->nallow_hosts++] = name;
	return CLI_OK;
}

/* A duration longer than 0 into *ms. */
static int positive_duration(dash_args *a, const char *name, const char *arg, int64_t *ms)
{
	if (!cli_duration(a->cc, name, arg, ms))
		return CLI_USAGE;
	if (*ms > 0)
		return CLI_OK;
	cli_error(a->cc, "%s must be longer than 0", name);
	return CLI_USAGE;
}

static int own_option(int code, const char *arg, void *ctx)
{
	dash_args *a = ctx;
	switch (code) {
	case O_LISTEN: a->listen = arg; return CLI_OK;
	case O_READ_ONLY: a->read_only = true; return CLI_OK;
	case O_TOKEN_FILE: a->token_file = arg; return CLI_OK;
	case O_VIEWER_FILE: a->viewer_file = arg; return CLI_OK;
	case O_HIDE: a->hide_payloads = true; return CLI_OK;
	case O_IDLE_FOR: return positive_duration(a, "--idle-for", arg, &a->idle_for_ms);
	case O_STUCK_AFTER: return positive_duration(a, "--stuck-after", arg, &a->stuck_after_ms);
	case O_ALLOW_HOST: return allow_host(a, arg);
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
static char *read_token(const cli_common *cc, const char *opt, const char *path)
{
	FILE *f = fopen(path, "r");
	if (f == NULL) {
		cli_error(cc, "%s: cannot read %s", opt, path);
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
		cli_error(cc, "%s: the first line of %s must be a token of 16 to 4096 printable "
		              "characters without spaces", opt, path);
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
	cli_log(SKL_LOG_INFO, "dashboard: listening on port %u%s%s", port,
	        s->read_only ? " (read-only)" : "", s->hide_payloads ? " (payloads hidden)" : "");
	const struct timespec second = {1, 0};
	int sig;
	while ((sig = sigtimedwait(&set, NULL, &second)) < 0 && (errno == EAGAIN || errno == EINTR))
		dash_conns_sweep(&s->conns); /* requests not whole in time */
	cli_log(SKL_LOG_INFO, "dashboard: stopping on signal %d", sig);
	dash_http_stop(d);
	return CLI_OK;
}

/* The token files into s; CLI_USAGE (one line said) when one is bad or
 * both hold the same token (a request could not be given one role). */
static int read_tokens(const cli_common *cc, const dash_args *a, dash_server *s)
{
	char *op = NULL, *viewer = NULL;
	if (a->token_file && (op = read_token(cc, "--operator-token-file", a->token_file)) == NULL)
		return CLI_USAGE;
	if (a->viewer_file &&
	    (viewer = read_token(cc, "--viewer-token-file", a->viewer_file)) == NULL) {
		free(op);
		return CLI_USAGE;
	}
	if (op && viewer && strcmp(op, viewer) == 0) {
		cli_error(cc, "--viewer-token-file: the viewer token must differ from the operator's");
		free(op);
		free(viewer);
		return CLI_USAGE;
	}
	s->token = op;
	s->viewer_token = viewer;
	return CLI_OK;
}

static int run(cli_common *cc, dash_args *a, const listen_addr *la)
{
	dash_server s = {.read_only = a->read_only, .hide_payloads = a->hide_payloads,
	                 .idle_for_ms = a->idle_for_ms, .stuck_after_ms = a->stuck_after_ms,
	                 .allow_hosts = a->allow_hosts, .nallow_hosts = a->nallow_hosts};
	int rc = read_tokens(cc, a, &s);
	if (rc == CLI_OK)
		rc = cli_open(cc, &s.client);
	if (rc != CLI_OK) {
		free((char *)s.token);
		free((char *)s.viewer_token);
		return rc;
	}
	skl_error err;
	pthread_mutex_init(&s.lock, NULL);
	dash_conns_init(&s.conns);
	if (skl_client_ping(s.client, &err) != SKL_OK) {
		rc = cli_fail(cc, &err);
	} else if (!dash_page_init(&s)) {
		cli_error(cc, "cannot prepare the page (out of memory or randomness)");
		rc = CLI_PROBLEM;
	} else {
		rc = serve(cc, &s, la, a->listen);
	}
	pthread_mutex_destroy(&s.lock);
	dash_conns_destroy(&s.conns);
	skl_client_close(s.client);
	dash_page_free(&s);
	free((char *)s.token);
	free((char *)s.viewer_token);
	return rc;
}

int cmd_dashboard(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_LONGOPTS,
		{"listen", required_argument, NULL, O_LISTEN},
		{"read-only", no_argument, NULL, O_READ_ONLY},
		{"operator-token-file", required_argument, NULL, O_TOKEN_FILE},
		{"auth-token-file", required_argument, NULL, O_TOKEN_FILE},
		{"viewer-token-file", required_argument, NULL, O_VIEWER_FILE},
		{"hide-payloads", no_argument, NULL, O_HIDE},
		{"idle-for", required_argument, NULL, O_IDLE_FOR},
		{"stuck-after", required_argument, NULL, O_STUCK_AFTER},
		{"allow-host", required_argument, NULL, O_ALLOW_HOST},
		{0}};
	cli_common cc;
	cli_common_init(&cc, "dashboard");
	cc.settings = true; /* SKIPLOCK_<OPTION> and --config FILE (settings.c) */
	dash_args a = {.cc = &cc, .listen = "127.0.0.1:8080", .idle_for_ms = 60000,
	               .stuck_after_ms = 15 * 60000};
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, usage, exit_help, 0, &done);
	if (done)
		return rc;
	listen_addr la;
	if (!parse_listen(&cc, a.listen, &la))
		return CLI_USAGE;
	if (!la.loopback && a.token_file == NULL && a.viewer_file == NULL) {
		cli_error(&cc, "--listen %s is not a loopback address: refusing to serve it "
		               "without --operator-token-file (--auth-token-file) or "
		               "--viewer-token-file", a.listen);
		return CLI_USAGE;
	}
	return run(&cc, &a, &la);
}
