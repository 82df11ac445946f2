/*
 * cmd_jobs.c — `skiplock jobs list|show|retry|cancel|discard|prune|actions`:
 * inspect jobs and act on one, on several, or on every job a filter matches.
 *
 * Reading goes through skiplock/inspect.h, acting on one job with
 * --attempts through skiplock/queue.h, and every other action through the
 * logged calls of skiplock/control.h (the actor is USER@HOST, role "cli");
 * this file parses and prints (jobs_print.c formats a job).  Every operand
 * and option is checked before the database is contacted, so bad input
 * writes nothing.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "print/control_print.h"
#include "print/jobs_print.h"
#include "print/output.h"

static const char jobs_usage[] =
	"Usage: skiplock jobs list [FILTER...] [--limit N] [--json]\n"
	"       skiplock jobs show ID [--json]\n"
	"       skiplock jobs retry ID [--attempts N]\n"
	"       skiplock jobs retry|cancel|discard (ID... | FILTER... | --all) [--dry-run]\n"
	"                                          [--yes] [--up-to ID --expect N]\n"
	"                                          [--batch N]\n"
	"       skiplock jobs prune --older-than DUR [--batch N]\n"
	"       skiplock jobs actions [--limit N] [--json]\n"
	"\n"
	"Inspect jobs and act on one, on several, or on every job a filter matches.\n"
	"\"skiplock jobs SUBCOMMAND --help\" shows the options of each, the connection\n"
	"options included.\n"
	"\n"
	"  list     jobs, newest first, filtered by queue, kind, state, payload,\n"
	"           error text and a time window\n"
	"  show     one job: every column, payload, result and error history\n"
	"  retry    make discarded, cancelled or available jobs available now\n"
	"  cancel   cancel available or running jobs\n"
	"  discard  discard available or running jobs (failed for good)\n"
	"  prune    delete jobs that finished longer ago than a bound\n"
	"  actions  the action log: who did what, when, to how many jobs\n"
	"\n"
	"Job states: available (waiting: due now, or scheduled for later, which\n"
	"includes a retry waiting out its backoff), running (claimed under a lease),\n"
	"completed, discarded (failed for good) and cancelled.\n"
	"\n"
	"Exit status: 0 success, 1 no such job or its state does not allow the\n"
	"action, 2 bad usage or bad input (nothing written), 3 database unreachable\n"
	"within --retry-for.\n";

/* What retry, cancel and discard say of the forms with several IDs or a
 * filter, and their options. */
#define BULK_TEXT                                                                        \
	"\n"                                                                                 \
	"With several IDs, or with filters instead of IDs (at least one), it acts\n"       \
	"on every job that matches: the count first, then batches of N jobs per\n"        \
	"transaction, newest first, each job through the same fenced step as one\n"      \
	"ID. Safe with workers running: a job a worker finished or claimed since the\n"  \
	"count is skipped, never acted on twice; a job enqueued after the count is\n"    \
	"left alone, and no more jobs are changed than were counted. It prints \"M\n"    \
	"matched, C <done>, S skipped\" and is written to the action log (skiplock\n"    \
	"jobs actions) as USER@HOST with role cli; one ID is logged too. Without\n"      \
	"--yes it asks first when stdin is a terminal (and acts on what it counted\n"    \
	"for the question), and refuses (exit 2) when it is not. A filter that\n"        \
	"matches every job (none, a --time-field without a bound, --payload '{}' or\n"   \
	"'[]') needs --all.\n"
#define BULK_HELP                                                                        \
	FILTER_HELP                                                                          \
	"  --all                  act on every job the filters match even when they\n"     \
	"                         name no subset (or without filters: every job)\n"        \
	"  --dry-run              print how many jobs match and the highest id among\n"    \
	"                         them: \"M matched, up to job ID\"; change nothing\n"     \
	"  --up-to ID             with --expect: act only on jobs up to ID, a dry run's\n" \
	"                         \"up to job ID\"; newer jobs are left alone\n"           \
	"  --expect N             with --up-to: the dry run's count; refused (exit 1,\n"   \
	"                         nothing changed) when more than N match up to ID now\n" \
	"  --yes                  act without asking\n"                                     \
	"  --batch N              jobs per transaction (default 500, at most 10000)\n"

