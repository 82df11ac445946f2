/* cmd_status.c — placeholder until the command lands; refuses to run. */
#include "cli.h"

int cmd_status(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	cli_error(NULL, "status: not built yet");
	return CLI_USAGE;
}
