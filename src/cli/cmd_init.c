/*
 * cmd_init.c — `skiplock init`: install or upgrade skiplock's schema.
 */
#include <stdio.h>

#include "cli.h"

static const char usage[] =
	"Usage: skiplock init [OPTIONS]\n"
	"\n"
	"Install or upgrade skiplock's own schema \"skiplock\" in the database.\n"
	"\n"
	"The schema is built into the binary as numbered steps. Each missing step\n"
	"runs in its own short transaction under a transaction-scoped advisory lock,\n"
	"so any number of replicas may run init at once, directly or through a\n"
	"transaction-mode pooler; none leaves a session lock or setting behind.\n"
	"Running it again changes nothing.\n"
	"\n"
	"Least privilege (docs/security.md): with --owner, ROLE becomes the owner of\n"
	"the schema and everything in it; with --grant-worker, ROLE may use the\n"
	"schema's functions and read and write its rows, and nothing else: it cannot\n"
	"DROP, ALTER or TRUNCATE skiplock's tables. Both roles must exist already.\n"
	"Run init with these options again after an upgrade. Needs a superuser, or a\n"
	"member of the owner role.\n"
	"\n"
	"Options:\n"
	"  --owner ROLE           make ROLE the owner of the schema and its objects\n"
	"  --grant-worker ROLE    grant ROLE what workers, enqueue, leases and cron need\n"
	"\n";

static const char exit_help[] =
	"\nExit status: 0 installed or already current, 1 the database refused a step,\n"
	"2 bad usage or a role that does not exist, 3 database unreachable within\n"
	"--retry-for.\n";

enum { O_OWNER = OPT_COMMON_LAST + 1, O_WORKER };

typedef struct init_args {
	const char *owner, *worker;
} init_args;

static int own_option(int code, const char *arg, void *ctx)
{
	init_args *a = ctx;
	if (code == O_OWNER)
		a->owner = arg;
	else if (code == O_WORKER)
		a->worker = arg;
	else
		return CLI_USAGE;
	return CLI_OK;
}

static int grant(const cli_common *cc, skl_client *c, const init_args *a)
{
	skl_error err;
	if (skl_schema_grant(c, a->owner, a->worker, &err) != SKL_OK)
		return cli_fail(cc, &err);
	if (a->owner)
		printf("skiplock schema owner: %s\n", a->owner);
	if (a->worker)
		printf("skiplock worker role: %s\n", a->worker);
	return CLI_OK;
}

int cmd_init(int argc, char **argv)
{
	static const struct option opts[] = {CLI_COMMON_LONGOPTS,
	                                     {"owner", required_argument, NULL, O_OWNER},
	                                     {"grant-worker", required_argument, NULL, O_WORKER},
	                                     {0}};
	cli_common cc;
	cli_common_init(&cc, "init");
	init_args a = {0};
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, usage, exit_help, 0, &done);
	if (done)
		return rc;
	skl_client *c;
	rc = cli_open(&cc, &c);
	if (rc != CLI_OK)
		return rc;
	skl_error err;
	int applied = 0;
	if ((a.owner || a.worker) && skl_schema_check_roles(c, a.owner, a.worker, &err) != SKL_OK)
		rc = cli_fail(&cc, &err);
	else if (skl_schema_install(c, &applied, &err) != SKL_OK)
		rc = cli_fail(&cc, &err);
	else if (applied > 0) /* a version, not a count of steps: sql/SCHEMA.md */
		printf("skiplock schema installed: version %d\n", skl_schema_latest());
	else
		printf("skiplock schema is current: version %d\n", skl_schema_latest());
	if (rc == CLI_OK && (a.owner || a.worker))
		rc = grant(&cc, c, &a);
	skl_client_close(c);
	return rc;
}
