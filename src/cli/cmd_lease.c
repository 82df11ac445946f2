/*
 * cmd_lease.c — `skiplock lease run|list`: options, help and the lease
 * table.  The supervision of a command under a lease is lease_run.c.
 */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lease/lease_run.h"
#include "print/output.h"

static const char lease_usage[] =
	"Usage: skiplock lease run NAME --ttl DUR [OPTIONS] -- CMD [ARGS...]\n"
	"       skiplock lease list [--json] [OPTIONS]\n"
	"\n"
	"Named leases with expiry and fencing tokens: a fleet-wide singleton that\n"
	"works behind transaction-mode poolers. See \"skiplock lease run --help\" and\n"
	"\"skiplock lease list --help\".\n";

static const char run_usage[] =
	"NAME\n"
	"    skiplock lease run - run a command only while holding a lease\n"
	"\n"
	"SYNOPSIS\n"
	"    skiplock lease run NAME --ttl DUR [--wait | --wait-for DUR] [--owner ID]\n"
	"                       [--kill-grace DUR] [OPTIONS] -- CMD [ARGS...]\n"
	"\n"
	"DESCRIPTION\n"
	"    Takes lease NAME for DUR and runs CMD (directly, not through a shell) in\n"
	"    a process group of its own while renewing the lease every DUR/3. Every\n"
	"    replica of a fleet may run the same line: one runs CMD, the others exit\n"
	"    0 at once with one line naming the holder (or wait, with --wait).\n"
	"\n"
	"    The lease is a row in skiplock.leases, not a session: each acquire,\n"
	"    renewal and release is one short autocommit statement and nothing is\n"
	"    held on the connection in between, so it works through PgBouncer in\n"
	"    transaction mode and survives a dropped or terminated connection.\n"
	"    Each acquisition gets a fencing token one higher than any before for\n"
	"    NAME; CMD receives it in SKIPLOCK_FENCING and should pass it to every\n"
	"    write it makes (see skiplock.lease_fence and docs/leases.md), so that\n"
	"    a CMD that outlived its lease cannot write.\n"
	"\n"
	"    The lease is lost when a renewal matches no row (the token is stale:\n"
	"    the lease expired and another process took it, or an operator released\n"
	"    it), or when no renewal succeeded in time to stop CMD before the lease\n"
	"    would expire (the database is unreachable, or this process was paused).\n"
	"    Then CMD's process group gets SIGTERM, SIGKILL after --kill-grace, and\n"
	"    skiplock exits 1 with a line saying the lease was lost. Renewal and\n"
	"    kill are timed so that CMD is gone before another process can take\n"
	"    the lease.\n"
	"\n"
	"    When CMD exits while the lease is held, anything it left in its process\n"
	"    group is killed, the lease is released (its row and token stay), and\n"
	"    skiplock exits with CMD's status. SIGTERM, SIGINT and SIGHUP sent to\n"
	"    skiplock are passed on to CMD's group; the lease is kept until CMD\n"
	"    exits. If skiplock itself is killed, CMD gets SIGKILL.\n"
	"\n"
	"OPTIONS\n"
	"    --ttl DUR          lease length, at least 1s (required); renewed every\n"
	"                       DUR/3; each database call is bounded by DUR/10\n"
	"    --wait             if the lease is held elsewhere, poll (with jitter)\n"
	"                       until it is free, then run CMD\n"
	"    --wait-for DUR     like --wait, but give up after DUR (exit 0)\n"
	"    --owner ID         the holder's name in the lease row; must be unique\n"
	"                       per process (default HOST:PID:RANDOM)\n"
	"    --kill-grace DUR   SIGTERM to SIGKILL when the lease is lost, at most\n"
	"                       DUR/4 (default DUR/10, at most 5s)\n"
	"\n";

static const char run_tail[] =
	"\n"
	"ENVIRONMENT\n"
	"    CMD runs with SKIPLOCK_LEASE=NAME and SKIPLOCK_FENCING=TOKEN added.\n"
	"\n"
	"EXIT STATUS\n"
	"    CMD's status when it finished while holding the lease (128+N when it\n"
	"    was killed by signal N); 0 when the lease was held elsewhere; 1 when\n"
	"    the lease was lost (CMD was stopped); 2 bad usage; 3 database\n"
	"    unreachable within --retry-for; 126 or 127 when CMD could not be run.\n"
	"\n"
	"EXAMPLES\n"
	"    skiplock lease run nightly-report --ttl 1m -- ./report.sh --day today\n"
	"    skiplock lease run reindex --ttl 30s --wait-for 10m -- psql -f reindex.sql\n";

