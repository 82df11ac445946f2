/*
 * cmd_jobs.c — `skiplock jobs list|show|retry|cancel|prune`: inspect jobs
 * and act on one.
 *
 * Reading goes through skiplock/inspect.h and acting through the operator
 * calls of skiplock/queue.h; this file parses and prints (jobs_print.c
 * formats a job).  Every operand and option is checked before the database
 * is contacted, so bad input writes nothing.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "print/jobs_print.h"
#include "print/output.h"

static const char jobs_usage[] =
	"Usage: skiplock jobs list [--queue Q] [--kind K] [--state S] [--limit N] [--json]\n"
	"       skiplock jobs show ID [--json]\n"
	"       skiplock jobs retry ID [--attempts N]\n"
	"       skiplock jobs cancel ID\n"
	"       skiplock jobs prune --older-than DUR [--batch N]\n"
	"\n"
	"Inspect jobs and act on one. \"skiplock jobs SUBCOMMAND --help\" shows the\n"
	"options of each, the connection options included.\n"
	"\n"
	"  list    jobs, newest first, filtered by queue, kind and state\n"
	"  show    one job: every column, payload, result and error history\n"
	"  retry   make a discarded, cancelled or available job available now\n"
	"  cancel  cancel an available or running job\n"
	"  prune   delete jobs that finished longer ago than a bound\n"
	"\n"
	"Job states: available (waiting: due now, or scheduled for later, which\n"
	"includes a retry waiting out its backoff), running (claimed under a lease),\n"
	"completed, discarded (failed for good) and cancelled.\n"
	"\n"
	"Exit status: 0 success, 1 no such job or its state does not allow the\n"
	"action, 2 bad usage or bad input (nothing written), 3 database unreachable\n"
	"within --retry-for.\n";

static const char list_usage[] =
	"Usage: skiplock jobs list [--queue Q] [--kind K] [--state S] [--limit N] [--json]\n"
	"\n"
	"List jobs, newest (highest id) first. Columns: ID; QUEUE; KIND; STATE;\n"
	"ATTEMPT, attempts started of max_attempts; PRIORITY; RUN AT, when the job\n"
	"is or was due (UTC); LEASE, when a running job's lease expires by the\n"
	"database clock; LAST ERROR, the newest error of its history, shortened.\n"
	"With --json: one JSON array of job objects, times in ISO 8601 UTC.\n"
	"\n"
	"List options:\n"
	"  --queue Q              only jobs of queue Q\n"
	"  --kind K               only jobs of kind K\n"
	"  --state S              only jobs in state S: available, running, completed,\n"
	"                         discarded or cancelled\n"
	"  --limit N              at most N jobs (default 50, at most 100000)\n"
	"  --json                 print JSON instead of a table\n"
	"\n";

static const char list_exit[] =
	"\nExit status: 0 listed (also when no job matched), 1 the database refused,\n"
	"2 bad usage or bad input, 3 database unreachable within --retry-for.\n";

static const char show_usage[] =
	"Usage: skiplock jobs show ID [--json]\n"
	"\n"
	"Show job ID: every column, the payload, the result and the error history\n"
	"(the newest 20 errors, each with its attempt number and time, UTC). The\n"
	"fencing token grows by one on every claim; the lease owner and expiry are\n"
	"set while the job runs.\n"
	"\n"
	"Show options:\n"
	"  --json                 print one JSON object instead of text\n"
	"\n";

static const char show_exit[] =
	"\nExit status: 0 shown, 1 no such job, 2 bad usage (a missing or malformed\n"
	"ID), 3 database unreachable within --retry-for.\n";

static const char retry_usage[] =
	"Usage: skiplock jobs retry ID [--attempts N]\n"
	"\n"
	"Make job ID available to run now. Allowed when it is discarded, cancelled\n"
	"or available (one waiting out a retry backoff runs at once). A discarded or\n"
	"cancelled job gets a fresh budget: as many attempts again as it had\n"
	"(max_attempts becomes attempt + max_attempts), or N with --attempts N; an\n"
	"available job keeps its budget unless --attempts is given. The attempt\n"
	"count, the error history and the fencing token stay. Refused while another\n"
	"unfinished job holds the job's unique key. An operator's action: it needs\n"
	"UPDATE on skiplock.jobs, which the worker role does not have.\n"
	"\n"
	"Retry options:\n"
	"  --attempts N           allow N more attempts (1 to 1000000; default: the\n"
	"                         job's max_attempts)\n"
	"\n";

static const char cancel_usage[] =
	"Usage: skiplock jobs cancel ID\n"
	"\n"
	"Cancel job ID. Allowed when it is available or running. A running job's\n"
	"claim ends at once: its worker finds the claim lost at the next heartbeat\n"
	"and stops the handler, and the handler's outcome is refused.\n"
	"\n";

static const char act_exit[] =
	"\nExit status: 0 done, 1 no such job or its state does not allow it, 2 bad\n"
	"usage (a missing or malformed ID), 3 database unreachable within --retry-for.\n";

static const char prune_usage[] =
	"Usage: skiplock jobs prune --older-than DUR [--batch N]\n"
	"\n"
	"Delete finished jobs (completed, discarded, cancelled) that finished more\n"
	"than DUR ago, N rows per short transaction, and print how many were\n"
	"deleted. Available and running jobs are never deleted.\n"
	"\n"
	"Prune options:\n"
	"  --older-than DUR       required: finished longer ago than this (0s: all)\n"
	"  --batch N              rows per transaction (default 1000, at most 100000)\n"
	"\n";

static const char prune_exit[] =
	"\nExit status: 0 pruned (also when nothing was old enough), 1 the database\n"
	"refused, 2 bad usage or bad input, 3 database unreachable within --retry-for.\n";

enum { O_QUEUE = OPT_COMMON_LAST + 1, O_KIND, O_STATE, O_LIMIT, O_JSON, O_OLDER, O_BATCH,
       O_ATTEMPTS };

static const struct option list_opts[] = {
	CLI_COMMON_LONGOPTS,
	{"queue", required_argument, NULL, O_QUEUE},
	{"kind", required_argument, NULL, O_KIND},
	{"state", required_argument, NULL, O_STATE},
	{"limit", required_argument, NULL, O_LIMIT},
	{"json", no_argument, NULL, O_JSON},
	{0}};
static const struct option show_opts[] = {
	CLI_COMMON_LONGOPTS, {"json", no_argument, NULL, O_JSON}, {0}};
static const struct option act_opts[] = {CLI_COMMON_LONGOPTS, {0}};
static const struct option retry_opts[] = {
	CLI_COMMON_LONGOPTS, {"attempts", required_argument, NULL, O_ATTEMPTS}, {0}};
static const struct option prune_opts[] = {
	CLI_COMMON_LONGOPTS,
	{"older-than", required_argument, NULL, O_OLDER},
	{"batch", required_argument, NULL, O_BATCH},
	{0}};

typedef struct jobs_args {
	cli_common *cc;
	skl_list_opts lo;
	bool json;
	bool has_older;
	int64_t older_than_ms;
	int batch;
	int attempts;             /* retry --attempts; 0: the job's max_attempts */
} jobs_args;

