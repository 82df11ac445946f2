/*
 * maintenance_print.c — how the maintenance's status and finding are
 * printed and sent as JSON (maintenance_print.h).
 */
#include <inttypes.h>
#include <stdio.h>

#include "print/maintenance_print.h"
#include "print/output.h"

const char *maintenance_finding(const skl_maintenance_status *st, char *buf, size_t cap)
{
	char every[32], age[32], busy[32], left[32];
	buf[0] = '\0';
	if (!st->installed || !st->overdue)
		return buf;
	cli_fmt_duration(st->expected_ms / 3, every, sizeof(every));
	cli_fmt_duration(st->busy_age_ms, busy, sizeof(busy));
	int n = st->last_run_age_ms < 0
	        ? snprintf(buf, cap, "maintenance has never run, and jobs ran")
	        : snprintf(buf, cap, "maintenance has not run for %s while jobs ran",
	                   cli_fmt_duration(st->last_run_age_ms, age, sizeof(age)));
	if (n < 0 || (size_t)n >= cap)
		return buf;
	if (st->busy_age_ms == 0)
		n += snprintf(buf + n, cap - (size_t)n, " (one runs now); busy workers offer it every %s",
		              every);
	else
		n += snprintf(buf + n, cap - (size_t)n, " (the last finished %s ago); busy workers offer"
		              " it every %s", busy, every);
	if (st->lease_owner && n > 0 && (size_t)n < cap)
		snprintf(buf + n, cap - (size_t)n, "; its lease skiplock.maintenance is held by %s"
		         " for %s more", st->lease_owner,
		         cli_fmt_duration(st->lease_left_ms, left, sizeof(left)));
	return buf;
}

static json_t *ms_or_null(int64_t ms)
{
	return ms < 0 ? json_null() : json_integer(ms);
}

json_t *maintenance_json(const skl_maintenance_status *st)
{
	char f[512];
	maintenance_finding(st, f, sizeof(f));
	json_t *findings = json_array();
	if (findings && f[0])
		json_array_append_new(findings, json_pack("{s:s, s:s}", "kind", "maintenance_overdue",
		                                          "message", f));
	return json_pack("{s:b, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:b, s:o, s:b}",
	                 "installed", st->installed, "last_run_at", cli_json_str(st->last_run_at),
	                 "last_run_age_ms", ms_or_null(st->last_run_age_ms),
	                 "last_owner", cli_json_str(st->last_owner),
	                 "last_summary", cli_json_str(st->last_summary),
	                 "lease_owner", cli_json_str(st->lease_owner),
	                 "lease_left_ms", ms_or_null(st->lease_left_ms),
	                 "busy_age_ms", ms_or_null(st->busy_age_ms),
	                 "expected_ms", (json_int_t)st->expected_ms, "overdue", st->overdue,
	                 "findings", findings ? findings : json_array(),
	                 "needs_action", st->installed && st->overdue);
}

bool maintenance_print_text(const skl_maintenance_status *st)
{
	char a[32], b[32], f[512];
	if (!st->installed) {
		printf("skiplock's schema is not installed in this database: no maintenance to check\n");
		return fflush(stdout) == 0;
	}
	if (st->last_run_age_ms < 0)
		printf("last run:  never\n");
	else
		printf("last run:  %s ago by %s: %s\n", cli_fmt_duration(st->last_run_age_ms, a, sizeof(a)),
		       st->last_owner ? st->last_owner : "?", st->last_summary ? st->last_summary : "-");
	if (st->lease_owner)
		printf("lease:     held by %s for %s more\n", st->lease_owner,
		       cli_fmt_duration(st->lease_left_ms, b, sizeof(b)));
	else
		printf("lease:     free\n");
	if (st->busy_age_ms < 0)
		printf("jobs:      none has finished yet\n");
	else if (st->busy_age_ms == 0)
		printf("jobs:      one is running now\n");
	else
		printf("jobs:      the last one finished %s ago\n",
		       cli_fmt_duration(st->busy_age_ms, a, sizeof(a)));
	maintenance_finding(st, f, sizeof(f));
	printf(f[0] ? "finding:   %s\n" : "no findings: maintenance runs while jobs do%s\n", f);
	return fflush(stdout) == 0;
}
