/*
 * cmd_retention.c — `skiplock retention [show|set|reset|maintain]`: how
 * long finished jobs are kept (skiplock/retention.h, sql/0013_finished.sql).
 * Operands and options are checked before the database is contacted.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "print/output.h"
#include "skiplock/retention.h"

static const char usage[] =
	"Usage: skiplock retention [show] [--json]\n"
	"       skiplock retention set [--queue QUEUE] [--state STATE] --retain DURATION|forever\n"
	"       skiplock retention set --partition-width DURATION|auto\n"
	"       skiplock retention reset [--queue QUEUE]\n"
	"       skiplock retention maintain\n"
	"\n"
	"Finished jobs (completed, discarded, cancelled) leave skiplock.jobs when they\n"
	"finish and are kept in skiplock.finished_jobs until they expire: completed\n"
	"jobs for 24 hours, discarded and cancelled ones for 7 days, unless set\n"
	"otherwise. Expired jobs go a whole partition at a time; workers do that\n"
	"maintenance themselves, one at a time under the lease skiplock.maintenance.\n"
	"A setting applies to jobs that finish after it is made.\n"
	"\n"
	"  show       every setting, the partition width and the last maintenance\n"
	"  set        keep finished jobs of QUEUE (default: every queue without a\n"
	"             setting of its own) in STATE (default: all three) for DURATION\n"
	"             (0: not kept at all; forever: never dropped); or set the width\n"
	"             of the partitions created from now on (1s to 1d, or auto; a\n"
	"             finished job is stored its retention plus up to one width)\n"
	"  reset      QUEUE follows the default again; without --queue, the default\n"
	"             is reset to 24 hours and 7 days\n"
	"  maintain   do the maintenance now (partitions ahead, expired ones dropped,\n"
	"             finished jobs left in skiplock.jobs by an upgrade moved), unless\n"
	"             another holder of the lease is doing it\n"
	"\n"
	"Retention options:\n"
	"  --queue QUEUE          the queue a setting is for (default: '*', every queue\n"
	"                         without its own)\n"
	"  --state STATE          completed, discarded or cancelled (default: all)\n"
	"  --retain DURATION      how long to keep them: 0, 90s, 30m, 24h, 7d ... or\n"
	"                         forever\n"
	"  --partition-width DURATION|auto\n"
	"                         the width of new partitions, 1s to 1d; auto (the\n"
	"                         default): a quarter of the shortest retention, at\n"
	"                         least the longest / 100, 1m to 6h\n"
	"  --json                 show: print a JSON object instead of a table\n"
	"\n";

static const char exit_help[] =
	"\nExit status: 0 success, 1 the database refused, 2 bad usage or bad input,\n"
	"3 database unreachable within --retry-for.\n";

enum { O_QUEUE = OPT_COMMON_LAST + 1, O_STATE, O_RETAIN, O_WIDTH, O_JSON };

typedef struct ret_args {
	cli_common *cc;
	const char *queue, *state;
	int64_t keep_ms;   /* -2: not given; -1: forever */
	int64_t width_ms;  /* 0: not given; -1: auto */
	bool json;
} ret_args;

static int own_option(int code, const char *arg, void *ctx)
{
	ret_args *a = ctx;
	switch (code) {
	case O_QUEUE: a->queue = arg; return CLI_OK;
	case O_STATE: a->state = arg; return CLI_OK;
	case O_JSON: a->json = true; return CLI_OK;
	case O_RETAIN:
		if (strcmp(arg, "forever") == 0) {
			a->keep_ms = -1;
			return CLI_OK;
		}
		return strcmp(arg, "0") == 0 ? (a->keep_ms = 0, CLI_OK)
		       : cli_duration(a->cc, "--retain", arg, &a->keep_ms) ? CLI_OK : CLI_USAGE;
	case O_WIDTH:
		if (strcmp(arg, "auto") == 0) {
			a->width_ms = -1;
			return CLI_OK;
		}
		return cli_duration(a->cc, "--partition-width", arg, &a->width_ms) ? CLI_OK : CLI_USAGE;
	}
	return CLI_USAGE;
}

static const char *keep_text(int64_t ms, char *buf, size_t cap)
{
	if (ms < 0)
		return "forever";
	if (ms == 0)
		return "not kept";
	return cli_fmt_duration(ms, buf, cap);
}

static int show_json(const skl_retention *rows, size_t n, const skl_retention_info *i)
{
	json_t *s = json_array();
	for (size_t k = 0; s && k < n; k++)
		json_array_append_new(s, json_pack("{s:s, s:s, s:o}", "queue", rows[k].queue, "state",
		                                   rows[k].state, "keep_ms", rows[k].keep_ms < 0
		                                   ? json_null() : json_integer(rows[k].keep_ms)));
	json_t *o = json_pack("{s:o, s:I, s:b, s:i, s:s?, s:s?, s:s?, s:I}", "settings", s,
	                      "partition_width_ms", (json_int_t)i->partition_width_ms,
	                      "partition_width_auto", i->width_auto, "partitions",
	                      i->partitions, "last_run_at", i->last_run_at, "last_owner",
	                      i->last_owner, "last_summary", i->last_summary, "unmoved",
	                      (json_int_t)i->unmoved);
	return cli_json_print(o) ? CLI_OK : CLI_PROBLEM;
}

