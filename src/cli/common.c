/*
 * common.c — the options every command shares, and opening a client.
 * Parsing a command line with them is parse.c.
 */
#include <errno.h>
#include <pwd.h>
#include <sys/random.h>
#include <unistd.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

const char cli_common_help[] =
	"Connection options:\n"
	"  --url URL              database URL or conninfo (default: $DATABASE_URL, else\n"
	"                         libpq's PG* environment variables)\n"
	"  --direct-url URL       the non-pooled endpoint, where one is needed\n"
	"                         (default: $DIRECT_DATABASE_URL)\n"
	"  --pooler MODE          auto, none, session or transaction (default: auto,\n"
	"                         detected from the URL: a \"-pooler\" host label,\n"
	"                         port 6432 or 6543)\n"
	"  --connect-timeout DUR  bound on one connection attempt (default 5s)\n"
	"  --call-timeout DUR     client-side deadline of one database call (default 30s)\n"
	"  --retry-for DUR        bound on retrying transient failures (default 30s)\n"
	"Output options:\n"
	"  --log-level LEVEL      debug, info, warning or error (default info)\n"
	"  --log-format FORMAT    text or json (default text)\n"
	"  --help                 show this help and exit\n"
	"Durations are written 250ms, 5s, 2m, 1h30m, 1d or as bare seconds.\n";

/* Commands that work on a database without skiplock's schema (or install
 * it); every other one checks it first and says "run skiplock init". */
static bool schema_free(const char *command)
{
	static const char *const free_of[] = {"init", "doctor", "explain", "demo", "migrate"};
	for (size_t i = 0; i < sizeof(free_of) / sizeof(free_of[0]); i++) {
		size_t n = strlen(free_of[i]);
		if (strncmp(command, free_of[i], n) == 0 && (command[n] == '\0' || command[n] == ' '))
			return true;
	}
	return false;
}

void cli_common_init(cli_common *cc, const char *command)
{
	memset(cc, 0, sizeof(*cc));
	cc->command = command;
	cli_log_command(command);
	skl_client_options_init(&cc->client);
	cc->client.log = cli_log_sink;
	cc->client.require_schema = !schema_free(command);
}

bool cli_duration(const cli_common *cc, const char *name, const char *arg, int64_t *ms)
{
	skl_error err;
	if (skl_duration_parse(arg, ms, &err) != SKL_OK) {
		cli_error(cc, "%s: %s", name, err.message);
		return false;
	}
	return true;
}

static int duration_int(const cli_common *cc, const char *name, const char *arg, int *out)
{
	int64_t ms;
	if (!cli_duration(cc, name, arg, &ms))
		return -1;
	if (ms <= 0 || ms > INT_MAX) {
		cli_error(cc, "%s: duration \"%s\" must be positive and under 24 days", name, arg);
		return -1;
	}
	*out = (int)ms;
	return 1;
}

static int log_option(cli_common *cc, int code, const char *arg)
{
	static skl_log_level level = SKL_LOG_INFO;
	static cli_log_format fmt = LOG_TEXT;
	if (code == OPT_LOG_LEVEL && !cli_log_parse_level(arg, &level)) {
		cli_error(cc, "unknown log level \"%s\" (expected debug, info, warning or error)", arg);
		return -1;
	}
	if (code == OPT_LOG_FORMAT && !cli_log_parse_format(arg, &fmt)) {
		cli_error(cc, "unknown log format \"%s\" (expected text or json)", arg);
		return -1;
	}
	cli_log_setup(level, fmt);
	return 1;
}