/* The filters of list and of the bulk actions (skl_list_opts). */
#define FILTER_HELP                                                                      \
	"  --queue Q              only jobs of queue Q\n"                                      \
	"  --kind K               only jobs of kind K\n"                                       \
	"  --state S              only jobs in state S: available, running, completed,\n"      \
	"                         discarded or cancelled\n"                                    \
	"  --payload JSON         only jobs whose payload contains JSON (jsonb @>)\n"          \
	"  --error TEXT           only jobs with TEXT in an entry of their error history,\n"  \
	"                         ignoring case\n"                                             \
	"  --time-field F         the time --since, --from and --to bound: created, run,\n"    \
	"                         attempted, finished or lease (default: finished with a\n"    \
	"                         --state of a finished job, else created)\n"                  \
	"  --since DUR            F within the last DUR (15m, 1h, 2d): --from DUR\n"           \
	"  --from T               F at or after T: an ISO 8601 time (UTC unless it names a\n" \
	"                         zone) or a duration before now\n"                            \
	"  --to T                 F before T (the same forms)\n"

static const char list_usage[] =
	"Usage: skiplock jobs list [FILTER...] [--limit N] [--json]\n"
	"\n"
	"List jobs, newest (highest id) first. Columns: ID; QUEUE; KIND; STATE;\n"
	"ATTEMPT, attempts started of max_attempts; PRIORITY; RUN AT, when the job\n"
	"is or was due (UTC); LEASE, when a running job's lease expires by the\n"
	"database clock; LAST ERROR, the newest error of its history, shortened.\n"
	"With --json: one JSON array of job objects, times in ISO 8601 UTC.\n"
	"\n"
	"List options:\n"
	FILTER_HELP
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
	"fencing token grows by one on every claim (shown as \"-\", null in JSON, to\n"
	"the worker and reader roles, which may not read it); the lease owner and\n"
	"expiry are set while the job runs. An available job has a \"waits for:\" line\n"
	"(\"waits_for\" in JSON, null otherwise): why it is not running now, such as\n"
	"\"dependencies: 1 of 2 parent(s) not finished\" (its run at then reads\n"
	"2199-12-31 until the last parent finishes), \"due at ...\", \"paused\",\n"
	"\"breaker not closed\", \"limit: ...\" or \"due: waiting for a worker\".\n"
	"\n"
	"Show options:\n"
	"  --json                 print one JSON object instead of text\n"
	"\n";

static const char show_exit[] =
	"\nExit status: 0 shown, 1 no such job, 2 bad usage (a missing or malformed\n"
	"ID), 3 database unreachable within --retry-for.\n";

static const char retry_usage[] =
	"Usage: skiplock jobs retry ID [--attempts N]\n"
	"       skiplock jobs retry (ID... | FILTER... | --all) [--dry-run] [--yes]\n"
	"                           [--up-to ID --expect N] [--batch N]\n"
	"\n"
	"Make jobs available to run now. Allowed when a job is discarded, cancelled\n"
	"or available (one waiting out a retry backoff runs at once). A discarded or\n"
	"cancelled job gets a fresh budget: as many attempts again as it had\n"
	"(max_attempts becomes attempt + max_attempts), or N with --attempts N (one\n"
	"ID only); an available job keeps its budget unless --attempts is given. The\n"
	"attempt count, the error history and the fencing token stay. A job whose\n"
	"unique key another unfinished job holds is refused. An operator's action:\n"
	"the worker role may not.\n"
	BULK_TEXT
	"\n"
	"Retry options:\n"
	"  --attempts N           one ID only: allow N more attempts (1 to 1000000;\n"
	"                         default: the job's max_attempts); not logged\n"
	BULK_HELP
	"\n";

static const char cancel_usage[] =
	"Usage: skiplock jobs cancel (ID... | FILTER... | --all) [--dry-run] [--yes]\n"
	"                            [--up-to ID --expect N] [--batch N]\n"
	"\n"
	"Cancel jobs. Allowed when a job is available or running. A running job's\n"
	"claim ends at once: its worker finds the claim lost at the next heartbeat\n"
	"and stops the handler, and the handler's outcome is refused.\n"
	BULK_TEXT
	"\n"
	"Cancel options:\n"
	BULK_HELP
	"\n";

