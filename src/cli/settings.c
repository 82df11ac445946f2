/*
 * settings.c — options from SKIPLOCK_<OPTION> variables and a JSON file,
 * for commands that run as services (the worker), so a unit file needs no
 * argument string.
 *
 * Both are derived from the command's getopt table: option --poll-max is
 * variable SKIPLOCK_POLL_MAX and key "poll-max".  Precedence, per option:
 * the command line, else the environment, else the file; the source that
 * gives an option gives all its values, so a repeated option is never
 * merged across sources.  Values go through the same handlers as flags,
 * with the source named in any error.  Strings handed to the handlers live
 * until the process exits (the handlers keep pointers).
 */
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

const char cli_settings_help[] =
	"Settings (flags win over the environment, which wins over the file):\n"
	"  --config FILE          a JSON object of options: {\"concurrency\": 8,\n"
	"                         \"queue\": [\"a\", \"b\"], \"no-cron\": true}; a regular\n"
	"                         file (not a FIFO) of at most 1 MiB\n"
	"  SKIPLOCK_<OPTION>      each option from the environment: --poll-max is\n"
	"                         SKIPLOCK_POLL_MAX; a repeated option's values on\n"
	"                         separate lines; a flag is 1, true or yes\n";

#define MAX_CODES 4096

/* Which option codes one source gave. */
typedef struct seen {
	unsigned char code[MAX_CODES / 8];
} seen;

static void mark(seen *s, int code)
{
	if (code >= 0 && code < MAX_CODES)
		s->code[code / 8] |= (unsigned char)(1u << (code % 8));
}

static bool marked(const seen *s, int code)
{
	return code >= 0 && code < MAX_CODES && (s->code[code / 8] & (1u << (code % 8)));
}

/* Copies that live until exit: reachable from here, so no leak. */
static char **kept;
static size_t nkept;

static const char *keep(const char *s, size_t n)
{
	char **grown = realloc(kept, (nkept + 1) * sizeof(*kept));
	char *copy = malloc(n + 1);
	if (grown == NULL || copy == NULL) {
		free(copy);
		if (grown)
			kept = grown;
		return NULL;
	}
	kept = grown;
	memcpy(copy, s, n);
	copy[n] = '\0';
	kept[nkept++] = copy;
	return copy;
}

bool cli_settings_options(const struct option *opts, struct option *out, size_t cap)
{
	size_t n = 0;
	while (opts[n].name && n + 2 < cap) {
		out[n] = opts[n];
		n++;
	}
	if (opts[n].name)
		return false;
	out[n++] = (struct option){"config", required_argument, NULL, OPT_CONFIG};
	out[n] = (struct option){0};
	return true;
}

/* Options that never come from a file or the environment. */
static bool settable(const struct option *o)
{
	return o->val != OPT_HELP && o->val != OPT_CONFIG;
}

/* Applies one value of option o; where names the source for errors. */
static int apply(cli_common *cc, const struct option *o, const char *arg, const char *where,
                 cli_opt_fn own, void *ctx)
{
	const char *command = cc->command;
	char prefix[640]; /* the command, then where: up to 512 bytes */
	snprintf(prefix, sizeof(prefix), "%s: %s", command, where);
	cc->command = prefix;
	int r = cli_common_option(cc, o->val, arg);
	int rc = r < 0 ? CLI_USAGE : CLI_OK;
	if (r == 0)
		rc = own ? own(o->val, arg, ctx) : CLI_USAGE;
	cc->command = command;
	return rc == CLI_OK ? CLI_OK : CLI_USAGE;
}

/* A flag's value: 1 set, 0 not set, -1 neither. */
static int flag_value(const char *v)
{
	static const char *const yes[] = {"1", "true", "yes", "on"};
	static const char *const no[] = {"0", "false", "no", "off", ""};
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		if (strcmp(v, yes[i]) == 0)
			return 1;
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (strcmp(v, no[i]) == 0)
			return 0;
	return -1;
}

/* --poll-max: SKIPLOCK_POLL_MAX. */
static void env_name(const char *opt, char *buf, size_t cap)
{
	size_t n = (size_t)snprintf(buf, cap, "SKIPLOCK_");
	for (const char *p = opt; *p && n + 1 < cap; p++)
		buf[n++] = *p == '-' ? '_' : (char)toupper((unsigned char)*p);
	buf[n] = '\0';
}

/* The value of o's variable, or NULL.  In a command handler's or `lease
 * run`'s environment (SKIPLOCK_FENCING set), SKIPLOCK_QUEUE and
 * SKIPLOCK_LEASE are the job's queue and the lease's name, not options. */
static const char *env_value(const struct option *o, char *var, size_t cap)
{
	env_name(o->name, var, cap);
	const char *v = getenv(var);
	if (v == NULL || *v == '\0' || !settable(o))
		return NULL;
	if (getenv("SKIPLOCK_FENCING") &&
	    (strcmp(var, "SKIPLOCK_QUEUE") == 0 || strcmp(var, "SKIPLOCK_LEASE") == 0))
		return NULL;
	return v;
}

