/*
 * worker_int.h — the worker's private structures, shared by its files.
 *
 * The worker files call each other in one direction only (checked by
 * tests/layers/check_layers.sh):
 *   worker_log.c, worker_check.c, spawn.c,       call no worker file
 *   complete_tx.c, lanes.c
 *   worker.c, retry_policy.c, worker_idle.c      the log, the checks, spawn.c,
 *                                                complete_tx.c
 *   command.c, webhook.c                         worker.c (registration), the log
 *   stream_out.c < stream_proc.c < stream_loop.c < stream.c
 *                                                the same; each stream file
 *                                                calls only those before it
 *                                                (stream_int.h)
 *   worker_loop.c                                worker.c, the policy, the idle poll,
 *                                                complete_tx.c, lanes.c
 * A handler is reached only through its handler_ops: the loop knows no
 * handler file, and worker.c knows none either.
 */
#ifndef SKL_WORKER_INT_H
#define SKL_WORKER_INT_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "core/internal.h"
#include "queue/queue_int.h"
#include "skiplock/queue.h"
#include "skiplock/retry.h"
#include "skiplock/worker.h"
#include "worker/spawn.h"
#include "worker/wmetrics.h"

#define SLOT_MAGIC 0x736b6c6aU

typedef struct slot slot;
typedef struct handler handler;
typedef struct lane lane;

struct slot {
	skl_job job;                 /* first: handlers get &slot->job */
	unsigned magic;
	struct slot *next;
	const struct handler *h;
	struct lane *lane;           /* claims, heartbeats and records it */
	volatile sig_atomic_t lost;
	_Atomic int in_tx;           /* IN_TX_*: the handler completed the job in its
	                              * own transaction (complete_tx.c) */
	bool row_locked;             /* the last heartbeat found its row held by a
	                              * transaction (a job_fence): not extended */
	skl_outcome_kind outcome;
	int64_t retry_delay_ms;      /* > 0 with a retry outcome: set by the handler
	                              * path (e.g. a webhook's Retry-After) and wins
	                              * over the backoff; after the record, the
	                              * delay the database chose */
	bool deferred;               /* the retry budget refused an early retry */
	skl_backoff backoff;         /* the kind's or worker's policy (retry_policy.c) */
	int64_t backoff_base_ms, backoff_cap_ms;
	char *result;                /* JSON or NULL */
	char *error;                 /* text or NULL */
	double seconds;              /* how long the handler ran */
};

/* slot.in_tx (complete_tx.c): no completion; skiplock.job_complete ran
 * in a transaction still open; that transaction committed (or its
 * COMMIT's answer was lost). */
enum { IN_TX_NONE = 0, IN_TX_OPEN = 1, IN_TX_DONE = 2 };

/* What a kind of handler (C function, command, webhook, stream) offers
 * the worker.  ctx is the handler's own state, given at registration. */
typedef struct handler_ops {
	const char *name;            /* "C", "command", "webhook", "stream" */
	/* Runs one attempt of s's job on a handler thread (s->h->ctx is the
	 * handler's state): may fill s->result and s->error and set
	 * s->retry_delay_ms; returns SKL_JOB_OK, SKL_JOB_RETRY, SKL_JOB_DISCARD,
	 * or any other value for a failed attempt. */
	int (*run)(skl_worker *w, slot *s);
	/* Optional: called by skl_worker_run before the first claim (main
	 * thread); an error stops the run. */
	skl_rc (*start)(skl_worker *w, void *ctx, skl_error *err);
	/* Optional: called by skl_worker_run after every handler thread ended. */
	void (*stop)(void *ctx);
	/* Optional (main thread, any time while running): how many jobs of its
	 * kind the handler can hold now, claimed and unfinished, or -1 for as
	 * many as the worker's threads; the claim takes no more of the kind
	 * than this minus those it holds (a stream: its processes' room).  A
	 * handler whose capacity grows calls skl__worker_room_opened. */
	int (*capacity)(void *ctx);
	/* Frees ctx (skl_worker_free, or a registration that failed). */
	void (*free)(void *ctx);
} handler_ops;

typedef struct handler {
	char *kind;
	const handler_ops *ops;
	void *ctx;
} handler;

/* A kind's retry budget in this process: first attempts and granted
 * retries in one-second buckets over SKL_RETRY_BUDGET_WINDOW_MS. */
