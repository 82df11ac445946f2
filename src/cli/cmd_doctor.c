/*
 * cmd_doctor.c — `skiplock doctor SUBCOMMAND`: dispatch to one diagnosis.
 * Each subcommand lives in cmd_doctor_<name>.c; this file is only the table.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct doctor_cmd {
	const char *name;
	cli_cmd_fn fn;
	const char *summary;
} doctor_cmds[] = {
	{"locks", cmd_doctor_locks, "advisory locks, orphans, idle transactions and blockers"},
	{"pooler", cmd_doctor_pooler, "what sits between client and Postgres; unsafe features"},
	{"indexes", cmd_doctor_indexes, "unused, invalid, redundant indexes; stale statistics"},
};


static void usage(FILE *out)
{
	fprintf(out,
	        "NAME\n"
	        "    skiplock doctor - diagnose locks, poolers and indexes in any database\n"
	        "\n"
	        "SYNOPSIS\n"
	        "    skiplock doctor SUBCOMMAND [--json] [OPTIONS]\n"
	        "\n"
	        "SUBCOMMANDS\n");
	for (size_t i = 0; i < sizeof(doctor_cmds) / sizeof(doctor_cmds[0]); i++)
		fprintf(out, "    %-10s %s\n", doctor_cmds[i].name, doctor_cmds[i].summary);
	fprintf(out,
	        "\n"
	        "    Run \"skiplock doctor SUBCOMMAND --help\" for its options.\n"
	        "\n"
	        "EXIT STATUS\n"
	        "    0 nothing needs action; 1 a finding needs action; 2 bad usage;\n"
	        "    3 database unreachable.\n");
}

int cmd_doctor(int argc, char **argv)
{
	const char *sub = argc > 1 ? argv[1] : NULL;
	if (sub && (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 ||
	            strcmp(sub, "help") == 0)) {
		usage(stdout);
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
