/*
 * cmd_doctor_indexes.c — `skiplock doctor indexes`: unused, invalid,
 * duplicate and redundant indexes, stale statistics, tables autovacuum is
 * losing on, and the health of skiplock's own jobs table.  The rules are
 * in src/lib/doctor/doctor_indexes.c and docs/diagnostics.md.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "print/output.h"

static const char usage[] =
	"NAME\n"
	"    skiplock doctor indexes - indexes and statistics that cost more than they give\n"
	"\n"
	"SYNOPSIS\n"
	"    skiplock doctor indexes [--schema S] [--min-size SIZE] [--json] [OPTIONS]\n"
	"\n"
	"DESCRIPTION\n"
	"    Reads the statistics views and catalogs (nothing is changed) and reports:\n"
	"      unused-index     never scanned since the statistics were reset (not\n"
	"                       unique, backing no constraint, at least --min-size)\n"
	"      invalid-index    left invalid by a failed CREATE INDEX CONCURRENTLY\n"
	"      duplicate-index  the same definition as another index on the table\n"
	"      redundant-index  its key columns lead another b-tree index's\n"
	"      stale-stats      1000 or more rows written since the last ANALYZE and\n"
	"                       over 10% of the table, or never analyzed at all\n"
	"      dead-tuples      1000 or more dead rows, over 20% of the table, and no\n"
	"                       autovacuum in the last hour\n"
	"      jobs-bloat       skiplock.jobs at least 8 MiB and over 3x what its live\n"
	"                       rows need\n"
	"      claim-plan       the claim no longer reads jobs_claim_idx (checked once\n"
	"                       skiplock.jobs holds 10,000 rows)\n"
	"    skiplock's own indexes are never proposed for dropping.\n"
	"    Each finding comes with one SQL line that fixes it; the fixes are printed\n"
	"    again together at the end, in order, ready to review and run.\n"
	"\n"
	"OPTIONS\n"
	"    --schema S         look only at schema S (default: every user schema,\n"
	"                       skiplock's included)\n"
	"    --min-size SIZE    smallest unused index reported (default 1MB; units B,\n"
	"                       kB, MB, GB; 0 reports every unused index)\n"
	"    --json             one JSON document: {\"findings\": [{\"check\", \"action\",\n"
	"                       \"object\", \"size_bytes\", \"detail\", \"fix\"}, ...]}\n"
	"\n";

static const char exit_help[] =
	"\n"
	"EXIT STATUS\n"
	"    0 nothing needs action; 1 a finding needs action (or the database\n"
	"    refused); 2 bad usage; 3 database unreachable within --retry-for.\n"
	"\n"
	"EXAMPLES\n"
	"    skiplock doctor indexes\n"
	"    skiplock doctor indexes --schema public --json\n";

enum { O_JSON = OPT_COMMON_LAST + 1, O_SCHEMA, O_MIN_SIZE };

typedef struct idx_args {
	cli_common *cc;
	skl_index_opts o;
	bool json;
} idx_args;

/* "1MB", "512kB", "0": bytes (1024-based units, as PostgreSQL's). */
static bool parse_size(const char *s, int64_t *out)
{
	static const struct { const char *unit; int64_t mul; } units[] = {
		{"", 1}, {"B", 1}, {"kB", 1024}, {"MB", 1024 * 1024}, {"GB", 1024 * 1024 * 1024}};
	char *end = NULL;
	if (!isdigit((unsigned char)s[0]))
		return false;
	long long v = strtoll(s, &end, 10);
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(end, units[i].unit) == 0 && v <= INT64_MAX / units[i].mul) {
			*out = v * units[i].mul;
			return true;
		}
	return false;
}

