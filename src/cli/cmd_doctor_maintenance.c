/*
 * cmd_doctor_maintenance.c — `skiplock doctor maintenance`: whether
 * skiplock's maintenance (partitions of finished jobs, retention) runs
 * while jobs do.  The read is skl_maintenance_check (src/lib/coord/maintain.c).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "print/maintenance_print.h"
#include "print/output.h"

static const char usage[] =
	"NAME\n"
	"    skiplock doctor maintenance - is skiplock's maintenance running?\n"
	"\n"
	"SYNOPSIS\n"
	"    skiplock doctor maintenance [--json] [OPTIONS]\n"
	"\n"
	"DESCRIPTION\n"
	"    Reads skiplock.maintenance (its last run, who did it and what),\n"
	"    the lease skiplock.maintenance and when a job last ran or finished.\n"
	"    Busy workers offer to do maintenance about every minute; an idle\n"
	"    fleet does not.  Needs action (exit 1): jobs ran or finished more\n"
	"    than three minutes after maintenance last ran, or it never ran; then\n"
	"    partitions of skiplock.finished_jobs stop being made and dropped.\n"
	"    Nothing is changed.  A database without skiplock's schema has\n"
	"    nothing to check (exit 0).\n"
	"\n"
	"OPTIONS\n"
	"    --json             one JSON document: {\"installed\", \"last_run_at\",\n"
	"                       \"last_run_age_ms\", \"last_owner\", \"last_summary\",\n"
	"                       \"lease_owner\", \"lease_left_ms\", \"busy_age_ms\",\n"
	"                       \"expected_ms\", \"overdue\", \"findings\": [{\"kind\",\n"
	"                       \"message\"}], \"needs_action\"}\n"
	"\n";

static const char exit_help[] =
	"\n"
	"EXIT STATUS\n"
	"    0 nothing needs action; 1 maintenance is overdue (or the database\n"
	"    refused); 2 bad usage; 3 database unreachable.\n"
	"\n"
	"EXAMPLES\n"
	"    skiplock doctor maintenance\n"
	"    skiplock doctor maintenance --json | jq .findings\n";

enum { O_JSON = OPT_COMMON_LAST + 1 };

static int own_option(int code, const char *arg, void *ctx)
{
	(void)arg;
	if (code != O_JSON)
		return CLI_USAGE;
	*(bool *)ctx = true;
	return CLI_OK;
}

int cmd_doctor_maintenance(int argc, char **argv)
{
	static const struct option opts[] = {CLI_COMMON_LONGOPTS,
	                                     {"json", no_argument, NULL, O_JSON}, {0}};
	cli_common cc;
	cli_common_init(&cc, "doctor maintenance");
	bool json = false, done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &json, usage, exit_help, 0, &done);
	if (done)
		return rc;
	skl_client *c;
	if ((rc = cli_open(&cc, &c)) != CLI_OK)
		return rc;
	skl_maintenance_status st;
	skl_error err;
	if (skl_maintenance_check(c, &st, &err) != SKL_OK) {
		rc = cli_fail(&cc, &err);
	} else if (!(json ? cli_json_print(maintenance_json(&st)) : maintenance_print_text(&st))) {
		cli_error(&cc, "cannot write the output");
		rc = CLI_PROBLEM;
	} else if (st.installed && st.overdue) {
		rc = CLI_PROBLEM;
	}
	skl_maintenance_status_free(&st);
	skl_client_close(c);
	return rc;
}
