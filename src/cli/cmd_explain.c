/*
 * cmd_explain.c — `skiplock explain --compare INDEX -- QUERY`: a query's
 * plan, rows and shared buffers before and after a candidate index, side
 * by side, with a verdict.  The measuring is src/lib/doctor/explain.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "print/output.h"

static const char usage[] =
	"NAME\n"
	"    skiplock explain - measure whether a candidate index makes a query cheaper\n"
	"\n"
	"SYNOPSIS\n"
	"    skiplock explain --compare 'CREATE [UNIQUE] INDEX ...' [--yes] [--json]\n"
	"                     [OPTIONS] -- 'SELECT ...'\n"
	"\n"
	"DESCRIPTION\n"
	"    In one transaction that is always rolled back: ANALYZEs the table,\n"
	"    runs EXPLAIN (ANALYZE, BUFFERS) of the query, creates the index,\n"
	"    ANALYZEs again and runs the query again; then prints both plans' nodes\n"
	"    with estimated and actual rows, shared buffers hit and read, and times\n"
	"    side by side, and a verdict from the shared buffers (hit + read) the\n"
	"    whole query touched: fewer (at least 10% fewer), about the same, or\n"
	"    more. Buffers, unlike times, do not depend on a warm cache. Nothing is\n"
	"    kept: not the index, not the statistics; being one transaction, it\n"
	"    works through a transaction-mode pooler.\n"
	"\n"
	"    Before anything runs, the index statement must be CREATE [UNIQUE] INDEX\n"
	"    (without CONCURRENTLY, which cannot run in a transaction) on an existing\n"
	"    table, the query must be one SELECT whose plan modifies nothing (it is\n"
	"    EXPLAINed in a read-only transaction first) and calls no volatile\n"
	"    function, and the index statement is tried once under a savepoint. The\n"
	"    query is executed twice (that is what EXPLAIN ANALYZE does).\n"
	"\n"
	"    A volatile function may change what a ROLLBACK cannot undo: nextval\n"
	"    advances its sequence for good, pg_advisory_lock keeps a session lock,\n"
	"    dblink writes elsewhere. So every function call in the plan (EXPLAIN\n"
	"    VERBOSE shows calls made through views and inlined SQL functions too)\n"
	"    is looked up in pg_proc, and a volatile one is refused, except random,\n"
	"    random_normal, clock_timestamp, timeofday and gen_random_uuid, which\n"
	"    change nothing. Not seen: a volatile call inside a function declared\n"
	"    STABLE or IMMUTABLE, or behind an operator or a cast.\n"
	"\n"
	"    Building the index takes a SHARE lock on the table, which blocks its\n"
	"    writers until the comparison ends (lock waits are bounded to 5s). A\n"
	"    table of over 1,000,000 rows (--max-rows) or over 1 GB with its\n"
	"    indexes counts as production-sized: explain refuses it unless --yes.\n"
	"\n"
	"OPTIONS\n"
	"    --compare SQL      the candidate index statement (required)\n"
	"    --yes              run even on a production-sized table\n"
	"    --max-rows N       the production-sized row count (default 1000000)\n"
	"    --json             one JSON document: {\"table\", \"index\", \"uses_index\",\n"
	"                       \"verdict\": \"fewer_buffers\"|\"same_buffers\"|\"more_buffers\",\n"
	"                       \"change\", \"before\"/\"after\": {\"shared_hit\", \"shared_read\",\n"
	"                       \"buffers\", \"planning_ms\", \"execution_ms\", \"nodes\": [{\"depth\",\n"
	"                       \"node\", \"est_rows\", \"actual_rows\", \"loops\", \"shared_hit\",\n"
	"                       \"shared_read\"}]}}\n"
	"    Raise --call-timeout for a query or an index build longer than 30s.\n"
	"\n";

static const char exit_help[] =
	"\n"
	"EXIT STATUS\n"
	"    0 the index reduces the shared buffers by at least 10%; 1 it does not;\n"
	"    2 bad usage, a statement of the wrong shape or one the server rejects\n"
	"    (syntax, unknown column, a unique index over duplicate keys), a query\n"
	"    calling a volatile function, or a\n"
	"    production-sized table without --yes (nothing is kept); 3 database\n"
	"    unreachable within --retry-for.\n"
	"\n"
	"EXAMPLES\n"
	"    skiplock explain --compare 'CREATE INDEX ON events (created_at DESC)\n"
	"        WHERE status = '\\''pending'\\''' -- 'SELECT id FROM events WHERE status =\n"
	"        '\\''pending'\\'' ORDER BY created_at DESC LIMIT 50'\n";

enum { O_JSON = OPT_COMMON_LAST + 1, O_COMPARE, O_YES, O_MAX_ROWS };

typedef struct explain_args {
	cli_common *cc;
	skl_explain_opts o;
	bool json;
} explain_args;

static int own_option(int code, const char *arg, void *ctx)
{
	explain_args *a = ctx;
	long long v;
	switch (code) {
	case O_JSON: a->json = true; return CLI_OK;
	case O_COMPARE: a->o.index_sql = arg; return CLI_OK;
	case O_YES: a->o.yes = true; return CLI_OK;
	case O_MAX_ROWS:
		if (!cli_int(a->cc, "--max-rows", arg, 1, INT64_MAX, &v))
			return CLI_USAGE;
		a->o.max_table_rows = v;
		return CLI_OK;
	default: return CLI_USAGE;
	}
}

static const char *const verdicts[] = {"fewer_buffers", "same_buffers", "more_buffers"};

static void add_nodes(cli_table *t, const char *which, const skl_plan *p)
{
	for (size_t i = 0; i < p->nnodes; i++) {
		const skl_plan_node *n = &p->nodes[i];
		cli_table_add(t, "%s", i == 0 ? which : "");
		cli_table_add(t, "%*s%s", n->depth * 2, "", n->node);
		cli_table_add(t, "%.0f", n->est_rows);
		cli_table_add(t, "%.0f", n->actual_rows);
		cli_table_add(t, "%.0f", n->loops);
		cli_table_add(t, "%" PRId64, n->shared_hit);
		cli_table_add(t, "%" PRId64, n->shared_read);
	}
}

/* One summary row; decimals: digits after the point. */
static void add_pair(cli_table *t, const char *what, int decimals, double b, double a)
{
	cli_table_add(t, "%s", what);
	cli_table_add(t, "%.*f", decimals, b);
	cli_table_add(t, "%.*f", decimals, a);
}