static int own_option(int code, const char *arg, void *ctx)
{
	idx_args *a = ctx;
	switch (code) {
	case O_JSON: a->json = true; return CLI_OK;
	case O_SCHEMA:
		if (arg[0] == '\0') {
			cli_error(a->cc, "--schema must not be empty");
			return CLI_USAGE;
		}
		a->o.schema = arg;
		return CLI_OK;
	case O_MIN_SIZE:
		if (!parse_size(arg, &a->o.min_unused_bytes)) {
			cli_error(a->cc, "--min-size: invalid size \"%s\" (expected e.g. 0, 512kB, 1MB)", arg);
			return CLI_USAGE;
		}
		if (a->o.min_unused_bytes == 0)
			a->o.min_unused_bytes = -1;   /* the library's "report all" */
		return CLI_OK;
	default: return CLI_USAGE;
	}
}

static const char *fmt_size(int64_t b, char *buf, size_t cap)
{
	if (b < 0)
		snprintf(buf, cap, "-");
	else if (b < 10 * 1024)
		snprintf(buf, cap, "%" PRId64 " B", b);
	else if (b < 10 * 1024 * 1024)
		snprintf(buf, cap, "%" PRId64 " kB", b / 1024);
	else
		snprintf(buf, cap, "%" PRId64 " MB", b / (1024 * 1024));
	return buf;
}

static bool print_table(const skl_finding *f, size_t n)
{
	if (n == 0) {
		printf("no findings: indexes and statistics look healthy\n");
		return fflush(stdout) == 0;
	}
	cli_table t;
	cli_table_init(&t, 5, "lllrl");
	cli_table_add(&t, "CHECK");
	cli_table_add(&t, "NEEDS");
	cli_table_add(&t, "OBJECT");
	cli_table_add(&t, "SIZE");
	cli_table_add(&t, "DETAIL");
	char size[32];
	for (size_t i = 0; i < n; i++) {
		cli_table_add(&t, "%s", f[i].check);
		cli_table_add(&t, "%s", f[i].action ? "action" : "note");
		cli_table_add(&t, "%s", f[i].object);
		cli_table_add(&t, "%s", fmt_size(f[i].size_bytes, size, sizeof(size)));
		cli_table_add(&t, "%s", f[i].detail);
	}
	bool ok = cli_table_print(&t);
	cli_table_free(&t);
	printf("\nFixes, in order:\n");
	for (size_t i = 0; i < n; i++)
		printf("  %s\n", f[i].fix);
	return ok && fflush(stdout) == 0;
}

static bool print_json(const skl_finding *f, size_t n)
{
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		json_array_append_new(
			arr, json_pack("{s:s, s:b, s:s, s:o, s:s, s:s}", "check", f[i].check, "action",
		                   f[i].action, "object", f[i].object, "size_bytes",
		                   f[i].size_bytes < 0 ? json_null() : json_integer(f[i].size_bytes),
		                   "detail", f[i].detail, "fix", f[i].fix));
	return cli_json_print(arr ? json_pack("{s:o}", "findings", arr) : NULL);
}

int cmd_doctor_indexes(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_LONGOPTS,
		{"json", no_argument, NULL, O_JSON},
		{"schema", required_argument, NULL, O_SCHEMA},
		{"min-size", required_argument, NULL, O_MIN_SIZE},
		{0}};
	cli_common cc;
	cli_common_init(&cc, "doctor indexes");
	idx_args a = {.cc = &cc};
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, usage, exit_help, 0, &done);
	if (done)
		return rc;
	skl_client *c;
	if ((rc = cli_open(&cc, &c)) != CLI_OK)
		return rc;
	skl_finding *f = NULL;
	size_t n = 0;
	skl_error err;
	if (skl_diagnose_indexes(c, &a.o, &f, &n, &err) != SKL_OK) {
		rc = cli_fail(&cc, &err);
	} else if (!(a.json ? print_json(f, n) : print_table(f, n))) {
		cli_error(&cc, "cannot write the output");
		rc = CLI_PROBLEM;
	} else {
		for (size_t i = 0; i < n; i++)
			if (f[i].action)
				rc = CLI_PROBLEM;
	}
	skl_findings_free(f);
	skl_client_close(c);
	return rc;
}