static int name_option(jobs_args *a, const char *name, const char *arg, const char **out)
{
	size_t n = strlen(arg);
	if (n == 0 || n > SKL_KIND_MAX) {
		cli_error(a->cc, "%s must be 1 to %d bytes (got %zu)", name, SKL_KIND_MAX, n);
		return CLI_USAGE;
	}
	*out = arg;
	return CLI_OK;
}

static int own_option(int code, const char *arg, void *ctx)
{
	jobs_args *a = ctx;
	long long v = 0;
	switch (code) {
	case O_QUEUE: return name_option(a, "--queue", arg, &a->lo.queue);
	case O_KIND: return name_option(a, "--kind", arg, &a->lo.kind);
	case O_STATE:
		if (!skl_job_state_valid(arg)) {
			cli_error(a->cc, "--state: unknown job state \"%s\" (expected available, running, "
			          "completed, discarded or cancelled)", arg);
			return CLI_USAGE;
		}
		a->lo.state = arg;
		return CLI_OK;
	case O_LIMIT:
		if (!cli_int(a->cc, "--limit", arg, 1, 100000, &v))
			return CLI_USAGE;
		a->lo.limit = (int)v;
		return CLI_OK;
	case O_JSON: a->json = true; return CLI_OK;
	case O_OLDER:
		a->has_older = true;
		return cli_duration(a->cc, "--older-than", arg, &a->older_than_ms) ? CLI_OK : CLI_USAGE;
	case O_BATCH:
		if (!cli_int(a->cc, "--batch", arg, 1, 100000, &v))
			return CLI_USAGE;
		a->batch = (int)v;
		return CLI_OK;
	case O_ATTEMPTS:
		if (!cli_int(a->cc, "--attempts", arg, 1, 1000000, &v))
			return CLI_USAGE;
		a->attempts = (int)v;
		return CLI_OK;
	default: return CLI_USAGE;
	}
}

