/*
 * explain.c — `explain --compare`: a query's plan and buffers before and
 * after a candidate index, measured in one transaction that is rolled back.
 *
 * Invariants:
 *  - nothing is kept: the comparison runs inside BEGIN … ROLLBACK
 *    (skl_txn_opts.rollback), so the index, the statistics ANALYZE wrote
 *    and anything the query did vanish, and one transaction works through
 *    a transaction-mode pooler;
 *  - nothing runs before the inputs are known good: the shapes are checked
 *    here without a database, the query is EXPLAINed (not run) in a
 *    read-only transaction and refused when its plan modifies data or
 *    calls a volatile function (a sequence's nextval is not undone by the
 *    ROLLBACK, nor is a session lock or a remote call), the
 *    table must exist and must not be production-sized unless the caller
 *    says yes, and the index statement is tried once under a savepoint
 *    that is rolled back before the query first runs;
 *  - the verdict compares shared buffers (hit + read, the root node's,
 *    which include its children), not time or estimated cost: buffer counts
 *    do not depend on a warm cache or a busy machine.
 * The plan is read from EXPLAIN's JSON (jansson).
 */
#include <ctype.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/internal.h"
#include "skiplock/diagnose.h"

/* ---- a minimal SQL lexer: enough to check the two statements' shapes ---- */

typedef struct lexer {
	const char *p;
	char tok[256];   /* the current token; keywords and identifiers as written */
	char kind;       /* 'w' word, 'q' quoted identifier, 's' string, '.' punctuation, 0 end */
	bool bad;        /* an unterminated quote or comment */
} lexer;

static const char *skip_space(const char *p, bool *bad)
{
	for (;;) {
		while (isspace((unsigned char)*p))
			p++;
		if (p[0] == '-' && p[1] == '-') {
			p += strcspn(p, "\n");
		} else if (p[0] == '/' && p[1] == '*') {
			const char *e = strstr(p + 2, "*/");
			if (e == NULL) {
				*bad = true;
				return p + strlen(p);
			}
			p = e + 2;
		} else {
			return p;
		}
	}
}

/* Skips a quoted run starting at p (quote q, doubled to escape). */
static const char *skip_quoted(const char *p, char q, bool *bad)
{
	for (p++; *p; p++)
		if (*p == q && p[1] == q)
			p++;
		else if (*p == q)
			return p + 1;
	*bad = true;
	return p;
}

