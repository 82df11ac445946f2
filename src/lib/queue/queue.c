/*
 * queue.c — enqueue, claim, fenced outcomes, heartbeat, rescue, operator
 * actions and retention for skiplock.jobs (sql/0002_jobs.sql).
 *
 * Fencing invariant: a claim adds 1 to fencing; every statement here that
 * ends or extends a claim matches (id, fencing, state = 'running'), so the
 * holder of an old token — a frozen worker that woke up, a worker whose job
 * was rescued or cancelled — changes nothing and is told so.
 *
 * Every statement is a single autocommit statement (no transaction is held
 * open between round trips) and goes through skl__run for retries.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "core/buf.h"
#include "core/internal.h"
#include "queue/queue_int.h"
#include "skiplock/queue.h"
#include "skiplock/retry.h"

void skl_enqueue_opts_init(skl_enqueue_opts *o)
{
	memset(o, 0, sizeof(*o));
}

/* ---- enqueue ---- */

static const char *const enqueue_sql =
	"SELECT unnest(skiplock.enqueue_many($1, $2::text[], $3::jsonb[], $4::text[], "
	"$5::timestamptz[], $6::bigint[], $7::int[], $8::text[], $9::int[], $10::int[], "
	"$11::int[], $12::int[], $13::text[]))";

enum { EQ_KIND, EQ_PAYLOAD, EQ_QUEUE, EQ_RUN_AT, EQ_DELAY, EQ_PRIO, EQ_UKEY, EQ_MAX, EQ_TMO, EQ_BB,
       EQ_BC, EQ_BS, EQ_NCOLS };

/* Jobs per statement.  A larger batch is sent in chunks of this many, one
 * statement each, inside one transaction: the server never holds more
 * than a chunk's arrays and rows in memory, and no column's array literal
 * nears the 64 MiB buffer cap for ordinary payloads. */
#define EQ_CHUNK 5000

static void int_array(skl_buf *b, const int64_t *v, size_t n);

/* Whether each job's row is this transaction's: its xmin is the current
 * transaction id.  A separate statement, because the enqueue statement's
 * own snapshot cannot see the rows its function inserted. */
static const char *const inserted_sql =
	"SELECT j.xmin = xid(pg_current_xact_id()) AS mine"
	"  FROM unnest($1::bigint[]) WITH ORDINALITY AS u(id, ord)"
	"  LEFT JOIN skiplock.jobs j ON j.id = u.id ORDER BY u.ord";

typedef struct enqueue_call {
	char base[33];           /* the call's retry token; chunk k sends base-k */
	char token[48];
	skl_buf cols[EQ_NCOLS];
	bool set[EQ_NCOLS];      /* some job has a non-NULL value in the column */
	const skl_job_spec *jobs;
	size_t n;
	int64_t *ids;
	skl_enqueued *inserted;  /* NULL: not asked for */
	bool ran_ok;             /* a run returned OK: its COMMIT may have happened */
	bool maybe_committed;    /* so this run may have found that run's token */
} enqueue_call;

/* One array element; NULL (the column's default) is written unquoted. */
static void add_str(enqueue_call *e, int col, const char *v)
{
	e->set[col] |= v != NULL;
	skl_buf_array_elem(&e->cols[col], v);
}

static void add_int(enqueue_call *e, int col, int64_t v, bool null_if_zero)
{
	if (null_if_zero && v == 0) {
		skl_buf_adds(&e->cols[col], "NULL");
		return;
	}
	e->set[col] = true;
	skl_buf_printf(&e->cols[col], "%" PRId64, v);
}

/* The jobs as one array literal per column.  Defaults are sent as NULL
 * (the function fills them in), and a column no job sets as a NULL array:
 * most batches set two columns of twelve, so the statement stays small. */
static skl_rc build_columns(enqueue_call *e, const skl_job_spec *jobs, size_t n, skl_error *err)
{
	for (int c = 0; c < EQ_NCOLS; c++) {
		skl_buf_reset(&e->cols[c]);
		e->set[c] = false;
		skl_buf_adds(&e->cols[c], "{");
	}
	for (size_t i = 0; i < n; i++) {
		const skl_job_spec *j = &jobs[i];
		const skl_enqueue_opts *o = &j->opts;
		if (i > 0)
			for (int c = 0; c < EQ_NCOLS; c++)
				skl_buf_adds(&e->cols[c], ",");
		add_str(e, EQ_KIND, j->kind ? j->kind : "");
		add_str(e, EQ_PAYLOAD, j->payload);
		add_str(e, EQ_QUEUE, o->queue);
		add_str(e, EQ_RUN_AT, o->run_at);
		/* a delay is added to the database clock, never the client's */
		add_int(e, EQ_DELAY, o->delay_ms, true);
		add_int(e, EQ_PRIO, o->priority, true);
		add_str(e, EQ_UKEY, o->unique_key);
		add_int(e, EQ_MAX, o->max_attempts > 0 ? o->max_attempts : 0, true);
		add_int(e, EQ_TMO, o->timeout_ms, true);
		add_int(e, EQ_BB, o->backoff_base_ms, true);
		add_int(e, EQ_BC, o->backoff_cap_ms, true);
		add_str(e, EQ_BS, skl_backoff_name(o->backoff));
	}
	for (int c = 0; c < EQ_NCOLS; c++)
		if (!skl_buf_adds(&e->cols[c], "}"))
			return skl__seterr(err, SKL_INVALID, "batch too large (over 64 MiB in one column)");
	return SKL_OK;
}

/* inserted[from, from + n) for the ids just returned, in the same
 * transaction. */
