/*
 * cmd_doctor.c — `skiplock doctor SUBCOMMAND`: dispatch to one diagnostic.
 * Each diagnostic lives in its own cmd_doctor_<name>.c; this file holds
 * only the table below.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct doctor_cmd {
	const char *name;
	cli_cmd_fn fn;
	const char *summary;
} doctor_cmds[] = {
	{"pooler", cmd_doctor_pooler, "what sits between client and Postgres; unsafe features"},
	{"indexes", cmd_doctor_indexes, "unused, invalid, redundant indexes; stale statistics"},
};

static void doctor_usage(void)
{
	printf("Usage: skiplock doctor SUBCOMMAND [OPTIONS]\n"
	       "\n"
	       "Find hazards before they page you. Every diagnostic prints its findings\n"
	       "as a table (or one JSON document with --json), each with a fix, and exits\n"
	       "1 when a finding needs action.\n"
	       "\n"
	       "Subcommands:\n");
	for (size_t i = 0; i < sizeof(doctor_cmds) / sizeof(doctor_cmds[0]); i++)
		printf("  %-10s %s\n", doctor_cmds[i].name, doctor_cmds[i].summary);
	printf("\nRun \"skiplock doctor SUBCOMMAND --help\" for its options.\n"
	       "\nExit status: 0 nothing needs action, 1 a finding needs action, 2 bad\n"
	       "usage, 3 database unreachable within --retry-for.\n");
}

int cmd_doctor(int argc, char **argv)
{
	const char *sub = argc > 1 ? argv[1] : NULL;
	if (sub && (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 ||
	            strcmp(sub, "help") == 0)) {
		doctor_usage();
		return CLI_OK;
	}
	for (size_t i = 0; sub && i < sizeof(doctor_cmds) / sizeof(doctor_cmds[0]); i++)
		if (strcmp(sub, doctor_cmds[i].name) == 0)
			return doctor_cmds[i].fn(argc - 1, argv + 1);
	cli_common cc;
	cli_common_init(&cc, "doctor");
	if (sub == NULL)
		cli_error(&cc, "missing subcommand (see skiplock doctor --help)");
	else
		cli_error(&cc, "unknown subcommand \"%s\" (see skiplock doctor --help)", sub);
	return CLI_USAGE;
}
