/*
 * worker_int.h — the worker's private structures, shared by worker.c (setup
 * and API) and worker_loop.c (the run loop and handler threads).
 */
#ifndef SKL_WORKER_INT_H
#define SKL_WORKER_INT_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "internal.h"
#include "wmetrics.h"

#define SLOT_MAGIC 0x736b6c6aU

typedef struct slot {
	skl_job job;                 /* first: handlers get &slot->job */
	unsigned magic;
	struct slot *next;
	const struct handler *h;
	volatile sig_atomic_t lost;
	skl_outcome_kind outcome;
	int64_t retry_delay_ms;
	char *result;                /* JSON or NULL */
	char *error;                 /* text or NULL */
	double seconds;              /* how long the handler ran */
} slot;

typedef struct handler {
	char *kind;
	skl_handler_fn fn;
	void *ctx;
	char *command;
} handler;

struct skl_worker {
	skl_client_options co;
	skl_worker_options wo;
	char *strings[8];            /* copies the option structs point into */
	char **queues;
	handler *handlers;
	size_t nhandlers;
	skl_client *db;

	pthread_mutex_t mu;
	pthread_cond_t work;
	slot *queued, *queued_tail, *done;
	slot **running;              /* every claimed, unrecorded slot */
	size_t nrunning;
	bool threads_exit;
	pthread_t *threads;
	int nthreads;

	int wake[2];
	volatile sig_atomic_t stop;
	uint64_t rng;
	skl_wmetrics *metrics;       /* per queue and kind; see wmetrics.h */
	_Atomic uint64_t st_claimed, st_completed, st_retried, st_discarded, st_fenced,
		st_rescued, st_heartbeats;
};

void skl__wlog(const skl_worker *w, skl_log_level lvl, const char *fmt, ...) SKL_PRINTF(3, 4);
/* A message about one job: its context goes to log_record as fields, or
 * before the message ("job=… kind=… attempt=… fencing=… queue=…: ") for the
 * plain log callback. */
void skl__wlog_job(const skl_worker *w, skl_log_level lvl, const skl_job *job,
                   const char *fmt, ...) SKL_PRINTF(4, 5);

#endif
