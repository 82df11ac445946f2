/*
 * SPDX-License-Identifier: MIT
 * skiplock/inspect.h — reading the job queue: list jobs, show one job with
 * its error history, and per queue and kind status.
 *
 * Every call here is one read-only statement, retried on transient
 * failures like any other (reading twice changes nothing).  The operator
 * actions that change jobs (retry, cancel, prune) are in skiplock/queue.h.
 *
 * Times are returned as text, ISO 8601 in UTC with milliseconds
 * ("2026-05-01T08:00:00.000Z"), read from the database clock; durations
 * relative to "now" are computed by the database too, so a client's clock
 * never matters.
 *
 * Memory: arrays returned here belong to the caller and are freed with the
 * matching *_free call, which frees every string they point to.  Pointers
 * into them stay valid until then.  Out-parameters are set to NULL / 0
 * first and assigned only on success.
 *
 * Thread-safety: as skl_client (one thread at a time per client); the
 * returned arrays are plain data and may be read from any thread.
 */
#ifndef SKIPLOCK_INSPECT_H
#define SKIPLOCK_INSPECT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "skiplock/client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True when s names a job state: available, running, completed, discarded
 * or cancelled (sql/0002_jobs.sql describes each).  Thread-safe. */
SKL_API bool skl_job_state_valid(const char *s);

/* One entry of a job's error history: attempt number as recorded (0 when
 * the entry carries none), when it was recorded, and the error text. */
typedef struct skl_job_error {
	int attempt;
	const char *at;            /* timestamp text; "" when not recorded */
	const char *error;         /* "" when empty */
} skl_job_error;

/* A job as stored.  Strings that may be absent are NULL when absent. */
typedef struct skl_job_info {
	int64_t id;
	const char *queue;
	const char *kind;
	const char *state;
	int priority;
	int attempt;               /* attempts started so far */
	int max_attempts;
	int64_t fencing;           /* the token of the latest claim; -1 when the
	                            * client's role may not read tokens (the
	                            * worker and reader roles: docs/security.md) */
	const char *run_at;        /* when it is (or was) due */
	const char *created_at;
	const char *attempted_at;  /* latest claim; NULL before the first */
	const char *finished_at;   /* NULL unless finished */
	const char *lease_owner;   /* running only, else NULL */
	const char *lease_expires_at;
	int64_t lease_expires_in_ms; /* lease_expires_at - now(): negative when the
	                              * lease already expired; 0 when no lease */
	const char *unique_key;
	int64_t timeout_ms;        /* 0: not set on the job */
	int64_t backoff_base_ms;   /* 0: not set on the job */
	int64_t backoff_cap_ms;    /* 0: not set on the job */
	const char *last_error;    /* newest entry of the error history, or NULL */
	/* Filled by skl_job_get only; NULL and 0 in a list. */
	const char *payload;       /* JSON text */
	const char *result;        /* JSON text, or NULL */
	skl_job_error *errors;     /* oldest first (the newest 20 are kept) */
	size_t nerrors;
	void *internal;            /* owned by the library */
} skl_job_info;

typedef struct skl_list_opts {
	const char *queue;         /* NULL: every queue */
	const char *kind;          /* NULL: every kind */
	const char *state;         /* NULL: every state; else one skl_job_state_valid accepts */
	int limit;                 /* at most this many jobs; 0: 50 */
	/* Finding a job (every one NULL: no such filter). */
	const char *payload_contains; /* JSON: the payload contains it (jsonb @>) */
	const char *error_contains;   /* text in an entry of the error history,
	                               * ignoring case */
	const char *time_field;    /* the time that from and to bound: "created",
	                            * "run", "attempted", "finished" or "lease"
	                            * (lease_expires_at) */
	const char *from;          /* time_field >= from; to: time_field < to.  Each
	                            * an ISO 8601 timestamp ("2026-05-01T08:00:00Z",
	                            * UTC when it names no zone) or a duration
	                            * before the database's now() ("15m", as
	                            * skl_duration_parse reads it) */
	const char *to;
} skl_list_opts;

/* Lists jobs matching every filter in o (o may be NULL: no filter), newest
 * (highest id) first.  *jobs (free with skl_job_info_free) is NULL and *n 0
 * when none matches; that is SKL_OK, not SKL_EMPTY.  SKL_INVALID, before
 * any statement, for an unknown state, a negative limit, a payload filter
 * that is not JSON, an unknown time field, a bound that is neither a
 * timestamp nor a duration, or a bound without a time field.  The jobs are
 * read newest first along the primary key until limit match, so a filter
 * that matches few jobs reads many.  Blocks up to the client's retry
 * bound. */
SKL_API skl_rc skl_jobs_list(skl_client *c, const skl_list_opts *o, skl_job_info **jobs,
                             size_t *n, skl_error *err);

/* Reads job id with its payload, result and full error history into *job
 * (free with skl_job_info_free(*job, 1)).  SKL_EMPTY when there is no such
 * job.  Blocks up to the client's retry bound. */
SKL_API skl_rc skl_job_get(skl_client *c, int64_t id, skl_job_info **job, skl_error *err);

/* Frees n jobs returned by skl_jobs_list or skl_job_get.  Accepts NULL. */
SKL_API void skl_job_info_free(skl_job_info *jobs, size_t n);

