/*
 * stream.c — the streaming handler (docs/protocol.md, "The streaming
 * handler"; the parts in stream_int.h): registration, a job's run on its
 * handler thread, the supervisor's start and stop, and the handler's
 * capacity, which keeps the worker from claiming more jobs of the kind
 * than its processes can take.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/stream_int.h"

void skl_stream_opts_init(skl_stream_opts *o)
{
	*o = (skl_stream_opts){.procs = 1, .inflight = 1};
}

static void wake_supervisor(stream *st)
{
	ssize_t ignored = write(st->wake[1], "j", 1);
	(void)ignored;
}

/* Handler thread: queue the job, sleep until the supervisor finished it.
 * Its line is built when a process takes it. */
static int stream_run(skl_worker *w, slot *s)
{
	stream *st = s->h->ctx;
	sjob j = {.s = s};
	j.timeout_ms = s->job.timeout_ms > 0 ? s->job.timeout_ms : w->wo.job_timeout_ms;
	pthread_cond_init(&j.cv, NULL);
	pthread_mutex_lock(&st->mu);
	if (st->waiting_tail)
		st->waiting_tail->next = &j;
	else
		st->waiting = &j;
	st->waiting_tail = &j;
	pthread_mutex_unlock(&st->mu);
	wake_supervisor(st);
	pthread_mutex_lock(&st->mu);
	while (!j.done)
		pthread_cond_wait(&j.cv, &st->mu);
	pthread_mutex_unlock(&st->mu);
	pthread_cond_destroy(&j.cv);
	free(j.line);
	return j.code;
}

/* Jobs its running processes can hold: inflight each (worker_int.h). */
static int stream_capacity(void *ctx)
{
	stream *st = ctx;
	int n = 0;
	pthread_mutex_lock(&st->mu);
	for (int i = 0; i < st->nprocs; i++)
		if (st->procs[i].up && !st->procs[i].dying)
			n += st->inflight;
	pthread_mutex_unlock(&st->mu);
	return n;
}

static skl_rc stream_start(skl_worker *w, void *ctx, skl_error *err)
{
	stream *st = ctx;
	st->w = w;
	st->stopping = false; /* a worker may run again after a stop */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* no signal handler runs on it */
	int rc = pthread_create(&st->thread, NULL, skl__stream_supervise, st);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return skl__seterr(err, SKL_IO, "stream handler %s: cannot start its thread", st->kind);
	st->started = true;
	return SKL_OK;
}

/* After the handler threads ended: stdin closed, then SIGTERM and SIGKILL
 * after the kill grace each, until every process is gone. */
static void stream_stop(void *ctx)
{
	stream *st = ctx;
	if (!st->started)
		return;
	pthread_mutex_lock(&st->mu);
	st->stopping = true;
	pthread_mutex_unlock(&st->mu);
	wake_supervisor(st);
	pthread_join(st->thread, NULL);
	st->started = false;
}

static void stream_free(void *ctx)
{
	stream *st = ctx;
	if (st == NULL)
		return;
	stream_stop(st);
	for (int i = 0; st->procs && i < st->nprocs; i++) {
		skl_buf_free(&st->procs[i].wbuf);
		skl_buf_free(&st->procs[i].obuf);
		skl_buf_free(&st->procs[i].ebuf);
	}
	free(st->procs);
	free(st->fds);
	free(st->map);
	free(st->kind);
	free(st->command);
	for (int i = 0; i < 2; i++)
		if (st->wake[i] >= 0)
			close(st->wake[i]);
	pthread_mutex_destroy(&st->mu);
	free(st);
}

static const handler_ops stream_ops = {.name = "stream", .run = stream_run,
                                       .start = stream_start, .stop = stream_stop,
                                       .capacity = stream_capacity, .free = stream_free};

static stream *stream_new(const char *kind, const char *command, const skl_stream_opts *o)
{
	stream *st = calloc(1, sizeof(*st));
	if (st == NULL)
		return NULL;
	st->wake[0] = st->wake[1] = -1;
	pthread_mutex_init(&st->mu, NULL);
	st->nprocs = o->procs;
	st->inflight = o->inflight;
	st->kind = strdup(kind);
	st->command = strdup(command);
	st->procs = calloc((size_t)o->procs, sizeof(sproc));
	st->fds = calloc(1 + 3 * (size_t)o->procs, sizeof(*st->fds));
	st->map = calloc(1 + 3 * (size_t)o->procs, sizeof(*st->map));
	for (int i = 0; st->procs && i < o->procs; i++)
		st->procs[i].ch = (skl_child){.in = -1, .out = -1, .err = -1};
	if (!st->kind || !st->command || !st->procs || !st->fds || !st->map ||
	    pipe2(st->wake, O_CLOEXEC | O_NONBLOCK)) {
		stream_free(st);
		return NULL;
	}
	return st;
}

skl_rc skl_worker_handle_stream(skl_worker *w, const char *kind, const char *command,
                                const skl_stream_opts *opts, skl_error *err)
{
	skl_stream_opts o;
	skl_stream_opts_init(&o);
	if (opts)
		o = *opts;
	if (command == NULL || *command == '\0')
		return skl__seterr(err, SKL_INVALID, "stream command for \"%s\" is empty",
		                   kind ? kind : "");
	if (o.procs < 1 || o.procs > SKL_STREAM_PROCS_MAX)
		return skl__seterr(err, SKL_INVALID, "stream processes must be 1 to %d",
		                   SKL_STREAM_PROCS_MAX);
	if (o.inflight < 1 || o.inflight > SKL_STREAM_INFLIGHT_MAX)
		return skl__seterr(err, SKL_INVALID, "stream jobs in flight must be 1 to %d",
		                   SKL_STREAM_INFLIGHT_MAX);
	if (skl__check_name("job kind", kind, SKL_KIND_MAX, SKL_KIND_MAX, err) != SKL_OK)
		return SKL_INVALID;
	stream *st = stream_new(kind, command, &o);
	if (st == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	return skl__handler_add(w, kind, &stream_ops, st, err);
}
