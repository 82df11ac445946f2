/*
 * cmd_workers.c — `skiplock workers [--idle] [--seen DUR] [--json]`: the
 * registry of workers their empty claims keep (skiplock/workers.h), and
 * which of them are idle while due jobs of their queues wait.  Options are
 * checked before the database is contacted.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "print/output.h"
#include "print/workers_print.h"

static const char usage[] =
	"Usage: skiplock workers [--idle] [--seen DUR] [--json]\n"
	"\n"
	"List the workers that claimed and found nothing within --seen, from the\n"
	"registry every claim keeps (any client: the C worker, Node, Python, Rust,\n"
	"SQL). A claim that takes nothing records its owner, kinds and queues, at\n"
	"most once per worker per 10 seconds; a claim that takes jobs writes\n"
	"nothing. A worker is idle while work waits when due jobs of its queues\n"
	"were left behind by its last recorded empty claim: their kind is not one\n"
	"of its kinds, or their queue or kind is paused, or their breaker is open.\n"
	"A stopped worker stays listed until --seen has passed.\n"
	"\n"
	"Columns: OWNER; QUEUES (\"*\": every queue); KINDS; EMPTY CLAIM, how long\n"
	"ago its last recorded empty claim was; WAITING, the due jobs it left\n"
	"behind (counted among 1000 read at most) and the kinds of the 10 that have\n"
	"waited longest.\n"
	"\n"
	"Workers options:\n"
	"  --idle                 only the workers idle while due jobs wait\n"
	"  --seen DUR             how far back to look, 1s to 1d (default 15m)\n"
	"  --json                 print a JSON array instead of a table: [{\"owner\",\n"
	"                         \"kinds\", \"queues\" (null: every queue),\n"
	"                         \"empty_at\", \"empty_age_ms\", \"first_seen_at\",\n"
	"                         \"waiting\", \"waiting_kinds\", \"idle\"}]\n"
	"\n";

static const char exit_help[] =
	"\nExit status: 0 success, 1 the database refused, 2 bad usage or bad input,\n"
	"3 database unreachable within --retry-for.\n";

enum { O_IDLE = OPT_COMMON_LAST + 1, O_SEEN, O_JSON };

typedef struct workers_args {
	cli_common *cc;
	bool idle, json;
	int64_t seen_ms;
} workers_args;

static int own_option(int code, const char *arg, void *ctx)
{
	workers_args *a = ctx;
	if (code == O_IDLE)
		a->idle = true;
	else if (code == O_JSON)
		a->json = true;
	else if (code != O_SEEN)
		return CLI_USAGE;
	else if (!cli_duration(a->cc, "--seen", arg, &a->seen_ms))
		return CLI_USAGE;
	else if (a->seen_ms < SKL_WORKERS_SEEN_MIN_MS || a->seen_ms > SKL_WORKERS_SEEN_MAX_MS) {
		cli_error(a->cc, "--seen must be 1s to 1d, got \"%s\"", arg);
		return CLI_USAGE;
	}
	return CLI_OK;
}

static int list(workers_args *a, skl_client *c)
{
	skl_worker_info *rows;
	size_t n;
	skl_error err;
	if (skl_workers_list(c, a->seen_ms, a->idle, &rows, &n, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	bool ok = a->json ? cli_json_print(workers_json(rows, n)) : workers_print_table(rows, n);
	skl_workers_free(rows, n);
	if (!ok) {
		cli_error(a->cc, "cannot write the output");
		return CLI_PROBLEM;
	}
	return CLI_OK;
}

int cmd_workers(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_LONGOPTS,
		{"idle", no_argument, NULL, O_IDLE},
		{"seen", required_argument, NULL, O_SEEN},
		{"json", no_argument, NULL, O_JSON},
		{0}};
	cli_common cc;
	cli_common_init(&cc, "workers");
	workers_args a = {.cc = &cc};
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, usage, exit_help, 0, &done);
	if (done)
		return rc;
	skl_client *c;
	if ((rc = cli_open(&cc, &c)) != CLI_OK)
		return rc;
	rc = list(&a, c);
	skl_client_close(c);
	return rc;
}
