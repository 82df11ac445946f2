/*
 * cmd_migrate.c — `skiplock migrate up|status|verify --dir DIR`: options,
 * help, progress lines and the status table.  The run itself is the
 * library's (src/lib/migrate/migrate_run.c).
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "print/output.h"

static const char migrate_usage[] =
	"NAME\n"
	"    skiplock migrate - apply a directory of SQL migrations, pooler-safe\n"
	"\n"
	"SYNOPSIS\n"
	"    skiplock migrate up --dir DIR [--table NAME] [--lock-timeout DUR]\n"
	"                        [--max-wait DUR] [--lease-ttl DUR]\n"
	"                        [--terminate-idle-holders [--idle-for DUR]]\n"
	"                        [--allow-pooler] [OPTIONS]\n"
	"    skiplock migrate status --dir DIR [--table NAME] [--json] [OPTIONS]\n"
	"    skiplock migrate verify --dir DIR [--table NAME] [--json] [OPTIONS]\n"
	"\n"
	"DESCRIPTION\n"
	"    DIR holds files NNNN_name.sql (a version of 1 to 18 digits, '_', a name\n"
	"    of letters, digits, '_' and '-'), each a regular file (a symlink is\n"
	"    followed) of at most 16 MiB. \"up\" applies the files not yet\n"
	"    recorded, in version order, and records each in the table (default\n"
	"    skiplock.migrations, created when missing) with its name, the SHA-256\n"
	"    of its text with line endings normalised to LF (a CRLF checkout is not\n"
	"    a change), applied_at, duration_ms and applied_by. Progress is printed\n"
	"    per file.\n"
	"\n"
	"    Each file runs in one transaction with SET LOCAL lock_timeout, so DDL\n"
	"    never queues for long behind application traffic; a failing file rolls\n"
	"    back completely and the error names the file, the line and the\n"
	"    server's message. A file whose first line is\n"
	"        -- skiplock:no-transaction\n"
	"    runs statement by statement outside a transaction (CREATE INDEX\n"
	"    CONCURRENTLY); should such a build fail, the invalid index it left is\n"
	"    named. Write such files so that running them again is harmless.\n"
	"\n"
	"    When a lock wait times out or deadlocks, the transaction is rolled\n"
	"    back, the session that blocked it is logged (pid, state and its age,\n"
	"    transaction age, application_name, client address, query: sampled\n"
	"    while the wait lasted), and the file is retried with jittered backoff\n"
	"    until --max-wait; then migrate exits 1 naming the blocker.\n"
	"\n"
	"    One migrator runs at a time. The run holds the skiplock lease\n"
	"    \"skiplock.migrate:TABLE\", renewed from a second connection; every\n"
	"    write to the table checks the lease's fencing token in the same\n"
	"    transaction. Another migrator polls for the lease with jitter, outside\n"
	"    any transaction, for up to --max-wait. No session advisory lock is\n"
	"    taken, so a lock leaked by another tool cannot block migrate, and a\n"
	"    killed migrator's lease simply expires after --lease-ttl.\n"
	"\n"
	"    \"up\" runs on the direct endpoint: --direct-url or $DIRECT_DATABASE_URL\n"
	"    when given; a Neon \"-pooler\" host is rewritten to its direct host; any\n"
	"    other URL detected as pooled (or --pooler session|transaction) is\n"
	"    refused unless --allow-pooler.\n"
	"\n"
	"    \"status\" lists every migration: applied, pending, changed (the file\n"
	"    differs from what was applied) or missing (applied, no file).\n"
	"    \"verify\" exits 1 when an applied file changed or is missing.\n"
	"\n"
	"OPTIONS\n"
	"    --dir DIR               the migrations directory (required)\n"
	"    --table NAME            the record table, NAME or SCHEMA.NAME in lower\n"
	"                            case (default skiplock.migrations)\n"
	"    --lock-timeout DUR      SET LOCAL lock_timeout of each file (default 5s)\n"
	"    --max-wait DUR          how long to wait for another migrator, and for\n"
	"                            each blocked file (default 60s)\n"
	"    --lease-ttl DUR         the lease's length, renewed every third of it\n"
	"                            (default 30s, at least 1s)\n"
	"    --terminate-idle-holders\n"
	"                            terminate a blocking session that is idle or idle\n"
	"                            in transaction for longer than --idle-for (checked\n"
	"                            again in the terminating statement); an active\n"
	"                            session is never terminated\n"
	"    --idle-for DUR          see above (default 60s)\n"
	"    --allow-pooler          run through a transaction pooler when no direct\n"
	"                            endpoint is known (blockers may not be named)\n"
	"    --json                  status and verify: one JSON document instead of\n"
	"                            text: {\"table\", \"drift\" (verify's verdict),\n"
	"                            \"migrations\": [{\"version\", \"name\", \"state\",\n"
	"                            \"applied_at\", \"duration_ms\", \"applied_by\"}]}\n"
	"    --call-timeout defaults to 1h here: one statement of a file may run that\n"
	"    long.\n"
	"\n";

static const char migrate_tail[] =
	"\n"
	"EXIT STATUS\n"
	"    0 done (up: nothing left pending; verify: no drift); 1 a file failed,\n"
	"    stayed blocked, or another migrator kept the lease past --max-wait, or\n"
	"    verify found drift; 2 bad usage or bad files (missing directory, a\n"
	"    file name breaking the pattern, two files with one version, a file\n"
	"    that is not a regular file or is over 16 MiB: nothing is applied), or\n"
	"    a pooled URL refused; 3 database unreachable.\n"
	"\n"
	"EXAMPLES\n"
	"    skiplock migrate up --dir db/migrations --lock-timeout 2s\n"
	"    skiplock migrate up --dir db/migrations --terminate-idle-holders \\\n"
	"        --idle-for 5m\n"
	"    skiplock migrate verify --dir db/migrations\n";

enum {
	O_DIR = OPT_COMMON_LAST + 1, O_TABLE, O_LOCK_TIMEOUT, O_MAX_WAIT, O_LEASE_TTL,
	O_TERMINATE, O_IDLE_FOR, O_ALLOW_POOLER, O_JSON
};

typedef struct mig_args {
	cli_common *cc;
	const char *dir;
	skl_migrate_options o;
	bool allow_pooler;
	bool json;
	bool bad;
} mig_args;

/* A duration option in [min, max] ms. */
static bool dur(mig_args *a, const char *name, const char *arg, int64_t min, int64_t *out)
{
	if (!cli_duration(a->cc, name, arg, out))
		return false;
	if (*out < min || *out > INT_MAX) {
		cli_error(a->cc, "%s must be from %" PRId64 "ms to 24 days, got \"%s\"", name, min, arg);
		return false;
	}
	return true;
}

