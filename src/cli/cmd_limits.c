/*
 * cmd_limits.c — `skiplock limits [show|set KIND|remove KIND]`: limits on
 * job starts across the fleet (skiplock/limits.h, sql/0029_limits.sql).
 *
 * set and remove are written to the action log as USER@HOST, role "cli".
 * Operands and options are checked before the database is contacted
 * (skl_limit_spec_check holds the bounds the database keeps), so bad input
 * exits 2 with one line and writes nothing.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "print/limits_print.h"
#include "print/output.h"

static const char usage[] =
	"Usage: skiplock limits [show] [--json]\n"
	"       skiplock limits set KIND [--max-running N] [--rate N [--per DURATION]]\n"
	"                           [--key-field FIELD]\n"
	"       skiplock limits remove KIND\n"
	"\n"
	"Limits on job starts, one row per kind in skiplock.limits, enforced by the\n"
	"claim itself: they hold for every worker of every language at once.\n"
	"  max running  at most N jobs of KIND running at a time, counted from live\n"
	"               leases (a crashed worker's slot frees when its lease expires)\n"
	"  rate         at most N starts of KIND in any window of --per (a sliding\n"
	"               window, exact)\n"
	"With --key-field the limit holds per key: the value of the payload's\n"
	"top-level field of that name (jobs without it share one key), so \"at most 2\n"
	"exports running per customer\" is: skiplock limits set export\n"
	"--max-running 2 --key-field customer. A job held back stays available and\n"
	"keeps its attempts; it starts in claim order as room frees.\n"
	"\n"
	"  show         print every limit and its use now (the default)\n"
	"  set KIND     set KIND's limit, replacing the one it had\n"
	"  remove KIND  remove KIND's limit\n"
	"set and remove are written to the action log (skiplock jobs actions) as\n"
	"USER@HOST, role cli. An operator's action: the worker role may not.\n"
	"\n"
	"Columns of show: KIND; KEY FIELD; MAX RUNNING; RUNNING, jobs running now;\n"
	"RATE, starts per window; STARTED, starts in the current window (every\n"
	"key's); WAITING, due jobs not started yet; KEYS, the distinct keys among\n"
	"available and running jobs.\n"
	"\n"
	"Limits options:\n"
	"  --max-running N        set: at most N jobs running at a time (1 to 1000000)\n"
	"  --rate N               set: at most N starts per window (1 to 1000000)\n"
	"  --per DURATION         set: the rate's window, 1ms to 1d (default 1s)\n"
	"  --key-field FIELD      set: hold the limit per value of the payload's FIELD\n"
	"                         (1 to 128 bytes)\n"
	"  --json                 show: print a JSON array instead of a table: [{\"kind\",\n"
	"                         \"key_field\", \"max_running\", \"running\", \"rate\",\n"
	"                         \"per_ms\", \"started\", \"waiting\", \"keys\",\n"
	"                         \"changed_at\", \"changed_by\"}], null where a limit has\n"
	"                         none\n"
	"\n";

static const char exit_help[] =
	"\nExit status: 0 success, 1 the database refused or KIND has no limit (remove),\n"
	"2 bad usage or bad input (nothing written), 3 database unreachable within\n"
	"--retry-for.\n";

enum { O_MAX_RUNNING = OPT_COMMON_LAST + 1, O_RATE, O_PER, O_KEY_FIELD, O_JSON };

typedef enum { V_SHOW, V_SET, V_REMOVE } limits_verb;

typedef struct limits_args {
	cli_common *cc;
	skl_limit_spec spec;
	bool json;
} limits_args;

static int own_option(int code, const char *arg, void *ctx)
{
	limits_args *a = ctx;
	long long v = 0;
	switch (code) {
	case O_JSON: a->json = true; return CLI_OK;
	case O_KEY_FIELD: a->spec.key_field = arg; return CLI_OK;
	case O_MAX_RUNNING:
		if (!cli_int(a->cc, "--max-running", arg, 1, SKL_LIMIT_MAX, &v))
			return CLI_USAGE;
		a->spec.max_running = (int)v;
		return CLI_OK;
	case O_RATE:
		if (!cli_int(a->cc, "--rate", arg, 1, SKL_LIMIT_MAX, &v))
			return CLI_USAGE;
		a->spec.rate = (int)v;
		return CLI_OK;
	case O_PER:
		if (!cli_duration(a->cc, "--per", arg, &a->spec.per_ms))
			return CLI_USAGE;
		if (a->spec.per_ms >= 1 && a->spec.per_ms <= SKL_LIMIT_PER_MAX_MS)
			return CLI_OK;
		cli_error(a->cc, "--per: \"%s\" is not a window from 1ms to 1d", arg);
		return CLI_USAGE;
	}
	return CLI_USAGE;
}

/* ---- the three verbs ---- */

