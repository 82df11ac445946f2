/*
 * SPDX-License-Identifier: MIT
 * skiplock/diagnose.h — diagnostics behind `skiplock doctor pooler`,
 * `skiplock doctor indexes` and `skiplock explain --compare`.
 *
 * skl_diagnose_pooler learns from behaviour what sits between the client
 * and PostgreSQL (nothing, a session pooler or a transaction pooler) and
 * which session features work through it; it opens its own connections
 * and undoes every piece of session state it creates.
 * skl_diagnose_indexes reads the statistics views and catalogs and returns
 * findings about indexes and tables, each with a one-line fix.
 * skl_explain_compare measures a query's plan before and after a
 * candidate index inside one transaction that is always rolled back.
 * docs/diagnostics.md explains every rule and threshold.
 *
 * Memory: every report returned here belongs to the caller and is freed
 * with its *_free call (which accepts NULL).  Strings passed in are used
 * only during the call.  Out-parameters are set to NULL first and
 * assigned only on success.
 *
 * Thread-safety: as skl_client (one thread at a time per client); the
 * reports are plain data.  Every call blocks up to the client's deadlines.
 */
#ifndef SKIPLOCK_DIAGNOSE_H
#define SKIPLOCK_DIAGNOSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "skiplock/client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- doctor pooler ---- */

/* A session feature probed through the URL. */
typedef enum skl_probe_feature {
	SKL_PROBE_BACKEND = 0,    /* consecutive transactions keep their backend */
	SKL_PROBE_SET = 1,        /* a session SET survives into the next transaction */
	SKL_PROBE_LOCK = 2,       /* a session advisory lock is still held next transaction */
	SKL_PROBE_NOTIFY = 3,     /* LISTEN, then NOTIFY: the notification comes back */
	SKL_PROBE_PREPARED = 4,   /* a named prepared statement survives */
	SKL_PROBE_COUNT = 5
} skl_probe_feature;

typedef struct skl_probe_result {
	const char *name;         /* "backend", "session SET", … (static) */
	bool works;               /* the feature behaved as on a direct connection */
	char observed[256];       /* what was seen, for people */
	const char *skiplock;     /* what skiplock does about it (static) */
} skl_probe_result;

typedef struct skl_pooler_report {
	skl_pooler verdict;           /* NONE (direct), SESSION or TRANSACTION */
	skl_pooler configured;        /* what the client resolved from URL / --pooler */
	char evidence[512];           /* why the verdict, for people */
	skl_probe_result probes[SKL_PROBE_COUNT];
	bool undone;                  /* every probe's session state was removed */
	char undo_problem[512];       /* what could not be undone, when !undone */
	bool direct_checked;          /* a direct URL was given and reached */
	bool same_database;           /* it reaches the same database (when checked) */
	char direct_detail[512];      /* the identities compared */
} skl_pooler_report;

/* Probes the URL of opts (opts->direct_url, when set, is compared with it).
 * Opens short-lived connections with the same options (at most six at
 * once: the prober, holders of open transactions, a fresh one); each
 * database call is bounded by min(opts->call_timeout_ms, 5s).  Session
 * state created by the probes (a session advisory lock on key pair
 * (0x736b6c70, random), the setting skiplock.probe, a LISTEN channel and
 * a named prepared statement) is removed on the backend that holds it
 * before returning; report->undone says whether that succeeded.
 * SKL_UNREACHABLE when no connection could be made.  Free *out with
 * skl_pooler_report_free. */
SKL_API skl_rc skl_diagnose_pooler(const skl_client_options *opts, skl_pooler_report **out,
                                   skl_error *err);
/* Frees a pooler report.  Accepts NULL. */
SKL_API void skl_pooler_report_free(skl_pooler_report *r);

/* ---- doctor indexes ---- */

typedef struct skl_finding {
	char check[32];           /* "unused-index", "invalid-index", "duplicate-index",
	                           * "redundant-index", "stale-stats", "dead-tuples",
	                           * "jobs-bloat", "claim-plan" */
	bool action;              /* needs action (else a note) */
	char object[160];         /* schema.name of the index or table */
	char detail[320];         /* what was measured */
	char fix[320];            /* one SQL line that fixes it */
	int64_t size_bytes;       /* the object's size, -1 when not applicable */
} skl_finding;

