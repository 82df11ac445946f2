/*
 * doctor_indexes.c — `doctor indexes`: read-only checks of indexes and
 * table statistics, each returning findings with a one-line fix.
 *
 * Every check is one statement that returns rows already shaped as
 * findings (check, action, object, detail, fix, size), so the rules live in
 * SQL where they can be read next to the catalogs they use; the thresholds
 * are written down in docs/diagnostics.md and here:
 *   unused-index     idx_scan = 0 since the statistics were reset, the index
 *                    backs no constraint and is not unique, size >= the
 *                    caller's minimum (1 MiB by default)
 *   invalid-index    pg_index.indisvalid = false and no CREATE INDEX is in
 *                    progress for it
 *   duplicate-index  same table, method, key columns, operator classes,
 *   redundant-index  collations, options, INCLUDE columns, expressions and
 *                    predicate as another (duplicate), or its key columns are
 *                    a leading prefix of another b-tree's (redundant); never
 *                    proposed for an index that is unique or backs a
 *                    constraint unless its twin does the same job
 *   stale-stats      n_mod_since_analyze >= 1000 and either never analyzed
 *                    or > 10% of reltuples
 *   dead-tuples      n_dead_tup >= 1000 and > 20% of all tuples, and no
 *                    autovacuum in the last hour
 *   jobs-bloat       skiplock.jobs >= 8 MiB on disk and over 3x what its
 *                    live rows need (from pg_stats widths)
 *   claim-plan       skiplock.jobs has >= 10,000 rows and the claim's plan
 *                    does not read jobs_claim_idx
 * skiplock's own indexes are never proposed for dropping (unused,
 * duplicate, redundant): its claim, rescue and retention need each one even
 * when they have not run yet; its tables get the other checks.
 * The statements only read; each runs in the one short transaction of
 * skl__run so that SET LOCAL statement_timeout bounds it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "skiplock/diagnose.h"

/* Schemas looked at: $1 names one, else every user schema. */
#define SCHEMA_FILTER(n)                                                                    \
	"(" n " NOT IN ('pg_catalog', 'information_schema') AND " n " NOT LIKE 'pg\\_toast%'" \
	" AND " n " NOT LIKE 'pg\\_temp\\_%' AND ($1::text IS NULL OR " n " = $1))"

static const char *const invalid_sql =
	"SELECT 'invalid-index', true, format('%I.%I', n.nspname, c.relname),"
	"       format('invalid index on %I.%I (a CREATE INDEX CONCURRENTLY or REINDEX CONCURRENTLY"
	" failed): every write still updates it, no query reads it', tn.nspname, t.relname),"
	"       CASE WHEN i.indisunique"
	"         THEN format('DROP INDEX CONCURRENTLY %I.%I;  -- remove the duplicate keys, then"
	" create it again', n.nspname, c.relname)"
	"         ELSE format('REINDEX INDEX CONCURRENTLY %I.%I;', n.nspname, c.relname) END,"
	"       pg_relation_size(c.oid)"
	"  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
	"  JOIN pg_namespace n ON n.oid = c.relnamespace"
	"  JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace tn ON tn.oid = t.relnamespace"
	" WHERE NOT i.indisvalid AND " SCHEMA_FILTER("n.nspname")
	"   AND NOT EXISTS (SELECT 1 FROM pg_stat_progress_create_index p"
	"                    WHERE p.index_relid = i.indexrelid)"
	" ORDER BY 3";

/* Valid indexes with their key columns, operator classes, collations and
 * options cut to the key columns, and the INCLUDE columns apart. */
#define INDEX_COLUMNS                                                                          \
	"WITH x AS ("                                                                              \
	"  SELECT i.indexrelid AS oid, i.indrelid, i.indisunique AS uniq, c.relam, n.nspname,"     \
	"         c.relname, pg_get_expr(i.indexprs, i.indrelid) AS exprs,"                       \
	"         pg_get_expr(i.indpred, i.indrelid) AS pred,"                                     \
	"         (string_to_array(i.indkey::text, ' '))[1:i.indnkeyatts] AS keys,"              \
	"         coalesce((string_to_array(i.indkey::text, ' '))[i.indnkeyatts + 1:], '{}') AS incl," \
	"         string_to_array(i.indclass::text, ' ') AS cls,"                                 \
	"         string_to_array(i.indcollation::text, ' ') AS coll,"                            \
	"         string_to_array(i.indoption::text, ' ') AS opt,"                                \
	"         EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid) AS con"  \
	"    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"                              \
	"    JOIN pg_namespace n ON n.oid = c.relnamespace"                                        \
	"   WHERE i.indisvalid AND " SCHEMA_FILTER("n.nspname") ")"