static int env_option(cli_common *cc, const struct option *o, cli_opt_fn own, void *ctx)
{
	char var[96];
	const char *v = env_value(o, var, sizeof(var));
	if (v == NULL)
		return CLI_OK;
	if (o->has_arg == no_argument) {
		int f = flag_value(v);
		if (f < 0)
			cli_error(cc, "%s: expected 1, true, yes, 0, false or no, got \"%s\"", var, v);
		return f < 0 ? CLI_USAGE : f ? apply(cc, o, NULL, var, own, ctx) : CLI_OK;
	}
	for (const char *line = v; *line;) {
		size_t n = strcspn(line, "\n");
		const char *arg = n ? keep(line, n) : NULL;
		if (n && (arg == NULL || apply(cc, o, arg, var, own, ctx) != CLI_OK))
			return CLI_USAGE;
		line += n + (line[n] == '\n');
	}
	return CLI_OK;
}

/* One JSON value of option o from the file. */
static int file_value(cli_common *cc, const struct option *o, const json_t *v, const char *where,
                      cli_opt_fn own, void *ctx)
{
	if (o->has_arg == no_argument) {
		if (!json_is_boolean(v)) {
			cli_error(cc, "%s: expected true or false", where);
			return CLI_USAGE;
		}
		return json_is_true(v) ? apply(cc, o, NULL, where, own, ctx) : CLI_OK;
	}
	char num[32];
	const char *arg = NULL;
	if (json_is_string(v))
		arg = keep(json_string_value(v), json_string_length(v));
	else if (json_is_integer(v) && snprintf(num, sizeof(num), "%" JSON_INTEGER_FORMAT,
	                                        json_integer_value(v)) > 0)
		arg = keep(num, strlen(num));
	else {
		cli_error(cc, "%s: expected a string or an integer%s", where,
		          json_is_array(v) ? " (arrays of arrays are not options)" : "");
		return CLI_USAGE;
	}
	return arg ? apply(cc, o, arg, where, own, ctx) : CLI_USAGE;
}

static const struct option *find_option(const struct option *all, const char *name)
{
	for (const struct option *o = all; o->name; o++)
		if (strcmp(o->name, name) == 0 && settable(o))
			return o;
	return NULL;
}

/* The options of the file that neither the command line nor the
 * environment gives. */
static int file_options(cli_common *cc, const char *path, const struct option *all,
                        const seen *given, cli_opt_fn own, void *ctx)
{
	json_error_t e;
	char *text;
	size_t len;
	if (cli_read_file(cc, "--config ", path, false, &text, &len) != CLI_OK)
		return CLI_USAGE;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
	free(text);
	if (root == NULL && e.line > 0)
		cli_error(cc, "--config %s: line %d, column %d: %s", path, e.line, e.column, e.text);
	else if (root == NULL)
		cli_error(cc, "--config %s: %s", path, e.text);
	else if (!json_is_object(root))
		cli_error(cc, "--config %s: expected a JSON object of options", path);
	if (root == NULL || !json_is_object(root)) {
		json_decref(root);
		return CLI_USAGE;
	}
	int rc = CLI_OK;
	const char *key;
	json_t *v;
	json_object_foreach(root, key, v) {
		const struct option *o = find_option(all, key);
		char where[512];
		snprintf(where, sizeof(where), "--config %s: \"%s\"", path, key);
		if (o == NULL) {
			const char *best = cli_option_suggest(all, key);
			cli_error(cc, "--config %s: unknown option \"%s\"%s%s%s", path, key,
			          best ? " (did you mean \"" : "", best ? best : "", best ? "\"?)" : "");
			rc = CLI_USAGE;
		}
		for (size_t i = 0; rc == CLI_OK && o && !marked(given, o->val) &&
		                   i < (json_is_array(v) ? json_array_size(v) : 1); i++)
			rc = file_value(cc, o, json_is_array(v) ? json_array_get(v, i) : v, where, own,
			                ctx);
		if (rc != CLI_OK)
			break;
	}
	json_decref(root);
	return rc;
}

/* First pass over the command line: which options it gives, and the file. */
static int scan_argv(cli_common *cc, int argc, char **argv, const char *shortopts,
                     const struct option *all, seen *given, const char **config)
{
	int code;
	opterr = 0;
	optind = 1;
	while ((code = getopt_long(argc, argv, shortopts, all, NULL)) != -1) {
		if (code == '?' || code == ':')
			return cli_bad_option(cc, code, argv, all);
		mark(given, code);
		if (code == OPT_CONFIG)
			*config = optarg;
	}
	optind = 1;
	return CLI_OK;
}

int cli_settings_apply(cli_common *cc, const struct option *all, char **argv, int argc,
                       const char *shortopts, cli_opt_fn own, void *ctx)
{
	seen flags = {{0}}, given;
	const char *config = NULL;
	int rc = scan_argv(cc, argc, argv, shortopts, all, &flags, &config);
	if (rc != CLI_OK || marked(&flags, OPT_HELP))
		return rc;
	given = flags;
	char var[96];
	for (const struct option *o = all; o->name; o++)
		if (env_value(o, var, sizeof(var)))
			mark(&given, o->val);
	if (config)
		rc = file_options(cc, config, all, &given, own, ctx);
	for (const struct option *o = all; rc == CLI_OK && o->name; o++)
		if (!marked(&flags, o->val))
			rc = env_option(cc, o, own, ctx);
	return rc;
}