static const char discard_usage[] =
	"Usage: skiplock jobs discard (ID... | FILTER... | --all) [--dry-run] [--yes]\n"
	"                             [--up-to ID --expect N] [--batch N]\n"
	"\n"
	"Discard jobs: failed for good, kept as discarded jobs are. Allowed when a\n"
	"job is available or running. A running job's fencing token is raised, so\n"
	"its worker's outcome is refused.\n"
	BULK_TEXT
	"\n"
	"Discard options:\n"
	BULK_HELP
	"\n";

static const char act_exit[] =
	"\nExit status: 0 done (also when some jobs were skipped), 1 one ID given and\n"
	"no such job or its state does not allow it, or more jobs match up to the\n"
	"count's mark than were counted (nothing changed), 2 bad usage or bad input\n"
	"(nothing written; also without --yes when stdin is not a terminal, and a\n"
	"filter that matches every job without --all), 3 database unreachable\n"
	"within --retry-for.\n";

static const char actions_usage[] =
	"Usage: skiplock jobs actions [--limit N] [--json]\n"
	"\n"
	"The action log, newest first: every operator action taken through\n"
	"skiplock (bulk retry, cancel and discard, queue and kind pauses, breaker\n"
	"and schedule actions, from the command or the dashboard). Columns: ID; AT\n"
	"(UTC); ACTOR and ROLE, as the acting program named them; DB USER, the\n"
	"database role the acting session logged in as, which it cannot choose (\"-\"\n"
	"for actions logged before schema step 0017); ACTION; MATCHED, jobs matched\n"
	"when it started; CHANGED, jobs (or things) it changed; TARGET, the filter,\n"
	"ids, queue, kind, breaker or schedule as JSON.\n"
	"\n"
	"Actions options:\n"
	"  --limit N              at most N rows (default 50, at most 10000)\n"
	"  --json                 print JSON instead of a table\n"
	"\n";

static const char actions_exit[] =
	"\nExit status: 0 listed, 1 the database refused (the worker role may not read\n"
	"the log), 2 bad usage, 3 database unreachable within --retry-for.\n";

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
       O_ATTEMPTS, O_PAYLOAD, O_ERROR, O_TIME_FIELD, O_SINCE, O_FROM, O_TO, O_DRY_RUN, O_YES,
       O_ALL, O_UP_TO, O_EXPECT };

#define FILTER_OPTS                                                                      \
	{"queue", required_argument, NULL, O_QUEUE},                                         \
	{"kind", required_argument, NULL, O_KIND},                                           \
	{"state", required_argument, NULL, O_STATE},                                         \
	{"payload", required_argument, NULL, O_PAYLOAD},                                     \
	{"error", required_argument, NULL, O_ERROR},                                         \
	{"time-field", required_argument, NULL, O_TIME_FIELD},                               \
	{"since", required_argument, NULL, O_SINCE},                                         \
	{"from", required_argument, NULL, O_FROM},                                           \
	{"to", required_argument, NULL, O_TO}
#define BULK_OPTS                                                                        \
	FILTER_OPTS, {"dry-run", no_argument, NULL, O_DRY_RUN}, {"yes", no_argument, NULL, O_YES}, \
	{"batch", required_argument, NULL, O_BATCH}, {"all", no_argument, NULL, O_ALL},           \
	{"up-to", required_argument, NULL, O_UP_TO}, {"expect", required_argument, NULL, O_EXPECT}

static const struct option list_opts[] = {
	CLI_COMMON_LONGOPTS, FILTER_OPTS,
	{"limit", required_argument, NULL, O_LIMIT},
	{"json", no_argument, NULL, O_JSON},
	{0}};
static const struct option show_opts[] = {
	CLI_COMMON_LONGOPTS, {"json", no_argument, NULL, O_JSON}, {0}};
static const struct option act_opts[] = {CLI_COMMON_LONGOPTS, BULK_OPTS, {0}};
static const struct option retry_opts[] = {
	CLI_COMMON_LONGOPTS, BULK_OPTS, {"attempts", required_argument, NULL, O_ATTEMPTS}, {0}};
static const struct option prune_opts[] = {
	CLI_COMMON_LONGOPTS,
	{"older-than", required_argument, NULL, O_OLDER},
	{"batch", required_argument, NULL, O_BATCH},
	{0}};
static const struct option actions_opts[] = {
	CLI_COMMON_LONGOPTS,
	{"limit", required_argument, NULL, O_LIMIT},
	{"json", no_argument, NULL, O_JSON},
	{0}};