static const char *skip_dollar(const char *p, bool *bad)
{
	size_t n = 1 + strspn(p + 1, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789");
	if (p[n] != '$')
		return p + 1;   /* a parameter such as $1 */
	char tag[64];
	if (n + 1 >= sizeof(tag)) {
		*bad = true;
		return p + strlen(p);
	}
	memcpy(tag, p, n + 1);
	tag[n + 1] = '\0';
	const char *e = strstr(p + n + 1, tag);
	if (e == NULL) {
		*bad = true;
		return p + strlen(p);
	}
	return e + n + 1;
}

static void next(lexer *l)
{
	const char *p = skip_space(l->p, &l->bad), *s = p;
	if (*p == '\0') {
		l->kind = 0;
	} else if (isalpha((unsigned char)*p) || *p == '_' || (unsigned char)*p >= 0x80) {
		while (isalnum((unsigned char)*p) || *p == '_' || *p == '$' || (unsigned char)*p >= 0x80)
			p++;
		l->kind = 'w';
	} else if (*p == '"' || *p == '\'') {
		l->kind = *p == '"' ? 'q' : 's';
		p = skip_quoted(p, *p, &l->bad);
	} else if (*p == '$') {
		p = skip_dollar(p, &l->bad);
		l->kind = 's';
	} else {
		p++;
		l->kind = '.';
	}
	size_t n = (size_t)(p - s) < sizeof(l->tok) ? (size_t)(p - s) : sizeof(l->tok) - 1;
	memcpy(l->tok, s, n);
	l->tok[n] = '\0';
	l->p = p;
}

static bool is(const lexer *l, const char *word)
{
	return l->kind == 'w' && strcasecmp(l->tok, word) == 0;
}

/* Consumes the rest of a statement: parentheses must balance and a ';' may
 * only end it.  *parens counts the top-level parenthesised groups. */
static const char *rest_of_statement(lexer *l, int *parens)
{
	int depth = 0;
	*parens = 0;
	for (; l->kind; next(l)) {
		if (l->kind != '.')
			continue;
		if (l->tok[0] == '(' && depth++ == 0)
			(*parens)++;
		if (l->tok[0] == ')' && --depth < 0)
			return "unbalanced parentheses";
		if (l->tok[0] == ';' && depth == 0) {
			next(l);
			return l->kind ? "more than one statement" : NULL;
		}
	}
	if (l->bad)
		return "an unterminated quote or comment";
	return depth ? "unbalanced parentheses" : NULL;
}

/* ON [ONLY] name[.name]: copies the name as written into table. */
static bool table_name(lexer *l, char *table, size_t cap)
{
	if (is(l, "only"))
		next(l);
	if (l->kind != 'w' && l->kind != 'q')
		return false;
	snprintf(table, cap, "%s", l->tok);
	next(l);
	if (l->kind == '.' && l->tok[0] == '.') {
		next(l);
		if (l->kind != 'w' && l->kind != 'q')
			return false;
		size_t n = strlen(table);
		snprintf(table + n, cap - n, ".%s", l->tok);
		next(l);
	}
	return true;
}

static skl_rc check_index(const char *sql, char *table, size_t cap, skl_error *err)
{
	static const char shape[] =
		"the index statement must be CREATE [UNIQUE] INDEX [name] ON table (...)";
	lexer l = {.p = sql};
	next(&l);
	if (!is(&l, "create"))
		return skl__seterr(err, SKL_INVALID, "%s", shape);
	next(&l);
	if (is(&l, "unique"))
		next(&l);
	if (!is(&l, "index"))
		return skl__seterr(err, SKL_INVALID, "%s", shape);
	next(&l);
	if (is(&l, "concurrently"))
		return skl__seterr(err, SKL_INVALID, "CONCURRENTLY cannot run inside the comparison's"
		                   " transaction: leave it out (the candidate index is never kept)");
	if (is(&l, "if")) {   /* IF NOT EXISTS */
		next(&l);
		next(&l);
		next(&l);
	}
	if (!is(&l, "on") && (l.kind == 'w' || l.kind == 'q'))
		next(&l);   /* the index's name */
	if (!is(&l, "on"))
		return skl__seterr(err, SKL_INVALID, "%s", shape);
	next(&l);
	if (!table_name(&l, table, cap))
		return skl__seterr(err, SKL_INVALID, "%s: no table name after ON", shape);
	int parens;
	const char *why = rest_of_statement(&l, &parens);
	if (why == NULL && parens == 0)
		why = "no column list";
	return why ? skl__seterr(err, SKL_INVALID, "the index statement: %s", why) : SKL_OK;
}

static skl_rc check_query(const char *sql, skl_error *err)
{
	lexer l = {.p = sql};
	next(&l);
	if (!(is(&l, "select") || is(&l, "with") || is(&l, "table") || is(&l, "values") ||
	      (l.kind == '.' && l.tok[0] == '(')))
		return skl__seterr(err, SKL_INVALID, "the query must be one SELECT, not \"%.40s\"",
		                   l.kind ? l.tok : "(empty)");
	int parens;
	const char *why = rest_of_statement(&l, &parens);
	return why ? skl__seterr(err, SKL_INVALID, "the query: %s", why) : SKL_OK;
}

skl_rc skl_explain_check(const char *index_sql, const char *query, char *table, size_t cap,
                         skl_error *err)
{
	char tmp[160];
	if (table == NULL || cap == 0)
		table = tmp, cap = sizeof(tmp);
	table[0] = '\0';
	if (index_sql == NULL || query == NULL)
		return skl__seterr(err, SKL_MISUSE, "skl_explain_check: NULL statement");
	skl_rc rc = check_index(index_sql, table, cap, err);
	return rc == SKL_OK ? check_query(query, err) : rc;
}

/* ---- reading EXPLAIN (FORMAT JSON) ---- */

static double num(const json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

static void node_label(const json_t *p, char *buf, size_t cap)
{
	const char *type = json_string_value(json_object_get(p, "Node Type"));
	const char *index = json_string_value(json_object_get(p, "Index Name"));
	const char *rel = json_string_value(json_object_get(p, "Relation Name"));
	int n = snprintf(buf, cap, "%s", type ? type : "?");
	if (type && strcmp(type, "Bitmap Index Scan") == 0 && index)
		rel = index, index = NULL;
	if (index && n >= 0 && (size_t)n < cap)
		n += snprintf(buf + n, cap - (size_t)n, " using %s", index);
	if (rel && n >= 0 && (size_t)n < cap)
		snprintf(buf + n, cap - (size_t)n, " on %s", rel);
}

/* Appends p and its children depth-first; false when out of memory. */
static bool walk(const json_t *p, int depth, skl_plan *plan, const char *index, bool *uses)
{
	skl_plan_node *nodes = realloc(plan->nodes, (plan->nnodes + 1) * sizeof(*nodes));
	if (nodes == NULL)
		return false;
	plan->nodes = nodes;
	skl_plan_node *n = &nodes[plan->nnodes++];
	*n = (skl_plan_node){.depth = depth,
	                     .est_rows = num(p, "Plan Rows"),
	                     .actual_rows = num(p, "Actual Rows"),
	                     .loops = num(p, "Actual Loops"),
	                     .shared_hit = (int64_t)num(p, "Shared Hit Blocks"),
	                     .shared_read = (int64_t)num(p, "Shared Read Blocks")};
	node_label(p, n->node, sizeof(n->node));
	const char *used = json_string_value(json_object_get(p, "Index Name"));
	if (index && used && strcmp(used, index) == 0)
		*uses = true;
	size_t i;
	json_t *child;
	json_array_foreach(json_object_get(p, "Plans"), i, child)
		if (!walk(child, depth + 1, plan, index, uses))
			return false;
	return true;
}

static skl_rc read_plan(const char *text, skl_plan *plan, const char *index, bool *uses,
                        skl_error *err)
{
	json_error_t jerr;
	json_t *doc = json_loads(text, 0, &jerr);
	json_t *top = json_array_get(doc, 0);
	json_t *root = json_object_get(top, "Plan");
	skl_rc rc = SKL_OK;
	if (root == NULL)
		rc = skl__seterr(err, SKL_DB, "EXPLAIN returned no plan");
	else if (!walk(root, 0, plan, index, uses))
		rc = skl__seterr(err, SKL_NOMEM, "out of memory");
	if (rc == SKL_OK) {
		plan->shared_hit = plan->nodes[0].shared_hit;
		plan->shared_read = plan->nodes[0].shared_read;
		plan->planning_ms = num(top, "Planning Time");
		plan->execution_ms = num(top, "Execution Time");
	}
	json_decref(doc);
	return rc;
}

/* ---- validation: nothing runs yet ---- */

typedef struct explain_run {
	const skl_explain_opts *o;
	skl_explain_report *r;
	char index_relname[80];   /* as EXPLAIN names it */
	char table_written[160];
} explain_run;

/* Errors the server finds in the user's statements are bad input. */
static skl_rc user_error(skl_rc rc, const char *what, skl_error *err)
{
	if (rc != SKL_DB || err == NULL || err->sqlstate[0] == '\0')
		return rc;
	const char *s = err->sqlstate;
	if (strncmp(s, "42", 2) && strncmp(s, "22", 2) && strncmp(s, "23", 2) &&
	    strncmp(s, "0A", 2) && strcmp(s, "25006"))
		return rc;
	char msg[sizeof(err->message)];
	memcpy(msg, err->message, sizeof(msg));
	size_t n = strlen(what) + 2;
	if (n < sizeof(err->message)) {
		snprintf(err->message, sizeof(err->message), "%s: ", what);
		memcpy(err->message + n, msg, sizeof(err->message) - n - 1);
		err->message[sizeof(err->message) - 1] = '\0';
	}
	err->rc = SKL_INVALID;
	return SKL_INVALID;
}

static skl_rc exec1(skl_client *c, const char *sql, int n, const char *const *v, PGresult **r,
                    skl_error *err)
{
	*r = NULL;
	return skl__exec(c, sql, n, v, r, err);
}

/* ---- volatile functions: their effects outlast the ROLLBACK ---- */

/* An identifier token as the catalog spells it: unquoted ones fold to
 * lower case, quoted ones lose their quotes and doubled quotes. */
static json_t *ident(const lexer *l)
{
	char name[256];
	size_t o = 0;
	const char *t = l->tok;
	if (l->kind == 'q')
		for (t++; *t && o + 1 < sizeof(name); t++) {
			if (*t == '"' && *++t != '"')
				break;   /* the closing quote; a doubled one stands for one */
			name[o++] = *t;
		}
	else
		for (; *t && o + 1 < sizeof(name); t++)
			name[o++] = (char)tolower((unsigned char)*t);
	name[o] = '\0';
	return json_string(name);
}

/* Appends [schema or null, name] to calls for each "name(" and
 * "schema.name(" in one deparsed expression of EXPLAIN VERBOSE. */
static void scan_calls(const char *text, json_t *calls)
{
	lexer l = {.p = text};
	lexer prev[3] = {{0}};   /* the three tokens before the current one */
	for (next(&l); l.kind; next(&l)) {
		bool name = prev[0].kind == 'w' || prev[0].kind == 'q';
		if (l.kind == '.' && l.tok[0] == '(' && name) {
			bool qual = prev[1].kind == '.' && prev[1].tok[0] == '.' &&
			            (prev[2].kind == 'w' || prev[2].kind == 'q');
			json_array_append_new(calls, json_pack("[o, o]", qual ? ident(&prev[2]) : json_null(),
			                                       ident(&prev[0])));
		}
		prev[2] = prev[1];
		prev[1] = prev[0];
		prev[0] = l;
	}
}

/* Every string anywhere in the plan: Output, Filter, Function Call, … */
static void walk_strings(const json_t *v, json_t *calls)
{
	size_t i;
	const char *key;
	json_t *child;
	if (json_is_string(v))
		scan_calls(json_string_value(v), calls);
	else if (json_is_array(v))
		json_array_foreach(v, i, child)
			walk_strings(child, calls);
	else if (json_is_object(v))
		json_object_foreach((json_t *)v, key, child)
			walk_strings(child, calls);
}

/* The volatile functions among the names, resolved as the deparser wrote
 * them: unqualified names among the functions visible on search_path, any
 * overload (a conservative match).  A few pg_catalog functions are
 * volatile only because they return a new value each call; they change
 * nothing, so they are allowed. */
static const char *const volatile_sql =
	"SELECT string_agg(DISTINCT p.oid::regprocedure::text, ', ')"
	"  FROM json_array_elements($1::json) c"
	"  JOIN pg_proc p ON p.proname = c ->> 1"
	"   AND CASE WHEN c ->> 0 IS NULL THEN pg_function_is_visible(p.oid)"
	"            ELSE p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = c ->> 0) END"
	" WHERE p.provolatile = 'v'"
	"   AND NOT (p.pronamespace = 'pg_catalog'::regnamespace AND p.proname IN"
	"            ('random', 'random_normal', 'clock_timestamp', 'timeofday', 'gen_random_uuid'))";

static skl_rc check_volatile(skl_client *c, const json_t *plan, skl_error *err)
{
	json_t *calls = json_array();
	if (calls)
		walk_strings(plan, calls);
	char *text = calls ? json_dumps(calls, JSON_COMPACT) : NULL;
	json_decref(calls);
	if (text == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	const char *p[] = {text};
	PGresult *r;
	skl_rc rc = exec1(c, volatile_sql, 1, p, &r, err);
	free(text);
	if (rc == SKL_OK && !PQgetisnull(r, 0, 0))
		rc = skl__seterr(err, SKL_INVALID, "the query calls the volatile function %s: a "
		                 "volatile function may change what the ROLLBACK cannot undo (nextval "
		                 "advances a sequence for good), so explain --compare does not run it",
		                 PQgetvalue(r, 0, 0));
	PQclear(r);
	return rc;
}

/* EXPLAIN VERBOSE deparses every expression the plan evaluates: views are
 * expanded and inlined SQL functions replaced by their bodies, so a call
 * that the query's text hides still shows. */
static skl_rc check_plan_reads_only(skl_client *c, const char *query, skl_error *err)
{
	static const char fmt[] = "EXPLAIN (VERBOSE, FORMAT JSON) %s";
	size_t n = strlen(query) + sizeof(fmt);
	char *sql = malloc(n);
	if (sql == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	snprintf(sql, n, fmt, query);
	PGresult *r;
	skl_rc rc = user_error(exec1(c, sql, 0, NULL, &r, err), "the query", err);
	free(sql);
	if (rc == SKL_OK && strstr(PQgetvalue(r, 0, 0), "\"ModifyTable\""))
		rc = skl__seterr(err, SKL_INVALID, "the query must only read: its plan modifies data");
	json_t *plan = rc == SKL_OK ? json_loads(PQgetvalue(r, 0, 0), 0, NULL) : NULL;
	PQclear(r);
	if (rc == SKL_OK)
		rc = plan ? check_volatile(c, plan, err)
		          : skl__seterr(err, SKL_DB, "EXPLAIN returned no JSON plan");
	json_decref(plan);
	return rc;
}

static const char *const table_sql =
	"SELECT format('%I.%I', n.nspname, c.relname), c.relkind IN ('r', 'm', 'p'),"
	"       pg_total_relation_size(c.oid), greatest(c.reltuples, 0)::bigint,"
	"       pg_size_pretty(pg_total_relation_size(c.oid))"
	"  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
	" WHERE c.oid = to_regclass($1)";

static skl_rc check_table(skl_client *c, explain_run *x, skl_error *err)
{
	const char *p[] = {x->table_written};
	PGresult *r;
	skl_rc rc = exec1(c, table_sql, 1, p, &r, err);
	if (rc != SKL_OK)
		return user_error(rc, "the table", err);
	if (PQntuples(r) == 0 || PQgetvalue(r, 0, 1)[0] != 't') {
		rc = skl__seterr(err, SKL_INVALID, "no table %s", x->table_written);
	} else {
		snprintf(x->r->table_name, sizeof(x->r->table_name), "%s", PQgetvalue(r, 0, 0));
		long long bytes = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
		long long rows = strtoll(PQgetvalue(r, 0, 3), NULL, 10);
		int64_t max_b = x->o->max_table_bytes > 0 ? x->o->max_table_bytes : 1LL << 30;
		int64_t max_r = x->o->max_table_rows > 0 ? x->o->max_table_rows : 1000000;
		if (!x->o->yes && (bytes > max_b || rows > max_r))
			rc = skl__seterr(err, SKL_CONFLICT,
			                 "%s looks production-sized (%s, about %lld rows): building the"
			                 " index blocks writes to it until the comparison ends; pass --yes"
			                 " to run anyway", x->r->table_name, PQgetvalue(r, 0, 4), rows);
	}
	PQclear(r);
	return rc;
}

static skl_rc validate_fn(skl_client *c, void *ctx, skl_error *err)
{
	explain_run *x = ctx;
	PGresult *r;
	skl_rc rc = exec1(c, "SET TRANSACTION READ ONLY", 0, NULL, &r, err);
	PQclear(r);
	if (rc == SKL_OK)
		rc = check_plan_reads_only(c, x->o->query, err);
	return rc == SKL_OK ? check_table(c, x, err) : rc;
}

/* ---- the comparison: one transaction, rolled back ---- */

static skl_rc simple_ok(skl_client *c, const char *sql, skl_error *err)
{
	PGresult *r;
	skl_rc rc = exec1(c, sql, 0, NULL, &r, err);
	PQclear(r);
	return rc;
}

/* Builds the candidate once under a savepoint and undoes it, so that a
 * statement the server rejects stops everything before the query runs. */
static skl_rc try_index(skl_client *c, const char *index_sql, skl_error *err)
{
	skl_rc rc = simple_ok(c, "SAVEPOINT skiplock_trial", err);
	if (rc == SKL_OK)
		rc = user_error(simple_ok(c, index_sql, err), "the index statement", err);
	return rc == SKL_OK ? simple_ok(c, "ROLLBACK TO SAVEPOINT skiplock_trial", err) : rc;
}

static skl_rc analyze(skl_client *c, const char *table, skl_error *err)
{
	char sql[200];
	snprintf(sql, sizeof(sql), "ANALYZE %s", table);
	return simple_ok(c, sql, err);
}

static skl_rc measure(skl_client *c, explain_run *x, skl_plan *plan, skl_error *err)
{
	static const char fmt[] = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) %s";
	size_t n = strlen(x->o->query) + sizeof(fmt);
	char *sql = malloc(n);
	if (sql == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	snprintf(sql, n, fmt, x->o->query);
	PGresult *r;
	skl_rc rc = user_error(exec1(c, sql, 0, NULL, &r, err), "the query", err);
	free(sql);
	if (rc == SKL_OK)
		rc = read_plan(PQgetvalue(r, 0, 0), plan, x->index_relname[0] ? x->index_relname : NULL,
		               &x->r->uses_index, err);
	PQclear(r);
	return rc;
}

static const char *const before_sql =
	"SELECT coalesce(array_agg(indexrelid), '{}')::text FROM pg_index"
	" WHERE indrelid = $1::regclass";
static const char *const created_sql =
	"SELECT format('%I.%I', n.nspname, c.relname), c.relname"
	"  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
	"  JOIN pg_namespace n ON n.oid = c.relnamespace"
	" WHERE i.indrelid = $1::regclass AND NOT (i.indexrelid = ANY ($2::oid[]))";

/* Creates the candidate and learns its name (generated when not given). */
static skl_rc create_index(skl_client *c, explain_run *x, skl_error *err)
{
	const char *p[2] = {x->r->table_name, NULL};
	PGresult *r;
	skl_rc rc = exec1(c, before_sql, 1, p, &r, err);
	char *oids = rc == SKL_OK ? skl__strdup(PQgetvalue(r, 0, 0)) : NULL;
	PQclear(r);
	if (rc == SKL_OK && oids == NULL)
		rc = skl__seterr(err, SKL_NOMEM, "out of memory");
	if (rc == SKL_OK)
		rc = user_error(simple_ok(c, x->o->index_sql, err), "the index statement", err);
	p[1] = oids;
	if (rc == SKL_OK && (rc = exec1(c, created_sql, 2, p, &r, err)) == SKL_OK) {
		if (PQntuples(r) == 1) {
			snprintf(x->r->index_name, sizeof(x->r->index_name), "%s", PQgetvalue(r, 0, 0));
			snprintf(x->index_relname, sizeof(x->index_relname), "%s", PQgetvalue(r, 0, 1));
		}
		PQclear(r);
	}
	free(oids);
	return rc;
}

static void plan_clear(skl_plan *p)
{
	free(p->nodes);
	memset(p, 0, sizeof(*p));
}

static skl_rc compare_fn(skl_client *c, void *ctx, skl_error *err)
{
	explain_run *x = ctx;
	plan_clear(&x->r->before);   /* a retried attempt starts over */
	plan_clear(&x->r->after);
	x->r->uses_index = false;
	x->index_relname[0] = '\0';
	skl_rc rc = try_index(c, x->o->index_sql, err);
	if (rc == SKL_OK)
		rc = analyze(c, x->r->table_name, err);
	if (rc == SKL_OK)
		rc = measure(c, x, &x->r->before, err);
	if (rc == SKL_OK)
		rc = create_index(c, x, err);
	if (rc == SKL_OK)
		rc = analyze(c, x->r->table_name, err);
	return rc == SKL_OK ? measure(c, x, &x->r->after, err) : rc;
}

static void judge(skl_explain_report *r)
{
	double b = (double)(r->before.shared_hit + r->before.shared_read);
	double a = (double)(r->after.shared_hit + r->after.shared_read);
	r->change = b > 0 ? (a - b) / b : 0;
	if (b == 0)
		r->verdict = a > 0 ? SKL_EXPLAIN_MORE : SKL_EXPLAIN_SAME;
	else
		r->verdict = a <= 0.9 * b ? SKL_EXPLAIN_FEWER
		             : a >= 1.1 * b ? SKL_EXPLAIN_MORE : SKL_EXPLAIN_SAME;
}

skl_rc skl_explain_compare(skl_client *c, const skl_explain_opts *o, skl_explain_report **out,
                           skl_error *err)
{
	static const skl_txn_opts validate_opts = {.txn = 1, .idempotent = 1, .rollback = 1};
	static const skl_txn_opts compare_opts = {.txn = 1, .idempotent = 1, .rollback = 1};
	if (out)
		*out = NULL;
	if (c == NULL || o == NULL || out == NULL)
		return skl__seterr(err, SKL_MISUSE, "skl_explain_compare: NULL argument");
	explain_run x = {.o = o};
	skl_rc rc = skl_explain_check(o->index_sql, o->query, x.table_written,
	                              sizeof(x.table_written), err);
	if (rc != SKL_OK)
		return rc;
	if ((x.r = calloc(1, sizeof(*x.r))) == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	rc = skl__run(c, &validate_opts, validate_fn, &x, err);
	if (rc == SKL_OK)
		rc = skl__run(c, &compare_opts, compare_fn, &x, err);
	if (rc != SKL_OK) {
		skl_explain_report_free(x.r);
		return rc;
	}
	judge(x.r);
	*out = x.r;
	skl_error_clear(err);
	return SKL_OK;
}

void skl_explain_report_free(skl_explain_report *r)
{
	if (r == NULL)
		return;
	free(r->before.nodes);
	free(r->after.nodes);
	free(r);
}