static int own_option(int code, const char *arg, void *ctx)
{
	mig_args *a = ctx;
	bool ok = true;
	switch (code) {
	case O_DIR: a->dir = arg; break;
	case O_TABLE: a->o.table = arg; break;
	case O_LOCK_TIMEOUT: ok = dur(a, "--lock-timeout", arg, 1, &a->o.lock_timeout_ms); break;
	case O_MAX_WAIT: ok = dur(a, "--max-wait", arg, 0, &a->o.max_wait_ms); break;
	case O_LEASE_TTL: ok = dur(a, "--lease-ttl", arg, 1000, &a->o.lease_ttl_ms); break;
	case O_TERMINATE: a->o.terminate_idle_holders = true; break;
	case O_IDLE_FOR: ok = dur(a, "--idle-for", arg, 0, &a->o.idle_for_ms); break;
	case O_ALLOW_POOLER: a->allow_pooler = true; break;
	case O_JSON: a->json = true; break;
	default: return CLI_USAGE;
	}
	return ok ? CLI_OK : CLI_USAGE;
}

/* One line: message (SQLSTATE): detail; hint. */
static void print_error(const cli_common *cc, const skl_error *err)
{
	cli_error(cc, "%s%s%s%s%s%s%s%s", err->message, err->sqlstate[0] ? " (SQLSTATE " : "",
	          err->sqlstate, err->sqlstate[0] ? ")" : "", err->detail[0] ? ": " : "",
	          err->detail, err->hint[0] ? "; " : "", err->hint);
}

static int exit_for(const cli_common *cc, const skl_error *err)
{
	print_error(cc, err);
	switch (err->rc) {
	case SKL_INVALID: return CLI_USAGE;
	case SKL_UNREACHABLE: return CLI_UNREACHABLE;
	case SKL_RETRY:
	case SKL_INDETERMINATE:
		return err->sqlstate[0] ? CLI_PROBLEM : CLI_UNREACHABLE;
	default: return CLI_PROBLEM;
	}
}

/* ---- up ---- */

static void describe(const skl_migrate_blocker *b, char *buf, size_t cap)
{
	char st[32], tx[32], q[200];
	cli_fmt_duration(b->state_age_ms, st, sizeof(st));
	if (b->xact_age_ms < 0)
		snprintf(tx, sizeof(tx), "none");
	else
		cli_fmt_duration(b->xact_age_ms, tx, sizeof(tx));
	snprintf(buf, cap, "pid %d (application_name \"%s\", %s for %s, transaction open %s, "
	         "client %s, query: %s)", b->pid, b->application_name, b->state, st, tx,
	         b->client_addr, cli_fmt_oneline(b->query, 40, q, sizeof(q)));
}

