/*
 * cmd_queue.c — `skiplock queue pause|resume|paused`: stop and start the
 * claiming of a queue or a kind for the whole fleet (skiplock/control.h).
 *
 * Pausing and resuming are written to the action log as USER@HOST, role
 * "cli".  Operands and options are checked before the database is
 * contacted, so bad input writes nothing.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "print/control_print.h"
#include "print/output.h"

static const char queue_usage[] =
	"Usage: skiplock queue pause (--queue Q | --kind K)\n"
	"       skiplock queue resume (--queue Q | --kind K)\n"
	"       skiplock queue paused [--json]\n"
	"\n"
	"Stop the bleeding: pause a queue or a kind for every worker at once. No\n"
	"worker claims a job of a paused queue or kind (nor admits one as a breaker\n"
	"probe): its jobs wait without failing or using attempts, as behind an open\n"
	"breaker, until it is resumed. Jobs already running run on; expired leases\n"
	"are still rescued. \"skiplock queue SUBCOMMAND --help\" shows the options of\n"
	"each.\n"
	"\n"
	"  pause   pause a queue or a kind (from the next claim of every worker)\n"
	"  resume  resume it\n"
	"  paused  list what is paused, since when and by whom\n"
	"\n"
	"Exit status: 0 success, 1 the database refused, 2 bad usage or bad input\n"
	"(nothing written), 3 database unreachable within --retry-for.\n";

static const char pause_usage[] =
	"Usage: skiplock queue pause (--queue Q | --kind K)\n"
	"\n"
	"Pause queue Q or kind K fleet-wide, and say whether it was paused before.\n"
	"Written to the action log (skiplock jobs actions) as USER@HOST, role cli. An\n"
	"operator's action: the worker role may not.\n"
	"\n"
	"Pause options:\n"
	"  --queue Q              the queue to pause\n"
	"  --kind K               the kind to pause (in every queue)\n"
	"\n";

static const char resume_usage[] =
	"Usage: skiplock queue resume (--queue Q | --kind K)\n"
	"\n"
	"Resume queue Q or kind K: workers claim its jobs again from their next\n"
	"claim. Written to the action log as USER@HOST, role cli.\n"
	"\n"
	"Resume options:\n"
	"  --queue Q              the queue to resume\n"
	"  --kind K               the kind to resume\n"
	"\n";

static const char paused_usage[] =
	"Usage: skiplock queue paused [--json]\n"
	"\n"
	"List the paused queues and kinds. Columns: QUEUE (\"*\" for a kind's pause);\n"
	"KIND (\"*\" for a queue's pause); SINCE (UTC); BY, the actor; ROLE.\n"
	"\n"
	"Paused options:\n"
	"  --json                 print a JSON array instead of a table\n"
	"\n";

static const char common_exit[] =
	"\nExit status: 0 success, 1 the database refused, 2 bad usage or bad input\n"
	"(nothing written), 3 database unreachable within --retry-for.\n";

enum { O_QUEUE = OPT_COMMON_LAST + 1, O_KIND, O_JSON };

static const struct option pause_opts[] = {
	CLI_COMMON_LONGOPTS,
	{"queue", required_argument, NULL, O_QUEUE},
	{"kind", required_argument, NULL, O_KIND},
	{0}};
static const struct option paused_opts[] = {
	CLI_COMMON_LONGOPTS, {"json", no_argument, NULL, O_JSON}, {0}};

typedef struct queue_args {
	cli_common *cc;
	const char *queue, *kind;
	bool json;
} queue_args;

static int own_option(int code, const char *arg, void *ctx)
{
	queue_args *a = ctx;
	if (code == O_JSON) {
		a->json = true;
		return CLI_OK;
	}
	const char *name = code == O_QUEUE ? "--queue" : "--kind";
	size_t n = strlen(arg);
	if (n == 0 || n > SKL_KIND_MAX || strcmp(arg, "*") == 0) {
		cli_error(a->cc, "%s must be 1 to %d bytes, not \"*\"", name, SKL_KIND_MAX);
		return CLI_USAGE;
	}
	*(code == O_QUEUE ? &a->queue : &a->kind) = arg;
	return CLI_OK;
}

static int pause_or_resume(queue_args *a, skl_client *c, bool pause)
{
	char actor[200];
	cli_default_actor(actor, sizeof(actor));
	skl_actor who = {actor, CLI_ACTOR_ROLE};
	bool changed = false;
	skl_error err;
	skl_rc rc = pause ? skl_pause(c, a->queue, a->kind, &who, &changed, &err)
	                  : skl_resume(c, a->queue, a->kind, &who, &changed, &err);
	if (rc != SKL_OK)
		return cli_fail(a->cc, &err);
	printf("%s \"%s\" %s%s\n", a->queue ? "queue" : "kind", a->queue ? a->queue : a->kind,
	       changed ? "" : "was already ", pause ? "paused" : changed ? "resumed" : "running");
	return CLI_OK;
}

static int queue_pause(queue_args *a, skl_client *c)
{
	return pause_or_resume(a, c, true);
}

static int queue_resume(queue_args *a, skl_client *c)
{
	return pause_or_resume(a, c, false);
}

static bool print_table(const skl_pause_info *p, size_t n)
{
	cli_table t;
	cli_table_init(&t, 5, "lllll");
	const char *const head[] = {"QUEUE", "KIND", "SINCE", "BY", "ROLE"};
	for (size_t i = 0; i < 5; i++)
		cli_table_add(&t, "%s", head[i]);
	for (size_t i = 0; i < n; i++) {
		char since[32];
		cli_table_add(&t, "%s", p[i].queue);
		cli_table_add(&t, "%s", p[i].kind);
		cli_table_add(&t, "%s", cli_fmt_time(p[i].paused_at, since, sizeof(since)));
		cli_table_add(&t, "%s", p[i].paused_by);
		cli_table_add(&t, "%s", p[i].role);
	}
	bool ok = cli_table_print(&t);
	cli_table_free(&t);
	return ok;
}

static int queue_paused(queue_args *a, skl_client *c)
{
	skl_pause_info *p;
	size_t n;
	skl_error err;
	if (skl_pauses_list(c, &p, &n, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	bool ok = a->json ? cli_json_print(control_pauses_json(p, n)) : print_table(p, n);
	skl_pauses_free(p, n);
	if (!ok) {
		cli_error(a->cc, "cannot write the output");
		return CLI_PROBLEM;
	}
	return CLI_OK;
}

/* ---- dispatch ---- */

