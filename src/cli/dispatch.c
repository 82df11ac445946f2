/*
 * dispatch.c — subcommand tables and the errors of bad usage: a missing or
 * unknown subcommand, one line with "did you mean" when a name of the table
 * is close (suggest.h).  An unknown option is options.c's.
 */
#include <string.h>

#include "cli.h"
#include "suggest.h"

static bool is_help(const char *arg)
{
	return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0 || strcmp(arg, "help") == 0;
}

/* "a, b or c" into buf. */
static const char *names_list(const cli_subs *t, char *buf, size_t cap)
{
	size_t used = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < t->n && used < cap; i++) {
		const char *sep = i == 0 ? "" : i + 1 == t->n ? " or " : ", ";
		int w = snprintf(buf + used, cap - used, "%s%s", sep, t->subs[i].name);
		used += w > 0 ? (size_t)w : 0;
	}
	return buf;
}

const cli_sub *cli_sub_find(const cli_subs *t, const char *name)
{
	cli_suggest sg;
	cli_suggest_init(&sg, name);
	for (size_t i = 0; name && i < t->n; i++) {
		if (strcmp(name, t->subs[i].name) == 0)
			return &t->subs[i];
		cli_suggest_add(&sg, t->subs[i].name);
	}
	cli_common cc = {.command = NULL};
	if (t->command)
		cli_common_init(&cc, t->command);
	const char *what = t->command ? "subcommand" : "command";
	char names[512], see[64];
	snprintf(see, sizeof(see), "see skiplock%s%s --help", t->command ? " " : "",
	         t->command ? t->command : "");
	if (name == NULL || name[0] == '-')
		cli_error(&cc, "missing %s (expected %s)", what, names_list(t, names, sizeof(names)));
	else if (sg.best)
		cli_error(&cc, "unknown %s \"%s\" (did you mean \"%s\"? %s)", what, name, sg.best, see);
	else if (t->command)
		cli_error(&cc, "unknown %s \"%s\" (expected %s)", what, name,
		          names_list(t, names, sizeof(names)));
	else
		cli_error(&cc, "unknown %s \"%s\" (%s)", what, name, see);
	return NULL;
}

int cli_dispatch(const cli_subs *t, int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : NULL;
	if (name && is_help(name)) {
		t->help(stdout);
		return CLI_OK;
	}
	const cli_sub *s = cli_sub_find(t, name);
	if (s == NULL)
		return CLI_USAGE;
	return s->run ? s->run(s, argc - 1, argv + 1) : s->fn(argc - 1, argv + 1);
}