int cli_common_option(cli_common *cc, int code, const char *arg)
{
	skl_error err;
	switch (code) {
	case OPT_URL: cc->client.url = arg; return 1;
	case OPT_DIRECT_URL: cc->client.direct_url = arg; return 1;
	case OPT_POOLER:
		if (skl_pooler_parse(arg, &cc->client.pooler, &err) != SKL_OK) {
			cli_error(cc, "--pooler: %s", err.message);
			return -1;
		}
		return 1;
	case OPT_CONNECT_TIMEOUT:
		return duration_int(cc, "--connect-timeout", arg, &cc->client.connect_timeout_ms);
	case OPT_TIMEOUT_CALL:
		return duration_int(cc, "--call-timeout", arg, &cc->client.call_timeout_ms);
	case OPT_RETRY_FOR:
		return duration_int(cc, "--retry-for", arg, &cc->client.retry_max_ms);
	case OPT_LOG_LEVEL:
	case OPT_LOG_FORMAT: return log_option(cc, code, arg);
	case OPT_HELP: cc->help = true; return 1;
	case OPT_CONFIG: return cc->settings; /* read before the flags (settings.c) */
	default: return 0;
	}
}

int cli_fail(const cli_common *cc, const skl_error *err)
{
	const char *state = err->sqlstate[0] ? err->sqlstate : NULL;
	/* a refused connection says what to fix */
	const char *hint = err->rc == SKL_REFUSED ? err->hint : "";
	cli_error(cc, "%s%s%s%s%s%s%s%s", err->message, state ? " (SQLSTATE " : "",
	          state ? state : "", state ? ")" : "", err->detail[0] ? ": " : "", err->detail,
	          hint[0] ? "; " : "", hint);
	/* data exceptions and constraint violations: the input was bad */
	if (state && (strncmp(state, "22", 2) == 0 || strncmp(state, "23", 2) == 0))
		return CLI_USAGE;
	switch (err->rc) {
	case SKL_INVALID: return CLI_USAGE;
	case SKL_UNREACHABLE: return CLI_UNREACHABLE;
	case SKL_REFUSED: /* no database, role or password: retrying cannot help */
	case SKL_SCHEMA: return CLI_PROBLEM;
	case SKL_RETRY:
	case SKL_INDETERMINATE:
		return state && !skl_sqlstate_is_transient(state) ? CLI_PROBLEM : CLI_UNREACHABLE;
	default: return CLI_PROBLEM;
	}
}

int cli_open(const cli_common *cc, skl_client **out)
{
	skl_error err;
	if (skl_client_open(&cc->client, out, &err) != SKL_OK)
		return cli_fail(cc, &err);
	return CLI_OK;
}

bool cli_int(const cli_common *cc, const char *name, const char *arg, long long min,
             long long max, long long *out)
{
	char *end = NULL;
	errno = 0;
	long long v = strtoll(arg, &end, 10);
	if (errno || end == arg || *end != '\0' || v < min || v > max) {
		cli_error(cc, "%s: \"%s\" is not an integer from %lld to %lld", name, arg, min, max);
		return false;
	}
	*out = v;
	return true;
}

/* PREFIX HOST:PID:RANDOM — unique per process, also across containers. */
void cli_default_owner(char *buf, size_t cap, const char *prefix)
{
	char host[128] = "localhost";
	gethostname(host, sizeof(host) - 1);
	host[sizeof(host) - 1] = '\0';
	unsigned int rnd = 0;
	if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
		rnd = (unsigned int)getpid() * 2654435761u;
	snprintf(buf, cap, "%s%s:%d:%08x", prefix, host, (int)getpid(), rnd);
}

/* USER@HOST for the action log: the login name (USER, else the password
 * database, else the uid) and the host name. */
void cli_default_actor(char *buf, size_t cap)
{
	char host[128] = "localhost";
	gethostname(host, sizeof(host) - 1);
	host[sizeof(host) - 1] = '\0';
	const char *user = getenv("USER");
	const struct passwd *pw = user && *user ? NULL : getpwuid(getuid());
	if (pw)
		user = pw->pw_name;
	if (user && *user)
		snprintf(buf, cap, "%.64s@%.120s", user, host);
	else
		snprintf(buf, cap, "uid%u@%.120s", (unsigned)getuid(), host);
}
