/*
 * cmd_status.c — `skiplock status`: per queue and kind, jobs by state, how
 * long the oldest due job has waited, running jobs and their leases, and a
 * recent failure rate.  Counters are defined by formula in
 * skiplock/inspect.h (skl_queue_status); the help text repeats them.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "print/breakers_print.h"
#include "cli.h"
#include "skiplock/retention.h"
#include "print/output.h"

static const char usage[] =
	"Usage: skiplock status [--json] [--window DUR]\n"
	"\n"
	"Show, for every queue and kind that has jobs:\n"
	"  DUE         available jobs whose run_at has come\n"
	"  SCHEDULED   available jobs due later (delayed, or a retry waiting out its\n"
	"              backoff)\n"
	"  RUNNING     running jobs; \"(N expired)\" counts those whose lease expired\n"
	"              and that wait to be rescued\n"
	"  COMPLETED, DISCARDED, CANCELLED   finished jobs not yet pruned\n"
	"  OLDEST DUE  how long the due job that has waited longest is past its run_at\n"
	"  NEXT LEASE  when the earliest lease of a running job expires\n"
	"  FAILURES    the failure rate over the window (default 5m):\n"
	"                E / (E + C), where E counts the attempt errors recorded in\n"
	"                the window (failed attempts, timeouts, expired leases) and\n"
	"                C the jobs completed in the window; \"-\" when E + C = 0\n"
	"All ages and expiries are by the database clock. With --json: one JSON\n"
	"document {\"window_ms\": …, \"queues\": [{\"queue\", \"kind\", \"due\",\n"
	"\"scheduled\", \"available\", \"running\", \"lease_expired\", \"completed\",\n"
	"\"discarded\", \"cancelled\", \"oldest_due_age_ms\", \"next_lease_expiry\",\n"
	"\"next_lease_expiry_in_ms\", \"recent_errors\", \"recent_completed\",\n"
	"\"failure_rate\"}, …], \"breakers\": […]}; values that do not apply are\n"
	"null. The breakers are those of skiplock breakers --json; in the table they\n"
	"follow the queues when any kind has one (BREAKER: closed, open, half_open).\n"
	"\n"
	"Status options:\n"
	"  --json                 print one JSON document instead of a table\n"
	"  --window DUR           the failure-rate window (default 5m)\n"
	"\n";

static const char exit_help[] =
	"\nExit status: 0 shown, 1 the database refused, 2 bad usage or bad input,\n"
	"3 database unreachable within --retry-for.\n";

enum { O_JSON = OPT_COMMON_LAST + 1, O_WINDOW };

typedef struct status_args {
	cli_common *cc;
	bool json;
	int64_t window_ms;
} status_args;

static int own_option(int code, const char *arg, void *ctx)
{
	status_args *a = ctx;
	switch (code) {
	case O_JSON: a->json = true; return CLI_OK;
	case O_WINDOW:
		if (!cli_duration(a->cc, "--window", arg, &a->window_ms))
			return CLI_USAGE;
		if (a->window_ms <= 0) {
			cli_error(a->cc, "--window must be positive");
			return CLI_USAGE;
		}
		return CLI_OK;
	default: return CLI_USAGE;
	}
}

/* ---- table ---- */

static void add_row(cli_table *t, const skl_queue_status *s)
{
	char age[32], lease[48];
	cli_table_add(t, "%s", s->queue);
	cli_table_add(t, "%s", s->kind);
	cli_table_add(t, "%" PRId64, s->due);
	cli_table_add(t, "%" PRId64, s->scheduled);
	if (s->lease_expired > 0)
		cli_table_add(t, "%" PRId64 " (%" PRId64 " expired)", s->running, s->lease_expired);
	else
		cli_table_add(t, "%" PRId64, s->running);
	cli_table_add(t, "%" PRId64, s->completed);
	cli_table_add(t, "%" PRId64, s->discarded);
	cli_table_add(t, "%" PRId64, s->cancelled);
	cli_table_add(t, "%s", s->oldest_due_age_ms >= 0
	                           ? cli_fmt_duration(s->oldest_due_age_ms, age, sizeof(age))
	                           : "-");
	cli_table_add(t, "%s", s->next_lease_expiry
	                           ? cli_fmt_expiry(s->next_lease_expiry_in_ms, lease, sizeof(lease))
	                           : "-");
	if (s->failure_rate < 0)
		cli_table_add(t, "-");
	else
		cli_table_add(t, "%.0f%% (%" PRId64 "/%" PRId64 ")", s->failure_rate * 100.0,
		              s->recent_errors, s->recent_errors + s->recent_completed);
}

static bool print_table(const skl_queue_status *rows, size_t n, int64_t window_ms)
{
	char w[32], fail[48];
	snprintf(fail, sizeof(fail), "FAILURES (%s)", cli_fmt_duration(window_ms, w, sizeof(w)));
	const char *const head[] = {"QUEUE", "KIND", "DUE", "SCHEDULED", "RUNNING", "COMPLETED",
	                            "DISCARDED", "CANCELLED", "OLDEST DUE", "NEXT LEASE", fail};
	cli_table t;
	cli_table_init(&t, 11, "llrrrrrrlll");
	for (size_t i = 0; i < 11; i++)
		cli_table_add(&t, "%s", head[i]);
	for (size_t i = 0; i < n; i++)
		add_row(&t, &rows[i]);
	bool ok = cli_table_print(&t);
	cli_table_free(&t);
	return ok;
}