#define BUDGET_BUCKETS (SKL_RETRY_BUDGET_WINDOW_MS / 1000)
typedef struct retry_budget {
	int64_t bucket_ms;           /* start of the newest bucket */
	int head;
	int firsts[BUDGET_BUCKETS], retries[BUDGET_BUCKETS];
	int64_t denied;              /* since the last log line */
	int64_t logged_ms;           /* when the last one was written */
} retry_budget;

/* Retry settings and state of one kind (worker.c, retry_policy.c). */
typedef struct kind_retry {
	char *kind;
	skl_retry_policy policy;
	bool breaker;
	skl_breaker_config breaker_config;
	retry_budget budget;         /* under the worker's mu */
} kind_retry;

struct skl_worker {
	skl_client_options co;
	skl_worker_options wo;
	char *strings[8];            /* copies the option structs point into */
	char **queues;
	handler *handlers;
	size_t nhandlers;
	kind_retry *retry;           /* per-kind settings, from skl_worker_retry_policy */
	size_t nretry;               /* and skl_worker_breaker */
	skl_client *db;
	skl_cmd_env cmd_env;         /* command handlers' environment (command.h) */

	pthread_mutex_t mu;
	pthread_cond_t work;
	slot *queued, *queued_tail;  /* claimed by any lane, waiting for a thread */
	bool threads_exit;
	pthread_t *threads;
	int nthreads;

	lane *lanes;                 /* wo.connections of them (lanes.c) */
	int nlanes;
	/* Per handler with a capacity, by index in handlers: jobs claimed and
	 * not finished, and room a lane's claim in flight has taken
	 * (worker_loop.c claim_kinds; reserved under claim_mu). */
	_Atomic int *held, *reserved;
	pthread_mutex_t claim_mu;
	atomic_bool primary_idle;    /* lane 0 is idle: the others may idle too */

	int wake[2];                 /* lane 0's wake pipe */
	uint64_t listen_gen;         /* the connection (db->connects) last looked at */
	bool listening;              /* that connection LISTENs */
	skl_client *listen_db;       /* through a pooler: a direct connection that
	                              * only LISTENs (worker_idle.c); else NULL */
	int64_t listen_retry_at;     /* its next (re)connection attempt */
	bool pooler_seen;            /* --pooler auto: the server's port showed a
	                              * pooler; LISTEN on the direct URL if any */
	volatile sig_atomic_t stop;
	uint64_t rng;
	skl_wmetrics *metrics;       /* per queue and kind; see wmetrics.h */
	_Atomic uint64_t st_claimed, st_completed, st_retried, st_discarded, st_fenced,
		st_rescued, st_heartbeats;
	_Atomic uint64_t st_claims, st_empty_claims;
	uint64_t st_notifications;   /* lane 0 only */
};

/* One connection of the worker for claims, outcomes and heartbeats, and
 * the thread that drives it (lane 0: the thread in skl_worker_run, with
 * w->db and w->wake; the others: their own).  A lane records and
 * heartbeats only the jobs it claimed, on its own connection; the handler
 * threads are shared.  Lane 0 alone does the rest (rescue, cron,
 * maintenance, gauges, LISTEN, the idle poll). */
struct lane {
	skl_worker *w;
	int index;
	skl_client *db;
	int wake[2];
	size_t capacity;             /* its share of concurrency + prefetch */
	slot *done;                  /* under w->mu: finished, unrecorded */
	bool done_woken;             /* a byte is on the wake pipe for `done` */
	slot **running;              /* every slot it claimed and has not recorded */
	_Atomic size_t nrunning;     /* written by its thread only */
	atomic_bool poked;           /* claim now: room opened, or a wake-up */
	_Atomic uint64_t reconnects, indeterminate; /* its connection's, for lane 0 */
	/* The place in the claim order after which its claims start
	 * (worker_loop.c exchange()): set from a full claim's last job, dropped
	 * when a claim comes back short; a claim from the front is made at
	 * least every SKL_CLAIM_FRONT_EVERY_MS. */
	bool mark_set;
	int mark_priority;
	int64_t mark_run_at_us, mark_id, mark_front_at;
	pthread_t thread;
};

/* lanes.c: opens wo.connections lanes (lane 0 takes w->db and w->wake)
 * and shares concurrency and prefetch among them. */
skl_rc skl__lanes_open(skl_worker *w, skl_error *err);
/* Frees the lanes and their connections (not the slots they hold). */
void skl__lanes_free(skl_worker *w);
/* Sets every lane's poked but except's and writes a byte on its pipe
 * (async-signal-safe). */
