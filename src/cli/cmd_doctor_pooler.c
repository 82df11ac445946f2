/*
 * cmd_doctor_pooler.c — `skiplock doctor pooler`: what sits between this
 * client and PostgreSQL, learnt from behaviour, and which session features
 * are unsafe through it.  The probe is src/lib/doctor/doctor_pooler.c.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "print/output.h"

static const char usage[] =
	"NAME\n"
	"    skiplock doctor pooler - find out what sits between you and Postgres\n"
	"\n"
	"SYNOPSIS\n"
	"    skiplock doctor pooler [--url URL] [--direct-url URL] [--json] [OPTIONS]\n"
	"\n"
	"DESCRIPTION\n"
	"    Runs a handful of short transactions through URL and watches what\n"
	"    happens, instead of trusting the host name: whether consecutive\n"
	"    transactions of one connection stay on one backend (pg_backend_pid())\n"
	"    while other connections come and go, whether a session SET survives\n"
	"    into the next transaction, whether a session advisory lock is still\n"
	"    held by this connection in the next transaction, whether LISTEN/NOTIFY\n"
	"    round-trips, whether a named prepared statement (SQL PREPARE) survives,\n"
	"    and whether a new connection is handed a backend that already existed.\n"
	"\n"
	"    Verdict: \"direct\", \"session pooler\" or \"transaction pooler\", the\n"
	"    features that are unsafe on this URL, and what skiplock does about each.\n"
	"    Everything the probe creates (an advisory lock, the setting\n"
	"    skiplock.probe, a LISTEN channel, a prepared statement, all named\n"
	"    skiplock_probe_*) is removed again on the backend that holds it.\n"
	"    It opens up to six short connections; each call is bounded by 5s.\n"
	"\n"
	"    Needs action (exit 1): the URL behaves as a transaction pooler but\n"
	"    skiplock treats it as something else (--pooler, or its detection from\n"
	"    the URL); the probe's state could not be removed; --direct-url does\n"
	"    not reach the same database, or cannot be reached.\n"
	"\n"
	"OPTIONS\n"
	"    --direct-url URL   also check that this URL reaches the same database\n"
	"                       (same name and oid, same server start, and the same\n"
	"                       system identifier where the role may read it)\n"
	"    --json             one JSON document: {\"verdict\", \"configured\",\n"
	"                       \"evidence\", \"features\": [{\"name\", \"works\", \"observed\",\n"
	"                       \"skiplock\"}], \"unsafe\": [...], \"undone\",\n"
	"                       \"undo_problem\", \"direct\", \"actions\": [...]}\n"
	"\n";

static const char exit_help[] =
	"\n"
	"EXIT STATUS\n"
	"    0 nothing needs action; 1 something needs action (see above); 2 bad\n"
	"    usage; 3 database unreachable.\n"
	"\n"
	"EXAMPLES\n"
	"    skiplock doctor pooler --url \"$DATABASE_URL\"\n"
	"    skiplock doctor pooler --url \"$POOLED_URL\" --direct-url \"$DIRECT_URL\" --json\n";

enum { O_JSON = OPT_COMMON_LAST + 1 };

static int own_option(int code, const char *arg, void *ctx)
{
	(void)arg;
	if (code != O_JSON)
		return CLI_USAGE;
	*(bool *)ctx = true;
	return CLI_OK;
}

static const char *verdict_name(skl_pooler p)
{
	return p == SKL_POOLER_TRANSACTION ? "transaction pooler"
	       : p == SKL_POOLER_SESSION   ? "session pooler" : "direct";
}

/* The findings that need action, one line each; returns how many. */
static int actions(const skl_pooler_report *r, const char *direct_url, char out[3][600])
{
	int n = 0;
	if (r->verdict == SKL_POOLER_TRANSACTION && r->configured != SKL_POOLER_TRANSACTION)
		snprintf(out[n++], 600, "this URL behaves as a transaction pooler but skiplock treats"
		         " it as %s: pass --pooler transaction", verdict_name(r->configured));
	if (!r->undone)
		snprintf(out[n++], 600, "%s", r->undo_problem);
	if (direct_url && (!r->direct_checked || !r->same_database))
		snprintf(out[n++], 600, "--direct-url: %s", r->direct_checked
		         ? "it reaches a different database" : r->direct_detail);
	return n;
}