typedef struct skl_index_opts {
	const char *schema;       /* NULL: every schema but pg_catalog,
	                           * information_schema, pg_toast and temp schemas */
	int64_t min_unused_bytes; /* unused indexes smaller than this are not
	                           * reported; 0: 1 MiB; negative: report all */
} skl_index_opts;

/* Runs every check (read-only statements) and returns the findings, most
 * urgent first, in *out (free with skl_findings_free; NULL and *n 0 when
 * there is nothing to report).  o may be NULL. */
SKL_API skl_rc skl_diagnose_indexes(skl_client *c, const skl_index_opts *o, skl_finding **out,
                                    size_t *n, skl_error *err);
/* Frees the findings of skl_diagnose_indexes.  Accepts NULL. */
SKL_API void skl_findings_free(skl_finding *f);

/* ---- explain --compare ---- */

typedef struct skl_plan_node {
	int depth;                /* 0 for the root */
	char node[200];           /* "Index Scan using i on t", "Seq Scan on t", … */
	double est_rows;          /* planner's rows per loop */
	double actual_rows;       /* actual rows per loop */
	double loops;
	int64_t shared_hit;       /* inclusive of children, as EXPLAIN reports */
	int64_t shared_read;
} skl_plan_node;

typedef struct skl_plan {
	skl_plan_node *nodes;     /* depth-first, root first */
	size_t nnodes;
	int64_t shared_hit;       /* the root's: the whole execution */
	int64_t shared_read;
	double planning_ms;
	double execution_ms;
} skl_plan;

typedef enum skl_explain_verdict {
	SKL_EXPLAIN_FEWER = 0,    /* at least 10% fewer shared buffers */
	SKL_EXPLAIN_SAME = 1,     /* within 10% */
	SKL_EXPLAIN_MORE = 2      /* at least 10% more */
} skl_explain_verdict;

typedef struct skl_explain_opts {
	const char *index_sql;    /* CREATE [UNIQUE] INDEX … (no CONCURRENTLY) */
	const char *query;        /* one SELECT */
	bool yes;                 /* run even on a production-sized table */
	int64_t max_table_bytes;  /* larger tables are production-sized; 0: 1 GiB */
	int64_t max_table_rows;   /* so are tables with more rows; 0: 1,000,000 */
} skl_explain_opts;

typedef struct skl_explain_report {
	skl_plan before, after;
	char index_name[160];     /* the candidate's name (generated when not given) */
	char table_name[160];
	bool uses_index;          /* the after plan reads the candidate */
	skl_explain_verdict verdict;
	double change;            /* (after - before) / before buffers; 0 when before is 0 */
} skl_explain_report;

/* Checks the shape of index_sql and query without a database: SKL_INVALID
 * naming the problem, else SKL_OK.  On SKL_OK, table (cap bytes) receives
 * the table name as written after ON.  Pure; thread-safe. */
SKL_API skl_rc skl_explain_check(const char *index_sql, const char *query, char *table,
                                 size_t cap, skl_error *err);

/* Validates (skl_explain_check; then EXPLAIN of the query in a read-only
 * transaction, refused when it would modify data; then the table exists and
 * is not production-sized unless o->yes: SKL_INVALID / SKL_CONFLICT before
 * anything runs), then in one transaction: builds the index once under a
 * savepoint that is rolled back (its errors are SKL_INVALID), runs EXPLAIN
 * (ANALYZE, BUFFERS) of the query, creates the index, ANALYZEs the table,
 * runs it again, and rolls back.  Nothing is kept.  Free *out with
 * skl_explain_report_free. */
SKL_API skl_rc skl_explain_compare(skl_client *c, const skl_explain_opts *o,
                                   skl_explain_report **out, skl_error *err);
/* Frees an explain report.  Accepts NULL. */
SKL_API void skl_explain_report_free(skl_explain_report *r);

#ifdef __cplusplus
}
#endif
#endif