static void on_progress(void *ctx, skl_migrate_event ev, const skl_migration *m,
                        const skl_migrate_blocker *b, int64_t ms)
{
	(void)ctx;
	char d[32], who[512];
	if (b && b->pid)
		describe(b, who, sizeof(who));
	else
		snprintf(who, sizeof(who), "a session that was not caught in the act");
	switch (ev) {
	case SKL_MIGRATE_APPLYING: break;
	case SKL_MIGRATE_APPLIED:
		printf("applied %s (%s)\n", m->file, cli_fmt_duration(ms, d, sizeof(d)));
		fflush(stdout);
		break;
	case SKL_MIGRATE_BLOCKED:
		cli_log(SKL_LOG_WARNING, "%s: rolled back after a lock wait timed out; blocked by %s",
		        m->file, who);
		break;
	case SKL_MIGRATE_TERMINATED:
		cli_log(SKL_LOG_WARNING, "%s: terminated blocking %s", m->file, who);
		break;
	case SKL_MIGRATE_WAITING:
		cli_log(SKL_LOG_INFO, "another migrator holds the lease; waiting for it");
		break;
	}
}

/* Parses the options and loads DIR; nothing is sent before this succeeds. */
static int prepare(cli_common *cc, mig_args *a, int argc, char **argv,
                   skl_migration_set *set, bool *done)
{
	cc->client.call_timeout_ms = 3600000;
	skl_migrate_options_init(&a->o);
	a->cc = cc;
	int rc = cli_start(cc, argc, argv, (const struct option[]){
		CLI_COMMON_LONGOPTS,
		{"dir", required_argument, NULL, O_DIR},
		{"table", required_argument, NULL, O_TABLE},
		{"lock-timeout", required_argument, NULL, O_LOCK_TIMEOUT},
		{"max-wait", required_argument, NULL, O_MAX_WAIT},
		{"lease-ttl", required_argument, NULL, O_LEASE_TTL},
		{"terminate-idle-holders", no_argument, NULL, O_TERMINATE},
		{"idle-for", required_argument, NULL, O_IDLE_FOR},
		{"allow-pooler", no_argument, NULL, O_ALLOW_POOLER},
		{"json", no_argument, NULL, O_JSON},
		{0}}, own_option, a, migrate_usage, migrate_tail, 0, done);
	if (*done)
		return rc;
	*done = true;
	skl_error err;
	if (a->dir == NULL) {
		cli_error(cc, "--dir is required (the directory of NNNN_name.sql files)");
		return CLI_USAGE;
	}
	if (skl_migrate_check_table(a->o.table, &err) != SKL_OK ||
	    skl_migrate_load_dir(a->dir, set, &err) != SKL_OK)
		return exit_for(cc, &err);
	*done = false;
	return CLI_OK;
}

static int run_up(cli_common *cc, mig_args *a, const skl_migration_set *set)
{
	skl_error err;
	char *url = NULL;
	bool pooled = false;
	if (skl_migrate_endpoint(cc->client.url, cc->client.direct_url, cc->client.pooler,
	                         a->allow_pooler, &url, &pooled, &err) != SKL_OK)
		return exit_for(cc, &err);
	if (pooled)
		cli_log(SKL_LOG_WARNING, "migrating through a pooler (--allow-pooler): blockers "
		        "may not be named and no-transaction files may land on several backends");
	skl_client_options co = cc->client;
	co.url = url;
	co.direct_url = NULL;
	co.pooler = pooled ? cc->client.pooler : SKL_POOLER_NONE;
	a->o.progress = on_progress;
	int applied = 0, rc = CLI_OK;
	if (skl_migrate_up(&co, set, &a->o, &applied, &err) != SKL_OK)
		rc = exit_for(cc, &err);
	else if (applied == 0)
		printf("nothing to apply: %zu migration%s already applied\n", set->n,
		       set->n == 1 ? "" : "s");
	else
		printf("%d migration%s applied\n", applied, applied == 1 ? "" : "s");
	skl_free(url);
	return rc;
}

/* ---- status and verify ---- */

static const char *row_state(const skl_migrate_row *r)
{
	if (!r->applied)
		return "pending";
	if (!r->present)
		return "missing";
	return r->changed ? "changed" : "applied";
}

static bool print_status(const skl_migrate_row *rows, size_t n)
{
	cli_table t;
	cli_table_init(&t, 6, "rlllrl");
	static const char *const head[] = {"VERSION", "NAME", "STATE", "APPLIED AT (UTC)",
	                                   "DURATION", "APPLIED BY"};
	for (size_t i = 0; i < 6; i++)
		cli_table_add(&t, "%s", head[i]);
	for (size_t i = 0; i < n; i++) {
		char at[32], d[32];
		cli_table_add(&t, "%" PRId64, rows[i].version);
		cli_table_add(&t, "%s", rows[i].name);
		cli_table_add(&t, "%s", row_state(&rows[i]));
		cli_table_add(&t, "%s", cli_fmt_time(rows[i].applied ? rows[i].applied_at : NULL, at,
		                                     sizeof(at)));
		cli_table_add(&t, "%s", rows[i].applied ? cli_fmt_duration(rows[i].duration_ms, d,
		                                                           sizeof(d)) : "-");
		cli_table_add(&t, "%s", rows[i].applied ? rows[i].applied_by : "-");
	}
	bool ok = cli_table_print(&t);
	cli_table_free(&t);
	return ok;
}