typedef struct queue_sub {
	const char *command;
	const char *usage;
	const struct option *opts;
	bool names_one;           /* exactly one of --queue and --kind */
	int (*run)(queue_args *a, skl_client *c);
} queue_sub;

static int run_sub(const cli_sub *sub, int argc, char **argv);
#define QUEUE_SUB(name, usage, opts, names_one, fn)                                    \
	{name, NULL, run_sub, &(const queue_sub){"queue " name, usage, opts, names_one, fn}, NULL}
static const cli_sub subs[] = {
	QUEUE_SUB("pause", pause_usage, pause_opts, true, queue_pause),
	QUEUE_SUB("resume", resume_usage, pause_opts, true, queue_resume),
	QUEUE_SUB("paused", paused_usage, paused_opts, false, queue_paused),
};

static int run_sub(const cli_sub *sub, int argc, char **argv)
{
	const queue_sub *s = sub->spec;
	cli_common cc;
	cli_common_init(&cc, s->command);
	queue_args a = {.cc = &cc};
	bool done;
	int rc = cli_start(&cc, argc, argv, s->opts, own_option, &a, s->usage, common_exit, 0,
	                   &done);
	if (done)
		return rc;
	if (s->names_one && (a.queue == NULL) == (a.kind == NULL)) {
		cli_error(&cc, "give one of --queue Q and --kind K (see skiplock %s --help)",
		          s->command);
		return CLI_USAGE;
	}
	skl_client *c;
	if ((rc = cli_open(&cc, &c)) != CLI_OK)
		return rc;
	rc = s->run(&a, c);
	skl_client_close(c);
	return rc;
}

static void help(FILE *out)
{
	fputs(queue_usage, out);
}

int cmd_queue(int argc, char **argv)
{
	static const cli_subs table = {"queue", subs, sizeof(subs) / sizeof(subs[0]), help};
	return cli_dispatch(&table, argc, argv);
}
