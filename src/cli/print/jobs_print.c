/*
 * jobs_print.c — how `skiplock jobs` prints a job: a table row, a page of
 * fields with the error history, and JSON objects carrying every field.
 * Times arrive from the library as ISO 8601 UTC text and are kept so in
 * JSON; an absent value is "-" for people and null for machines.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "print/jobs_print.h"
#include "print/output.h"

/* ---- for people ---- */

static void add_row(cli_table *t, const skl_job_info *j)
{
	char run[32], lease[48], err[256];
	cli_table_add(t, "%" PRId64, j->id);
	cli_table_add(t, "%s", j->queue);
	cli_table_add(t, "%s", j->kind);
	cli_table_add(t, "%s", j->state);
	cli_table_add(t, "%d/%d", j->attempt, j->max_attempts);
	cli_table_add(t, "%d", j->priority);
	cli_table_add(t, "%s", cli_fmt_time(j->run_at, run, sizeof(run)));
	cli_table_add(t, "%s", j->lease_expires_at
	                           ? cli_fmt_expiry(j->lease_expires_in_ms, lease, sizeof(lease))
	                           : "-");
	cli_table_add(t, "%s", j->last_error && j->last_error[0]
	                           ? cli_fmt_oneline(j->last_error, 60, err, sizeof(err))
	                           : "-");
}

bool jobs_print_table(const skl_job_info *jobs, size_t n)
{
	cli_table t;
	cli_table_init(&t, 9, "rllllrlll");
	static const char *const head[] = {"ID", "QUEUE", "KIND", "STATE", "ATTEMPT", "PRIORITY",
	                                   "RUN AT (UTC)", "LEASE", "LAST ERROR"};
	for (size_t i = 0; i < 9; i++)
		cli_table_add(&t, "%s", head[i]);
	for (size_t i = 0; i < n; i++)
		add_row(&t, &jobs[i]);
	bool ok = cli_table_print(&t);
	cli_table_free(&t);
	return ok;
}

static void field(const char *name, const char *value)
{
	printf("%-14s %s\n", name, value && value[0] ? value : "-");
}

static void field_ms(const char *name, int64_t ms)
{
	char d[32];
	field(name, ms > 0 ? cli_fmt_duration(ms, d, sizeof(d)) : NULL);
}

/* Each line of text, indented; a final newline adds no empty line. */
static void print_indented(const char *text, const char *indent)
{
	const char *p = text;
	do {
		size_t len = strcspn(p, "\n");
		printf("%s%.*s\n", indent, (int)len, p);
		p += len + (p[len] == '\n');
	} while (*p);
}

static void print_errors(const skl_job_info *j)
{
	if (j->nerrors == 0) {
		field("errors:", "none");
		return;
	}
	printf("%-14s %zu, oldest first\n", "errors:", j->nerrors);
	for (size_t i = 0; i < j->nerrors; i++) {
		const skl_job_error *e = &j->errors[i];
		printf("  attempt %d at %s:\n", e->attempt, e->at[0] ? e->at : "(unknown time)");
		print_indented(e->error, "    ");
	}
}

bool jobs_print_one(const skl_job_info *j, const char *waits_for)
{
	char buf[160], d[48];
	printf("%-14s %" PRId64 "\n", "id:", j->id);
	field("queue:", j->queue);
	field("kind:", j->kind);
	field("state:", j->state);
	if (waits_for)
		field("waits for:", waits_for);
	printf("%-14s %d of %d\n", "attempt:", j->attempt, j->max_attempts);
	printf("%-14s %d\n", "priority:", j->priority);
	if (j->fencing < 0) /* the worker and reader roles may not read it */
		field("fencing:", NULL);
	else
		printf("%-14s %" PRId64 "\n", "fencing:", j->fencing);
	field("run at:", j->run_at);
	field("created at:", j->created_at);
	field("attempted at:", j->attempted_at);
	field("finished at:", j->finished_at);
	field("lease owner:", j->lease_owner);
	if (j->lease_expires_at)
		snprintf(buf, sizeof(buf), "%s (%s)", j->lease_expires_at,
		         cli_fmt_expiry(j->lease_expires_in_ms, d, sizeof(d)));
	field("lease expires:", j->lease_expires_at ? buf : NULL);
	field("unique key:", j->unique_key);
	field_ms("timeout:", j->timeout_ms);
	field_ms("backoff base:", j->backoff_base_ms);
	field_ms("backoff cap:", j->backoff_cap_ms);
	field("payload:", j->payload);
	field("result:", j->result);
	print_errors(j);
	return fflush(stdout) == 0 && !ferror(stdout);
}

/* ---- for machines ---- */

static void put(json_t *o, const char *key, json_t *v)
{
	json_object_set_new(o, key, v);   /* a NULL v (no memory) is skipped */
}

static json_t *ms_or_null(int64_t ms)
{
	return ms > 0 ? json_integer(ms) : json_null();
}

static json_t *job_object(const skl_job_info *j)
{
	json_t *o = json_object();
	if (o == NULL)
		return NULL;
	put(o, "id", json_integer(j->id));
	put(o, "queue", cli_json_str(j->queue));
	put(o, "kind", cli_json_str(j->kind));
	put(o, "state", cli_json_str(j->state));
	put(o, "attempt", json_integer(j->attempt));
	put(o, "max_attempts", json_integer(j->max_attempts));
	put(o, "priority", json_integer(j->priority));
	put(o, "fencing", j->fencing < 0 ? json_null() : json_integer(j->fencing));
	put(o, "run_at", cli_json_str(j->run_at));
	put(o, "created_at", cli_json_str(j->created_at));
	put(o, "attempted_at", cli_json_str(j->attempted_at));
	put(o, "finished_at", cli_json_str(j->finished_at));
	put(o, "lease_owner", cli_json_str(j->lease_owner));
	put(o, "lease_expires_at", cli_json_str(j->lease_expires_at));
	put(o, "lease_expires_in_ms",
	    j->lease_expires_at ? json_integer(j->lease_expires_in_ms) : json_null());
	put(o, "unique_key", cli_json_str(j->unique_key));
	put(o, "timeout_ms", ms_or_null(j->timeout_ms));
	put(o, "backoff_base_ms", ms_or_null(j->backoff_base_ms));
	put(o, "backoff_cap_ms", ms_or_null(j->backoff_cap_ms));
	put(o, "last_error", cli_json_str(j->last_error));
	return o;
}

json_t *jobs_json_list(const skl_job_info *jobs, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++)
		if (json_array_append_new(a, job_object(&jobs[i])) != 0) {
			json_decref(a);
			return NULL;
		}
	return a;
}

json_t *jobs_json_one(const skl_job_info *j)
{
	json_t *o = job_object(j), *errors = json_array();
	if (o == NULL || errors == NULL) {
		json_decref(o);
		json_decref(errors);
		return NULL;
	}
	put(o, "payload", cli_json_raw(j->payload));
	put(o, "result", cli_json_raw(j->result));
	for (size_t i = 0; i < j->nerrors; i++) {
		const skl_job_error *e = &j->errors[i];
		json_array_append_new(errors, json_pack("{s:i, s:o, s:o}", "attempt", e->attempt, "at",
		                                        cli_json_str(e->at[0] ? e->at : NULL),
		                                        "error", cli_json_str(e->error)));
	}
	put(o, "errors", errors);
	return o;
}

json_t *jobs_json_show(const skl_job_info *j, const char *waits_for)
{
	json_t *o = jobs_json_one(j);
	if (o)
		put(o, "waits_for", cli_json_str(waits_for));
	return o;
}