static bool drifted(const skl_migrate_row *r)
{
	return r->applied && (!r->present || r->changed);
}

static bool print_json(const char *table, const skl_migrate_row *rows, size_t n)
{
	json_t *list = json_array();
	bool drift = false;
	for (size_t i = 0; list && i < n; i++) {
		const skl_migrate_row *r = &rows[i];
		drift = drift || drifted(r);
		json_array_append_new(list, json_pack(
			"{s:I, s:s, s:s, s:o, s:o, s:o}", "version", (json_int_t)r->version, "name",
			r->name, "state", row_state(r), "applied_at",
			r->applied ? json_string(r->applied_at) : json_null(), "duration_ms",
			r->applied ? json_integer(r->duration_ms) : json_null(), "applied_by",
			r->applied ? cli_json_str(r->applied_by) : json_null()));
	}
	return cli_json_print(json_pack("{s:s, s:b, s:o}", "table",
	                                table ? table : "skiplock.migrations", "drift", drift,
	                                "migrations", list));
}

/* Prints each drifted migration; returns how many. */
static int print_drift(const skl_migrate_row *rows, size_t n, const skl_migration_set *set)
{
	int bad = 0;
	for (size_t i = 0; i < n; i++) {
		const skl_migrate_row *r = &rows[i];
		if (r->applied && !r->present)
			printf("missing: version %" PRId64 " (%s) was applied but has no file\n",
			       r->version, r->name);
		else if (r->changed)
			printf("changed: version %" PRId64 " (%s) differs from what was applied at %s\n",
			       r->version, r->name, r->applied_at);
		bad += drifted(r);
	}
	if (bad == 0)
		printf("verified: %zu file%s, none changed since applied\n", set->n,
		       set->n == 1 ? "" : "s");
	return bad;
}

static int drift_count(const skl_migrate_row *rows, size_t n)
{
	int bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += drifted(&rows[i]);
	return bad;
}

static int output_failed(const cli_common *cc)
{
	cli_error(cc, "cannot write the output");
	return CLI_PROBLEM;
}

static int run_read(cli_common *cc, mig_args *a, const skl_migration_set *set, bool verify)
{
	skl_client *c = NULL;
	int rc = cli_open(cc, &c);
	if (rc != CLI_OK)
		return rc;
	skl_migrate_row *rows = NULL;
	size_t n = 0;
	skl_error err;
	if (skl_migrate_status(c, set, a->o.table, &rows, &n, &err) != SKL_OK)
		rc = exit_for(cc, &err);
	else if (a->json && !print_json(a->o.table, rows, n))
		rc = output_failed(cc);
	else if (a->json)
		rc = verify && drift_count(rows, n) ? CLI_PROBLEM : CLI_OK;
	else if (verify)
		rc = print_drift(rows, n, set) ? CLI_PROBLEM : CLI_OK;
	else if (!print_status(rows, n))
		rc = output_failed(cc);
	skl_free(rows);
	skl_client_close(c);
	return rc;
}

/* argv[0] is the subcommand: up, status or verify. */
static int sub(int argc, char **argv)
{
	const char *name = argv[0];
	char command[32];
	snprintf(command, sizeof(command), "migrate %s", name);
	cli_common cc;
	cli_common_init(&cc, command);
	mig_args a = {0};
	skl_migration_set set = {0};
	bool done;
	int rc = prepare(&cc, &a, argc, argv, &set, &done);
	if (!done && a.json && strcmp(name, "up") == 0) {
		cli_error(&cc, "--json applies to migrate status and verify, not up");
		rc = CLI_USAGE;
	} else if (!done)
		rc = strcmp(name, "up") == 0 ? run_up(&cc, &a, &set)
		                             : run_read(&cc, &a, &set, strcmp(name, "verify") == 0);
	skl_migrate_set_free(&set);
	return rc;
}

static void help(FILE *out)
{
	fprintf(out, "%s%s%s", migrate_usage, cli_common_help, migrate_tail);
}

int cmd_migrate(int argc, char **argv)
{
	static const cli_sub subs[] = {{"up", sub, NULL, NULL, NULL},
	                               {"status", sub, NULL, NULL, NULL},
	                               {"verify", sub, NULL, NULL, NULL}};
	static const cli_subs table = {"migrate", subs, 3, help};
	return cli_dispatch(&table, argc, argv);
}
