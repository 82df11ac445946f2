/*
 * deps.c — dependencies between jobs (sql/0030_dependencies.sql): the
 * parents of skl_enqueue through skiplock.enqueue_after, and
 * skiplock/deps.h, enqueue_batch and job_waits_for, one statement each.
 *
 * What the database checks (how many parents, their ids and keys, the
 * policy, the batch's size and names) is checked here first, so bad input
 * is refused before any statement; the database stays the authority, and
 * what it refuses as data (22xxx) or as an unknown parent (23503) becomes
 * SKL_INVALID with its SQLSTATE kept.  Neither enqueue_after nor
 * enqueue_batch takes queue.c's retry token, so a call is re-sent after an
 * indeterminate outcome only when a second run cannot insert twice: a job
 * with a unique key.  Which parent frees a child is the SQL's business.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/internal.h"
#include "queue/queue_int.h"
#include "skiplock/deps.h"

/* ---- checks ---- */

bool skl__has_parents(const skl_enqueue_opts *o)
{
	return o->ndepends_on + o->ndepends_on_keys > 0;
}

skl_rc skl__parents_check(const skl_enqueue_opts *o, size_t i, skl_error *err)
{
	if ((o->ndepends_on && o->depends_on == NULL) ||
	    (o->ndepends_on_keys && o->depends_on_keys == NULL))
		return skl__seterr(err, SKL_INVALID, "job %zu: a count of parents without their list",
		                   i + 1);
	if (o->ndepends_on > SKL_PARENTS_MAX || o->ndepends_on_keys > SKL_PARENTS_MAX ||
	    o->ndepends_on + o->ndepends_on_keys > SKL_PARENTS_MAX)
		return skl__seterr(err, SKL_INVALID, "job %zu: at most %d parents", i + 1,
		                   SKL_PARENTS_MAX);
	for (size_t k = 0; k < o->ndepends_on; k++)
		if (o->depends_on[k] < 1)
			return skl__seterr(err, SKL_INVALID, "job %zu: parent id %" PRId64
			                   " is not a job id (1 or more)", i + 1, o->depends_on[k]);
	for (size_t k = 0; k < o->ndepends_on_keys; k++) {
		size_t len = o->depends_on_keys[k] ? strlen(o->depends_on_keys[k]) : 0;
		if (len == 0 || len > SKL_UNIQUE_KEY_MAX)
			return skl__seterr(err, SKL_INVALID, "job %zu: a parent's unique key must be 1 "
			                   "to %d bytes", i + 1, SKL_UNIQUE_KEY_MAX);
	}
	if (o->on_parent_failure != SKL_PARENT_FAILURE_CANCEL &&
	    o->on_parent_failure != SKL_PARENT_FAILURE_RUN)
		return skl__seterr(err, SKL_INVALID, "job %zu: unknown on_parent_failure %d", i + 1,
		                   (int)o->on_parent_failure);
	return SKL_OK;
}

skl_rc skl__batch_check(const skl_batch_spec *b, skl_error *err)
{
	if (b == NULL)
		return skl__seterr(err, SKL_INVALID, "a batch needs a spec");
	if (skl__check_kind(b->kind, err) != SKL_OK || skl__check_kind(b->callback_kind, err) != SKL_OK)
		return SKL_INVALID;
	if (b->n < 1 || b->n > SKL_BATCH_MAX)
		return skl__seterr(err, SKL_INVALID, "a batch has 1 to %d jobs, got %zu", SKL_BATCH_MAX,
		                   b->n);
	if (b->payloads == NULL)
		return skl__seterr(err, SKL_INVALID, "a batch needs its payloads");
	size_t ql = b->queue ? strlen(b->queue) : 1;
	if (ql == 0 || ql > SKL_KIND_MAX)
		return skl__seterr(err, SKL_INVALID, "queue name must be 1 to %d bytes", SKL_KIND_MAX);
	if (b->max_attempts < 0)
		return skl__seterr(err, SKL_INVALID, "max_attempts must not be negative");
	return SKL_OK;
}

/* What the database refused as data or as an unknown parent: bad input,
 * nothing written. */
static skl_rc refused_as_input(skl_rc rc, skl_error *err)
{
	if (rc == SKL_DB && err && (strncmp(err->sqlstate, "22", 2) == 0 ||
	                            strncmp(err->sqlstate, "23", 2) == 0))
		err->rc = rc = SKL_INVALID;
	return rc;
}

/* ---- one job with parents ---- */

static const char *const after_sql =
	"SELECT skiplock.enqueue_after(depends_on => $1::bigint[], kind => $2,"
	" payload => coalesce($3::jsonb, '{}'), queue => $4,"
	" run_at => coalesce($5::timestamptz, now() + $6::bigint * interval '1 millisecond'),"
	" priority => $7::int, unique_key => $8, max_attempts => coalesce($9::int, 25),"
	" timeout => $10::bigint * interval '1 millisecond', backoff => $11,"
	" backoff_base => $12::bigint * interval '1 millisecond',"
	" backoff_cap => $13::bigint * interval '1 millisecond',"
	" depends_on_keys => $14::text[], on_parent_failure => $15)";