static skl_rc chunk_inserted(skl_client *c, enqueue_call *e, size_t from, size_t n,
                             skl_error *err)
{
	skl_buf a;
	skl_buf_init(&a, 0);
	int_array(&a, e->ids + from, n);
	const char *vals[1] = {skl_buf_str(&a)};
	PGresult *res = NULL;
	skl_rc rc = skl_buf_failed(&a) ? skl__seterr(err, SKL_NOMEM, "out of memory")
	                               : skl__exec(c, inserted_sql, 1, vals, &res, err);
	skl_buf_free(&a);
	if (rc != SKL_OK)
		return rc;
	if ((size_t)PQntuples(res) != n) {
		PQclear(res);
		return skl__seterr(err, SKL_DB, "inserted check returned %d rows for %zu jobs",
		                   PQntuples(res), n);
	}
	for (size_t i = 0; i < n; i++)
		e->inserted[from + i] = PQgetvalue(res, (int)i, 0)[0] == 't' ? SKL_ENQUEUED_INSERTED
		                                                              : SKL_ENQUEUED_EXISTING;
	PQclear(res);
	return SKL_OK;
}

/* Sends jobs[from, from + n) as one statement; their ids go to ids[from...]. */
static skl_rc enqueue_chunk(skl_client *c, enqueue_call *e, size_t from, size_t n,
                            skl_error *err)
{
	skl_rc rc = build_columns(e, e->jobs + from, n, err);
	if (rc != SKL_OK)
		return rc;
	if (e->n > EQ_CHUNK)
		snprintf(e->token, sizeof(e->token), "%s-%zx", e->base, from / EQ_CHUNK);
	else
		memcpy(e->token, e->base, sizeof(e->base));
	const char *vals[1 + EQ_NCOLS];
	vals[0] = e->token;
	for (int i = 0; i < EQ_NCOLS; i++)
		vals[1 + i] = e->set[i] || i == EQ_KIND ? skl_buf_str(&e->cols[i]) : NULL;
	PGresult *res = NULL;
	rc = skl__exec(c, enqueue_sql, 1 + EQ_NCOLS, vals, &res, err);
	if (rc != SKL_OK)
		return rc;
	if ((size_t)PQntuples(res) != n) {
		PQclear(res);
		return skl__seterr(err, SKL_DB, "enqueue returned %d ids for %zu jobs",
		                   PQntuples(res), n);
	}
	for (size_t i = 0; i < n; i++)
		e->ids[from + i] = strtoll(PQgetvalue(res, (int)i, 0), NULL, 10);
	PQclear(res);
	return e->inserted ? chunk_inserted(c, e, from, n, err) : SKL_OK;
}

static skl_rc enqueue_fn(skl_client *c, void *ctx, skl_error *err)
{
	enqueue_call *e = ctx;
	e->maybe_committed |= e->ran_ok;
	e->ran_ok = false;
	skl_rc rc = SKL_OK;
	for (size_t from = 0; rc == SKL_OK && from < e->n; from += EQ_CHUNK)
		rc = enqueue_chunk(c, e, from, e->n - from < EQ_CHUNK ? e->n - from : EQ_CHUNK, err);
	e->ran_ok = rc == SKL_OK;
	return rc;
}

typedef struct id_at {
	int64_t id;
	size_t at;
} id_at;

static int id_at_cmp(const void *a, const void *b)
{
	const id_at *x = a, *y = b;
	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return x->at < y->at ? -1 : x->at > y->at;
}

/* The verdicts once the transaction committed.  A job whose id an earlier
 * job of the batch already has was found, not inserted.  After a retry of
 * a COMMIT whose answer was lost, a run in which no row is this
 * transaction's may have returned the lost run's ids from its token: a
 * job without a unique key was inserted by whichever run committed, but
 * whether a keyed one was is not known. */
