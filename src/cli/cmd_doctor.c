/*
 * cmd_doctor.c — `skiplock doctor SUBCOMMAND`: dispatch to one diagnosis.
 * Each subcommand lives in cmd_doctor_<name>.c; this file is only the table.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static int doctor_all(int argc, char **argv);

/* The diagnoses, then `all`, which runs each of them. */
static const cli_sub doctor_cmds[] = {
	{"locks", cmd_doctor_locks, .summary = "advisory locks, orphans, idle transactions and blockers"},
	{"pooler", cmd_doctor_pooler, .summary = "what sits between client and Postgres; unsafe features"},
	{"indexes", cmd_doctor_indexes, .summary = "unused, invalid, redundant indexes; stale statistics"},
	{"maintenance", cmd_doctor_maintenance, .summary = "skiplock's maintenance: has it run while jobs did"},
	{"all", doctor_all, .summary = "each of the above in turn, with the connection and output options\n"
	                               "                and --json only; the highest exit status wins"},
};

#define NCMDS (sizeof(doctor_cmds) / sizeof(doctor_cmds[0]))
#define NDIAGNOSES (NCMDS - 1)

static void usage(FILE *out)
{
	fprintf(out,
	        "NAME\n"
	        "    skiplock doctor - diagnose locks, poolers, indexes and skiplock's maintenance\n"
	        "\n"
	        "SYNOPSIS\n"
	        "    skiplock doctor SUBCOMMAND [--json] [OPTIONS]\n"
	        "    skiplock doctor all [--json] [CONNECTION OPTIONS]\n"
	        "\n"
	        "SUBCOMMANDS\n");
	for (size_t i = 0; i < NCMDS; i++)
		fprintf(out, "    %-11s %s\n", doctor_cmds[i].name, doctor_cmds[i].summary);
	fprintf(out,
	        "\n"
	        "    Run \"skiplock doctor SUBCOMMAND --help\" for its options.\n"
	        "\n"
	        "EXIT STATUS\n"
	        "    0 nothing needs action; 1 a finding needs action; 2 bad usage;\n"
	        "    3 database unreachable.\n");
}

/* Options only one diagnosis takes: refused by `all` before anything runs. */
static const char *const own_options[] = {"--idle-for", "--terminate-idle-orphans",
                                          "--schema"};

static bool own_option(const char *arg)
{
	for (size_t i = 0; i < sizeof(own_options) / sizeof(own_options[0]); i++) {
		size_t n = strlen(own_options[i]);
		if (strncmp(arg, own_options[i], n) == 0 && (arg[n] == '\0' || arg[n] == '='))
			return true;
	}
	return false;
}

/* `doctor all [OPTIONS]`: every diagnosis in turn with the same connection,
 * output and --json options; with --json one document per diagnosis, one
 * after the other.  The highest exit status wins (3 over 1 over 0); a
 * usage error stops at once. */
static int doctor_all(int argc, char **argv)
{
	bool json = false;
	for (int i = 1; i < argc; i++) {
		json = json || strcmp(argv[i], "--json") == 0;
		if (own_option(argv[i])) {
			cli_common cc;
			cli_common_init(&cc, "doctor all");
			cli_error(&cc, "%s belongs to one diagnosis: run that one alone", argv[i]);
			return CLI_USAGE;
		}
	}
	int worst = CLI_OK;
	for (size_t i = 0; i < NDIAGNOSES; i++) {
		if (!json)
			printf("%s== skiplock doctor %s\n", i ? "\n" : "", doctor_cmds[i].name);
		fflush(stdout);
		argv[0] = (char *)doctor_cmds[i].name;
		int rc = doctor_cmds[i].fn(argc, argv);
		fflush(stdout);
		if (rc == CLI_USAGE)
			return rc;
		worst = rc > worst ? rc : worst;
	}
	return worst;
}

int cmd_doctor(int argc, char **argv)
{
	static const cli_subs table = {"doctor", doctor_cmds, NCMDS, usage};
	return cli_dispatch(&table, argc, argv);
}