/* Whether the job's row is this transaction's (queue.c's inserted check,
 * for one job). */
static const char *const mine_sql =
	"SELECT j.xmin = xid(pg_current_xact_id()) FROM skiplock.jobs j WHERE j.id = $1::bigint";

enum { AF_PARENTS, AF_KIND, AF_PAYLOAD, AF_QUEUE, AF_RUN_AT, AF_DELAY, AF_PRIO, AF_UKEY, AF_MAX,
       AF_TMO, AF_BS, AF_BB, AF_BC, AF_KEYS, AF_POLICY, AF_NPARAMS };

typedef struct after_call {
	const char *params[AF_NPARAMS];
	char num[6][24];          /* the numbers' text */
	int64_t id;
	skl_enqueued how;
	bool want_how;
	bool ran_ok;              /* a run returned OK: its COMMIT may have happened */
	bool maybe_committed;     /* so this run may have found that run's job */
} after_call;

/* v as decimal text in a->num[slot], or NULL when v is 0 (not given). */
static const char *num_or_null(after_call *a, int slot, int64_t v)
{
	if (v == 0)
		return NULL;
	snprintf(a->num[slot], sizeof(a->num[slot]), "%" PRId64, v);
	return a->num[slot];
}

/* The parameters of after_sql for job j; the id array in ids (freed by
 * the caller). */
static void after_params(after_call *a, const skl_job_spec *j, skl_buf *ids, char *keys)
{
	const skl_enqueue_opts *o = &j->opts;
	skl_buf_adds(ids, "{");
	for (size_t k = 0; k < o->ndepends_on; k++)
		skl_buf_printf(ids, k ? ",%" PRId64 : "%" PRId64, o->depends_on[k]);
	skl_buf_adds(ids, "}");
	const char **p = a->params;
	p[AF_PARENTS] = o->ndepends_on ? skl_buf_str(ids) : NULL;
	p[AF_KIND] = j->kind;
	p[AF_PAYLOAD] = j->payload;
	p[AF_QUEUE] = o->queue;
	p[AF_RUN_AT] = o->run_at;
	p[AF_DELAY] = num_or_null(a, 0, o->delay_ms);
	p[AF_PRIO] = num_or_null(a, 1, o->priority);
	p[AF_UKEY] = o->unique_key;
	p[AF_MAX] = num_or_null(a, 2, o->max_attempts);
	p[AF_TMO] = num_or_null(a, 3, o->timeout_ms);
	p[AF_BS] = skl_backoff_name(o->backoff);
	p[AF_BB] = num_or_null(a, 4, o->backoff_base_ms);
	p[AF_BC] = num_or_null(a, 5, o->backoff_cap_ms);
	p[AF_KEYS] = o->ndepends_on_keys ? keys : NULL;
	p[AF_POLICY] = o->on_parent_failure == SKL_PARENT_FAILURE_RUN ? "run" : "cancel";
}

/* a->how from the job's row, in the enqueue's transaction. */
static skl_rc after_mine(skl_client *c, after_call *a, skl_error *err)
{
	char id[24];
	snprintf(id, sizeof(id), "%" PRId64, a->id);
	const char *vals[1] = {id};
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, mine_sql, 1, vals, &res, err);
	if (rc == SKL_OK)
		a->how = PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 't'
		             ? SKL_ENQUEUED_INSERTED : SKL_ENQUEUED_EXISTING;
	PQclear(res);
	return rc;
}

static skl_rc after_fn(skl_client *c, void *ctx, skl_error *err)
{
	after_call *a = ctx;
	a->maybe_committed |= a->ran_ok;
	a->ran_ok = false;
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, after_sql, AF_NPARAMS, a->params, &res, err);
	if (rc == SKL_OK && (PQntuples(res) != 1 || PQgetisnull(res, 0, 0)))
		rc = skl__seterr(err, SKL_DB, "enqueue_after answered no id");
	if (rc == SKL_OK)
		a->id = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	if (rc == SKL_OK && a->want_how)
		rc = after_mine(c, a, err);
	a->ran_ok = rc == SKL_OK;
	return rc;
}

