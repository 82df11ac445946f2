/* cmd_jobs.c — placeholder until the command lands; refuses to run. */
#include "cli.h"

int cmd_jobs(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	cli_error(NULL, "jobs: not built yet");
	return CLI_USAGE;
}
