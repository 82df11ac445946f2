/*
 * options.c — an option getopt_long rejected, as one line: the value it
 * needs, or the closest known option ("did you mean", suggest.h).  Used by
 * parse.c and settings.c; calls only the log and suggest.h.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "suggest.h"

/* "--name" or "--name=value" of an unknown long option: the name, in buf. */
static const char *long_name(const char *arg, char *buf, size_t cap)
{
	if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
		return NULL;
	snprintf(buf, cap, "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
	return buf;
}

const char *cli_option_suggest(const struct option *opts, const char *name)
{
	cli_suggest sg;
	cli_suggest_init(&sg, name);
	for (size_t i = 0; opts && opts[i].name; i++)
		cli_suggest_add(&sg, opts[i].name);
	return sg.best;
}

int cli_bad_option(const cli_common *cc, int code, char *const argv[],
                   const struct option *opts)
{
	const char *opt = argv[optind - 1];
	if (code == ':') {
		cli_error(cc, "option \"%s\" needs a value (see skiplock %s --help)", opt,
		          cc->command);
		return CLI_USAGE;
	}
	char name[64];
	const char *best = cli_option_suggest(opts, long_name(opt, name, sizeof(name)));
	if (best)
		cli_error(cc, "unknown option \"%s\" (did you mean \"--%s\"? see skiplock %s --help)",
		          opt, best, cc->command);
	else
		cli_error(cc, "unknown option \"%s\" (see skiplock %s --help)", opt, cc->command);
	return CLI_USAGE;
}