typedef struct jobs_args {
	cli_common *cc;
	skl_list_opts lo;
	bool json;
	bool has_older;
	int64_t older_than_ms;
	int batch;
	bool batch_set;
	int attempts;             /* retry --attempts; 0: the job's max_attempts */
	bool dry_run, yes;
	bool all;                 /* --all: the filter may match every job */
	int64_t up_to, expect;    /* --up-to, --expect: a dry run's mark and count */
	bool filtered;            /* a filter option was given */
	int64_t *ids;             /* retry, cancel, discard: the IDs given */
	size_t nids;
	char actor[200];
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

/* The filters beyond queue, kind and state (checked by the library before
 * any statement). */
static int filter_option(jobs_args *a, int code, const char *arg)
{
	a->filtered = true;
	switch (code) {
	case O_PAYLOAD: a->lo.payload_contains = arg; return CLI_OK;
	case O_ERROR:
		if (arg[0] == '\0') {
			cli_error(a->cc, "--error must not be empty");
			return CLI_USAGE;
		}
		a->lo.error_contains = arg;
		return CLI_OK;
	case O_TIME_FIELD: a->lo.time_field = arg; return CLI_OK;
	case O_SINCE:
	case O_FROM:
		if (a->lo.from) {
			cli_error(a->cc, "give one of --since and --from");
			return CLI_USAGE;
		}
		a->lo.from = arg;
		return CLI_OK;
	case O_TO: a->lo.to = arg; return CLI_OK;
	default: return CLI_USAGE;
	}
}

static int own_option(int code, const char *arg, void *ctx)
{
	jobs_args *a = ctx;
	long long v = 0;
	if (code == O_QUEUE || code == O_KIND || code == O_STATE)
		a->filtered = true;
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
		a->batch_set = true;
		return CLI_OK;
	case O_ATTEMPTS:
		if (!cli_int(a->cc, "--attempts", arg, 1, 1000000, &v))
			return CLI_USAGE;
		a->attempts = (int)v;
		return CLI_OK;
	case O_DRY_RUN: a->dry_run = true; return CLI_OK;
	case O_YES: a->yes = true; return CLI_OK;
	case O_ALL: a->all = true; return CLI_OK;
	case O_UP_TO:
	case O_EXPECT:
		if (!cli_int(a->cc, code == O_UP_TO ? "--up-to" : "--expect", arg, 1, INT64_MAX, &v))
			return CLI_USAGE;
		*(code == O_UP_TO ? &a->up_to : &a->expect) = v;
		return CLI_OK;
	default: return filter_option(a, code, arg);
	}
}

/* A window without --time-field bounds the finished time of a finished
 * state, else the creation time. */