#define PREFIX_OF(col) "b." col "[1:cardinality(a." col ")] = a." col
#define TWINS "(a.keys = b.keys AND a.incl = b.incl AND a.uniq = b.uniq)"

static const char *const redundant_sql =
	INDEX_COLUMNS
	" SELECT DISTINCT ON (a.oid)"
	"        CASE WHEN " TWINS " THEN 'duplicate-index' ELSE 'redundant-index' END, true,"
	"        format('%I.%I', a.nspname, a.relname),"
	"        format('%s %I.%I: %s', CASE WHEN " TWINS " THEN 'the same as'"
	"               ELSE 'covered by' END, b.nspname, b.relname,"
	"               regexp_replace(pg_get_indexdef(b.oid), '^.* USING ', 'USING ')),"
	"        format('DROP INDEX CONCURRENTLY %I.%I;', a.nspname, a.relname),"
	"        pg_relation_size(a.oid)"
	"   FROM x a JOIN x b ON a.indrelid = b.indrelid AND a.oid <> b.oid AND a.relam = b.relam"
	"    AND a.exprs IS NOT DISTINCT FROM b.exprs AND a.pred IS NOT DISTINCT FROM b.pred"
	"  WHERE NOT a.con AND a.nspname <> 'skiplock'"
	"    AND " PREFIX_OF("keys") " AND " PREFIX_OF("cls")
	"    AND " PREFIX_OF("coll") " AND " PREFIX_OF("opt")
	"    AND cardinality(a.keys) <= cardinality(b.keys)"
	"    AND CASE WHEN a.keys = b.keys THEN a.incl <@ b.incl"
	"             ELSE a.incl = '{}' AND a.relam = (SELECT oid FROM pg_am WHERE amname = 'btree')"
	"        END"
	"    AND (NOT a.uniq OR (b.uniq AND a.keys = b.keys))"
	"    AND (NOT " TWINS " OR b.con OR a.oid > b.oid)"
	"  ORDER BY a.oid, b.con DESC, b.oid";

static const char *const unused_sql =
	"SELECT 'unused-index', true, format('%I.%I', s.schemaname, s.indexrelname),"
	"       format('never scanned since the statistics were reset (%s); %s, on %I.%I',"
	"              coalesce(to_char(d.stats_reset AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI UTC'),"
	"                       'never'), pg_size_pretty(pg_relation_size(s.indexrelid)),"
	"              s.schemaname, s.relname),"
	"       format('DROP INDEX CONCURRENTLY %I.%I;', s.schemaname, s.indexrelname),"
	"       pg_relation_size(s.indexrelid)"
	"  FROM pg_stat_user_indexes s JOIN pg_index i ON i.indexrelid = s.indexrelid"
	"  LEFT JOIN pg_stat_database d ON d.datname = current_database()"
	" WHERE s.idx_scan = 0 AND i.indisvalid AND NOT i.indisunique"
	"   AND s.schemaname <> 'skiplock'"
	"   AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = s.indexrelid)"
	"   AND " SCHEMA_FILTER("s.schemaname") " AND pg_relation_size(s.indexrelid) >= $2"
	" ORDER BY 6 DESC, 3";

static const char *const stale_sql =
	"SELECT 'stale-stats', true, format('%I.%I', s.schemaname, s.relname),"
	"       CASE WHEN coalesce(s.last_analyze, s.last_autoanalyze) IS NULL"
	"         THEN format('never analyzed, %s rows written since it was created (a bulk load?):"
	" the planner works from defaults', s.n_mod_since_analyze)"
	"         ELSE format('%s rows changed since the last analyze at %s, %s%% of its %s rows',"
	"              s.n_mod_since_analyze, to_char(greatest(s.last_analyze, s.last_autoanalyze)"
	"              AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI UTC'),"
	"              round(100.0 * s.n_mod_since_analyze / greatest(c.reltuples, 1)),"
	"              c.reltuples::bigint) END,"
	"       format('ANALYZE %I.%I;', s.schemaname, s.relname), pg_table_size(s.relid)"
	"  FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid"
	" WHERE " SCHEMA_FILTER("s.schemaname") " AND s.n_mod_since_analyze >= 1000"
	"   AND (coalesce(s.last_analyze, s.last_autoanalyze) IS NULL"
	"        OR s.n_mod_since_analyze > 0.1 * greatest(c.reltuples, 0))"
	" ORDER BY s.n_mod_since_analyze DESC";