static bool print_text(const skl_pooler_report *r, char act[3][600], int nact)
{
	printf("verdict: %s (skiplock treats this URL as %s)\n", verdict_name(r->verdict),
	       verdict_name(r->configured));
	printf("evidence: %s\n\n", r->evidence);
	cli_table t;
	cli_table_init(&t, 4, "llll");
	const char *const head[] = {"FEATURE", "SAFE", "OBSERVED", "WHAT SKIPLOCK DOES"};
	for (int i = 0; i < 4; i++)
		cli_table_add(&t, "%s", head[i]);
	for (int i = 0; i < SKL_PROBE_COUNT; i++) {
		cli_table_add(&t, "%s", r->probes[i].name);
		cli_table_add(&t, "%s", r->probes[i].works ? "yes" : "NO");
		cli_table_add(&t, "%s", r->probes[i].observed);
		cli_table_add(&t, "%s", r->probes[i].skiplock);
	}
	bool ok = cli_table_print(&t);
	cli_table_free(&t);
	printf("\nunsafe on this URL:");
	int unsafe = 0;
	for (int i = 0; i < SKL_PROBE_COUNT; i++)
		if (!r->probes[i].works)
			printf("%s %s", unsafe++ ? "," : "", r->probes[i].name);
	printf("%s\n", unsafe ? "" : " nothing");
	printf("probe state removed: %s\n", r->undone ? "yes" : "NO");
	if (r->direct_checked)
		printf("direct URL: %s: %s\n", r->same_database ? "same database" : "DIFFERENT database",
		       r->direct_detail);
	for (int i = 0; i < nact; i++)
		printf("needs action: %s\n", act[i]);
	return ok && fflush(stdout) == 0;
}

static bool print_json(const skl_pooler_report *r, const char *direct_url, char act[3][600],
                       int nact)
{
	json_t *features = json_array(), *unsafe = json_array(), *acts = json_array();
	for (int i = 0; i < SKL_PROBE_COUNT; i++) {
		const skl_probe_result *p = &r->probes[i];
		json_array_append_new(features, json_pack("{s:s, s:b, s:s, s:s}", "name", p->name,
		                                          "works", p->works, "observed", p->observed,
		                                          "skiplock", p->skiplock));
		if (!p->works)
			json_array_append_new(unsafe, json_string(p->name));
	}
	for (int i = 0; i < nact; i++)
		json_array_append_new(acts, json_string(act[i]));
	json_t *direct = direct_url ? json_pack("{s:b, s:b, s:s}", "checked", r->direct_checked,
	                                        "same_database", r->same_database, "detail",
	                                        r->direct_detail)
	                            : json_null();
	return cli_json_print(json_pack(
		"{s:s, s:s, s:s, s:o*, s:o*, s:b, s:o, s:o*, s:o*}", "verdict",
		verdict_name(r->verdict), "configured", verdict_name(r->configured), "evidence",
		r->evidence, "features", features, "unsafe", unsafe, "undone", r->undone,
		"undo_problem", r->undone ? json_null() : json_string(r->undo_problem), "direct", direct,
		"actions", acts));
}

int cmd_doctor_pooler(int argc, char **argv)
{
	static const struct option opts[] = {CLI_COMMON_LONGOPTS,
	                                     {"json", no_argument, NULL, O_JSON}, {0}};
	cli_common cc;
	cli_common_init(&cc, "doctor pooler");
	bool json = false;
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &json, usage, exit_help, 0, &done);
	if (done)
		return rc;
	skl_pooler_report *r = NULL;
	skl_error err;
	if (skl_diagnose_pooler(&cc.client, &r, &err) != SKL_OK)
		return cli_fail(&cc, &err);
	char act[3][600];
	int nact = actions(r, cc.client.direct_url, act);
	if (!(json ? print_json(r, cc.client.direct_url, act, nact) : print_text(r, act, nact))) {
		cli_error(&cc, "cannot write the output");
		nact = 1;
	}
	skl_pooler_report_free(r);
	return nact ? CLI_PROBLEM : CLI_OK;
}
