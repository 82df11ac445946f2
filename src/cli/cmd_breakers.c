/*
 * cmd_breakers.c — `skiplock breakers [list|open KIND|close KIND]`: the
 * fleet-wide circuit breakers (skiplock/retry.h) and the operator's
 * override, logged (skiplock/control.h).  Operands are checked before the database is contacted.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "print/breakers_print.h"
#include "cli.h"
#include "print/output.h"

static const char usage[] =
	"Usage: skiplock breakers [list] [--json]\n"
	"       skiplock breakers open KIND\n"
	"       skiplock breakers close KIND\n"
	"\n"
	"Circuit breakers are shared by every worker through one row per kind in\n"
	"skiplock.breakers; a worker started with --breaker KIND creates it.\n"
	"  closed     jobs of KIND are claimed as usual; the outcomes recorded by\n"
	"             every worker are counted in a window of up to `calls` calls\n"
	"             or `window` time; when at least `min` calls were made and\n"
	"             `rate` % of them failed (a retry), the breaker opens\n"
	"  open       no worker claims jobs of KIND: they wait in the queue without\n"
	"             failing or using attempts, for `open`\n"
	"  half_open  `probes` jobs are admitted fleet-wide; when all succeed the\n"
	"             breaker closes, when one fails it opens again\n"
	"\n"
	"  list         print every breaker (the default)\n"
	"  open KIND    force KIND's breaker open until closed (creates it with the\n"
	"               default settings when KIND has none)\n"
	"  close KIND   close KIND's breaker now and start a new window\n"
	"Transitions are recorded in skiplock.breaker_events; open and close are\n"
	"also written to the action log (skiplock jobs actions) as USER@HOST, role\n"
	"cli.\n"
	"\n"
	"Breakers options:\n"
	"  --json                 print a JSON array instead of a table: [{\"kind\",\n"
	"                         \"state\", \"calls\", \"failures\", \"probes_left\",\n"
	"                         \"probe_successes\", \"open_for_ms\" (null unless open;\n"
	"                         -1 when forced), \"changed_at\", \"config\": {\"rate\",\n"
	"                         \"min\", \"calls\", \"window_ms\", \"open_ms\", \"probes\"}}]\n"
	"\n";

static const char exit_help[] =
	"\nExit status: 0 success, 1 the database refused or KIND has no breaker\n"
	"(close), 2 bad usage or bad input, 3 database unreachable within --retry-for.\n";

enum { O_JSON = OPT_COMMON_LAST + 1 };

typedef struct breakers_args {
	cli_common *cc;
	bool json;
} breakers_args;

static int own_option(int code, const char *arg, void *ctx)
{
	(void)arg;
	breakers_args *a = ctx;
	if (code != O_JSON)
		return CLI_USAGE;
	a->json = true;
	return CLI_OK;
}

static int list(breakers_args *a, skl_client *c)
{
	skl_breaker_info *rows;
	size_t n;
	skl_error err;
	if (skl_breakers_list(c, &rows, &n, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	bool ok = a->json ? cli_json_print(breakers_json(rows, n)) : breakers_print_table(rows, n);
	skl_breakers_free(rows, n);
	if (!ok) {
		cli_error(a->cc, "cannot write the output");
		return CLI_PROBLEM;
	}
	return CLI_OK;
}

static int force(breakers_args *a, skl_client *c, const char *kind, bool open)
{
	skl_error err;
	char actor[200];
	cli_default_actor(actor, sizeof(actor));
	skl_actor who = {actor, CLI_ACTOR_ROLE};
	if (skl_breaker_set(c, kind, open, &who, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	printf("breaker of %s %s\n", kind, open ? "forced open" : "closed");
	return CLI_OK;
}

/* Checks the operands: "", "list", "open KIND" or "close KIND". */
static int operands(breakers_args *a, int n, char **v, bool *open)
{
	static const cli_sub verbs[] = {{"list", NULL, NULL, NULL, NULL},
	                                {"open", NULL, NULL, NULL, NULL},
	                                {"close", NULL, NULL, NULL, NULL}};
	static const cli_subs table = {"breakers", verbs, 3, NULL};
	const char *verb = n > 0 ? v[0] : "list";
	const cli_sub *s = cli_sub_find(&table, verb);
	if (s == NULL)
		return CLI_USAGE;
	if (s == &verbs[0] && n > 1) {
		cli_error(a->cc, "unexpected argument \"%s\"", v[1]);
		return CLI_USAGE;
	}
	if (s == &verbs[0])
		return CLI_OK;
	if (n != 2) {
		cli_error(a->cc, "%s: expected exactly one KIND", verb);
		return CLI_USAGE;
	}
	size_t kl = strlen(v[1]);
	if (kl == 0 || kl > SKL_KIND_MAX) {
		cli_error(a->cc, "%s: kind must be 1 to %d bytes", verb, SKL_KIND_MAX);
		return CLI_USAGE;
	}
	*open = s == &verbs[1];
	return CLI_OK;
}

int cmd_breakers(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_LONGOPTS, {"json", no_argument, NULL, O_JSON}, {0}};
	cli_common cc;
	cli_common_init(&cc, "breakers");
	breakers_args a = {.cc = &cc};
	bool done, open = false;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, usage, exit_help, -1, &done);
	if (done)
		return rc;
	int n = argc - optind;
	if ((rc = operands(&a, n, argv + optind, &open)) != CLI_OK)
		return rc;
	skl_client *c;
	if ((rc = cli_open(&cc, &c)) != CLI_OK)
		return rc;
	rc = n == 2 ? force(&a, c, argv[optind + 1], open) : list(&a, c);
	skl_client_close(c);
	return rc;
}