static bool print_summary(const skl_explain_report *r)
{
	const skl_plan *b = &r->before, *a = &r->after;
	cli_table t;
	cli_table_init(&t, 3, "lrr");
	cli_table_add(&t, "%s", "");
	cli_table_add(&t, "BEFORE");
	cli_table_add(&t, "AFTER");
	add_pair(&t, "shared hit", 0, (double)b->shared_hit, (double)a->shared_hit);
	add_pair(&t, "shared read", 0, (double)b->shared_read, (double)a->shared_read);
	add_pair(&t, "buffers", 0, (double)(b->shared_hit + b->shared_read),
	         (double)(a->shared_hit + a->shared_read));
	add_pair(&t, "planning ms", 3, b->planning_ms, a->planning_ms);
	add_pair(&t, "execution ms", 3, b->execution_ms, a->execution_ms);
	bool ok = cli_table_print(&t);
	cli_table_free(&t);
	return ok;
}

static bool print_text(const skl_explain_report *r)
{
	printf("table %s, candidate index %s\n\n", r->table_name, r->index_name);
	bool ok = print_summary(r);
	printf("\n");
	cli_table t;
	cli_table_init(&t, 7, "llrrrrr");
	const char *const head[] = {"PLAN", "NODE", "EST ROWS", "ACTUAL ROWS", "LOOPS", "HIT",
	                            "READ"};
	for (size_t i = 0; i < 7; i++)
		cli_table_add(&t, "%s", head[i]);
	add_nodes(&t, "before", &r->before);
	add_nodes(&t, "after", &r->after);
	ok = cli_table_print(&t) && ok;
	cli_table_free(&t);
	static const char *const words[] = {"reduces", "does not reduce", "increases"};
	printf("\nverdict: the index %s the shared buffers (%" PRId64 " -> %" PRId64 ", %+.0f%%);"
	       " the plan %s it\n", words[r->verdict], r->before.shared_hit + r->before.shared_read,
	       r->after.shared_hit + r->after.shared_read, r->change * 100.0,
	       r->uses_index ? "uses" : "does not use");
	return ok && fflush(stdout) == 0;
}

