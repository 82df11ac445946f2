/*
 * wmetrics.h — a worker's metrics: counters and handler durations per queue
 * and kind, cached queue gauges, rendered in the Prometheus text format.
 *
 * Writers are the worker's loop thread (counts, durations, gauges); readers
 * are any thread (skl_worker_metrics, an HTTP server's thread).  A small
 * mutex of its own guards the table, so a scrape never waits for a handler
 * thread and never touches the database connection.
 */
#ifndef SKL_WMETRICS_H
#define SKL_WMETRICS_H

#include <stdint.h>

#include "core/internal.h"

typedef struct skl_wmetrics skl_wmetrics;

/* The counters of one (queue, kind), each defined by what moves it:
 *   CLAIMED    a claim returned the job to this worker
 *   COMPLETED  a completion this worker recorded was accepted
 *   FAILED     an attempt of this worker's handler did not succeed and its
 *              outcome was accepted: FAILED = RETRIED + handler discards
 *   RETRIED    a failed attempt accepted and scheduled for another try
 *   DISCARDED  this worker moved the job to discarded: its handler's
 *              outcome (exit 65, or the last attempt failed), or a rescue
 *              of an expired lease on the last attempt
 *   RESCUED    this worker ended an expired lease (the job went back to
 *              available, or to discarded on its last attempt)
 *   FENCED     an outcome of this worker refused: the lease was lost */
typedef enum {
	WM_CLAIMED, WM_COMPLETED, WM_FAILED, WM_RETRIED, WM_DISCARDED, WM_RESCUED, WM_FENCED,
	WM_NCOUNTERS
} skl_wm_counter;

/* One row of the queue gauges. */
typedef struct skl_wm_queue {
	char *queue;
	int64_t depth;        /* due, available jobs (capped: SKL_WM_DEPTH_CAP) */
	double oldest_s;      /* age of the oldest of them; 0 when none */
} skl_wm_queue;

#define SKL_WM_DEPTH_CAP 10000

skl_wmetrics *skl__wm_new(void);
void skl__wm_free(skl_wmetrics *m);
void skl__wm_count(skl_wmetrics *m, const char *queue, const char *kind, skl_wm_counter c,
                   uint64_t n);
void skl__wm_duration(skl_wmetrics *m, const char *queue, const char *kind, double seconds);
/* Replaces the queue gauges (takes ownership of rows and their strings). */
void skl__wm_set_queues(skl_wmetrics *m, skl_wm_queue *rows, size_t n);
/* Scalars the loop thread copies in after each turn. */
void skl__wm_set_scalars(skl_wmetrics *m, uint64_t leases_held, uint64_t reconnects,
                         uint64_t indeterminate);
/* The loop's claims and wake-ups, copied in after each turn:
 *   claims         claim statements sent (with room for jobs), whatever
 *                  they returned
 *   empty_claims   those that returned no job
 *   notifications  NOTIFY hints read on the LISTEN connection (coalesced:
 *                  many may lead to one claim, or none) */
void skl__wm_set_wakeups(skl_wmetrics *m, uint64_t claims, uint64_t empty_claims,
                         uint64_t notifications);
/* Reads the queue gauges through c (the loop thread's connection): one
 * bounded statement.  queues NULL or empty: every queue. */
skl_rc skl__wm_refresh(skl_wmetrics *m, skl_client *c, const char *const *queues,
                       size_t nqueues, skl_error *err);
/* The whole text exposition; NULL when out of memory.  Free with free. */
char *skl__wm_render(skl_wmetrics *m);

#endif