static skl_rc settle_inserted(const enqueue_call *e, skl_error *err)
{
	bool fresh = false;
	for (size_t i = 0; i < e->n; i++)
		fresh |= e->inserted[i] == SKL_ENQUEUED_INSERTED;
	for (size_t i = 0; e->maybe_committed && !fresh && i < e->n; i++)
		e->inserted[i] = e->jobs[i].opts.unique_key ? SKL_ENQUEUED_UNKNOWN
		                                             : SKL_ENQUEUED_INSERTED;
	id_at *s = malloc(e->n * sizeof(*s));
	if (s == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	for (size_t i = 0; i < e->n; i++)
		s[i] = (id_at){.id = e->ids[i], .at = i};
	qsort(s, e->n, sizeof(*s), id_at_cmp);
	for (size_t i = 1; i < e->n; i++)
		if (s[i].id == s[i - 1].id)
			e->inserted[s[i].at] = SKL_ENQUEUED_EXISTING;
	free(s);
	return SKL_OK;
}

static skl_rc validate_spec(const skl_job_spec *j, size_t i, skl_error *err)
{
	size_t kl = j->kind ? strlen(j->kind) : 0;
	if (kl == 0 || kl > SKL_KIND_MAX)
		return skl__seterr(err, SKL_INVALID, "job %zu: kind must be 1 to %d bytes", i + 1,
		                   SKL_KIND_MAX);
	size_t ql = j->opts.queue ? strlen(j->opts.queue) : 1;
	if (ql == 0 || ql > SKL_KIND_MAX)
		return skl__seterr(err, SKL_INVALID, "job %zu: queue name must be 1 to %d bytes",
		                   i + 1, SKL_KIND_MAX);
	size_t ul = j->opts.unique_key ? strlen(j->opts.unique_key) : 1;
	if (ul == 0 || ul > SKL_UNIQUE_KEY_MAX)
		return skl__seterr(err, SKL_INVALID, "job %zu: unique key must be 1 to %d bytes",
		                   i + 1, SKL_UNIQUE_KEY_MAX);
	if (j->opts.max_attempts < 0 || j->opts.timeout_ms < 0 || j->opts.delay_ms < 0 ||
	    j->opts.backoff_base_ms < 0 || j->opts.backoff_cap_ms < 0)
		return skl__seterr(err, SKL_INVALID, "job %zu: negative attempts or duration", i + 1);
	if (j->opts.backoff != SKL_BACKOFF_DEFAULT && skl_backoff_name(j->opts.backoff) == NULL)
		return skl__seterr(err, SKL_INVALID, "job %zu: unknown backoff strategy %d", i + 1,
		                   (int)j->opts.backoff);
	return skl__parents_check(&j->opts, i, err);
}

skl_rc skl_enqueue_bulk(skl_client *c, const skl_job_spec *jobs, size_t n, int64_t *ids,
                        skl_error *err)
{
	return skl_enqueue_bulk_ex(c, jobs, n, ids, NULL, err);
}

skl_rc skl_enqueue_bulk_ex(skl_client *c, const skl_job_spec *jobs, size_t n, int64_t *ids,
                           skl_enqueued *inserted, skl_error *err)
{
	if (n == 0)
		return SKL_OK;
	if (jobs == NULL || ids == NULL)
		return skl__seterr(err, SKL_MISUSE, "jobs and ids must not be NULL");
	for (size_t i = 0; i < n; i++) {
		if (validate_spec(&jobs[i], i, err) != SKL_OK)
			return SKL_INVALID;
		if (n > 1 && skl__has_parents(&jobs[i].opts))
			return skl__seterr(err, SKL_INVALID, "job %zu: a job with parents is enqueued "
			                   "alone", i + 1);
	}
	/* parents: skiplock.enqueue_after (deps.c) */
	if (skl__has_parents(&jobs[0].opts))
		return skl__enqueue_after(c, &jobs[0], ids, inserted, err);
	enqueue_call e = {.jobs = jobs, .n = n, .ids = ids, .inserted = inserted};
	snprintf(e.base, sizeof(e.base), "%016" PRIx64 "%016" PRIx64, skl__rand(&c->rng),
	         skl__rand(&c->rng));
	/* Idempotent: the tokens make a retry after a lost answer return the
	 * first call's ids.  Up to EQ_CHUNK jobs are one autocommit statement;
	 * more, or the inserted check, are one transaction of several, all or
	 * nothing. */
	static const skl_txn_opts one = {.idempotent = 1};
	static const skl_txn_opts chunked = {.idempotent = 1, .txn = 1};
	skl_rc rc = skl__run(c, n > EQ_CHUNK || inserted ? &chunked : &one, enqueue_fn, &e, err);
	if (rc == SKL_OK && inserted)
		rc = settle_inserted(&e, err);
	for (int i = 0; i < EQ_NCOLS; i++)
		skl_buf_free(&e.cols[i]);
	/* A value the database refused (a run_at out of range, a constraint):
	 * bad input, nothing written. */
	if (rc == SKL_DB && err && (strncmp(err->sqlstate, "22", 2) == 0 ||
	                            strncmp(err->sqlstate, "23", 2) == 0))
		err->rc = rc = SKL_INVALID;
	return rc;
}

skl_rc skl_enqueue(skl_client *c, const char *kind, const char *payload,
                   const skl_enqueue_opts *opts, int64_t *id, skl_error *err)
{
	skl_job_spec spec = {.kind = kind, .payload = payload};
	if (opts)
		spec.opts = *opts;
	return skl_enqueue_bulk(c, &spec, 1, id, err);
}

/* ---- the worker protocol: claim, record, heartbeat ----
 *
 * The lifecycle is defined once, in SQL (sql/0011_protocol.sql:
 * skiplock.claim, record, record_claim, heartbeat, rescue); this file only
 * builds their arguments (the outcomes as one JSON array, protocol 3),
 * calls those functions and reads their rows by name.
 * Every statement has a fixed text and parameter count, so the worker
 * prepares each once per direct connection (skl__exec_hot). */

/* The columns of a claimed job.  The select lists are built from this
 * table and every result is checked against it (skl__columns_match), so a
 * column read by position is always the one its name says. */
#define CLAIM_COLUMNS(X)                                                    \
	X(CJ_ID, "id") X(CJ_QUEUE, "queue") X(CJ_KIND, "kind")                  \
	X(CJ_PAYLOAD, "payload") X(CJ_ATTEMPT, "attempt") X(CJ_MAX, "max_attempts") \
	X(CJ_FENCING, "fencing") X(CJ_PRIORITY, "priority") X(CJ_TIMEOUT, "timeout_ms") \
	X(CJ_RUN_AT_US, "run_at_us")
#define COL_ENUM(e, name) e,
#define COL_NAME(e, name) name,
#define COL_LIST(e, name) name ", "
/* After the job's columns: the row's type, then for an accepted outcome
 * (row_type 'recorded') its new state and the retry delay chosen. */
enum { CLAIM_COLUMNS(COL_ENUM) CJ_ROW_TYPE, CJ_STATE, CJ_DELAY, CJ_NCOLS };
static const char *const claim_cols[CJ_NCOLS] = {CLAIM_COLUMNS(COL_NAME) "row_type", "state",
                                                  "delay_ms"};

#define SKL_CLAIM_ARGS(o, k, q, n, l, ap, ar, ai)                            \
	o ", " k "::text[], " q "::text[], " n "::int, " l "::bigint * interval '1 millisecond', " \
	ap "::int, " ar "::bigint, " ai "::bigint"

static const char *const claim_sql =
	"SELECT " CLAIM_COLUMNS(COL_LIST) "'claimed'::text AS row_type"
	"  FROM skiplock.claim(" SKL_CLAIM_ARGS("$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8") ")";
/* The outcomes ($1, protocol 3: one JSON array of skiplock.outcome
 * objects), the claim's arguments, then whether to return a 'wait' row
 * when a limit held jobs back ($10). */
static const char *const record_claim_sql =
	"SELECT " CLAIM_COLUMNS(COL_LIST) "row_type, state, delay_ms"
	"  FROM skiplock.record_claim_rows($1::skiplock.outcome[], "
	SKL_CLAIM_ARGS("$2", "$3", "$4", "$5", "$6", "$7", "$8", "$9")
	", wait_hints => $10::boolean)";
enum { RC_ID, RC_STATE, RC_DELAY, RC_NCOLS };
static const char *const record_cols[RC_NCOLS] = {"id", "state", "delay_ms"};
static const char *const record_sql =
	"SELECT id, state, delay_ms FROM skiplock.record_rows($1::skiplock.outcome[])";

const char *skl__claim_sql(bool record)
{
	return record ? record_claim_sql : claim_sql;
}

const char *skl__record_sql(void)
{
	return record_sql;
}

static skl_rc columns_error(skl_error *err)
{
	return skl__seterr(err, SKL_DB,
	                   "the protocol functions returned unexpected columns; "
	                   "run `skiplock init` to bring the schema to this version");
}

typedef struct claim_call {
	const char *sql;
	int nparams;
	const char *params[10];
	skl_job *jobs;
	size_t n;
	int64_t wait_ms;         /* a 'wait' row's delay_ms, or -1 */
	size_t nouts;            /* with outcomes: what became of each */
	const skl_outcome *outs;
	skl_recorded *rec;
} claim_call;

/* One allocation per job holds its strings: internal points at it. */
static bool fill_job(skl_job *j, const PGresult *r, int row)
{
	size_t lq = strlen(PQgetvalue(r, row, CJ_QUEUE)) + 1,
	       lk = strlen(PQgetvalue(r, row, CJ_KIND)) + 1,
	       lp = strlen(PQgetvalue(r, row, CJ_PAYLOAD)) + 1;
	char *mem = malloc(lq + lk + lp);
	if (mem == NULL)
		return false;
	memcpy(mem, PQgetvalue(r, row, CJ_QUEUE), lq);
	memcpy(mem + lq, PQgetvalue(r, row, CJ_KIND), lk);
	memcpy(mem + lq + lk, PQgetvalue(r, row, CJ_PAYLOAD), lp);
	*j = (skl_job){
		.id = strtoll(PQgetvalue(r, row, CJ_ID), NULL, 10),
		.queue = mem,
		.kind = mem + lq,
		.payload = mem + lq + lk,
		.attempt = atoi(PQgetvalue(r, row, CJ_ATTEMPT)),
		.max_attempts = atoi(PQgetvalue(r, row, CJ_MAX)),
		.fencing = strtoll(PQgetvalue(r, row, CJ_FENCING), NULL, 10),
		.priority = atoi(PQgetvalue(r, row, CJ_PRIORITY)),
		.timeout_ms = strtoll(PQgetvalue(r, row, CJ_TIMEOUT), NULL, 10),
		.run_at_us = strtoll(PQgetvalue(r, row, CJ_RUN_AT_US), NULL, 10),
		.internal = mem,
	};
	return true;
}

/* Marks rec[i] for the outcome whose id an accepted row names. */
static void mark_recorded(skl_recorded *rec, const skl_outcome *outs, size_t n,
                          const PGresult *res, int row, const int *col)
{
	int64_t id = strtoll(PQgetvalue(res, row, col[0]), NULL, 10);
	for (size_t i = 0; rec && i < n; i++)
		if (outs[i].id == id) {
			rec[i].accepted = true;
			rec[i].discarded = PQgetvalue(res, row, col[1])[0] == 'd';
			rec[i].delay_ms = PQgetisnull(res, row, col[2])
			                      ? 0 : strtoll(PQgetvalue(res, row, col[2]), NULL, 10);
		}
}

static void recorded_reset(skl_recorded *rec, size_t n)
{
	for (size_t i = 0; rec && i < n; i++)
		rec[i] = (skl_recorded){.accepted = false};
}

static skl_rc claim_fn(skl_client *c, void *ctx, skl_error *err)
{
	claim_call *cc = ctx;
	PGresult *res = NULL;
	skl_rc rc = skl__exec_hot(c, cc->sql, cc->nparams, cc->params, &res, err);
	if (rc != SKL_OK)
		return rc;
	int ncols = cc->outs ? CJ_NCOLS : CJ_ROW_TYPE + 1, rows = PQntuples(res);
	if (!skl__columns_match(res, claim_cols, ncols)) {
		PQclear(res);
		return columns_error(err);
	}
	cc->jobs = rows ? calloc((size_t)rows, sizeof(skl_job)) : NULL;
	if (rows && cc->jobs == NULL) {
		PQclear(res);
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	}
	recorded_reset(cc->rec, cc->nouts);
	static const int rec_cols[3] = {CJ_ID, CJ_STATE, CJ_DELAY};
	for (int i = 0; i < rows; i++) {
		char type = PQgetvalue(res, i, CJ_ROW_TYPE)[0];
		if (type == 'r') {
			mark_recorded(cc->rec, cc->outs, cc->nouts, res, i, rec_cols);
		} else if (type == 'w') {
			cc->wait_ms = strtoll(PQgetvalue(res, i, CJ_DELAY), NULL, 10);
		} else if (fill_job(&cc->jobs[cc->n], res, i)) {
			cc->n++;
		} else {
			PQclear(res);
			return skl__seterr(err, SKL_NOMEM, "out of memory");
		}
	}
	PQclear(res);
	return cc->n ? SKL_OK : SKL_EMPTY;
}

/* The claim's parameters as text; queues and kinds are allocated. */
typedef struct claim_params {
	char *queues, *kinds;
	char limit[24], lease[24];
	char after[3][24];       /* the place to claim after: priority, run_at µs, id */
} claim_params;

/* Fills params[first .. first + 8) with the claim's arguments. */
static skl_rc claim_params_make(claim_params *p, const skl_claim_opts *o, claim_call *cc,
                                int first, skl_error *err)
{
	memset(p, 0, sizeof(*p));
	if (o == NULL || o->nkinds == 0 || o->limit == 0 || o->lease_ms <= 0)
		return skl__seterr(err, SKL_MISUSE, "claim needs kinds, a limit and a lease");
	snprintf(p->limit, sizeof(p->limit), "%zu", o->limit);
	snprintf(p->lease, sizeof(p->lease), "%" PRId64, o->lease_ms);
	snprintf(p->after[0], sizeof(p->after[0]), "%d", o->after_priority);
	snprintf(p->after[1], sizeof(p->after[1]), "%" PRId64, o->after_run_at_us);
	snprintf(p->after[2], sizeof(p->after[2]), "%" PRId64, o->after_id);
	p->queues = o->nqueues ? skl_text_array(o->queues, o->nqueues) : NULL;
	p->kinds = skl_text_array(o->kinds, o->nkinds);
	if (p->kinds == NULL || (o->nqueues && p->queues == NULL))
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	const char *v[8] = {o->owner ? o->owner : "skiplock", p->kinds, p->queues, p->limit,
	                    p->lease, NULL, NULL, NULL};
	for (int i = 0; o->after_set && i < 3; i++)
		v[5 + i] = p->after[i];
	memcpy(cc->params + first, v, sizeof(v));
	return SKL_OK;
}

static void claim_params_free(claim_params *p)
{
	free(p->queues);
	free(p->kinds);
}

/* Runs a claim call; hands over the jobs on SKL_OK. */
static skl_rc run_claim(skl_client *c, claim_call *cc, skl_job **jobs, size_t *n,
                        skl_error *err)
{
	/* Not idempotent: after an indeterminate claim the jobs, if claimed, are
	 * rescued when their lease expires. */
	static const skl_txn_opts opts = {0};
	skl_rc rc = skl__run(c, &opts, claim_fn, cc, err);
	if (rc != SKL_OK && rc != SKL_EMPTY) {
		skl_jobs_free(cc->jobs, cc->n);
		return rc;
	}
	*jobs = cc->n ? cc->jobs : NULL;
	*n = cc->n;
	if (cc->n == 0)
		free(cc->jobs);
	return rc;
}

skl_rc skl_claim(skl_client *c, const skl_claim_opts *o, skl_job **jobs, size_t *n,
                 skl_error *err)
{
	*jobs = NULL;
	*n = 0;
	claim_call cc = {.sql = claim_sql, .nparams = 8};
	claim_params p;
	skl_rc rc = claim_params_make(&p, o, &cc, 0, err);
	if (rc == SKL_OK)
		rc = run_claim(c, &cc, jobs, n, err);
	claim_params_free(&p);
	return rc;
}

void skl_jobs_free(skl_job *jobs, size_t n)
{
	for (size_t i = 0; jobs && i < n; i++)
		free(jobs[i].internal);
	free(jobs);
}

/* ---- outcomes ---- */

static const char *const outcome_names[] = {"ok", "retry", "discard"};

/* A text field of a record that is an element of an array literal, the
 * two text formats of PostgreSQL nested (record_in inside array_in): the
 * field is quoted, a quote or backslash in it doubled for the record, and
 * then every quote and backslash of that escaped with a backslash for the
 * array.  Written always quoted, so that "" stays an empty string and the
 * field's commas, parentheses and spaces are text. */
static bool record_text(skl_buf *b, const char *s)
{
	skl_buf_add(b, "\\\"", 2);
	while (*s) {
		size_t n = strcspn(s, "\"\\");
		skl_buf_add(b, s, n);
		s += n;
		if (*s == '"')
			skl_buf_add(b, "\\\"\\\"", 4);
		else if (*s == '\\')
			skl_buf_add(b, "\\\\\\\\", 4);
		if (*s)
			s++;
	}
	return skl_buf_add(b, "\\\"", 2);
}

/* A bigint field, or NULL (nothing between the commas) when not set. */
static bool record_int(skl_buf *b, int64_t v, bool set)
{
	return set ? skl_buf_printf(b, ",%lld", (long long)v) : skl_buf_adds(b, ",");
}

/* A text field after its comma, or NULL. */
static bool record_opt_text(skl_buf *b, const char *s)
{
	skl_buf_adds(b, ",");
	return s ? record_text(b, s) : true;
}

/* One outcome as an element of a skiplock.outcome[] literal (protocol 4,
 * sql/0036_outcome_rows.sql), its fields in the type's order: queue, id,
 * fencing, outcome, result, error, retry_after_ms, deferred, backoff,
 * backoff_base_ms, backoff_cap_ms; a field not set is NULL.  The result
 * goes as text, byte for byte as the handler wrote it, for the server to
 * read as jsonb (a number of any size stays exact). */
static bool outcome_record(skl_buf *b, const skl_outcome *o)
{
	unsigned k = (unsigned)o->kind < SKL_ARRAY_LEN(outcome_names) ? (unsigned)o->kind : 1;
	const char *result = o->kind == SKL_OUTCOME_COMPLETE ? o->result : NULL;
	bool ok = skl_buf_adds(b, "\"(");
	if (ok && o->queue)
		ok = record_text(b, o->queue);
	ok = ok && skl_buf_printf(b, ",%lld,%lld,%s", (long long)o->id, (long long)o->fencing,
	                          outcome_names[k]);
	ok = ok && record_opt_text(b, result) && record_opt_text(b, o->error);
	ok = ok && record_int(b, o->retry_delay_ms, o->retry_delay_ms > 0);
	ok = ok && skl_buf_adds(b, o->deferred ? ",t" : ",");
	ok = ok && record_opt_text(b, skl_backoff_name(o->backoff));
	ok = ok && record_int(b, o->backoff_base_ms, o->backoff_base_ms > 0);
	ok = ok && record_int(b, o->backoff_cap_ms, o->backoff_cap_ms > 0);
	return ok && skl_buf_adds(b, ")\"");
}

/* The outcomes as one skiplock.outcome[] literal in *text (to free with
 * skl_buf_free). */
static skl_rc outcomes_text(skl_buf *text, const skl_outcome *outs, size_t n, skl_error *err)
{
	bool ok = true;
	skl_buf_init(text, 0);
	skl_buf_adds(text, "{");
	for (size_t i = 0; ok && i < n; i++) {
		if (i)
			skl_buf_adds(text, ",");
		ok = outcome_record(text, &outs[i]);
	}
	skl_buf_adds(text, "}");
	if (!ok || skl_buf_failed(text))
		return skl__seterr(err, SKL_NOMEM, "out of memory building outcomes");
	return SKL_OK;
}

typedef struct record_call {
	const char *params[1];
	const skl_outcome *outs;
	size_t n;
	skl_recorded *rec;
} record_call;

static skl_rc record_fn(skl_client *c, void *ctx, skl_error *err)
{
	record_call *r = ctx;
	PGresult *res = NULL;
	skl_rc rc = skl__exec_hot(c, record_sql, 1, r->params, &res, err);
	if (rc != SKL_OK)
		return rc;
	if (!skl__columns_match(res, record_cols, RC_NCOLS)) {
		PQclear(res);
		return columns_error(err);
	}
	recorded_reset(r->rec, r->n);
	static const int cols[3] = {RC_ID, RC_STATE, RC_DELAY};
	for (int i = 0; i < PQntuples(res); i++)
		mark_recorded(r->rec, r->outs, r->n, res, i, cols);
	PQclear(res);
	return SKL_OK;
}

skl_rc skl__record(skl_client *c, const skl_outcome *outs, size_t n, skl_recorded *rec,
                   skl_error *err)
{
	if (n == 0)
		return SKL_OK;
	skl_buf json;
	record_call r = {.outs = outs, .n = n, .rec = rec};
	skl_rc rc = outcomes_text(&json, outs, n, err);
	r.params[0] = skl_buf_str(&json);
	/* Fenced: a retry after an indeterminate answer cannot apply twice (the
	 * first application ended the claim); it is then reported as not
	 * accepted. */
	static const skl_txn_opts o = {.idempotent = 1};
	if (rc == SKL_OK)
		rc = skl__run(c, &o, record_fn, &r, err);
	skl_buf_free(&json);
	return rc;
}

skl_rc skl__record_and_claim(skl_client *c, const skl_outcome *outs, size_t nouts,
                             skl_recorded *rec, const skl_claim_opts *o, skl_job **jobs,
                             size_t *n, int64_t *wait_ms, skl_error *err)
{
	*jobs = NULL;
	*n = 0;
	if (wait_ms)
		*wait_ms = -1;
	if (nouts == 0 && wait_ms == NULL)
		return skl_claim(c, o, jobs, n, err);
	claim_call cc = {.sql = record_claim_sql, .nparams = 10, .outs = outs, .nouts = nouts,
	                 .rec = rec, .wait_ms = -1};
	cc.params[9] = wait_ms ? "t" : "f";
	claim_params p;
	skl_buf json;
	skl_rc rc = outcomes_text(&json, outs, nouts, err);
	cc.params[0] = skl_buf_str(&json);
	skl_rc prc = claim_params_make(&p, o, &cc, 1, err);
	if (rc == SKL_OK)
		rc = prc;
	if (rc == SKL_OK)
		rc = run_claim(c, &cc, jobs, n, err);
	if (wait_ms && (rc == SKL_OK || rc == SKL_EMPTY))
		*wait_ms = cc.wait_ms;
	skl_buf_free(&json);
	claim_params_free(&p);
	return rc;
}

/* The public forms report only whether each outcome was accepted. */
static skl_recorded *recorded_new(size_t n)
{
	return calloc(n ? n : 1, sizeof(skl_recorded));
}

static void recorded_accepted(const skl_recorded *rec, bool *accepted, size_t n)
{
	for (size_t i = 0; accepted && i < n; i++)
		accepted[i] = rec[i].accepted;
}

skl_rc skl_record(skl_client *c, const skl_outcome *outs, size_t n, bool *accepted,
                  skl_error *err)
{
	skl_recorded *rec = recorded_new(n);
	if (rec == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	skl_rc rc = skl__record(c, outs, n, rec, err);
	if (rc == SKL_OK)
		recorded_accepted(rec, accepted, n);
	free(rec);
	return rc;
}

skl_rc skl_record_and_claim(skl_client *c, const skl_outcome *outs, size_t nouts,
                           bool *accepted, const skl_claim_opts *o, skl_job **jobs,
                           size_t *n, skl_error *err)
{
	skl_recorded *rec = recorded_new(nouts);
	if (rec == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	skl_rc rc = skl__record_and_claim(c, outs, nouts, rec, o, jobs, n, NULL, err);
	if (rc == SKL_OK || rc == SKL_EMPTY)
		recorded_accepted(rec, accepted, nouts);
	free(rec);
	return rc;
}

/* ---- heartbeat ---- */

/* One row per claim, in the order given (sql/0020_heartbeat_idem.sql). */
static const char *const heartbeat_sql =
	"SELECT id, extended, locked FROM skiplock.heartbeat($1::bigint[], $2::bigint[],"
	"                                   $3::bigint * interval '1 millisecond', $4::text[])";
static const char *const heartbeat_cols[] = {"id", "extended", "locked"};

const char *skl__heartbeat_sql(void)
{
	return heartbeat_sql;
}

typedef struct fenced_call {
	const char *params[4];
	const int64_t *ids;
	size_t n;
	skl_hb_state *states;
} fenced_call;

static bool is_true(const PGresult *res, int row, int col)
{
	return !PQgetisnull(res, row, col) && PQgetvalue(res, row, col)[0] == 't';
}

/* Runs the heartbeat and reads the state of each claim, row i for ids[i]. */
static skl_rc heartbeat_fn(skl_client *c, void *ctx, skl_error *err)
{
	fenced_call *f = ctx;
	PGresult *res = NULL;
	skl_rc rc = skl__exec_hot(c, heartbeat_sql, 4, f->params, &res, err);
	if (rc == SKL_OK)
		rc = skl__check_columns(res, heartbeat_cols, 3, err);
	if (rc == SKL_OK && (size_t)PQntuples(res) != f->n)
		rc = skl__seterr(err, SKL_DB, "heartbeat returned %d rows for %zu claims",
		                 PQntuples(res), f->n);
	for (size_t i = 0; rc == SKL_OK && i < f->n; i++) {
		if (strtoll(PQgetvalue(res, (int)i, 0), NULL, 10) != f->ids[i])
			rc = skl__seterr(err, SKL_DB, "heartbeat row %zu is not job %" PRId64, i + 1,
			                 f->ids[i]);
		else
			f->states[i] = !is_true(res, (int)i, 1) ? SKL_HB_LOST
			               : is_true(res, (int)i, 2) ? SKL_HB_LOCKED : SKL_HB_EXTENDED;
	}
	PQclear(res);
	return rc;
}

static void int_array(skl_buf *b, const int64_t *v, size_t n)
{
	skl_buf_adds(b, "{");
	for (size_t i = 0; i < n; i++)
		skl_buf_printf(b, i ? ",%" PRId64 : "%" PRId64, v[i]);
	skl_buf_adds(b, "}");
}

skl_rc skl_heartbeat_queued(skl_client *c, const char *const *queues, const int64_t *ids,
                            const int64_t *fencings, size_t n, int64_t lease_ms,
                            skl_hb_state *states, skl_error *err)
{
	if (n == 0)
		return SKL_OK;
	skl_buf a, b, q;
	skl_buf_init(&a, 0);
	skl_buf_init(&b, 0);
	skl_buf_init(&q, 0);
	int_array(&a, ids, n);
	int_array(&b, fencings, n);
	skl_buf_adds(&q, "{");
	for (size_t i = 0; queues && i < n; i++) {
		skl_buf_adds(&q, i ? "," : "");
		skl_buf_array_elem(&q, queues[i]);
	}
	skl_buf_adds(&q, "}");
	char lease[24];
	snprintf(lease, sizeof(lease), "%" PRId64, lease_ms);
	fenced_call f = {.params = {skl_buf_str(&a), skl_buf_str(&b), lease,
	                            queues ? skl_buf_str(&q) : NULL},
	                 .ids = ids, .n = n, .states = states};
	static const skl_txn_opts o = {.idempotent = 1};
	skl_rc rc = skl_buf_failed(&a) || skl_buf_failed(&b) || skl_buf_failed(&q)
	                ? skl__seterr(err, SKL_NOMEM, "out of memory")
	                : skl__run(c, &o, heartbeat_fn, &f, err);
	skl_buf_free(&a);
	skl_buf_free(&b);
	skl_buf_free(&q);
	return rc;
}

skl_rc skl_heartbeat_states(skl_client *c, const int64_t *ids, const int64_t *fencings,
                            size_t n, int64_t lease_ms, skl_hb_state *states, skl_error *err)
{
	return skl_heartbeat_queued(c, NULL, ids, fencings, n, lease_ms, states, err);
}

skl_rc skl_heartbeat(skl_client *c, const int64_t *ids, const int64_t *fencings, size_t n,
                     int64_t lease_ms, bool *alive, skl_error *err)
{
	skl_hb_state *st = n ? calloc(n, sizeof(*st)) : NULL;
	if (n && st == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	skl_rc rc = skl_heartbeat_states(c, ids, fencings, n, lease_ms, st, err);
	for (size_t i = 0; rc == SKL_OK && i < n; i++)
		alive[i] = st[i] != SKL_HB_LOST;
	free(st);
	return rc;
}

/* ---- rescue, operator actions, retention ---- */

static const char *const rescue_sql =
	"SELECT state, queue, kind FROM skiplock.rescue($1::int)";

typedef struct count_call {
	const char *sql;
	int nparams;
	const char *params[3];
	int64_t rows;
	int64_t discarded;
	int64_t count;      /* the first column of the first row, as a number */
} count_call;

static skl_rc count_fn(skl_client *c, void *ctx, skl_error *err)
{
	count_call *cc = ctx;
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, cc->sql, cc->nparams, cc->params, &res, err);
	if (rc != SKL_OK)
		return rc;
	cc->rows = PQntuples(res) ? PQntuples(res) : strtoll(PQcmdTuples(res), NULL, 10);
	cc->discarded = 0;
	cc->count = PQntuples(res) && PQnfields(res) ? strtoll(PQgetvalue(res, 0, 0), NULL, 10) : 0;
	for (int i = 0; i < PQntuples(res); i++)
		cc->discarded += strcmp(PQgetvalue(res, i, 0), "discarded") == 0;
	PQclear(res);
	return SKL_OK;
}

typedef struct rescue_call {
	const char *params[1];
	PGresult *res;
} rescue_call;

static skl_rc rescue_fn(skl_client *c, void *ctx, skl_error *err)
{
	rescue_call *rc = ctx;
	PQclear(rc->res);
	rc->res = NULL;
	return skl__exec(c, rescue_sql, 1, rc->params, &rc->res, err);
}

skl_rc skl__rescue_each(skl_client *c, int limit, skl__rescued_fn fn, void *ctx,
                        int *rescued, int *discarded, skl_error *err)
{
	char lim[16];
	snprintf(lim, sizeof(lim), "%d", limit > 0 ? limit : 1000);
	rescue_call call = {.params = {lim}};
	static const skl_txn_opts o = {.idempotent = 1};
	skl_rc rc = skl__run(c, &o, rescue_fn, &call, err);
	int rows = 0, gone = 0;
	for (int i = 0; rc == SKL_OK && i < PQntuples(call.res); i++, rows++) {
		bool d = strcmp(PQgetvalue(call.res, i, 0), "discarded") == 0;
		gone += d;
		if (fn)
			fn(ctx, PQgetvalue(call.res, i, 1), PQgetvalue(call.res, i, 2), d);
	}
	PQclear(call.res);
	if (rescued)
		*rescued = rows - gone;
	if (discarded)
		*discarded = gone;
	return rc;
}

skl_rc skl_rescue(skl_client *c, int limit, int *rescued, int *discarded, skl_error *err)
{
	return skl__rescue_each(c, limit, NULL, NULL, rescued, discarded, err);
}

/* The operators' actions are SQL functions (sql/0013_finished.sql): a
 * row (changed, state) — state NULL when there is no such job. */
static const char *const retry_sql = "SELECT changed, state FROM skiplock.job_retry($1, $2::int)";
static const char *const cancel_sql = "SELECT changed, state FROM skiplock.job_cancel($1)";

typedef struct action_call {
	const char *sql;
	int nparams;
	const char *params[2];
	int changed;      /* -1: no such job */
} action_call;

static skl_rc action_fn(skl_client *c, void *ctx, skl_error *err)
{
	action_call *a = ctx;
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, a->sql, a->nparams, a->params, &res, err);
	if (rc != SKL_OK)
		return rc;
	a->changed = PQntuples(res) != 1 || PQgetisnull(res, 0, 1) ? -1
	             : strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	return SKL_OK;
}

/* Runs an action on job id with arg (may be NULL). */
static skl_rc job_action(skl_client *c, const char *sql, int nparams, int64_t id,
                         const char *arg, const char *verb, skl_error *err)
{
	char ids[24];
	snprintf(ids, sizeof(ids), "%" PRId64, id);
	action_call a = {.sql = sql, .nparams = nparams, .params = {ids, arg}};
	static const skl_txn_opts o = {.idempotent = 1};
	skl_rc rc = skl__run(c, &o, action_fn, &a, err);
	if (rc == SKL_DB && err && strcmp(err->sqlstate, "23505") == 0)
		return skl__seterr(err, SKL_CONFLICT,
		                   "cannot %s job %" PRId64 ": another unfinished job holds its unique key",
		                   verb, id);
	if (rc != SKL_OK || a.changed == 1)
		return rc;
	if (a.changed < 0)
		return skl__seterr(err, SKL_EMPTY, "no job %" PRId64, id);
	return skl__seterr(err, SKL_CONFLICT, "cannot %s job %" PRId64 " in its current state",
	                   verb, id);
}

skl_rc skl_job_retry_attempts(skl_client *c, int64_t id, int attempts, skl_error *err)
{
	if (attempts < 0)
		return skl__seterr(err, SKL_INVALID, "attempts must not be negative (got %d)",
		                   attempts);
	char n[16];
	snprintf(n, sizeof(n), "%d", attempts);
	return job_action(c, retry_sql, 2, id, attempts ? n : NULL, "retry", err);
}

skl_rc skl_job_retry(skl_client *c, int64_t id, skl_error *err)
{
	return skl_job_retry_attempts(c, id, 0, err);
}

skl_rc skl_job_cancel(skl_client *c, int64_t id, skl_error *err)
{
	return job_action(c, cancel_sql, 1, id, NULL, "cancel", err);
}

static const char *const prune_sql =
	"SELECT n FROM skiplock.jobs_prune($1 * interval '1 millisecond', $2) AS n";

static const char *const prune_tokens_sql =
	"DELETE FROM skiplock.enqueue_tokens WHERE token IN ("
	"  SELECT token FROM skiplock.enqueue_tokens"
	"   WHERE created_at < now() - greatest($1, 86400000) * interval '1 millisecond'"
	"   LIMIT $2)";

skl_rc skl_jobs_prune(skl_client *c, int64_t older_than_ms, int batch, int64_t *deleted,
                      skl_error *err)
{
	char age[24], lim[16];
	snprintf(age, sizeof(age), "%" PRId64, older_than_ms);
	snprintf(lim, sizeof(lim), "%d", batch > 0 ? batch : 1000);
	static const skl_txn_opts o = {.idempotent = 1};
	int64_t total = 0, want = batch > 0 ? batch : 1000;
	skl_rc rc = SKL_OK;
	for (int pass = 0; pass < 2 && rc == SKL_OK; pass++) {
		count_call cc = {.sql = pass ? prune_tokens_sql : prune_sql, .nparams = 2,
		                 .params = {age, lim}};
		do {
			rc = skl__run(c, &o, count_fn, &cc, err);
			if (pass == 0 && rc == SKL_OK) { /* jobs_prune returns its count */
				cc.rows = cc.count;
				total += cc.rows;
			}
		} while (rc == SKL_OK && cc.rows >= want);
	}
	if (deleted)
		*deleted = total;
	return rc;
}