static const char list_usage[] =
	"NAME\n"
	"    skiplock lease list - show leases, holders, tokens and time left\n"
	"\n"
	"SYNOPSIS\n"
	"    skiplock lease list [--json] [OPTIONS]\n"
	"\n"
	"DESCRIPTION\n"
	"    Prints every row of skiplock.leases ordered by name: the lease, its\n"
	"    last owner, its last fencing token, whether it is held, the time left\n"
	"    by the database clock, and when it was acquired. Released and expired\n"
	"    leases stay listed: their row keeps the token, so tokens never repeat.\n"
	"    The worker and reader roles may not read tokens: TOKEN is \"-\" (null in\n"
	"    JSON) for them; the holder got its token when it acquired the lease.\n"
	"\n"
	"OPTIONS\n"
	"    --json             a JSON array of objects: name, owner, fencing, live,\n"
	"                       expires_in_ms, acquired_at, renewed_at, expires_at\n"
	"\n";

static const char list_tail[] =
	"\n"
	"EXIT STATUS\n"
	"    0 listed; 1 the database refused (schema not installed: skiplock init);\n"
	"    2 bad usage; 3 database unreachable within --retry-for.\n";

enum { O_TTL = OPT_COMMON_LAST + 1, O_WAIT, O_WAIT_FOR, O_OWNER, O_GRACE, O_JSON };

typedef struct run_args {
	cli_common *cc;
	lease_run_opts o;
	const char *ttl;
	const char *grace;
	const char *wait_for;
	bool json;
} run_args;

static int own_option(int code, const char *arg, void *ctx)
{
	run_args *a = ctx;
	switch (code) {
	case O_TTL: a->ttl = arg; break;
	case O_WAIT: a->o.wait = true; break;
	case O_WAIT_FOR: a->wait_for = arg; a->o.wait = true; break;
	case O_OWNER: a->o.owner = arg; break;
	case O_GRACE: a->grace = arg; break;
	case O_JSON: a->json = true; break;
	default: return CLI_USAGE;
	}
	return CLI_OK;
}

/* Parses DUR into *ms within [min, max]; prints and returns false if not. */
static bool duration_in(const cli_common *cc, const char *name, const char *arg, int64_t min,
                        int64_t max, const char *range, int64_t *ms)
{
	if (!cli_duration(cc, name, arg, ms))
		return false;
	if (*ms < min || *ms > max) {
		cli_error(cc, "%s must be %s, got \"%s\"", name, range, arg);
		return false;
	}
	return true;
}

static bool check_durations(run_args *a)
{
	lease_run_opts *o = &a->o;
	if (a->ttl == NULL) {
		cli_error(a->cc, "--ttl is required (the lease length, e.g. --ttl 1m)");
		return false;
	}
	if (!duration_in(a->cc, "--ttl", a->ttl, 1000, (int64_t)INT_MAX, "from 1s to 24 days",
	                 &o->ttl_ms))
		return false;
	o->kill_grace_ms = o->ttl_ms / 10 < 5000 ? o->ttl_ms / 10 : 5000;
	if (a->grace && !duration_in(a->cc, "--kill-grace", a->grace, 1, o->ttl_ms / 4,
	                             "positive and at most a quarter of --ttl", &o->kill_grace_ms))
		return false;
	if (a->wait_for && !duration_in(a->cc, "--wait-for", a->wait_for, 1, INT64_MAX / 4,
	                                "positive", &o->wait_for_ms))
		return false;
	return true;
}

/* NAME and the command: argv[optind..split) and argv[split+1..argc). */
static bool check_operands(run_args *a, int argc, char **argv, int split)
{
	int names = split - optind;
	if (names == 0) {
		cli_error(a->cc, "missing lease name (usage: skiplock lease run NAME --ttl DUR -- CMD)");
		return false;
	}
	if (names > 1) {
		cli_error(a->cc, "unexpected argument \"%s\" (put the command after --)",
		          argv[optind + 1]);
		return false;
	}
	a->o.name = argv[optind];
	size_t n = strlen(a->o.name);
	if (n == 0 || n > 4 * SKL_LEASE_NAME_MAX) {
		cli_error(a->cc, "lease name must be 1 to %d characters", SKL_LEASE_NAME_MAX);
		return false;
	}
	if (a->o.owner && (*a->o.owner == '\0' || strlen(a->o.owner) > 4 * SKL_LEASE_NAME_MAX)) {
		cli_error(a->cc, "--owner must be 1 to %d characters", SKL_LEASE_NAME_MAX);
		return false;
	}
	if (split >= argc - 1) {
		cli_error(a->cc, "no command: give it after --, as in: skiplock lease run %s "
		          "--ttl 1m -- CMD [ARGS...]", a->o.name);
		return false;
	}
	a->o.argv = argv + split + 1;
	return true;
}


/* One database call must fit well inside the lease: the client's connect
 * and call deadlines become at most ttl/10 each, and the library does not
 * retry on its own (lease_run.c retries against the lease's deadline). */
static void bound_client(cli_common *cc, lease_run_opts *o)
{
	int per = (int)(o->ttl_ms / 10);
	if (cc->client.call_timeout_ms > per)
		cc->client.call_timeout_ms = per;
	if (cc->client.connect_timeout_ms > per)
		cc->client.connect_timeout_ms = per;
	o->attempt_ms = cc->client.call_timeout_ms + cc->client.connect_timeout_ms;
	o->retry_for_ms = cc->client.retry_max_ms;
	cc->client.retry_max_ms = 0;
	cc->client.application_name = "skiplock lease run";
}