static const char *const dead_sql =
	"SELECT 'dead-tuples', true, format('%I.%I', s.schemaname, s.relname),"
	"       format('%s dead rows, %s%% of the table; last autovacuum: %s%s', s.n_dead_tup,"
	"              round(100.0 * s.n_dead_tup / (s.n_live_tup + s.n_dead_tup)),"
	"              coalesce(to_char(s.last_autovacuum AT TIME ZONE 'UTC',"
	"                               'YYYY-MM-DD HH24:MI UTC'), 'never'),"
	"              CASE WHEN c.reloptions && '{autovacuum_enabled=off,autovacuum_enabled=false}'"
	"                THEN ' (autovacuum is disabled on this table)' ELSE '' END),"
	"       format('VACUUM (ANALYZE) %I.%I;', s.schemaname, s.relname), pg_table_size(s.relid)"
	"  FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid"
	" WHERE " SCHEMA_FILTER("s.schemaname") " AND s.n_dead_tup >= 1000"
	"   AND s.n_dead_tup > 0.2 * (s.n_live_tup + s.n_dead_tup)"
	"   AND (s.last_autovacuum IS NULL OR s.last_autovacuum < now() - interval '1 hour')"
	" ORDER BY s.n_dead_tup DESC";

/* Heap bytes the live rows of skiplock.jobs need: header and line pointer
 * (28 bytes) plus the analyzed average width, at the table's fillfactor. */
static const char *const bloat_sql =
	"WITH j AS (SELECT c.oid, c.reltuples, pg_relation_size(c.oid) AS bytes,"
	"                  (SELECT sum(avg_width) FROM pg_stats"
	"                    WHERE schemaname = 'skiplock' AND tablename = 'jobs') AS width"
	"             FROM pg_class c WHERE c.oid = to_regclass('skiplock.jobs'))"
	" SELECT 'jobs-bloat', true, 'skiplock.jobs',"
	"        format('%s on disk for about %s live rows that need about %s: dead space left by"
	" finished and retried jobs', pg_size_pretty(bytes), reltuples::bigint,"
	"               pg_size_pretty((reltuples * (width + 28) / 0.8)::bigint)),"
	"        'VACUUM (ANALYZE) skiplock.jobs;  -- and prune finished jobs: skiplock jobs prune',"
	"        bytes"
	"   FROM j WHERE ($1::text IS NULL OR $1 = 'skiplock') AND width IS NOT NULL"
	"    AND bytes >= 8 * 1024 * 1024 AND bytes > 3 * reltuples * (width + 28) / 0.8";

/* The claim's row selection (SKL_CLAIM_PICK in queue.c) with sample
 * arguments, on a jobs table large enough for the plan to matter. */
static const char *const claim_size_sql =
	"SELECT coalesce((SELECT reltuples FROM pg_class"
	"                  WHERE oid = to_regclass('skiplock.jobs')), 0) >= 10000"
	"       AND ($1::text IS NULL OR $1 = 'skiplock')";
static const char *const claim_plan_sql =
	"EXPLAIN SELECT id FROM skiplock.jobs"
	" WHERE state = 'available' AND run_at <= now()"
	"   AND (NULL::text[] IS NULL OR queue = ANY (NULL::text[])) AND kind = ANY ('{k}'::text[])"
	" ORDER BY priority DESC, run_at, id LIMIT 10 FOR UPDATE SKIP LOCKED";

typedef struct find_ctx {
	const char *params[2];
	skl_finding *f;
	size_t n, cap;
} find_ctx;

static skl_finding *next_slot(find_ctx *x)
{
	if (x->n == x->cap) {
		size_t cap = x->cap ? x->cap * 2 : 16;
		skl_finding *f = realloc(x->f, cap * sizeof(*f));
		if (f == NULL)
			return NULL;
		x->f = f;
		x->cap = cap;
	}
	skl_finding *s = &x->f[x->n++];
	memset(s, 0, sizeof(*s));
	return s;
}

static void copy(char *dst, size_t cap, const char *src)
{
	snprintf(dst, cap, "%s", src ? src : "");
}

/* Appends the rows of one check (columns: check, action, object, detail,
 * fix, size). */
