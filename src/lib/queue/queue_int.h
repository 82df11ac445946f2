/*
 * queue_int.h — what the queue part offers the parts after it (worker) and
 * the tests, beyond its public headers.
 */
#ifndef SKL_QUEUE_INT_H
#define SKL_QUEUE_INT_H

#include <stdbool.h>

#include "core/internal.h"
#include "skiplock/deps.h"
#include "skiplock/queue.h"

/* kind.c: SKL_OK for a job kind of 1..SKL_KIND_MAX bytes, else SKL_INVALID
 * saying so. */
skl_rc skl__check_kind(const char *kind, skl_error *err);

/* inspect.c: *yes when the client's role may read the fencing tokens of
 * skiplock.all_jobs and skiplock.leases (the worker and reader roles may
 * not, sql/0017_guards.sql); asked of the database once per client. */
skl_rc skl__tokens_readable(skl_client *c, bool *yes, skl_error *err);

/* queue.c: skl_rescue, calling fn (when not NULL) with the queue and kind
 * of every job whose expired lease was ended, and whether it was discarded
 * (its last attempt). */
typedef void (*skl__rescued_fn)(void *ctx, const char *queue, const char *kind,
                                bool discarded);
skl_rc skl__rescue_each(skl_client *c, int limit, skl__rescued_fn fn, void *ctx,
                        int *rescued, int *discarded, skl_error *err);
/* The text of the claim call, or with `record` of the combined
 * record-and-claim (queue.c): for tests that compare them with sql/. */
const char *skl__claim_sql(bool record);
/* The fenced outcome call and the heartbeat, for the same tests. */
const char *skl__record_sql(void);
const char *skl__heartbeat_sql(void);
/* What became of one recorded outcome (skiplock.record's row for it). */
typedef struct skl_recorded {
	bool accepted;            /* false: the claim was lost, nothing changed */
	bool discarded;           /* the failed attempt ended the job */
	int64_t delay_ms;         /* a retry: the delay the database chose */
} skl_recorded;
/* skl_record and skl_record_and_claim with rec[i] (n entries, caller-owned)
 * for outs[i].  With wait_ms, skl__record_and_claim always goes through
 * skiplock.record_claim (outcomes or not) and sets *wait_ms to how soon a
 * limit that held due jobs back may have room (its 'wait' row), or -1. */
skl_rc skl__record(skl_client *c, const skl_outcome *outs, size_t n, skl_recorded *rec,
                   skl_error *err);
skl_rc skl__record_and_claim(skl_client *c, const skl_outcome *outs, size_t nouts,
                             skl_recorded *rec, const skl_claim_opts *o, skl_job **jobs,
                             size_t *n, int64_t *wait_ms, skl_error *err);

/* deps.c: whether o names parents; SKL_OK when they are well formed
 * (count, ids, keys, policy), else SKL_INVALID naming job i + 1. */
bool skl__has_parents(const skl_enqueue_opts *o);
skl_rc skl__parents_check(const skl_enqueue_opts *o, size_t i, skl_error *err);
/* SKL_OK when skl_enqueue_batch would send b, else SKL_INVALID saying why. */
skl_rc skl__batch_check(const skl_batch_spec *b, skl_error *err);
/* One job with parents (checked) through skiplock.enqueue_after, with
 * skl_enqueue_bulk_ex's results. */
skl_rc skl__enqueue_after(skl_client *c, const skl_job_spec *j, int64_t *id,
                          skl_enqueued *inserted, skl_error *err);

#endif