static int first_double_dash(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--") == 0)
			return i;
	return argc;
}

static int cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_LONGOPTS,
		{"ttl", required_argument, NULL, O_TTL},
		{"wait", no_argument, NULL, O_WAIT},
		{"wait-for", required_argument, NULL, O_WAIT_FOR},
		{"owner", required_argument, NULL, O_OWNER},
		{"kill-grace", required_argument, NULL, O_GRACE},
		{0}};
	cli_common cc;
	cli_common_init(&cc, "lease run");
	run_args a = {.cc = &cc};
	int split = first_double_dash(argc, argv);
	bool done;
	int rc = cli_start(&cc, split, argv, opts, own_option, &a, run_usage, run_tail, -1, &done);
	if (done)
		return rc;
	if (!check_operands(&a, argc, argv, split) || !check_durations(&a))
		return CLI_USAGE;
	char owner[256];
	if (a.o.owner == NULL) {
		cli_default_owner(owner, sizeof(owner), "");
		a.o.owner = owner;
	}
	bound_client(&cc, &a.o);
	skl_client *c = NULL;
	rc = cli_open(&cc, &c);
	if (rc != CLI_OK)
		return rc;
	rc = lease_run(&cc, c, &a.o);
	skl_client_close(c);
	return rc;
}

/* ---- list ---- */

static bool print_table(const skl_lease_info *l, size_t n)
{
	cli_table t;
	cli_table_init(&t, 6, "llrlll");
	static const char *const head[] = {"NAME", "OWNER", "TOKEN", "STATE", "EXPIRES",
	                                   "ACQUIRED AT (UTC)"};
	for (size_t i = 0; i < 6; i++)
		cli_table_add(&t, "%s", head[i]);
	for (size_t i = 0; i < n; i++) {
		char exp[48], at[32];
		cli_table_add(&t, "%s", l[i].name);
		cli_table_add(&t, "%s", l[i].owner);
		if (l[i].fencing < 0) /* the worker and reader roles may not read it */
			cli_table_add(&t, "-");
		else
			cli_table_add(&t, "%lld", (long long)l[i].fencing);
		cli_table_add(&t, "%s", l[i].live ? "held" : "free");
		cli_table_add(&t, "%s", cli_fmt_expiry(l[i].expires_in_ms, exp, sizeof(exp)));
		cli_table_add(&t, "%s", cli_fmt_time(l[i].acquired_at, at, sizeof(at)));
	}
	bool ok = cli_table_print(&t);
	cli_table_free(&t);
	return ok;
}

static bool print_json(const skl_lease_info *l, size_t n)
{
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++) {
		json_t *o = json_object();
		json_object_set_new(o, "name", cli_json_str(l[i].name));
		json_object_set_new(o, "owner", cli_json_str(l[i].owner));
		json_object_set_new(o, "fencing",
		                    l[i].fencing < 0 ? json_null() : json_integer(l[i].fencing));
		json_object_set_new(o, "live", json_boolean(l[i].live));
		json_object_set_new(o, "expires_in_ms", json_integer(l[i].expires_in_ms));
		json_object_set_new(o, "acquired_at", cli_json_str(l[i].acquired_at));
		json_object_set_new(o, "renewed_at", cli_json_str(l[i].renewed_at));
		json_object_set_new(o, "expires_at", cli_json_str(l[i].expires_at));
		json_array_append_new(arr, o);
	}
	return cli_json_print(arr);
}

static int output_failed(const cli_common *cc)
{
	cli_error(cc, "cannot write the output");
	return CLI_PROBLEM;
}

static int cmd_list(int argc, char **argv)
{
	static const struct option opts[] = {CLI_COMMON_LONGOPTS,
	                                     {"json", no_argument, NULL, O_JSON}, {0}};
	cli_common cc;
	cli_common_init(&cc, "lease list");
	run_args a = {.cc = &cc};
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, list_usage, list_tail, 0, &done);
	if (done)
		return rc;
	skl_client *c = NULL;
	if ((rc = cli_open(&cc, &c)) != CLI_OK)
		return rc;
	skl_lease_info *l = NULL;
	size_t n = 0;
	skl_error err;
	if (skl_lease_list(c, &l, &n, &err) != SKL_OK)
		rc = cli_fail(&cc, &err);
	else if (!(a.json ? print_json(l, n) : print_table(l, n)))
		rc = output_failed(&cc);
	skl_lease_list_free(l, n);
	skl_client_close(c);
	return rc;
}

static void help(FILE *out)
{
	fputs(lease_usage, out);
}

int cmd_lease(int argc, char **argv)
{
	static const cli_sub subs[] = {{"run", cmd_run, NULL, NULL, NULL},
	                               {"list", cmd_list, NULL, NULL, NULL}};
	static const cli_subs table = {"lease", subs, 2, help};
	return cli_dispatch(&table, argc, argv);
}
