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

typedef struct enqueue_call {
	char base[33];           /* the call's retry token; chunk k sends base-k */
	char token[48];
	skl_buf cols[EQ_NCOLS];
	bool set[EQ_NCOLS];      /* some job has a non-NULL value in the column */
	const skl_job_spec *jobs;
	size_t n;
	int64_t *ids;
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
	return SKL_OK;
}

static skl_rc enqueue_fn(skl_client *c, void *ctx, skl_error *err)
{
	enqueue_call *e = ctx;
	skl_rc rc = SKL_OK;
	for (size_t from = 0; rc == SKL_OK && from < e->n; from += EQ_CHUNK)
		rc = enqueue_chunk(c, e, from, e->n - from < EQ_CHUNK ? e->n - from : EQ_CHUNK, err);
	return rc;
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
	return SKL_OK;
}

skl_rc skl_enqueue_bulk(skl_client *c, const skl_job_spec *jobs, size_t n, int64_t *ids,
                        skl_error *err)
{
	if (n == 0)
		return SKL_OK;
	if (jobs == NULL || ids == NULL)
		return skl__seterr(err, SKL_MISUSE, "jobs and ids must not be NULL");
	for (size_t i = 0; i < n; i++)
		if (validate_spec(&jobs[i], i, err) != SKL_OK)
			return SKL_INVALID;
	enqueue_call e = {.jobs = jobs, .n = n, .ids = ids};
	snprintf(e.base, sizeof(e.base), "%016" PRIx64 "%016" PRIx64, skl__rand(&c->rng),
	         skl__rand(&c->rng));
	/* Idempotent: the tokens make a retry after a lost answer return the
	 * first call's ids.  Up to EQ_CHUNK jobs are one autocommit statement;
	 * more are one transaction of several, all or nothing. */
	static const skl_txn_opts one = {.idempotent = 1};
	static const skl_txn_opts chunked = {.idempotent = 1, .txn = 1};
	skl_rc rc = skl__run(c, n > EQ_CHUNK ? &chunked : &one, enqueue_fn, &e, err);
	for (int i = 0; i < EQ_NCOLS; i++)
		skl_buf_free(&e.cols[i]);
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

/* ---- claim ---- */

/* The claim, in pieces shared with the combined record-and-claim:
 * $1 queues (NULL: all), $2 kinds, $3 limit, $4 owner, $5 lease in ms.
 *
 * Circuit breakers (sql/0007_retry.sql): bk holds the kinds asked for whose
 * breaker is not closed; their jobs are left out of the ordinary pick (c0).
 * A kind whose open interval is over, or that is half-open with probes
 * left (or whose probes went missing for open_ms), may get one probe job
 * per claim: p picks it, and the conditional UPDATE `probe` admits it only
 * while the row still has a probe left when the UPDATE reaches it.  `busy`
 * names kinds whose breaker this statement already changed (the record
 * half of a record-and-claim): one statement cannot update a row twice. */
#define SKL_JOB_DUE                                                          \
	"state = 'available' AND run_at <= now()"                                \
	" AND ($1::text[] IS NULL OR queue = ANY ($1::text[]))"
/* The ordinary pick: due jobs of the kinds asked for, minus breakers. */
#define SKL_PICK_WHERE                                                       \
	SKL_JOB_DUE " AND kind = ANY (ARRAY(SELECT unnest($2::text[]) EXCEPT SELECT kind FROM bk))"
#define SKL_PICK_ORDER " ORDER BY priority DESC, run_at, id LIMIT $3 FOR UPDATE SKIP LOCKED"
#define SKL_PICK_FRONT "SELECT id FROM skiplock.jobs WHERE " SKL_PICK_WHERE SKL_PICK_ORDER
/* The same after a place (P priority, R run_at in µs, I id) in the claim
 * order: two index ranges, the rest of priority P after (R, I), then the
 * lower priorities, so the scan starts at the place instead of walking the
 * entries before it (jobs claimed since, dead but not yet removable). */
#define SKL_PICK_AFTER(P, R, I)                                              \
	"SELECT id FROM (SELECT id FROM skiplock.jobs WHERE " SKL_PICK_WHERE      \
	"   AND priority = " P " AND (run_at, id) > (timestamptz 'epoch' + " R   \
	"       * interval '1 microsecond', " I ")" SKL_PICK_ORDER ") a"          \
	" UNION ALL SELECT id FROM (SELECT id FROM skiplock.jobs WHERE " SKL_PICK_WHERE \
	"   AND priority < " P SKL_PICK_ORDER ") b LIMIT $3"
#define SKL_CLAIM_PICK(C0)                                                   \
	"bk AS ("                                                                \
	"  SELECT kind FROM skiplock.breakers"                                   \
	"   WHERE kind = ANY ($2::text[]) AND state <> 'closed'"                 \
	"  UNION SELECT kind FROM busy WHERE state <> 'closed'),"                \
	" pk AS ("                                                               \
	"  SELECT kind FROM skiplock.breakers"                                   \
	"   WHERE kind = ANY ($2::text[]) AND kind NOT IN (SELECT kind FROM busy)" \
	"     AND " SKL_PROBE_DUE "),"                                           \
	" p AS ("                                                                \
	"  SELECT x.id, pk.kind FROM pk CROSS JOIN LATERAL ("                    \
	"    SELECT id FROM skiplock.jobs WHERE " SKL_JOB_DUE " AND kind = pk.kind" \
	"     ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) x" \
	"  LIMIT $3),"                                                           \
	" probe AS ("                                                            \
	"  UPDATE skiplock.breakers b SET prev_state = b.state, state = 'half_open'," \
	"         probes_left = (CASE WHEN b.state = 'half_open' AND b.probes_left > 0" \
	"                             THEN b.probes_left ELSE b.probes END) - 1,"  \
	"         probe_ok = CASE WHEN b.state = 'open' THEN 0 ELSE b.probe_ok END," \
	"         changed_at = CASE WHEN b.state = 'half_open' AND b.probes_left > 0" \
	"                           THEN b.changed_at ELSE now() END"            \
	"    FROM p WHERE b.kind = p.kind AND " SKL_PROBE_DUE                    \
	"  RETURNING b.kind, b.prev_state, b.state),"                            \
	" probe_ev AS ("                                                         \
	"  INSERT INTO skiplock.breaker_events (kind, from_state, to_state, reason)" \
	"  SELECT kind, prev_state, state, 'open interval over: admitting probes'" \
	"    FROM probe WHERE prev_state <> state),"                             \
	" c0 AS (" C0 "),"                                                       \
	" c AS (SELECT id FROM (SELECT id FROM c0"                               \
	"                        LIMIT greatest($3 - (SELECT count(*) FROM p), 0)) c1" \
	"       UNION ALL SELECT p.id FROM p JOIN probe USING (kind))"
/* A breaker that may admit a probe now. */
#define SKL_PROBE_DUE                                                        \
	"((state = 'open' AND open_until <= now())"                              \
	" OR (state = 'half_open' AND (probes_left > 0"                          \
	"     OR changed_at <= now() - open_ms * interval '1 millisecond')))"
#define SKL_CLAIM_UPDATE                                                     \
	"UPDATE skiplock.jobs j"                                                 \
	"   SET state = 'running', attempt = j.attempt + 1, fencing = j.fencing + 1," \
	"       lease_owner = $4, lease_expires_at = now() + $5 * interval '1 millisecond'," \
	"       attempted_at = now()"                                            \
	"  FROM c WHERE j.id = c.id"                                             \
	" RETURNING j.id, j.queue, j.kind, j.payload, j.attempt, j.max_attempts, j.fencing," \
	"           j.priority, coalesce(j.timeout_ms, 0), coalesce(j.backoff_base_ms, 0)," \
	"           coalesce(j.backoff_cap_ms, 0), coalesce(j.backoff, ''),"    \
	"           coalesce(j.last_delay_ms, 0),"                               \
	"           (extract(epoch FROM j.run_at) * 1000000)::bigint"
#define SKL_CLAIM_NCOLS 14

#define SKL_CLAIM_SQL(C0)                                                    \
	"WITH busy AS (SELECT NULL::text AS kind, NULL::text AS state WHERE false), " \
	SKL_CLAIM_PICK(C0) " " SKL_CLAIM_UPDATE
static const char *const claim_sql = SKL_CLAIM_SQL(SKL_PICK_FRONT);
static const char *const claim_after_sql =
	SKL_CLAIM_SQL(SKL_PICK_AFTER("$6::int", "$7::bigint", "$8::bigint"));

typedef struct claim_call {
	const char *sql;
	int nparams;
	const char *params[14];  /* $1..$5 the claim, $6..$11 outcomes, then the place */
	skl_job *jobs;
	size_t n;
	const skl_outcome *outs; /* with outcomes: which were accepted */
	size_t nouts;
	bool *accepted;
} claim_call;

/* One allocation per job holds its strings: internal points at it. */
static bool fill_job(skl_job *j, const PGresult *r, int row)
{
	size_t lq = strlen(PQgetvalue(r, row, 1)) + 1, lk = strlen(PQgetvalue(r, row, 2)) + 1,
	       lp = strlen(PQgetvalue(r, row, 3)) + 1;
	char *mem = malloc(lq + lk + lp);
	if (mem == NULL)
		return false;
	memcpy(mem, PQgetvalue(r, row, 1), lq);
	memcpy(mem + lq, PQgetvalue(r, row, 2), lk);
	memcpy(mem + lq + lk, PQgetvalue(r, row, 3), lp);
	*j = (skl_job){
		.id = strtoll(PQgetvalue(r, row, 0), NULL, 10),
		.queue = mem,
		.kind = mem + lq,
		.payload = mem + lq + lk,
		.attempt = atoi(PQgetvalue(r, row, 4)),
		.max_attempts = atoi(PQgetvalue(r, row, 5)),
		.fencing = strtoll(PQgetvalue(r, row, 6), NULL, 10),
		.priority = atoi(PQgetvalue(r, row, 7)),
		.timeout_ms = strtoll(PQgetvalue(r, row, 8), NULL, 10),
		.backoff_base_ms = strtoll(PQgetvalue(r, row, 9), NULL, 10),
		.backoff_cap_ms = strtoll(PQgetvalue(r, row, 10), NULL, 10),
		.last_delay_ms = strtoll(PQgetvalue(r, row, 12), NULL, 10),
		.run_at_us = strtoll(PQgetvalue(r, row, 13), NULL, 10),
		.internal = mem,
	};
	skl_backoff_parse(PQgetvalue(r, row, 11), &j->backoff);
	return true;
}

/* Marks accepted[i] for the outcome whose id a 'd' row names. */
static void mark_accepted(claim_call *cc, const PGresult *res, int row)
{
	int64_t id = strtoll(PQgetvalue(res, row, 0), NULL, 10);
	for (size_t i = 0; cc->accepted && i < cc->nouts; i++)
		if (cc->outs[i].id == id)
			cc->accepted[i] = true;
}

static skl_rc claim_fn(skl_client *c, void *ctx, skl_error *err)
{
	claim_call *cc = ctx;
	PGresult *res = NULL;
	skl_rc rc = skl__exec_hot(c, cc->sql, cc->nparams, cc->params, &res, err);
	if (rc != SKL_OK)
		return rc;
	int rows = PQntuples(res);
	cc->jobs = rows ? calloc((size_t)rows, sizeof(skl_job)) : NULL;
	if (rows && cc->jobs == NULL) {
		PQclear(res);
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	}
	for (size_t i = 0; cc->accepted && i < cc->nouts; i++)
		cc->accepted[i] = false;
	bool tagged = PQnfields(res) > SKL_CLAIM_NCOLS;
	for (int i = 0; i < rows; i++) {
		if (tagged && PQgetvalue(res, i, SKL_CLAIM_NCOLS)[0] == 'd') {
			mark_accepted(cc, res, i);
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

/* The claim's parameters $1..$5 as text; queues and kinds are allocated. */
typedef struct claim_params {
	char *queues, *kinds;
	char limit[24], lease[24];
	char after[3][24];       /* the place to claim after: priority, run_at µs, id */
} claim_params;

/* With o->after_set: the place's three parameters from params[first]. */
static int claim_after_params(claim_params *p, const skl_claim_opts *o, claim_call *cc,
                              int first)
{
	if (!o->after_set)
		return 0;
	snprintf(p->after[0], sizeof(p->after[0]), "%d", o->after_priority);
	snprintf(p->after[1], sizeof(p->after[1]), "%" PRId64, o->after_run_at_us);
	snprintf(p->after[2], sizeof(p->after[2]), "%" PRId64, o->after_id);
	for (int i = 0; i < 3; i++)
		cc->params[first + i] = p->after[i];
	return 3;
}

static skl_rc claim_params_make(claim_params *p, const skl_claim_opts *o, claim_call *cc,
                                skl_error *err)
{
	memset(p, 0, sizeof(*p));
	if (o == NULL || o->nkinds == 0 || o->limit == 0 || o->lease_ms <= 0)
		return skl__seterr(err, SKL_MISUSE, "claim needs kinds, a limit and a lease");
	snprintf(p->limit, sizeof(p->limit), "%zu", o->limit);
	snprintf(p->lease, sizeof(p->lease), "%" PRId64, o->lease_ms);
	p->queues = o->nqueues ? skl_text_array(o->queues, o->nqueues) : NULL;
	p->kinds = skl_text_array(o->kinds, o->nkinds);
	if (p->kinds == NULL || (o->nqueues && p->queues == NULL))
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	const char *v[5] = {p->queues, p->kinds, p->limit, o->owner ? o->owner : "skiplock",
	                    p->lease};
	memcpy(cc->params, v, sizeof(v));
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
	claim_call cc = {.sql = claim_sql, .nparams = 5};
	claim_params p;
	skl_rc rc = claim_params_make(&p, o, &cc, err);
	if (rc == SKL_OK && claim_after_params(&p, o, &cc, 5)) {
		cc.sql = claim_after_sql;
		cc.nparams = 8;
	}
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

/* ---- outcomes and heartbeats ---- */

/* The error history keeps the newest 20 attempts. */
#define SKL_ERRORS_APPEND(expr)                                                           \
	"(CASE WHEN jsonb_array_length(j.errors) >= 20 THEN j.errors - 0 ELSE j.errors END)" \
	" || jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'at', now(),"       \
	" 'error', " expr "))"

/* The fence of every write that ends or extends a claim, for rows j joined
 * to the outcomes or heartbeats v by id.  COLLATE "C" (equality is the
 * same bytes either way) keeps the planner from proving the partial index
 * jobs_rescue_idx (WHERE state = 'running') usable here: with statistics
 * that saw few running jobs it otherwise hashes the whole rescue index —
 * every running job, and every dead version of one that a held snapshot
 * keeps — instead of looking the ids up in the primary key
 * (fenced_writes_use_primary_key in tests/integration/test_queue.c). */
#define SKL_FENCE "j.id = v.id AND j.fencing = v.fencing AND j.state = 'running' COLLATE \"C\""

/* Outcomes as arrays: ids, fencings, kinds, results, errors, retry delays;
 * P(n) names the n-th of them. */
#define SKL_RECORD_INPUT(a, b, c, d, e, f)                                   \
	"v AS (SELECT * FROM unnest(" a "::bigint[], " b "::bigint[], " c "::int[], " \
	d "::jsonb[], " e "::text[], " f "::bigint[]) AS v(id, fencing, o, res, err, delay))"
#define SKL_RECORD_UPDATE                                                    \
	"UPDATE skiplock.jobs j SET"                                             \
	"   state = CASE WHEN v.o = 0 THEN 'completed'"                          \
	"                WHEN v.o = 2 OR j.attempt >= j.max_attempts THEN 'discarded'" \
	"                ELSE 'available' END,"                                  \
	"   result = CASE WHEN v.o = 0 THEN v.res ELSE j.result END,"            \
	"   errors = CASE WHEN v.err IS NULL THEN j.errors ELSE " SKL_ERRORS_APPEND("v.err") " END," \
	"   run_at = CASE WHEN v.o = 1 AND j.attempt < j.max_attempts"           \
	"                 THEN now() + v.delay * interval '1 millisecond' ELSE j.run_at END," \
	"   last_delay_ms = CASE WHEN v.o = 1 THEN v.delay ELSE j.last_delay_ms END," \
	"   finished_at = CASE WHEN v.o <> 1 OR j.attempt >= j.max_attempts THEN now() END," \
	"   lease_owner = NULL, lease_expires_at = NULL"                         \
	"  FROM v WHERE " SKL_FENCE                                               \
	" RETURNING j.id, j.kind, v.o"
/* Accepted outcomes counted into the kinds' breakers (completions succeed,
 * retries fail, discards are the job's own fault and not counted). */
#define SKL_RECORD_BREAKERS                                                  \
	"tally AS (SELECT kind, (count(*) FILTER (WHERE o = 0))::int AS ok,"     \
	"                 (count(*) FILTER (WHERE o = 1))::int AS bad"           \
	"            FROM done GROUP BY kind),"                                  \
	" brk AS ("                                                              \
	"  UPDATE skiplock.breakers b"                                           \
	"     SET (state, prev_state, calls, failures, window_started_at, probe_ok, open_until," \
	"          changed_at) = (SELECT n.state, n.prev_state, n.calls, n.failures," \
	"          n.window_started_at, n.probe_ok, n.open_until, n.changed_at"  \
	"          FROM skiplock.breaker_step(b, t.ok, t.bad) n)"                \
	"    FROM tally t WHERE b.kind = t.kind AND (t.ok > 0 OR t.bad > 0)"     \
	"  RETURNING b.kind, b.prev_state, b.state, b.calls, b.failures),"       \
	" brk_ev AS ("                                                           \
	"  INSERT INTO skiplock.breaker_events (kind, from_state, to_state, reason)" \
	"  SELECT kind, prev_state, state, CASE WHEN state = 'closed' THEN 'probes succeeded'" \
	"         WHEN prev_state = 'half_open' THEN 'a probe failed'"           \
	"         ELSE format('%s of %s calls failed', failures, calls) END"     \
	"    FROM brk WHERE prev_state <> state)"

static const char *const record_sql =
	"WITH " SKL_RECORD_INPUT("$1", "$2", "$3", "$4", "$5", "$6") ","
	" done AS (" SKL_RECORD_UPDATE "), " SKL_RECORD_BREAKERS
	" SELECT id FROM done";

/* Both in one round trip.  The claim cannot pick a row the record just
 * changed: they share a snapshot, in which recorded rows were running.
 * Rows: claimed jobs with t = 'c', then accepted outcomes with t = 'd'. */
#define SKL_RECORD_CLAIM_SQL(C0)                                             \
	"WITH " SKL_RECORD_INPUT("$6", "$7", "$8", "$9", "$10", "$11") ","       \
	" done AS (" SKL_RECORD_UPDATE "), " SKL_RECORD_BREAKERS ","             \
	" busy AS (SELECT t.kind, coalesce(b.state, 'closed') AS state"          \
	"            FROM tally t LEFT JOIN brk b USING (kind)),"                \
	" " SKL_CLAIM_PICK(C0) ","                                               \
	" claimed AS (" SKL_CLAIM_UPDATE ")"                                     \
	" SELECT claimed.*, 'c' AS t FROM claimed"                               \
	" UNION ALL SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL," \
	"                  NULL, NULL, 'd' FROM done"
static const char *const record_claim_sql = SKL_RECORD_CLAIM_SQL(SKL_PICK_FRONT);
static const char *const record_claim_after_sql =
	SKL_RECORD_CLAIM_SQL(SKL_PICK_AFTER("$12::int", "$13::bigint", "$14::bigint"));

const char *skl__claim_sql(bool record, bool after)
{
	if (after)
		return record ? record_claim_after_sql : claim_after_sql;
	return record ? record_claim_sql : claim_sql;
}

const char *skl__record_sql(void)
{
	return record_sql;
}

typedef struct fenced_call {
	const char *sql;
	int nparams;
	const char *params[6];
	const int64_t *ids;
	size_t n;
	bool *ok;
} fenced_call;

/* Runs a fenced statement and marks ok[i] for each returned id. */
static skl_rc fenced_fn(skl_client *c, void *ctx, skl_error *err)
{
	fenced_call *f = ctx;
	PGresult *res = NULL;
	skl_rc rc = skl__exec_hot(c, f->sql, f->nparams, f->params, &res, err);
	if (rc != SKL_OK)
		return rc;
	for (size_t i = 0; f->ok && i < f->n; i++)
		f->ok[i] = false;
	for (int r = 0; f->ok && r < PQntuples(res); r++) {
		int64_t id = strtoll(PQgetvalue(res, r, 0), NULL, 10);
		for (size_t i = 0; i < f->n; i++)
			if (f->ids[i] == id)
				f->ok[i] = true;
	}
	PQclear(res);
	return SKL_OK;
}

static void int_array(skl_buf *b, const int64_t *v, size_t n, size_t stride)
{
	skl_buf_adds(b, "{");
	for (size_t i = 0; i < n; i++)
		skl_buf_printf(b, i ? ",%" PRId64 : "%" PRId64,
		               *(const int64_t *)((const char *)v + i * stride));
	skl_buf_adds(b, "}");
}

static void outcome_columns(skl_buf *cols, const skl_outcome *outs, size_t n)
{
	int_array(&cols[0], &outs[0].id, n, sizeof(skl_outcome));
	int_array(&cols[1], &outs[0].fencing, n, sizeof(skl_outcome));
	int_array(&cols[5], &outs[0].retry_delay_ms, n, sizeof(skl_outcome));
	for (int k = 2; k < 5; k++)
		skl_buf_adds(&cols[k], "{");
	for (size_t i = 0; i < n; i++) {
		const char *sep = i ? "," : "";
		skl_buf_printf(&cols[2], "%s%d", sep, (int)outs[i].kind);
		skl_buf_adds(&cols[3], sep);
		skl_buf_array_elem(&cols[3], outs[i].kind == SKL_OUTCOME_COMPLETE ? outs[i].result : NULL);
		skl_buf_adds(&cols[4], sep);
		skl_buf_array_elem(&cols[4], outs[i].error);
	}
	for (int k = 2; k < 5; k++)
		skl_buf_adds(&cols[k], "}");
}

skl_rc skl_record(skl_client *c, const skl_outcome *outs, size_t n, bool *accepted,
                  skl_error *err)
{
	if (n == 0)
		return SKL_OK;
	skl_buf cols[6];
	for (int k = 0; k < 6; k++)
		skl_buf_init(&cols[k], 0);
	outcome_columns(cols, outs, n);
	int64_t *ids = malloc(n * sizeof(int64_t));
	skl_rc rc = SKL_NOMEM;
	fenced_call f = {.sql = record_sql, .nparams = 6, .ids = ids, .n = n, .ok = accepted};
	for (int k = 0; k < 6; k++)
		f.params[k] = skl_buf_str(&cols[k]);
	bool failed = ids == NULL;
	for (int k = 0; k < 6; k++)
		failed |= skl_buf_failed(&cols[k]);
	if (!failed) {
		for (size_t i = 0; i < n; i++)
			ids[i] = outs[i].id;
		/* Fenced: a retry after an indeterminate answer cannot apply twice
		 * (the first application ended the claim); it is then reported as
		 * not accepted. */
		static const skl_txn_opts o = {.idempotent = 1};
		rc = skl__run(c, &o, fenced_fn, &f, err);
	} else {
		skl__seterr(err, SKL_NOMEM, "out of memory building outcomes");
	}
	free(ids);
	for (int k = 0; k < 6; k++)
		skl_buf_free(&cols[k]);
	return rc;
}

skl_rc skl_record_and_claim(skl_client *c, const skl_outcome *outs, size_t nouts,
                           bool *accepted, const skl_claim_opts *o, skl_job **jobs,
                           size_t *n, skl_error *err)
{
	*jobs = NULL;
	*n = 0;
	if (nouts == 0)
		return skl_claim(c, o, jobs, n, err);
	claim_call cc = {.sql = record_claim_sql, .nparams = 11, .outs = outs, .nouts = nouts,
	                 .accepted = accepted};
	claim_params p;
	skl_rc rc = claim_params_make(&p, o, &cc, err);
	if (rc == SKL_OK && claim_after_params(&p, o, &cc, 11)) {
		cc.sql = record_claim_after_sql;
		cc.nparams = 14;
	}
	skl_buf cols[6];
	for (int k = 0; k < 6; k++)
		skl_buf_init(&cols[k], 0);
	outcome_columns(cols, outs, nouts);
	for (int k = 0; k < 6; k++) {
		cc.params[5 + k] = skl_buf_str(&cols[k]);
		if (rc == SKL_OK && skl_buf_failed(&cols[k]))
			rc = skl__seterr(err, SKL_NOMEM, "out of memory building outcomes");
	}
	if (rc == SKL_OK)
		rc = run_claim(c, &cc, jobs, n, err);
	for (int k = 0; k < 6; k++)
		skl_buf_free(&cols[k]);
	claim_params_free(&p);
	return rc;
}

static const char *const heartbeat_sql =
	"UPDATE skiplock.jobs j SET lease_expires_at = now() + $3 * interval '1 millisecond'"
	"  FROM unnest($1::bigint[], $2::bigint[]) AS v(id, fencing)"
	" WHERE " SKL_FENCE
	" RETURNING j.id";

const char *skl__heartbeat_sql(void)
{
	return heartbeat_sql;
}

skl_rc skl_heartbeat(skl_client *c, const int64_t *ids, const int64_t *fencings, size_t n,
                     int64_t lease_ms, bool *alive, skl_error *err)
{
	if (n == 0)
		return SKL_OK;
	skl_buf a, b;
	skl_buf_init(&a, 0);
	skl_buf_init(&b, 0);
	int_array(&a, ids, n, sizeof(int64_t));
	int_array(&b, fencings, n, sizeof(int64_t));
	char lease[24];
	snprintf(lease, sizeof(lease), "%" PRId64, lease_ms);
	fenced_call f = {.sql = heartbeat_sql, .nparams = 3,
	                 .params = {skl_buf_str(&a), skl_buf_str(&b), lease},
	                 .ids = ids, .n = n, .ok = alive};
	static const skl_txn_opts o = {.idempotent = 1};
	skl_rc rc = skl_buf_failed(&a) || skl_buf_failed(&b)
	                ? skl__seterr(err, SKL_NOMEM, "out of memory")
	                : skl__run(c, &o, fenced_fn, &f, err);
	skl_buf_free(&a);
	skl_buf_free(&b);
	return rc;
}

/* ---- rescue, operator actions, retention ---- */

static const char *const rescue_sql =
	"WITH r AS ("
	"  SELECT id FROM skiplock.jobs"
	"   WHERE state = 'running' AND lease_expires_at < now()"
	"   ORDER BY lease_expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)"
	" UPDATE skiplock.jobs j SET"
	"   state = CASE WHEN j.attempt >= j.max_attempts THEN 'discarded' ELSE 'available' END,"
	"   finished_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,"
	"   run_at = now(), lease_owner = NULL, lease_expires_at = NULL,"
	"   errors = " SKL_ERRORS_APPEND("'lease expired: ' || coalesce(j.lease_owner, '?') ||"
	                                 " ' stopped renewing it'")
	"  FROM r WHERE j.id = r.id"
	" RETURNING j.state, j.queue, j.kind";

typedef struct count_call {
	const char *sql;
	int nparams;
	const char *params[3];
	int64_t rows;
	int64_t discarded;
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

static const char *const retry_sql =
	"UPDATE skiplock.jobs SET state = 'available', run_at = now(), finished_at = NULL,"
	"       max_attempts = greatest(max_attempts, attempt + 1)"
	" WHERE id = $1 AND state IN ('available', 'discarded', 'cancelled') RETURNING id";

static const char *const cancel_sql =
	"UPDATE skiplock.jobs SET state = 'cancelled', finished_at = now(),"
	"       lease_owner = NULL, lease_expires_at = NULL"
	" WHERE id = $1 AND state IN ('available', 'running') RETURNING id";

static const char *const exists_sql = "SELECT state FROM skiplock.jobs WHERE id = $1";

static skl_rc job_action(skl_client *c, const char *sql, int64_t id, const char *verb,
                         skl_error *err)
{
	char ids[24];
	snprintf(ids, sizeof(ids), "%" PRId64, id);
	count_call cc = {.sql = sql, .nparams = 1, .params = {ids}};
	static const skl_txn_opts o = {.idempotent = 1};
	skl_rc rc = skl__run(c, &o, count_fn, &cc, err);
	if (rc == SKL_DB && err && strcmp(err->sqlstate, "23505") == 0)
		return skl__seterr(err, SKL_CONFLICT,
		                   "cannot %s job %" PRId64 ": another unfinished job holds its unique key",
		                   verb, id);
	if (rc != SKL_OK || cc.rows > 0)
		return rc;
	cc = (count_call){.sql = exists_sql, .nparams = 1, .params = {ids}};
	rc = skl__run(c, &o, count_fn, &cc, err);
	if (rc != SKL_OK)
		return rc;
	if (cc.rows == 0)
		return skl__seterr(err, SKL_EMPTY, "no job %" PRId64, id);
	return skl__seterr(err, SKL_CONFLICT, "cannot %s job %" PRId64 " in its current state",
	                   verb, id);
}

skl_rc skl_job_retry(skl_client *c, int64_t id, skl_error *err)
{
	return job_action(c, retry_sql, id, "retry", err);
}

skl_rc skl_job_cancel(skl_client *c, int64_t id, skl_error *err)
{
	return job_action(c, cancel_sql, id, "cancel", err);
}

static const char *const prune_sql =
	"DELETE FROM skiplock.jobs WHERE id IN ("
	"  SELECT id FROM skiplock.jobs"
	"   WHERE state IN ('completed', 'discarded', 'cancelled')"
	"     AND finished_at < now() - $1 * interval '1 millisecond'"
	"   ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED)";

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
	int64_t total = 0;
	skl_rc rc = SKL_OK;
	for (int pass = 0; pass < 2 && rc == SKL_OK; pass++) {
		count_call cc = {.sql = pass ? prune_tokens_sql : prune_sql, .nparams = 2,
		                 .params = {age, lim}};
		do {
			rc = skl__run(c, &o, count_fn, &cc, err);
			if (pass == 0 && rc == SKL_OK)
				total += cc.rows;
		} while (rc == SKL_OK && cc.rows >= (batch > 0 ? batch : 1000));
	}
	if (deleted)
		*deleted = total;
	return rc;
}
