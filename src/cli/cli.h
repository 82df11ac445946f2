/*
 * cli.h — shared pieces of the `skiplock` command: exit codes, the common
 * connection options, logging.  Only the command may exit or print.
 */
#ifndef SKL_CLI_H
#define SKL_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "skiplock.h"

enum {
	CLI_OK = 0,          /* success */
	CLI_PROBLEM = 1,     /* ran and found a problem */
	CLI_USAGE = 2,       /* bad usage or bad input */
	CLI_UNREACHABLE = 3, /* database unreachable after retries */
	CLI_INCOMPLETE = 4   /* ran, but could not look at everything it checks */
};

/* Long-option codes of the common options (above any short option). */
enum {
	OPT_URL = 1000, OPT_DIRECT_URL, OPT_POOLER, OPT_CONNECT_TIMEOUT, OPT_TIMEOUT_CALL,
	OPT_RETRY_FOR, OPT_LOG_LEVEL, OPT_LOG_FORMAT, OPT_HELP, OPT_CONFIG, OPT_COMMON_LAST
};

#define CLI_COMMON_LONGOPTS                                                        \
	{"url", required_argument, NULL, OPT_URL},                                     \
	{"direct-url", required_argument, NULL, OPT_DIRECT_URL},                       \
	{"pooler", required_argument, NULL, OPT_POOLER},                               \
	{"connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT},             \
	{"call-timeout", required_argument, NULL, OPT_TIMEOUT_CALL},                   \
	{"retry-for", required_argument, NULL, OPT_RETRY_FOR},                         \
	{"log-level", required_argument, NULL, OPT_LOG_LEVEL},                         \
	{"log-format", required_argument, NULL, OPT_LOG_FORMAT},                       \
	{"help", no_argument, NULL, OPT_HELP}

/* The help text of the common options, for every command's --help. */
extern const char cli_common_help[];

typedef struct cli_common {
	const char *command;        /* "init", "enqueue"…: prefixes messages */
	skl_client_options client;
	bool help;
	bool settings;              /* options may also come from SKIPLOCK_<OPTION>
	                             * variables and a --config FILE (settings.c) */
} cli_common;

void cli_common_init(cli_common *cc, const char *command);

/* Handles one option returned by getopt_long.  Returns 1 when it was a
 * common option, 0 when not, and -1 after printing an error (exit 2). */
int cli_common_option(cli_common *cc, int code, const char *arg);

/* Reports an option getopt_long rejected ('?' or ':'), with the closest
 * option of opts as a suggestion (dispatch.c); returns CLI_USAGE. */
int cli_bad_option(const cli_common *cc, int code, char *const argv[],
                   const struct option *opts);
/* The long option of opts closest to name (without "--"), or NULL. */
const char *cli_option_suggest(const struct option *opts, const char *name);

/* Parses a duration option into milliseconds; prints and returns false on
 * bad input.  `name` is the option as written ("--ttl"). */
bool cli_duration(const cli_common *cc, const char *name, const char *arg, int64_t *ms);

/* Parses an integer option in [min, max]; prints and returns false on bad
 * input. */
bool cli_int(const cli_common *cc, const char *name, const char *arg, long long min,
             long long max, long long *out);

/* Parses the common options and the command's own: calls own(code, arg,
 * ctx) for every option that is not common.  Returns CLI_OK, or an exit
 * code after printing.  On CLI_OK, optind is the first operand. */
typedef int (*cli_opt_fn)(int code, const char *arg, void *ctx);
int cli_parse(cli_common *cc, int argc, char **argv, const char *shortopts,
              const struct option *opts, cli_opt_fn own, void *ctx);

/* cli_parse, then --help (usage, the common options, exit_help on stdout)
 * and, when max_operands >= 0, a check of the operand count.  *done is set
 * when the command should return the result at once. */
int cli_start(cli_common *cc, int argc, char **argv, const struct option *opts,
              cli_opt_fn own, void *ctx, const char *usage, const char *exit_help,
              int max_operands, bool *done);

/* settings.c: with cc->settings, cli_parse first applies the options of
 * --config FILE (a JSON object: "option": value, an array for a repeated
 * option, true for a flag), then SKIPLOCK_<OPTION> environment variables
 * (values of a repeated option on separate lines; 1/true/yes for a flag),
 * then the command line; each option comes from the first of command
 * line, environment, file that gives it.  Returns CLI_OK or an exit code
 * after printing.  `all` is opts with --config added. */
int cli_settings_apply(cli_common *cc, const struct option *all, char **argv, int argc,
                       const char *shortopts, cli_opt_fn own, void *ctx);
/* opts with --config appended, in out (capacity cap); false when full. */
bool cli_settings_options(const struct option *opts, struct option *out, size_t cap);
/* The help of --config and the environment, for --help. */
extern const char cli_settings_help[];

/* readfile.c: a small input file read whole (--config FILE, cron apply
 * FILE).  path ("-" with allow_stdin: standard input) is opened without
 * blocking and refused unless it is a regular file: a FIFO, a device or a
 * directory is never read or waited on.  At most CLI_FILE_MAX bytes, from
 * a file or standard input.  On CLI_OK, *data (NUL-terminated; free it)
 * holds *len bytes; else CLI_USAGE after one line "<what>PATH: why" (what:
 * a prefix such as "--config ", or ""). */
enum { CLI_FILE_MAX = 1024 * 1024 };
int cli_read_file(const cli_common *cc, const char *what, const char *path, bool allow_stdin,
                  char **data, size_t *len);

/* Opens a client from the common options; on failure prints one line and
 * returns the exit code (2 for a bad URL), else CLI_OK. */
int cli_open(const cli_common *cc, skl_client **out);

/* An owner name for a lease: PREFIX HOST:PID:RANDOM, unique per process. */
void cli_default_owner(char *buf, size_t cap, const char *prefix);
/* Who acts, for the action log (skiplock/control.h): USER@HOST. */
void cli_default_actor(char *buf, size_t cap);
/* The role the command records in the action log. */
#define CLI_ACTOR_ROLE "cli"

/* Maps a failed library call to an exit code after printing one line. */
int cli_fail(const cli_common *cc, const skl_error *err);

/* log.c */
typedef enum { LOG_TEXT = 0, LOG_JSON = 1 } cli_log_format;
void cli_log_setup(skl_log_level level, cli_log_format fmt);
bool cli_log_parse_level(const char *s, skl_log_level *out);
bool cli_log_parse_format(const char *s, cli_log_format *out);
void cli_log(skl_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An error for the user: "skiplock: CMD: message" on stderr, one line. */
void cli_error(const cli_common *cc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The library's log callback: forwards to cli_log. */
void cli_log_sink(void *ctx, skl_log_level level, const char *msg);
/* The worker's structured log callback: context as fields (JSON) or as a
 * "job=… kind=…:" prefix (text). */
void cli_log_record(void *ctx, skl_log_level level, const skl_log_context *lc, const char *msg);
/* Names the subcommand in JSON lines ("command"). */
void cli_log_command(const char *name);

/* One subcommand. */
typedef int (*cli_cmd_fn)(int argc, char **argv);

/* dispatch.c: the one table of subcommands every command with subcommands
 * (and `skiplock` itself) uses, with one wording for a missing or unknown
 * one and a did-you-mean suggestion. */
typedef struct cli_sub {
	const char *name;
	cli_cmd_fn fn;            /* called with argv[0] = the subcommand, or: */
	int (*run)(const struct cli_sub *s, int argc, char **argv);
	const void *spec;         /* the command's own description, for run */
	const char *summary;      /* a line of a generated help, or NULL */
} cli_sub;

typedef struct cli_subs {
	const char *command;      /* "cron"; NULL for skiplock's commands */
	const cli_sub *subs;
	size_t n;
	void (*help)(FILE *out);  /* for --help, -h and help */
} cli_subs;

/* Runs the subcommand argv[1] with argv + 1, or prints help; a missing or
 * unknown one gets one line on stderr and CLI_USAGE. */
int cli_dispatch(const cli_subs *t, int argc, char **argv);
/* The entry named name; NULL after printing the line (missing when name
 * is NULL or an option). */
const cli_sub *cli_sub_find(const cli_subs *t, const char *name);
int cmd_init(int argc, char **argv);
int cmd_enqueue(int argc, char **argv);
int cmd_cron(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_jobs(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_demo(int argc, char **argv);
int cmd_idem(int argc, char **argv);
int cmd_lease(int argc, char **argv);
int cmd_migrate(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_doctor_locks(int argc, char **argv);
int cmd_breakers(int argc, char **argv);
int cmd_limits(int argc, char **argv);
int cmd_retention(int argc, char **argv);
int cmd_doctor_pooler(int argc, char **argv);
int cmd_doctor_indexes(int argc, char **argv);
int cmd_doctor_maintenance(int argc, char **argv);
int cmd_explain(int argc, char **argv);
int cmd_dashboard(int argc, char **argv);
int cmd_queue(int argc, char **argv);
int cmd_workers(int argc, char **argv);

#endif
