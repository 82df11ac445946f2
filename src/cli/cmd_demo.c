/* cmd_demo.c — placeholder until the command lands; refuses to run. */
#include "cli.h"

int cmd_demo(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	cli_error(NULL, "demo: not built yet");
	return CLI_USAGE;
}