static int show(limits_args *a, skl_client *c)
{
	skl_limit_info *rows;
	size_t n;
	skl_error err;
	if (skl_limits_list(c, &rows, &n, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	bool ok = a->json ? cli_json_print(limits_json(rows, n)) : limits_print_table(rows, n);
	skl_limits_free(rows, n);
	if (!ok) {
		cli_error(a->cc, "cannot write the output");
		return CLI_PROBLEM;
	}
	return CLI_OK;
}

static int set_or_remove(limits_args *a, skl_client *c, limits_verb verb)
{
	char actor[200];
	cli_default_actor(actor, sizeof(actor));
	skl_actor who = {actor, CLI_ACTOR_ROLE};
	bool removed = false;
	skl_error err;
	skl_rc rc = verb == V_SET ? skl_limit_set(c, &a->spec, &who, &err)
	                          : skl_limit_remove(c, a->spec.kind, &who, &removed, &err);
	if (rc != SKL_OK)
		return cli_fail(a->cc, &err);
	if (verb == V_REMOVE && !removed) {
		cli_error(a->cc, "kind \"%s\" has no limit", a->spec.kind);
		return CLI_PROBLEM;
	}
	printf("limit of kind \"%s\" %s\n", a->spec.kind, verb == V_SET ? "set" : "removed");
	return CLI_OK;
}

/* ---- operands and options, before the database ---- */

/* set's options: at least one limit, --per with --rate, every bound. */
static int check_set(limits_args *a)
{
	const skl_limit_spec *s = &a->spec;
	skl_error err;
	if (s->max_running == 0 && s->rate == 0) {
		cli_error(a->cc, "set: give --max-running N, --rate N, or both");
		return CLI_USAGE;
	}
	if (s->per_ms > 0 && s->rate == 0) {
		cli_error(a->cc, "set: --per is the window of a rate; give --rate N too");
		return CLI_USAGE;
	}
	if (skl_limit_spec_check(s, &err) != SKL_OK) {
		cli_error(a->cc, "set: %s", err.message);
		return CLI_USAGE;
	}
	return CLI_OK;
}

/* The options that go with one verb only. */
static int check_options(limits_args *a, limits_verb verb)
{
	const skl_limit_spec *s = &a->spec;
	bool set_opts = s->max_running || s->rate || s->per_ms || s->key_field;
	if (a->json && verb != V_SHOW) {
		cli_error(a->cc, "--json goes with show");
		return CLI_USAGE;
	}
	if (set_opts && verb != V_SET) {
		cli_error(a->cc, "--max-running, --rate, --per and --key-field go with set");
		return CLI_USAGE;
	}
	return verb == V_SET ? check_set(a) : CLI_OK;
}

/* Checks the operands ("", "show", "set KIND" or "remove KIND") and the
 * options that go with them. */
static int operands(limits_args *a, int n, char **v, limits_verb *verb)
{
	static const cli_sub verbs[] = {{"show", NULL, NULL, NULL, NULL},
	                                {"set", NULL, NULL, NULL, NULL},
	                                {"remove", NULL, NULL, NULL, NULL}};
	static const cli_subs table = {"limits", verbs, 3, NULL};
	const cli_sub *s = cli_sub_find(&table, n > 0 ? v[0] : "show");
	if (s == NULL)
		return CLI_USAGE;
	*verb = (limits_verb)(s - verbs);
	if (*verb == V_SHOW && n > 1) {
		cli_error(a->cc, "unexpected argument \"%s\"", v[1]);
		return CLI_USAGE;
	}
	if (*verb != V_SHOW && n != 2) {
		cli_error(a->cc, "%s: expected exactly one KIND", v[0]);
		return CLI_USAGE;
	}
	size_t kl = *verb == V_SHOW ? 1 : strlen(v[1]);
	if (kl == 0 || kl > SKL_KIND_MAX) {
		cli_error(a->cc, "%s: kind must be 1 to %d bytes", v[0], SKL_KIND_MAX);
		return CLI_USAGE;
	}
	a->spec.kind = *verb == V_SHOW ? NULL : v[1];
	return check_options(a, *verb);
}

int cmd_limits(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_LONGOPTS,
		{"max-running", required_argument, NULL, O_MAX_RUNNING},
		{"rate", required_argument, NULL, O_RATE},
		{"per", required_argument, NULL, O_PER},
		{"key-field", required_argument, NULL, O_KEY_FIELD},
		{"json", no_argument, NULL, O_JSON},
		{0}};
	cli_common cc;
	cli_common_init(&cc, "limits");
	limits_args a = {.cc = &cc};
	bool done;
	limits_verb verb = V_SHOW;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, usage, exit_help, -1, &done);
	if (done)
		return rc;
	if ((rc = operands(&a, argc - optind, argv + optind, &verb)) != CLI_OK)
		return rc;
	skl_client *c;
	if ((rc = cli_open(&cc, &c)) != CLI_OK)
		return rc;
	rc = verb == V_SHOW ? show(&a, c) : set_or_remove(&a, c, verb);
	skl_client_close(c);
	return rc;
}
