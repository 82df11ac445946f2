/*
 * queue_int.h — what the queue part offers the parts after it (worker) and
 * the tests, beyond its public headers.
 */
#ifndef SKL_QUEUE_INT_H
#define SKL_QUEUE_INT_H

#include <stdbool.h>

#include "core/internal.h"

/* kind.c: SKL_OK for a job kind of 1..SKL_KIND_MAX bytes, else SKL_INVALID
 * saying so. */
skl_rc skl__check_kind(const char *kind, skl_error *err);

/* queue.c: skl_rescue, calling fn (when not NULL) with the queue and kind
 * of every job whose expired lease was ended, and whether it was discarded
 * (its last attempt). */
typedef void (*skl__rescued_fn)(void *ctx, const char *queue, const char *kind,
                                bool discarded);
skl_rc skl__rescue_each(skl_client *c, int limit, skl__rescued_fn fn, void *ctx,
                        int *rescued, int *discarded, skl_error *err);
/* The text of the claim statement, or with `record` of the combined
 * record-and-claim, with `after` their form that claims after a place in
 * the claim order (queue.c): for tests of their plans. */
const char *skl__claim_sql(bool record, bool after);
/* The fenced outcome statement and the heartbeat, for the same tests. */
const char *skl__record_sql(void);
const char *skl__heartbeat_sql(void);

#endif
