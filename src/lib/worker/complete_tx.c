/*
 * complete_tx.c — a job's effect and its completion in one transaction
 * (skl_job_complete_with, sql/0019_complete_in_tx.sql), and what the
 * worker learns from it.
 *
 * The fence alone (skiplock.job_fence) lets one effect commit per claim,
 * but a worker that dies between the effect's COMMIT and its outcome leaves
 * a running job whose next claim applies the effect again.  Completing the
 * job in the effect's own transaction leaves nothing to claim again.
 *
 * The worker must then send no outcome for that claim and must not take
 * the job's disappearance for a lost lease.  A C handler's slot carries
 * in_tx (worker_int.h), written here on the handler's thread and read by
 * the loop's thread:
 *   IN_TX_NONE  no completion: the loop records the handler's outcome
 *   IN_TX_OPEN  job_complete ran in a transaction not yet ended: the job
 *               row is locked by it, so a heartbeat that finds the job gone
 *               ran after that transaction committed
 *   IN_TX_DONE  committed, or the COMMIT's answer was lost: a handler that
 *               returns SKL_JOB_OK has its outcome dropped (the job is
 *               finished, or it is still running and comes back when its
 *               lease expires); any other outcome is recorded, fenced out
 *               when the completion did commit, and not counted as lost
 * A definite rollback returns to what it was before the call.  The slot
 * is found through a thread-local that the C handler's run (worker.c) sets
 * around the handler, so a job that is not the worker's (skl_claim's) is
 * never mistaken for one of its slots.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "worker/worker_int.h"

static _Thread_local slot *handler_slot;

void skl__handler_slot_set(slot *s)
{
	handler_slot = s;
}

bool skl__slot_completed_in_tx(slot *s)
{
	return atomic_load(&s->in_tx) != IN_TX_NONE;
}

slot *skl__take_completed_in_tx(slot **list, size_t *n)
{
	slot *taken = NULL;
	for (slot **p = list; *p;) {
		slot *s = *p;
		if (s->outcome == SKL_OUTCOME_COMPLETE && atomic_load(&s->in_tx) == IN_TX_DONE) {
			*p = s->next;
			s->next = taken;
			taken = s;
			(*n)--;
		} else {
			p = &s->next;
		}
	}
	return taken;
}

typedef struct complete_call {
	slot *s;                     /* the worker's slot of the job, or NULL */
	int before;                  /* its in_tx before this call */
	const char *sql;
	int nparams;
	const char *const *params;
	const char *vals[4];         /* id, fencing, result, queue */
	int64_t rows;
} complete_call;

static const char *const job_complete_sql =
	"SELECT skiplock.job_complete($1::bigint, $2::bigint, $3::jsonb, $4::text)";

static skl_rc complete_fn(skl_client *c, void *ctx, skl_error *err)
{
	complete_call *cc = ctx;
	if (cc->s)
		atomic_store(&cc->s->in_tx, cc->before); /* a retry: the last try rolled back */
	PGresult *res = NULL;
	skl_rc rc = SKL_OK;
	if (cc->sql) {
		rc = skl__exec(c, cc->sql, cc->nparams, cc->params, &res, err);
		if (rc != SKL_OK)
			return rc;
		cc->rows = PQresultStatus(res) == PGRES_TUPLES_OK ? PQntuples(res)
		                                                  : strtoll(PQcmdTuples(res), NULL, 10);
		PQclear(res);
	}
	rc = skl__exec(c, job_complete_sql, 4, cc->vals, &res, err);
	PQclear(res);
	if (rc == SKL_OK && cc->s)
		atomic_store(&cc->s->in_tx, IN_TX_OPEN);
	return rc;
}

skl_rc skl_job_complete_with(skl_client *c, const skl_job *job, const char *result,
                             const char *sql, int nparams, const char *const *params,
                             int64_t *rows, skl_error *err)
{
	if (rows)
		*rows = 0;
	if (c == NULL || job == NULL)
		return skl__seterr(err, SKL_MISUSE, "skl_job_complete_with needs a client and a job");
	if (nparams < 0 || (nparams > 0 && (sql == NULL || params == NULL)))
		return skl__seterr(err, SKL_MISUSE, "skl_job_complete_with: %d parameters for %s",
		                   nparams, sql ? "the statement" : "no statement");
	char id[24], fencing[24];
	snprintf(id, sizeof(id), "%" PRId64, job->id);
	snprintf(fencing, sizeof(fencing), "%" PRId64, job->fencing);
	slot *s = handler_slot && &handler_slot->job == job ? handler_slot : NULL;
	complete_call cc = {.s = s, .before = s ? atomic_load(&s->in_tx) : IN_TX_NONE,
	                    .sql = sql, .nparams = nparams, .params = params,
	                    .vals = {id, fencing, result, job->queue}};
	/* Not idempotent: after a lost COMMIT answer a retry would find the job
	 * completed (SK001) and could not tell that from a lost claim. */
	static const skl_txn_opts o = {.txn = 1};
	skl_rc rc = skl__run(c, &o, complete_fn, &cc, err);
	if (s)
		atomic_store(&s->in_tx, rc == SKL_OK || rc == SKL_INDETERMINATE ? IN_TX_DONE
		                                                                 : cc.before);
	if (rc == SKL_OK && rows)
		*rows = cc.rows;
	return rc;
}