/* Status of one (queue, kind) pair.
 *
 * Counters, by formula over skiplock.jobs at the time of the call:
 *   due          state = available and run_at <= now()
 *   scheduled    state = available and run_at >  now()  (delayed or
 *                waiting for a retry)
 *   running      state = running; lease_expired: of those, lease_expires_at
 *                < now() (waiting to be rescued)
 *   completed, discarded, cancelled: jobs in that state (until pruned)
 *   recent_errors     entries of the error history recorded in the last
 *                     window_ms (failed attempts, timeouts, expired leases)
 *   recent_completed  jobs completed in the last window_ms
 *   failure_rate      recent_errors / (recent_errors + recent_completed),
 *                     -1 when both are 0
 */
typedef struct skl_queue_status {
	const char *queue;
	const char *kind;
	int64_t due;
	int64_t scheduled;
	int64_t running;
	int64_t lease_expired;
	int64_t completed;
	int64_t discarded;
	int64_t cancelled;
	int64_t oldest_due_age_ms;    /* now() - run_at of the due job that has
	                               * waited longest; -1 when none is due */
	const char *next_lease_expiry; /* earliest lease_expires_at of a running
	                                * job; NULL when none runs */
	int64_t next_lease_expiry_in_ms; /* it minus now(): negative when already
	                                  * expired; 0 when none runs */
	int64_t recent_errors;
	int64_t recent_completed;
	double failure_rate;
	void *internal;               /* owned by the library */
} skl_queue_status;

/* Reads the status of every (queue, kind) pair that has jobs, ordered by
 * queue then kind, with a failure window of window_ms (0: 5 minutes).
 * Counting by state reads the whole jobs table; recent errors are read
 * only from unfinished jobs and jobs finished within the window.  *rows
 * (free with skl_queue_status_free) is NULL and *n 0 when there are no
 * jobs.  Blocks up to the client's retry bound. */
SKL_API skl_rc skl_queue_status_get(skl_client *c, int64_t window_ms, skl_queue_status **rows,
                                    size_t *n, skl_error *err);

/* Frees n rows returned by skl_queue_status_get.  Accepts NULL. */
SKL_API void skl_queue_status_free(skl_queue_status *rows, size_t n);

/* Jobs finished per time bucket for one (queue, kind) pair.  completed[i]
 * and discarded[i] count the jobs that reached that state in bucket i;
 * bucket nbuckets-1 is the latest, [now - bucket_ms, now] by the database
 * clock, bucket 0 the oldest.  Cancelled jobs are not counted. */
typedef struct skl_queue_rate {
	const char *queue;
	const char *kind;
	int64_t *completed;           /* nbuckets counts */
	int64_t *discarded;           /* nbuckets counts */
	void *internal;               /* owned by the library */
} skl_queue_rate;

/* Reads, for every (queue, kind) pair with jobs finished in the last
 * nbuckets × bucket_ms (1 to 1440 buckets of 1 s to 1 day), the counts per
 * bucket, ordered by queue then kind.  Reads only finished jobs of the
 * window (an index range); jobs already pruned are not counted.  *rows
 * (free with skl_queue_rate_free) is NULL and *n 0 when nothing finished. */
SKL_API skl_rc skl_queue_throughput(skl_client *c, int nbuckets, int64_t bucket_ms,
                                    skl_queue_rate **rows, size_t *n, skl_error *err);

/* Frees n rows returned by skl_queue_throughput.  Accepts NULL. */
SKL_API void skl_queue_rate_free(skl_queue_rate *rows, size_t n);

/* One time bucket of a chart.  Counters, by formula:
 *   completed, discarded  jobs whose finished_at falls in the bucket
 *   failed                entries of error histories recorded in it (failed
 *                         attempts, timeouts, expired leases)
 *   claims                running, completed and discarded jobs whose latest
 *                         claim (attempted_at) falls in it
 *   wait_p50_ms, wait_p95_ms  percentiles of attempted_at - run_at over those
 *                         claims (the queue wait); -1 when claims is 0 */
typedef struct skl_chart_bucket {
	int64_t completed;
	int64_t failed;
	int64_t discarded;
	int64_t claims;
	int64_t wait_p50_ms;
	int64_t wait_p95_ms;
} skl_chart_bucket;

/* A chart: nbuckets buckets of bucket_ms, oldest first; bucket i covers
 * [start + i × bucket_ms, start + (i + 1) × bucket_ms), and the last ends
 * at the database's now(). */
typedef struct skl_chart {
	int nbuckets;
	int64_t bucket_ms;
	const char *start;            /* ISO 8601 UTC, milliseconds */
	skl_chart_bucket *buckets;    /* nbuckets entries */
} skl_chart;

/* Reads the chart of one queue and kind (queue or kind NULL: every one)
 * over the last nbuckets × bucket_ms (1 to 1440 buckets of 1 s to 1 day):
 * one read-only statement over finished jobs by a range of finished_at
 * (their index) and over the live jobs.  Jobs already pruned by retention
 * are not counted.  *chart (free with skl_chart_free) always has nbuckets
 * buckets on SKL_OK.  SKL_INVALID for a bucket count or width out of
 * range, before any statement.  Blocks up to the client's retry bound. */
SKL_API skl_rc skl_queue_chart(skl_client *c, const char *queue, const char *kind, int nbuckets,
                               int64_t bucket_ms, skl_chart **chart, skl_error *err);

/* Frees a chart returned by skl_queue_chart.  Accepts NULL. */
SKL_API void skl_chart_free(skl_chart *chart);

#ifdef __cplusplus
}
#endif
#endif