static int output_failed(const jobs_args *a)
{
	cli_error(a->cc, "cannot write the output");
	return CLI_PROBLEM;
}

/* ---- the subcommands, each given a parsed job id (0 when none) ---- */

static int jobs_list(jobs_args *a, skl_client *c, int64_t id)
{
	(void)id;
	skl_job_info *jobs;
	size_t n;
	skl_error err;
	if (skl_jobs_list(c, &a->lo, &jobs, &n, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	bool ok = a->json ? cli_json_print(jobs_json_list(jobs, n)) : jobs_print_table(jobs, n);
	skl_job_info_free(jobs, n);
	return ok ? CLI_OK : output_failed(a);
}

static int jobs_show(jobs_args *a, skl_client *c, int64_t id)
{
	skl_job_info *job;
	skl_error err;
	if (skl_job_get(c, id, &job, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	bool ok = a->json ? cli_json_print(jobs_json_one(job)) : jobs_print_one(job);
	skl_job_info_free(job, 1);
	return ok ? CLI_OK : output_failed(a);
}

/* A refused action: name the state that refused it when that is why. */
static void explain_conflict(skl_client *c, int64_t id, bool cancel, skl_error *err)
{
	static const char *const allowed[2][3] = {{"available", "discarded", "cancelled"},
	                                          {"available", "running", NULL}};
	skl_job_info *job;
	skl_error ignored;
	if (skl_job_get(c, id, &job, &ignored) != SKL_OK)
		return;
	bool ok = false;
	for (int i = 0; i < 3; i++)
		ok |= allowed[cancel][i] && strcmp(job->state, allowed[cancel][i]) == 0;
	if (!ok)
		snprintf(err->message, sizeof(err->message),
		         "cannot %s job %" PRId64 ": it is %s (only %s jobs can be %s)",
		         cancel ? "cancel" : "retry", id, job->state,
		         cancel ? "available or running" : "discarded, cancelled or available",
		         cancel ? "cancelled" : "retried");
	skl_job_info_free(job, 1);
}

static int jobs_act(jobs_args *a, skl_client *c, int64_t id, bool cancel)
{
	skl_error err;
	skl_rc rc = cancel ? skl_job_cancel(c, id, &err)
	                   : skl_job_retry_attempts(c, id, a->attempts, &err);
	if (rc == SKL_CONFLICT)
		explain_conflict(c, id, cancel, &err);
	if (rc != SKL_OK)
		return cli_fail(a->cc, &err);
	printf("job %" PRId64 " %s\n", id, cancel ? "cancelled" : "is available");
	return CLI_OK;
}

static int jobs_retry(jobs_args *a, skl_client *c, int64_t id)
{
	return jobs_act(a, c, id, false);
}

static int jobs_cancel(jobs_args *a, skl_client *c, int64_t id)
{
	return jobs_act(a, c, id, true);
}

static int jobs_prune(jobs_args *a, skl_client *c, int64_t id)
{
	(void)id;
	int64_t deleted = 0;
	skl_error err;
	if (skl_jobs_prune(c, a->older_than_ms, a->batch, &deleted, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	printf("deleted %" PRId64 " finished job%s\n", deleted, deleted == 1 ? "" : "s");
	return CLI_OK;
}

/* ---- dispatch ---- */

typedef struct jobs_sub {
	const char *command;      /* prefixes messages */
	const char *usage;
	const char *exit_help;
	const struct option *opts;
	bool takes_id;
	bool needs_age;
	int (*run)(jobs_args *a, skl_client *c, int64_t id);
} jobs_sub;

static int run_sub(const cli_sub *sub, int argc, char **argv);
#define JOBS_SUB(name, usage, exit_help, opts, takes_id, needs_age, fn)                  \
	{name, NULL, run_sub,                                                                \
	 &(const jobs_sub){"jobs " name, usage, exit_help, opts, takes_id, needs_age, fn}, NULL}
static const cli_sub subs[] = {
	JOBS_SUB("list", list_usage, list_exit, list_opts, false, false, jobs_list),
	JOBS_SUB("show", show_usage, show_exit, show_opts, true, false, jobs_show),
	JOBS_SUB("retry", retry_usage, act_exit, retry_opts, true, false, jobs_retry),
	JOBS_SUB("cancel", cancel_usage, act_exit, act_opts, true, false, jobs_cancel),
	JOBS_SUB("prune", prune_usage, prune_exit, prune_opts, false, true, jobs_prune),
};

static bool parse_id(const cli_common *cc, const char *s, int64_t *id)
{
	char *end = NULL;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (!isdigit((unsigned char)s[0]) || errno || *end != '\0' || v <= 0) {
		cli_error(cc, "invalid job ID \"%s\" (expected a positive integer)", s);
		return false;
	}
	*id = v;
	return true;
}

static int operands(const jobs_sub *s, const jobs_args *a, int argc, char **argv, int64_t *id)
{
	int nargs = argc - optind, want = s->takes_id ? 1 : 0;
	if (nargs < want) {
		cli_error(a->cc, "missing job ID (see skiplock %s --help)", s->command);
		return CLI_USAGE;
	}
	if (nargs > want) {
		cli_error(a->cc, "unexpected argument \"%s\"", argv[optind + want]);
		return CLI_USAGE;
	}
	if (want && !parse_id(a->cc, argv[optind], id))
		return CLI_USAGE;
	if (s->needs_age && !a->has_older) {
		cli_error(a->cc, "--older-than DUR is required (see skiplock %s --help)", s->command);
		return CLI_USAGE;
	}
	return CLI_OK;
}

static int run_sub(const cli_sub *sub, int argc, char **argv)
{
	const jobs_sub *s = sub->spec;
	cli_common cc;
	cli_common_init(&cc, s->command);
	jobs_args a = {.cc = &cc, .batch = 1000};
	int rc = cli_parse(&cc, argc, argv, ":", s->opts, own_option, &a);
	if (rc != CLI_OK)
		return rc;
	if (cc.help) {
		printf("%s%s%s", s->usage, cli_common_help, s->exit_help);
		return CLI_OK;
	}
	int64_t id = 0;
	if ((rc = operands(s, &a, argc, argv, &id)) != CLI_OK)
		return rc;
	skl_client *c;
	if ((rc = cli_open(&cc, &c)) != CLI_OK)
		return rc;
	rc = s->run(&a, c, id);
	skl_client_close(c);
	return rc;
}

static void help(FILE *out)
{
	fputs(jobs_usage, out);
}

int cmd_jobs(int argc, char **argv)
{
	static const cli_subs table = {"jobs", subs, sizeof(subs) / sizeof(subs[0]), help};
	return cli_dispatch(&table, argc, argv);
}