static json_t *plan_json(const skl_plan *p)
{
	json_t *nodes = json_array();
	for (size_t i = 0; nodes && i < p->nnodes; i++) {
		const skl_plan_node *n = &p->nodes[i];
		json_array_append_new(nodes, json_pack("{s:i, s:s, s:f, s:f, s:f, s:I, s:I}", "depth",
		                                       n->depth, "node", n->node, "est_rows", n->est_rows,
		                                       "actual_rows", n->actual_rows, "loops", n->loops,
		                                       "shared_hit", (json_int_t)n->shared_hit,
		                                       "shared_read", (json_int_t)n->shared_read));
	}
	return json_pack("{s:I, s:I, s:I, s:f, s:f, s:o*}", "shared_hit", (json_int_t)p->shared_hit,
	                 "shared_read", (json_int_t)p->shared_read, "buffers",
	                 (json_int_t)(p->shared_hit + p->shared_read), "planning_ms", p->planning_ms,
	                 "execution_ms", p->execution_ms, "nodes", nodes);
}

static bool print_json(const skl_explain_report *r)
{
	return cli_json_print(json_pack("{s:s, s:s, s:b, s:s, s:f, s:o*, s:o*}", "table",
	                                r->table_name, "index", r->index_name, "uses_index",
	                                r->uses_index, "verdict", verdicts[r->verdict], "change",
	                                r->change, "before", plan_json(&r->before), "after",
	                                plan_json(&r->after)));
}

static int check_args(explain_args *a, int argc, char **argv)
{
	if (a->o.index_sql == NULL) {
		cli_error(a->cc, "missing --compare 'CREATE INDEX ...' (see skiplock explain --help)");
		return CLI_USAGE;
	}
	if (optind >= argc) {
		cli_error(a->cc, "missing the query: give it after -- (see skiplock explain --help)");
		return CLI_USAGE;
	}
	a->o.query = argv[optind];
	skl_error err;
	if (skl_explain_check(a->o.index_sql, a->o.query, NULL, 0, &err) != SKL_OK) {
		cli_error(a->cc, "%s", err.message);
		return CLI_USAGE;
	}
	return CLI_OK;
}

int cmd_explain(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_LONGOPTS,
		{"json", no_argument, NULL, O_JSON},
		{"compare", required_argument, NULL, O_COMPARE},
		{"yes", no_argument, NULL, O_YES},
		{"max-rows", required_argument, NULL, O_MAX_ROWS},
		{0}};
	cli_common cc;
	cli_common_init(&cc, "explain");
	explain_args a = {.cc = &cc};
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, usage, exit_help, 1, &done);
	if (done || (rc = check_args(&a, argc, argv)) != CLI_OK)
		return rc;
	skl_client *c;
	if ((rc = cli_open(&cc, &c)) != CLI_OK)
		return rc;
	skl_explain_report *r = NULL;
	skl_error err;
	skl_rc lrc = skl_explain_compare(c, &a.o, &r, &err);
	if (lrc == SKL_CONFLICT) {
		cli_error(&cc, "%s", err.message);
		rc = CLI_USAGE;
	} else if (lrc != SKL_OK) {
		rc = cli_fail(&cc, &err);
	} else if (!(a.json ? print_json(r) : print_text(r))) {
		cli_error(&cc, "cannot write the output");
		rc = CLI_PROBLEM;
	} else {
		rc = r->verdict == SKL_EXPLAIN_FEWER ? CLI_OK : CLI_PROBLEM;
	}
	skl_explain_report_free(r);
	skl_client_close(c);
	return rc;
}