/* ---- JSON ---- */

static json_t *row_json(const skl_queue_status *s)
{
	json_t *o = json_object();
	if (o == NULL)
		return NULL;
	json_object_set_new(o, "queue", cli_json_str(s->queue));
	json_object_set_new(o, "kind", cli_json_str(s->kind));
	json_object_set_new(o, "due", json_integer(s->due));
	json_object_set_new(o, "scheduled", json_integer(s->scheduled));
	json_object_set_new(o, "available", json_integer(s->due + s->scheduled));
	json_object_set_new(o, "running", json_integer(s->running));
	json_object_set_new(o, "lease_expired", json_integer(s->lease_expired));
	json_object_set_new(o, "completed", json_integer(s->completed));
	json_object_set_new(o, "discarded", json_integer(s->discarded));
	json_object_set_new(o, "cancelled", json_integer(s->cancelled));
	json_object_set_new(o, "oldest_due_age_ms", s->oldest_due_age_ms >= 0
	                                                ? json_integer(s->oldest_due_age_ms)
	                                                : json_null());
	json_object_set_new(o, "next_lease_expiry", cli_json_str(s->next_lease_expiry));
	json_object_set_new(o, "next_lease_expiry_in_ms",
	                    s->next_lease_expiry ? json_integer(s->next_lease_expiry_in_ms)
	                                         : json_null());
	json_object_set_new(o, "recent_errors", json_integer(s->recent_errors));
	json_object_set_new(o, "recent_completed", json_integer(s->recent_completed));
	json_object_set_new(o, "failure_rate",
	                    s->failure_rate >= 0 ? json_real(s->failure_rate) : json_null());
	return o;
}

static json_t *status_json(const skl_queue_status *rows, size_t n, int64_t window_ms,
                           const skl_breaker_info *brk, size_t nbrk)
{
	json_t *breakers = breakers_json(brk, nbrk);
	if (breakers == NULL)
		return NULL;
	json_t *queues = json_array();
	for (size_t i = 0; queues && i < n; i++)
		if (json_array_append_new(queues, row_json(&rows[i])) != 0) {
			json_decref(queues);
			queues = NULL;
		}
	if (queues == NULL) {
		json_decref(breakers);
		return NULL;
	}
	return json_pack("{s:I, s:o, s:o}", "window_ms", (json_int_t)window_ms, "queues", queues,
	                 "breakers", breakers);
}

/* "retention: QUEUE completed 24h, discarded 7d, …" a line per queue with
 * settings ('*' first), after the table. */
static bool print_retention(skl_client *c)
{
	skl_retention *r;
	size_t n;
	skl_error err;
	if (skl_retention_list(c, &r, &n, NULL, &err) != SKL_OK)
		return printf("\nretention: unknown (%s)\n", err.message) > 0;
	bool ok = printf("\nretention of finished jobs:") > 0;
	char b[32];
	for (size_t i = 0; ok && i < n; i++) {
		bool first = i == 0 || strcmp(r[i - 1].queue, r[i].queue) != 0;
		const char *keep = r[i].keep_ms < 0 ? "forever" : r[i].keep_ms == 0 ? "not kept"
		                   : cli_fmt_duration(r[i].keep_ms, b, sizeof(b));
		if (first)
			ok = printf("\n  %s: ", strcmp(r[i].queue, "*") ? r[i].queue : "every queue") > 0;
		ok = ok && printf("%s%s %s", first ? "" : ", ", r[i].state, keep) > 0;
	}
	skl_retention_free(r, n, NULL);
	return ok && printf("\n") > 0;
}

int cmd_status(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_LONGOPTS,
		{"json", no_argument, NULL, O_JSON},
		{"window", required_argument, NULL, O_WINDOW},
		{0}};
	cli_common cc;
	cli_common_init(&cc, "status");
	status_args a = {.cc = &cc, .window_ms = 300000};
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, usage, exit_help, 0, &done);
	if (done)
		return rc;
	skl_client *c;
	if ((rc = cli_open(&cc, &c)) != CLI_OK)
		return rc;
	skl_queue_status *rows;
	skl_breaker_info *brk = NULL;
	size_t n, nbrk = 0;
	skl_error err;
	if (skl_queue_status_get(c, a.window_ms, &rows, &n, &err) != SKL_OK) {
		rc = cli_fail(&cc, &err);
	} else if (skl_breakers_list(c, &brk, &nbrk, &err) != SKL_OK) {
		skl_queue_status_free(rows, n);
		rc = cli_fail(&cc, &err);
	} else {
		bool ok = a.json ? cli_json_print(status_json(rows, n, a.window_ms, brk, nbrk))
		                 : print_table(rows, n, a.window_ms);
		if (ok && !a.json && nbrk > 0)
			ok = printf("\n") > 0 && breakers_print_table(brk, nbrk);
		if (ok && !a.json)
			ok = print_retention(c);
		skl_queue_status_free(rows, n);
		skl_breakers_free(brk, nbrk);
		if (!ok) {
			cli_error(&cc, "cannot write the output");
			rc = CLI_PROBLEM;
		}
	}
	skl_client_close(c);
	return rc;
}