static void default_time_field(jobs_args *a)
{
	if (a->lo.time_field || (!a->lo.from && !a->lo.to))
		return;
	bool finished = a->lo.state && (strcmp(a->lo.state, "completed") == 0 ||
	                                strcmp(a->lo.state, "discarded") == 0 ||
	                                strcmp(a->lo.state, "cancelled") == 0);
	a->lo.time_field = finished ? "finished" : "created";
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

/* Why an available job is not running, in *waits (free it); NULL for
 * another state, or for a role that may not ask (the reader role: 42501). */
static int show_waits_for(jobs_args *a, skl_client *c, const skl_job_info *job, char **waits)
{
	skl_error err;
	*waits = NULL;
	if (strcmp(job->state, "available") != 0 ||
	    skl_job_waits_for(c, job->id, waits, &err) == SKL_OK)
		return CLI_OK;
	return strcmp(err.sqlstate, "42501") == 0 ? CLI_OK : cli_fail(a->cc, &err);
}

static int jobs_show(jobs_args *a, skl_client *c, int64_t id)
{
	skl_job_info *job;
	skl_error err;
	if (skl_job_get(c, id, &job, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	char *waits = NULL;
	int rc = show_waits_for(a, c, job, &waits);
	if (rc == CLI_OK && !(a->json ? cli_json_print(jobs_json_show(job, waits))
	                              : jobs_print_one(job, waits)))
		rc = output_failed(a);
	skl_free(waits);
	skl_job_info_free(job, 1);
	return rc;
}

/* ---- acting: one job, several, or every job a filter matches ---- */

static const char *const done_word[] = {"retried", "cancelled", "discarded"};

/* Why one job was not acted on: no such job, or its state. */
static int refused_one(jobs_args *a, skl_client *c, int64_t id, skl_bulk_action act)
{
	static const char *const allowed[] = {"discarded, cancelled or available",
	                                      "available or running", "available or running"};
	skl_job_info *job;
	skl_error err;
	if (skl_job_get(c, id, &job, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	if (strstr(allowed[act], job->state) != NULL)
		cli_error(a->cc, "cannot %s job %" PRId64 ": %s", skl_bulk_action_name(act), id,
		          act == SKL_BULK_RETRY && job->unique_key
		              ? "another unfinished job holds its unique key"
		              : "it changed meanwhile; try again");
	else
		cli_error(a->cc, "cannot %s job %" PRId64 ": it is %s (only %s jobs can be %s)",
		          skl_bulk_action_name(act), id, job->state, allowed[act], done_word[act]);
	skl_job_info_free(job, 1);
	return CLI_PROBLEM;
}

/* One ID: today's line, exit 1 when nothing was done; logged. */
static int act_one(jobs_args *a, skl_client *c, skl_bulk_action act)
{
	static const char *const line[] = {"is available", "cancelled", "discarded"};
	int64_t id = a->ids[0];
	skl_error err;
	if (act == SKL_BULK_RETRY && a->attempts > 0) { /* the budget: not a bulk step */
		skl_rc rc = skl_job_retry_attempts(c, id, a->attempts, &err);
		if (rc == SKL_CONFLICT)
			return refused_one(a, c, id, act);
		if (rc != SKL_OK)
			return cli_fail(a->cc, &err);
	} else {
		skl_bulk_opts o = {.action = act, .ids = &id, .nids = 1};
		skl_actor who = {a->actor, CLI_ACTOR_ROLE};
		skl_bulk_result r;
		if (skl_jobs_bulk(c, &o, &who, &r, &err) != SKL_OK)
			return cli_fail(a->cc, &err);
		if (r.matched == 0) {
			cli_error(a->cc, "no job %" PRId64, id);
			return CLI_PROBLEM;
		}
		if (r.changed == 0)
			return refused_one(a, c, id, act);
	}
	printf("job %" PRId64 " %s\n", id, line[act]);
	return CLI_OK;
}

/* Asks on the terminal; true for y or yes. */
static bool confirm(int64_t matched, skl_bulk_action act)
{
	fprintf(stderr, "%" PRId64 " job%s match. %s %s? [y/N] ", matched, matched == 1 ? "" : "s",
	        act == SKL_BULK_RETRY ? "Retry" : act == SKL_BULK_CANCEL ? "Cancel" : "Discard",
	        matched == 1 ? "it" : "them");
	char line[16] = "";
	if (fgets(line, sizeof(line), stdin) == NULL)
		return false;
	line[strcspn(line, "\n")] = '\0';
	return strcmp(line, "y") == 0 || strcmp(line, "yes") == 0;
}

/* "M matched, C <done>, S skipped", and the newer jobs left alone. */
static void print_done(const skl_bulk_result *r, skl_bulk_action act)
{
	printf("%" PRId64 " matched, %" PRId64 " %s, %" PRId64 " skipped", r->matched, r->changed,
	       done_word[act], r->skipped);
	if (r->newer > 0)
		printf("; %" PRId64 " newer job%s and %s left alone", r->newer,
		       r->newer == 1 ? " matches" : "s match", r->newer == 1 ? "was" : "were");
	printf("\n");
}

/* The count first (a dry run, or the question on a terminal), then the
 * action on what was counted: its mark and count, unless given. */
static int act_many(jobs_args *a, skl_client *c, skl_bulk_action act)
{
	skl_bulk_opts o = {.action = act, .filter = &a->lo, .ids = a->ids, .nids = a->nids,
	                   .batch = a->batch_set ? a->batch : 0, .dry_run = true, .all = a->all,
	                   .up_to = a->up_to, .expect = a->expect};
	skl_actor who = {a->actor, CLI_ACTOR_ROLE};
	skl_bulk_result r;
	skl_error err;
	if (a->dry_run || !a->yes) {
		if (skl_jobs_bulk(c, &o, &who, &r, &err) != SKL_OK)
			return cli_fail(a->cc, &err);
		if (a->dry_run || r.matched == 0) {
			if (r.matched > 0)
				printf("%" PRId64 " matched, up to job %" PRId64 "\n", r.matched, r.mark);
			else
				printf("0 matched\n");
			return CLI_OK;
		}
		if (!confirm(r.matched, act)) {
			fprintf(stderr, "nothing changed\n");
			return CLI_OK;
		}
		if (a->nids == 0 && o.up_to == 0) {
			o.up_to = r.mark;
			o.expect = r.matched;
		}
	}
	o.dry_run = false;
	skl_rc rc = skl_jobs_bulk(c, &o, &who, &r, &err);
	if (r.action_id > 0)
		print_done(&r, act);
	return rc == SKL_OK ? CLI_OK : cli_fail(a->cc, &err);
}

static int act(jobs_args *a, skl_client *c, skl_bulk_action act)
{
	return a->nids == 1 && !a->filtered && !a->dry_run ? act_one(a, c, act)
	                                                   : act_many(a, c, act);
}

static int jobs_retry(jobs_args *a, skl_client *c, int64_t id)
{
	(void)id;
	return act(a, c, SKL_BULK_RETRY);
}

static int jobs_cancel(jobs_args *a, skl_client *c, int64_t id)
{
	(void)id;
	return act(a, c, SKL_BULK_CANCEL);
}

static int jobs_discard(jobs_args *a, skl_client *c, int64_t id)
{
	(void)id;
	return act(a, c, SKL_BULK_DISCARD);
}

static bool actions_print_table(const skl_action_info *rows, size_t n)
{
	cli_table t;
	cli_table_init(&t, 9, "lllllrrrl");
	cli_table_add(&t, "ID");
	cli_table_add(&t, "AT");
	cli_table_add(&t, "ACTOR");
	cli_table_add(&t, "ROLE");
	cli_table_add(&t, "DB USER");
	cli_table_add(&t, "ACTION");
	cli_table_add(&t, "MATCHED");
	cli_table_add(&t, "CHANGED");
	cli_table_add(&t, "TARGET");
	for (size_t i = 0; i < n; i++) {
		char at[32], target[4 * 60 + 8];
		cli_table_add(&t, "%" PRId64, rows[i].id);
		cli_table_add(&t, "%s", cli_fmt_time(rows[i].at, at, sizeof(at)));
		cli_table_add(&t, "%s", rows[i].actor);
		cli_table_add(&t, "%s", rows[i].role);
		cli_table_add(&t, "%s", rows[i].db_user ? rows[i].db_user : "-");
		cli_table_add(&t, "%s", rows[i].action);
		cli_table_add(&t, "%" PRId64, rows[i].matched);
		cli_table_add(&t, "%" PRId64, rows[i].changed);
		cli_table_add(&t, "%s", cli_fmt_oneline(rows[i].target, 60, target, sizeof(target)));
	}
	bool ok = cli_table_print(&t);
	cli_table_free(&t);
	return ok;
}

static int jobs_actions(jobs_args *a, skl_client *c, int64_t id)
{
	(void)id;
	if (a->lo.limit > 10000) {
		cli_error(a->cc, "--limit: at most 10000 actions");
		return CLI_USAGE;
	}
	skl_action_info *rows;
	size_t n;
	skl_error err;
	if (skl_actions_list(c, a->lo.limit, 0, &rows, &n, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	bool ok = a->json ? cli_json_print(control_actions_json(rows, n)) : actions_print_table(rows, n);
	skl_actions_free(rows, n);
	return ok ? CLI_OK : output_failed(a);
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

enum { IDS_NONE, IDS_ONE, IDS_ANY };

typedef struct jobs_sub {
	const char *command;      /* prefixes messages */
	const char *usage;
	const char *exit_help;
	const struct option *opts;
	int ids;                  /* IDS_*: the job IDs it takes */
	bool needs_age;
	int (*run)(jobs_args *a, skl_client *c, int64_t id);
} jobs_sub;

static int run_sub(const cli_sub *sub, int argc, char **argv);
#define JOBS_SUB(name, usage, exit_help, opts, ids, needs_age, fn)                       \
	{name, NULL, run_sub,                                                                \
	 &(const jobs_sub){"jobs " name, usage, exit_help, opts, ids, needs_age, fn}, NULL}
static const cli_sub subs[] = {
	JOBS_SUB("list", list_usage, list_exit, list_opts, IDS_NONE, false, jobs_list),
	JOBS_SUB("show", show_usage, show_exit, show_opts, IDS_ONE, false, jobs_show),
	JOBS_SUB("retry", retry_usage, act_exit, retry_opts, IDS_ANY, false, jobs_retry),
	JOBS_SUB("cancel", cancel_usage, act_exit, act_opts, IDS_ANY, false, jobs_cancel),
	JOBS_SUB("discard", discard_usage, act_exit, act_opts, IDS_ANY, false, jobs_discard),
	JOBS_SUB("prune", prune_usage, prune_exit, prune_opts, IDS_NONE, true, jobs_prune),
	JOBS_SUB("actions", actions_usage, actions_exit, actions_opts, IDS_NONE, false,
	         jobs_actions),
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

/* --all, --up-to and --expect: with filters (or none, for --all) only. */
static int whole_options(const jobs_sub *s, jobs_args *a, int nargs)
{
	if (nargs == 0 && !a->filtered && !a->all) {
		cli_error(a->cc, "name the jobs: IDs, at least one filter, or --all (see skiplock %s "
		          "--help)", s->command);
		return CLI_USAGE;
	}
	if (nargs > 0 && a->all) {
		cli_error(a->cc, "--all goes with filters, not with job IDs");
		return CLI_USAGE;
	}
	if (nargs > 0 && (a->up_to || a->expect)) {
		cli_error(a->cc, "--up-to and --expect go with filters, not with job IDs");
		return CLI_USAGE;
	}
	if ((a->up_to > 0) != (a->expect > 0)) {
		cli_error(a->cc, "--up-to and --expect go together: a dry run's \"up to job ID\" and "
		          "its count");
		return CLI_USAGE;
	}
	return CLI_OK;
}

/* A filter that matches every job acts only with --all (a dry run counts). */
static int names_subset(jobs_args *a)
{
	const char *why = NULL;
	if (a->nids > 0 || a->all || a->dry_run || skl_list_opts_narrows(&a->lo, &why))
		return CLI_OK;
	cli_error(a->cc, "the filter matches every job (%s): pass --all to act on every job", why);
	return CLI_USAGE;
}

/* retry, cancel, discard: IDs or filters, and what goes with them. */
static int act_operands(const jobs_sub *s, jobs_args *a, int nargs, char **args)
{
	int rc = whole_options(s, a, nargs);
	if (rc != CLI_OK)
		return rc;
	if (nargs > 0 && a->filtered) {
		cli_error(a->cc, "give job IDs or filters, not both");
		return CLI_USAGE;
	}
	if (nargs < 0 || nargs > 100000) {
		cli_error(a->cc, "at most 100000 job IDs");
		return CLI_USAGE;
	}
	size_t n = (size_t)nargs;
	a->ids = n > 0 ? calloc(n, sizeof(int64_t)) : NULL;
	if (n > 0 && a->ids == NULL) {
		cli_error(a->cc, "out of memory");
		return CLI_PROBLEM;
	}
	for (size_t i = 0; i < n; i++)
		if (!parse_id(a->cc, args[i], &a->ids[i]))
			return CLI_USAGE;
	a->nids = n;
	bool many = a->nids != 1 || a->filtered || a->dry_run;
	if (a->attempts > 0 && many) {
		cli_error(a->cc, "--attempts goes with one job ID only");
		return CLI_USAGE;
	}
	if (a->batch_set && a->batch > 10000) {
		cli_error(a->cc, "--batch: at most 10000 jobs per transaction");
		return CLI_USAGE;
	}
	default_time_field(a);
	if ((rc = names_subset(a)) != CLI_OK)
		return rc;
	if (many && !a->dry_run && !a->yes && !isatty(STDIN_FILENO)) {
		cli_error(a->cc, "acting on several jobs asks first: pass --yes (or --dry-run to count)");
		return CLI_USAGE;
	}
	cli_default_actor(a->actor, sizeof(a->actor));
	return CLI_OK;
}

static int operands(const jobs_sub *s, jobs_args *a, int argc, char **argv, int64_t *id)
{
	int nargs = argc - optind, want = s->ids == IDS_ONE ? 1 : 0;
	if (s->ids == IDS_ANY)
		return act_operands(s, a, nargs, argv + optind);
	default_time_field(a);
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
	skl_client *c = NULL;
	if ((rc = operands(s, &a, argc, argv, &id)) == CLI_OK &&
	    (rc = cli_open(&cc, &c)) == CLI_OK) {
		rc = s->run(&a, c, id);
		skl_client_close(c);
	}
	free(a.ids);
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
