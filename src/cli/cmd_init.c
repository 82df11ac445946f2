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
	"\n";

static const char exit_help[] =
	"\nExit status: 0 installed or already current, 1 the database refused a step,\n"
	"2 bad usage, 3 database unreachable within --retry-for.\n";

int cmd_init(int argc, char **argv)
{
	static const struct option opts[] = {CLI_COMMON_LONGOPTS, {0}};
	cli_common cc;
	cli_common_init(&cc, "init");
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, NULL, NULL, usage, exit_help, 0, &done);
	if (done)
		return rc;
	skl_client *c;
	rc = cli_open(&cc, &c);
	if (rc != CLI_OK)
		return rc;
	skl_error err;
	int applied = 0;
	if (skl_schema_install(c, &applied, &err) != SKL_OK)
		rc = cli_fail(&cc, &err);
	else if (applied > 0)
		printf("skiplock schema installed: version %d (%d step%s applied)\n",
		       skl_schema_latest(), applied, applied == 1 ? "" : "s");
	else
		printf("skiplock schema is current: version %d\n", skl_schema_latest());
	skl_client_close(c);
	return rc;
}