static int show_table(const skl_retention *rows, size_t n, const skl_retention_info *i)
{
	cli_table t;
	char b[32];
	cli_table_init(&t, 3, "lll");
	cli_table_add(&t, "QUEUE"), cli_table_add(&t, "STATE"), cli_table_add(&t, "KEPT");
	for (size_t k = 0; k < n; k++) {
		cli_table_add(&t, "%s", strcmp(rows[k].queue, "*") ? rows[k].queue : "* (default)");
		cli_table_add(&t, "%s", rows[k].state);
		cli_table_add(&t, "%s", keep_text(rows[k].keep_ms, b, sizeof(b)));
	}
	bool ok = cli_table_print(&t);
	cli_table_free(&t);
	printf("\npartitions: %d, new ones %s wide%s\n", i->partitions,
	       cli_fmt_duration(i->partition_width_ms, b, sizeof(b)),
	       i->width_auto ? " (auto: from the retention)" : " (set)");
	printf("last maintenance: %s%s%s%s%s\n", i->last_run_at ? i->last_run_at : "never",
	       i->last_owner ? " by " : "", i->last_owner ? i->last_owner : "",
	       i->last_summary ? ": " : "", i->last_summary ? i->last_summary : "");
	if (i->unmoved > 0)
		printf("finished jobs still in skiplock.jobs (an upgrade): %" PRId64 "\n", i->unmoved);
	return ok ? CLI_OK : CLI_PROBLEM;
}

static int show(ret_args *a, skl_client *c)
{
	skl_retention *rows;
	size_t n;
	skl_retention_info info;
	skl_error err;
	if (skl_retention_list(c, &rows, &n, &info, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	int rc = a->json ? show_json(rows, n, &info) : show_table(rows, n, &info);
	skl_retention_free(rows, n, &info);
	if (rc != CLI_OK)
		cli_error(a->cc, "cannot write the output");
	return rc;
}

static int maintain_now(ret_args *a, skl_client *c)
{
	char owner[256];
	cli_default_owner(owner, sizeof(owner), "skiplock retention ");
	skl_maintenance m;
	bool ran;
	skl_error err;
	if (skl_maintain(c, owner, 1000000, NULL, NULL, &m, &ran, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	if (!ran)
		printf("another holder of the lease skiplock.maintenance is doing it\n");
	else
		printf("%" PRId64 " partition(s) created, %" PRId64 " dropped, %" PRId64
		       " expired row(s) deleted, %" PRId64 " finished job(s) moved\n",
		       m.created, m.dropped, m.deleted, m.moved);
	return CLI_OK;
}

static int change(ret_args *a, skl_client *c, const char *verb)
{
	skl_error err;
	skl_rc rc;
	if (strcmp(verb, "reset") == 0)
		rc = skl_retention_reset(c, a->queue, &err);
	else if (a->width_ms)
		rc = skl_retention_set_width(c, a->width_ms < 0 ? 0 : a->width_ms, &err);
	else
		rc = skl_retention_set(c, a->queue, a->state, a->keep_ms, &err);
	if (rc != SKL_OK)
		return cli_fail(a->cc, &err);
	printf("retention %s\n", strcmp(verb, "reset") == 0 ? "reset" : "set");
	return CLI_OK;
}

/* The verb's options, checked before the database is contacted. */
static int check(ret_args *a, const char *verb)
{
	bool set = strcmp(verb, "set") == 0, reset = strcmp(verb, "reset") == 0;
	if (a->state && strcmp(a->state, "completed") && strcmp(a->state, "discarded") &&
	    strcmp(a->state, "cancelled")) {
		cli_error(a->cc, "--state must be completed, discarded or cancelled, got \"%s\"",
		          a->state);
		return CLI_USAGE;
	}
	if (a->queue && (strlen(a->queue) < 1 || strlen(a->queue) > 128)) {
		cli_error(a->cc, "--queue must be 1 to 128 bytes");
		return CLI_USAGE;
	}
	if (set && (a->keep_ms == -2) == (a->width_ms == 0)) {
		cli_error(a->cc, "set: give --retain DURATION|forever, or --partition-width DURATION|auto");
		return CLI_USAGE;
	}
	if (a->width_ms > 0 && (a->width_ms < 1000 || a->width_ms > 86400000)) {
		cli_error(a->cc, "--partition-width must be 1s to 1d, or auto");
		return CLI_USAGE;
	}
	if ((!set && (a->keep_ms != -2 || a->width_ms || a->state)) ||
	    (!set && !reset && a->queue) || (a->width_ms && (a->queue || a->state))) {
		cli_error(a->cc, "%s: an option does not apply (see --help)", verb);
		return CLI_USAGE;
	}
	return CLI_OK;
}

int cmd_retention(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_LONGOPTS, {"queue", required_argument, NULL, O_QUEUE},
		{"state", required_argument, NULL, O_STATE}, {"retain", required_argument, NULL, O_RETAIN},
		{"partition-width", required_argument, NULL, O_WIDTH},
		{"json", no_argument, NULL, O_JSON}, {0}};
	cli_common cc;
	cli_common_init(&cc, "retention");
	ret_args a = {.cc = &cc, .keep_ms = -2};
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, usage, exit_help, 1, &done);
	if (done)
		return rc;
	static const cli_sub verbs[] = {{"show", NULL, NULL, NULL, NULL},
	                                {"set", NULL, NULL, NULL, NULL},
	                                {"reset", NULL, NULL, NULL, NULL},
	                                {"maintain", NULL, NULL, NULL, NULL}};
	static const cli_subs table = {"retention", verbs, 4, NULL};
	const char *verb = optind < argc ? argv[optind] : "show";
	if (cli_sub_find(&table, verb) == NULL)
		return CLI_USAGE;
	if ((rc = check(&a, verb)) != CLI_OK)
		return rc;
	skl_client *c;
	if ((rc = cli_open(&cc, &c)) != CLI_OK)
		return rc;
	if (strcmp(verb, "show") == 0)
		rc = show(&a, c);
	else if (strcmp(verb, "maintain") == 0)
		rc = maintain_now(&a, c);
	else
		rc = change(&a, c, verb);
	skl_client_close(c);
	return rc;
}