void skl__lanes_wake(skl_worker *w, const lane *except);

/* worker.c: registers a handler of kind with its ops and ctx.  ctx is
 * taken over: on failure ops->free(ctx) was called. */
skl_rc skl__handler_add(skl_worker *w, const char *kind, const handler_ops *ops, void *ctx,
                        skl_error *err);
/* worker.c: a handler's capacity grew (any thread): the loop claims at
 * once instead of at its next poll. */
void skl__worker_room_opened(skl_worker *w);
/* worker.c: frees a claimed slot and what it holds. */
void skl__slot_free(slot *s);
/* worker.c: replaces *dst with a copy of text (NULL: none). */
void skl__set_text(char **dst, const char *text);
/* retry_policy.c: the delay before a failed job's next attempt (the
 * handler's request in s->retry_delay_ms, the strategy, the budget).
 * Counts first attempts for the budget.  Handler threads; takes mu. */
void skl__retry_settle(skl_worker *w, slot *s);
/* Creates or updates the breakers of the kinds given one (main thread). */
skl_rc skl__retry_start(skl_worker *w, skl_error *err);
kind_retry *skl__retry_kind(skl_worker *w, const char *kind, bool create);
void skl__retry_free(skl_worker *w);

/* worker_idle.c: wake-ups on a direct connection, and the idle poll. */
typedef struct skl_idle_view {
	int64_t run_in;              /* ms until the earliest available job of ours is
	                              * due (<= 0: due now); INT64_MAX: none */
	int64_t fire_in;             /* ms until the earliest enabled schedule fires */
	int64_t expire_in;           /* ms until the earliest lease expires */
} skl_idle_view;
/* True when the worker may LISTEN: its connection is not a pooler. */
bool skl__idle_listens(const skl_worker *w);
/* LISTENs on a connection that does not yet (after every reconnect);
 * true when it just did: notifications may have been missed meanwhile. */
bool skl__idle_relisten(skl_worker *w);
/* The socket to poll for notifications, or -1 when not listening. */
int skl__idle_fd(const skl_worker *w);
/* Reads what arrived: the number of notifications (added to
 * st_notifications), or -1 when the connection was lost (the next
 * statement reconnects). */
int skl__idle_drain(skl_worker *w);
/* One read-only statement: when the next job, fire time, lease expiry are due. */
skl_rc skl__idle_poll(skl_worker *w, const char *const *kinds, skl_idle_view *v,
                      skl_error *err);

/* complete_tx.c: the slot of the C handler running on this thread (NULL
 * when none), set by the C handler's run around the handler. */
void skl__handler_slot_set(slot *s);
/* True when s's handler completed its job in its own transaction, or
 * that transaction is open (a heartbeat may find the job gone). */
bool skl__slot_completed_in_tx(slot *s);
/* Unlinks from *list the slots whose handler returned SKL_JOB_OK after
 * completing the job in its own transaction (no outcome to record), less
 * one from *n each; returns them as a list. */
slot *skl__take_completed_in_tx(slot **list, size_t *n);

/* worker_check.c: SKL_OK when every option is within its documented
 * bounds (skiplock/worker.h), else SKL_INVALID naming the first that is
 * not.  Zero means "the default" where worker.h says so. */
skl_rc skl__worker_options_check(const skl_worker_options *o, skl_error *err);
/* SKL_OK when s is valid UTF-8 of 1..max_chars characters and at most
 * max_bytes bytes; else SKL_INVALID saying so about what. */
skl_rc skl__check_name(const char *what, const char *s, size_t max_chars, size_t max_bytes,
                       skl_error *err);
/* Replaces each byte of s that is not part of a UTF-8 sequence PostgreSQL
 * accepts by '?', in place (text from a process, kept as an error). */
void skl__utf8_scrub(char *s);

/* worker_log.c: a message about the worker. */
void skl__wlog(const skl_worker *w, skl_log_level lvl, const char *fmt, ...) SKL_PRINTF(3, 4);
/* A message about one job: its context goes to log_record as fields, or
 * before the message ("job=… kind=… attempt=… fencing=… queue=…: ") for the
 * plain log callback. */
void skl__wlog_job(const skl_worker *w, skl_log_level lvl, const skl_job *job,
                   const char *fmt, ...) SKL_PRINTF(4, 5);

#endif