static skl_rc run_check(skl_client *c, find_ctx *x, const char *sql, int nparams, skl_error *err)
{
	PGresult *r = NULL;
	skl_rc rc = skl__exec(c, sql, nparams, x->params, &r, err);
	for (int i = 0; rc == SKL_OK && i < PQntuples(r); i++) {
		skl_finding *f = next_slot(x);
		if (f == NULL) {
			rc = skl__seterr(err, SKL_NOMEM, "out of memory");
			break;
		}
		copy(f->check, sizeof(f->check), PQgetvalue(r, i, 0));
		f->action = PQgetvalue(r, i, 1)[0] == 't';
		copy(f->object, sizeof(f->object), PQgetvalue(r, i, 2));
		copy(f->detail, sizeof(f->detail), PQgetvalue(r, i, 3));
		copy(f->fix, sizeof(f->fix), PQgetvalue(r, i, 4));
		f->size_bytes = PQgetisnull(r, i, 5) ? -1 : strtoll(PQgetvalue(r, i, 5), NULL, 10);
	}
	PQclear(r);
	return rc;
}

static skl_rc check_claim_plan(skl_client *c, find_ctx *x, skl_error *err)
{
	PGresult *r = NULL;
	skl_rc rc = skl__exec(c, claim_size_sql, 1, x->params, &r, err);
	bool big = rc == SKL_OK && PQntuples(r) == 1 && PQgetvalue(r, 0, 0)[0] == 't';
	PQclear(r);
	if (rc != SKL_OK || !big)
		return rc;
	r = NULL;
	if ((rc = skl__exec(c, claim_plan_sql, 0, NULL, &r, err)) != SKL_OK)
		return rc;
	bool uses = false;
	char first[200] = "";
	for (int i = 0; i < PQntuples(r); i++) {
		const char *line = PQgetvalue(r, i, 0);
		uses = uses || strstr(line, "jobs_claim_idx") != NULL;
		if (i == 0 || (first[0] == '\0' && strstr(line, "Scan")))
			copy(first, sizeof(first), line + strspn(line, " ->"));
	}
	PQclear(r);
	skl_finding *f = uses ? NULL : next_slot(x);
	if (f) {
		copy(f->check, sizeof(f->check), "claim-plan");
		f->action = true;
		copy(f->object, sizeof(f->object), "skiplock.jobs");
		snprintf(f->detail, sizeof(f->detail),
		         "the claim no longer reads the partial index jobs_claim_idx (plan: %s)", first);
		copy(f->fix, sizeof(f->fix), "ANALYZE skiplock.jobs;");
		f->size_bytes = -1;
	}
	return uses || f ? SKL_OK : skl__seterr(err, SKL_NOMEM, "out of memory");
}

static skl_rc indexes_fn(skl_client *c, void *ctx, skl_error *err)
{
	find_ctx *x = ctx;
	x->n = 0;   /* a retried attempt starts over */
	const char *const one[] = {invalid_sql, redundant_sql};
	const char *const more[] = {stale_sql, dead_sql, bloat_sql};
	skl_rc rc = SKL_OK;
	for (size_t i = 0; rc == SKL_OK && i < SKL_ARRAY_LEN(one); i++)
		rc = run_check(c, x, one[i], 1, err);
	if (rc == SKL_OK)
		rc = run_check(c, x, unused_sql, 2, err);
	for (size_t i = 0; rc == SKL_OK && i < SKL_ARRAY_LEN(more); i++)
		rc = run_check(c, x, more[i], 1, err);
	return rc == SKL_OK ? check_claim_plan(c, x, err) : rc;
}

skl_rc skl_diagnose_indexes(skl_client *c, const skl_index_opts *o, skl_finding **out,
                            size_t *n, skl_error *err)
{
	static const skl_txn_opts read_opts = {.txn = 1, .idempotent = 1};
	if (out)
		*out = NULL;
	if (n)
		*n = 0;
	if (c == NULL || out == NULL || n == NULL)
		return skl__seterr(err, SKL_MISUSE, "skl_diagnose_indexes: NULL argument");
	int64_t min = o && o->min_unused_bytes ? o->min_unused_bytes : 1024 * 1024;
	char minbuf[32];
	snprintf(minbuf, sizeof(minbuf), "%lld", (long long)(min < 0 ? 0 : min));
	find_ctx x = {.params = {o ? o->schema : NULL, minbuf}};
	skl_rc rc = skl__run(c, &read_opts, indexes_fn, &x, err);
	if (rc != SKL_OK || x.n == 0) {
		free(x.f);
		return rc;
	}
	*out = x.f;
	*n = x.n;
	skl_error_clear(err);
	return SKL_OK;
}

void skl_findings_free(skl_finding *f)
{
	free(f);
}