skl_rc skl__enqueue_after(skl_client *c, const skl_job_spec *j, int64_t *id,
                          skl_enqueued *inserted, skl_error *err)
{
	after_call a = {.want_how = inserted != NULL};
	skl_buf ids;
	skl_buf_init(&ids, 0);
	char *keys = j->opts.ndepends_on_keys
	                 ? skl_text_array(j->opts.depends_on_keys, j->opts.ndepends_on_keys)
	                 : NULL;
	after_params(&a, j, &ids, keys);
	skl_rc rc;
	if (skl_buf_failed(&ids) || (j->opts.ndepends_on_keys && keys == NULL)) {
		rc = skl__seterr(err, SKL_NOMEM, "out of memory");
	} else {
		/* a second run finds a keyed job instead of inserting it again */
		skl_txn_opts o = {.idempotent = j->opts.unique_key != NULL, .txn = a.want_how};
		rc = skl__run(c, &o, after_fn, &a, err);
	}
	skl_buf_free(&ids);
	free(keys);
	if (rc == SKL_OK) {
		*id = a.id;
		if (inserted)
			*inserted = a.how == SKL_ENQUEUED_EXISTING && a.maybe_committed
			                ? SKL_ENQUEUED_UNKNOWN : a.how;
	}
	return refused_as_input(rc, err);
}

/* ---- a batch and its callback ---- */

static const char *const batch_sql =
	"SELECT unnest(skiplock.enqueue_batch(kind => $1, payloads => $2::jsonb[],"
	" callback_kind => $3, callback_payload => coalesce($4::jsonb, '{}'),"
	" queue => coalesce($5, 'default'), priority => $6::int,"
	" max_attempts => coalesce(nullif($7::int, 0), 25)))";

/* The rows of batch_sql: n ids and the callback's. */
static skl_rc batch_ids(const PGresult *res, const skl_batch_spec *b, int64_t *ids,
                        int64_t *callback_id, skl_error *err)
{
	if ((size_t)PQntuples(res) != b->n + 1)
		return skl__seterr(err, SKL_DB, "enqueue_batch returned %d ids for %zu jobs",
		                   PQntuples(res), b->n);
	for (size_t i = 0; i < b->n; i++)
		ids[i] = strtoll(PQgetvalue(res, (int)i, 0), NULL, 10);
	if (callback_id)
		*callback_id = strtoll(PQgetvalue(res, (int)b->n, 0), NULL, 10);
	return SKL_OK;
}

skl_rc skl_enqueue_batch(skl_client *c, const skl_batch_spec *b, int64_t *ids,
                         int64_t *callback_id, skl_error *err)
{
	if (callback_id)
		*callback_id = 0;
	skl_rc rc = skl__batch_check(b, err);
	if (rc != SKL_OK)
		return rc;
	if (ids == NULL)
		return skl__seterr(err, SKL_MISUSE, "ids must not be NULL");
	skl_buf pl;
	skl_buf_init(&pl, 0);
	skl_buf_adds(&pl, "{");
	for (size_t i = 0; i < b->n; i++) {
		if (i)
			skl_buf_adds(&pl, ",");
		skl_buf_array_elem(&pl, b->payloads[i] ? b->payloads[i] : "{}");
	}
	skl_buf_adds(&pl, "}");
	char prio[16], max[16];
	snprintf(prio, sizeof(prio), "%d", b->priority);
	snprintf(max, sizeof(max), "%d", b->max_attempts);
	skl_stmt s = {.sql = batch_sql, .nparams = 7,
	              .params = {b->kind, skl_buf_str(&pl), b->callback_kind, b->callback_payload,
	                         b->queue, prio, max}};
	static const skl_txn_opts once = {0};  /* no retry token: never re-sent */
	rc = skl_buf_failed(&pl) ? skl__seterr(err, SKL_INVALID, "batch too large (over 64 MiB)")
	                         : skl__run_stmt(c, &once, &s, err);
	skl_buf_free(&pl);
	if (rc == SKL_OK)
		rc = batch_ids(s.res, b, ids, callback_id, err);
	PQclear(s.res);
	return refused_as_input(rc, err);
}

/* ---- why a job waits ---- */

skl_rc skl_job_waits_for(skl_client *c, int64_t id, char **reason, skl_error *err)
{
	*reason = NULL;
	char v[24];
	snprintf(v, sizeof(v), "%" PRId64, id);
	skl_stmt s = {.sql = "SELECT skiplock.job_waits_for($1::bigint)", .nparams = 1,
	              .params = {v}};
	static const skl_txn_opts read_opts = {.idempotent = 1};
	skl_rc rc = skl__run_stmt(c, &read_opts, &s, err);
	if (rc == SKL_OK && (PQntuples(s.res) != 1 || PQnfields(s.res) != 1))
		rc = skl__seterr(err, SKL_DB, "job_waits_for answered an unexpected shape");
	if (rc == SKL_OK && !PQgetisnull(s.res, 0, 0) &&
	    (*reason = skl__strdup(PQgetvalue(s.res, 0, 0))) == NULL)
		rc = skl__seterr(err, SKL_NOMEM, "out of memory");
	PQclear(s.res);
	return rc;
}
