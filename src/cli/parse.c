/*
 * parse.c — a command's command line: its settings from the environment
 * and --config (settings.c), then getopt_long over the common options
 * (common.c) and the command's own; --help and surplus operands.
 */
#include <stdio.h>

#include "cli.h"

int cli_parse(cli_common *cc, int argc, char **argv, const char *shortopts,
              const struct option *opts, cli_opt_fn own, void *ctx)
{
	struct option all[128];
	if (cc->settings) {
		if (!cli_settings_options(opts, all, sizeof(all) / sizeof(all[0])))
			return CLI_USAGE;
		opts = all;
		int rc = cli_settings_apply(cc, all, argv, argc, shortopts, own, ctx);
		if (rc != CLI_OK)
			return rc;
	}
	int code;
	opterr = 0;
	optind = 1;
	while ((code = getopt_long(argc, argv, shortopts, opts, NULL)) != -1) {
		if (code == '?' || code == ':')
			return cli_bad_option(cc, code, argv, opts);
		int r = cli_common_option(cc, code, optarg);
		if (r < 0)
			return CLI_USAGE;
		if (r == 0 && (own == NULL || own(code, optarg, ctx) != CLI_OK))
			return own ? CLI_USAGE : cli_bad_option(cc, code, argv, opts);
	}
	return CLI_OK;
}

int cli_start(cli_common *cc, int argc, char **argv, const struct option *opts,
              cli_opt_fn own, void *ctx, const char *usage, const char *exit_help,
              int max_operands, bool *done)
{
	*done = true;
	int rc = cli_parse(cc, argc, argv, ":", opts, own, ctx);
	if (rc != CLI_OK)
		return rc;
	if (cc->help) {
		printf("%s%s%s%s", usage, cli_common_help, cc->settings ? cli_settings_help : "",
		       exit_help);
		return CLI_OK;
	}
	if (max_operands >= 0 && argc - optind > max_operands) {
		cli_error(cc, "unexpected argument \"%s\"", argv[optind + max_operands]);
		return CLI_USAGE;
	}
	*done = false;
	return CLI_OK;
}
