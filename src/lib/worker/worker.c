/*
 * worker.c — run jobs: one database connection, N handler threads.
 *
 * The main thread (skl_worker_run) owns the only connection and does every
 * database call: claim into free slots, record finished outcomes in one
 * fenced statement per batch, heartbeat all running claims every lease/3,
 * rescue expired leases now and then.  Handler threads only run handlers;
 * they hand a finished slot back on the done list and wake the main thread
 * through a pipe (the same pipe skl_worker_stop writes, so stopping is
 * async-signal-safe).
 *
 * Slot states: QUEUED (claimed, waiting for a thread) -> RUNNING (a thread
 * runs its handler) -> DONE (outcome waiting to be recorded) -> freed after
 * the record.  A slot is heartbeated from claim to record.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/buf.h"
#include "worker/command.h"
#include "core/internal.h"
#include "worker/worker_int.h"

static void wlog(const skl_worker *w, skl_log_level lvl, const skl_job *job, const char *fmt,
                 va_list ap)
{
	if (w->wo.log == NULL && w->wo.log_record == NULL)
		return;
	char buf[1024];
	vsnprintf(buf, sizeof(buf), fmt, ap);
	if (w->wo.log_record) {
		skl_log_context lc = {.worker = w->wo.owner};
		if (job)
			lc = (skl_log_context){.worker = w->wo.owner, .job_id = job->id,
			                       .queue = job->queue, .kind = job->kind,
			                       .attempt = job->attempt, .fencing = job->fencing,
			                       .payload = w->wo.log_payloads ? job->payload : NULL};
		w->wo.log_record(w->wo.log_ctx, lvl, &lc, buf);
		return;
	}
	if (job == NULL) {
		w->wo.log(w->wo.log_ctx, lvl, buf);
		return;
	}
	char line[1400];
	snprintf(line, sizeof(line),
	         "job=%" PRId64 " kind=%s attempt=%d fencing=%" PRId64 " queue=%s: %s", job->id,
	         job->kind, job->attempt, job->fencing, job->queue, buf);
	w->wo.log(w->wo.log_ctx, lvl, line);
}

void skl__wlog(const skl_worker *w, skl_log_level lvl, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	wlog(w, lvl, NULL, fmt, ap);
	va_end(ap);
}

void skl__wlog_job(const skl_worker *w, skl_log_level lvl, const skl_job *job,
                   const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	wlog(w, lvl, job, fmt, ap);
	va_end(ap);
}

void skl_worker_options_init(skl_worker_options *o)
{
	memset(o, 0, sizeof(*o));
	o->concurrency = 8;
	o->lease_ms = 30000;
	o->poll_ms = 200;
	o->poll_max_ms = 5000;
	o->shutdown_timeout_ms = 30000;
	o->job_timeout_ms = 300000;
	o->kill_grace_ms = 5000;
	o->backoff_base_ms = 1000;
	o->backoff_cap_ms = 3600000;
	o->rescue_every_ms = 5000;
	o->backoff = SKL_BACKOFF_FULL;
	o->retry_budget_pct = 10;
	o->poll_idle_ms = 600000;
}

static char *keep(skl_worker *w, int i, const char *s)
{
	w->strings[i] = skl__strdup(s);
	return w->strings[i];
}

static void apply_defaults(skl_worker_options *o)
{
	skl_worker_options d;
	skl_worker_options_init(&d);
#define DFLT(f) if (o->f <= 0) o->f = d.f
	DFLT(concurrency); DFLT(lease_ms); DFLT(poll_ms); DFLT(poll_max_ms);
	DFLT(shutdown_timeout_ms); DFLT(job_timeout_ms); DFLT(kill_grace_ms);
	DFLT(backoff_base_ms); DFLT(backoff_cap_ms); DFLT(rescue_every_ms); DFLT(poll_idle_ms);
#undef DFLT
	if (o->poll_max_ms < o->poll_ms)
		o->poll_max_ms = o->poll_ms;
	if (o->poll_idle_ms < o->poll_max_ms)
		o->poll_idle_ms = o->poll_max_ms;
}

skl_rc skl_worker_new(const skl_client_options *co, const skl_worker_options *wo,
                      skl_worker **out, skl_error *err)
{
	*out = NULL;
	if (wo && skl__worker_options_check(wo, err) != SKL_OK)
		return SKL_INVALID;
	skl_worker *w = calloc(1, sizeof(*w));
	if (w == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	skl_client_options_init(&w->co);
	if (co)
		w->co = *co;
	skl_worker_options_init(&w->wo);
	if (wo)
		w->wo = *wo;
	apply_defaults(&w->wo);
	w->co.url = keep(w, 0, w->co.url);
	w->co.direct_url = keep(w, 1, w->co.direct_url);
	w->co.application_name = keep(w, 2, w->co.application_name ? w->co.application_name
	                                                           : "skiplock worker");
	char owner[128];
	char host[64] = "host";
	gethostname(host, sizeof(host) - 1);
	snprintf(owner, sizeof(owner), "%s:%d", host, (int)getpid());
	w->wo.owner = keep(w, 3, w->wo.owner ? w->wo.owner : owner);
	w->queues = calloc(w->wo.nqueues + 1, sizeof(char *));
	for (size_t i = 0; w->queues && i < w->wo.nqueues; i++)
		w->queues[i] = skl__strdup(w->wo.queues[i]);
	w->wo.queues = (const char *const *)w->queues;
	bool env_ok = true;
	for (size_t i = 0; i < w->wo.nhandler_env; i++)
		env_ok = env_ok && skl__cmd_env_add(&w->cmd_env.pass, w->wo.handler_env[i]);
	w->wo.handler_env = NULL; /* the copy is in cmd_env */
	w->wo.nhandler_env = 0;
	w->rng = skl__seed();
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->work, NULL);
	w->wake[0] = w->wake[1] = -1;
	w->metrics = skl__wm_new();
	if (w->queues == NULL || !env_ok || w->metrics == NULL || pipe2(w->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		skl_worker_free(w);
		return skl__seterr(err, SKL_IO, "cannot create the worker's wake-up pipe");
	}
	skl_rc rc = skl_client_open(&w->co, &w->db, err);
	if (rc != SKL_OK) {
		skl_worker_free(w);
		return rc;
	}
	*out = w;
	return SKL_OK;
}

skl_rc skl__handler_add(skl_worker *w, const char *kind, const handler *tmpl, skl_error *err)
{
	if (skl__check_name("job kind", kind, SKL_KIND_MAX, SKL_KIND_MAX, err) != SKL_OK)
		return SKL_INVALID;
	for (size_t i = 0; i < w->nhandlers; i++)
		if (strcmp(w->handlers[i].kind, kind) == 0)
			return skl__seterr(err, SKL_CONFLICT, "kind \"%s\" already has a handler", kind);
	char *k = strdup(kind);
	handler *h = k ? realloc(w->handlers, (w->nhandlers + 1) * sizeof(handler)) : NULL;
	if (h == NULL) {
		free(k);
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	}
	w->handlers = h;
	h[w->nhandlers] = *tmpl;
	h[w->nhandlers].kind = k;
	w->nhandlers++;
	return SKL_OK;
}

void skl__handler_free(handler *h)
{
	free(h->kind);
	free(h->command);
	free(h->url);
	if (h->secret) {
		explicit_bzero(h->secret, strlen(h->secret));
		free(h->secret);
	}
	memset(h, 0, sizeof(*h));
}

static skl_rc add_handler(skl_worker *w, const char *kind, skl_handler_fn fn, void *ctx,
                          const char *command, skl_error *err)
{
	handler t = {.fn = fn, .ctx = ctx, .command = skl__strdup(command)};
	if (command && t.command == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	skl_rc rc = skl__handler_add(w, kind, &t, err);
	if (rc != SKL_OK)
		skl__handler_free(&t);
	return rc;
}

skl_rc skl_worker_handle(skl_worker *w, const char *kind, skl_handler_fn fn, void *ctx,
                         skl_error *err)
{
	if (fn == NULL)
		return skl__seterr(err, SKL_MISUSE, "handler function is NULL");
	return add_handler(w, kind, fn, ctx, NULL, err);
}

skl_rc skl_worker_handle_command(skl_worker *w, const char *kind, const char *command,
                                 skl_error *err)
{
	if (command == NULL || *command == '\0')
		return skl__seterr(err, SKL_INVALID, "handler command for \"%s\" is empty",
		                   kind ? kind : "");
	return add_handler(w, kind, NULL, NULL, command, err);
}

void skl_worker_stop(skl_worker *w)
{
	w->stop = 1;
	ssize_t ignored = write(w->wake[1], "s", 1);
	(void)ignored;
}

void skl_worker_get_stats(skl_worker *w, skl_worker_stats *s)
{
	*s = (skl_worker_stats){
		.claimed = w->st_claimed, .completed = w->st_completed, .retried = w->st_retried,
		.discarded = w->st_discarded, .fenced_out = w->st_fenced, .rescued = w->st_rescued,
		.heartbeats = w->st_heartbeats,
	};
}

skl_rc skl_worker_metrics(skl_worker *w, char **text, skl_error *err)
{
	*text = skl__wm_render(w->metrics);
	if (*text == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	skl_error_clear(err);
	return SKL_OK;
}

static slot *slot_of(const skl_job *job)
{
	slot *s = (slot *)job;
	return s && s->magic == SLOT_MAGIC ? s : NULL;
}

void skl_job_set_result(const skl_job *job, const char *json)
{
	slot *s = slot_of(job);
	if (s == NULL)
		return;
	free(s->result);
	s->result = json ? strndup(json, SKL_STDOUT_MAX) : NULL;
}

void skl_job_set_error(const skl_job *job, const char *text)
{
	slot *s = slot_of(job);
	if (s == NULL)
		return;
	free(s->error);
	s->error = text ? strndup(text, SKL_STDERR_TAIL) : NULL;
}

void skl_job_retry_after(const skl_job *job, int64_t ms)
{
	slot *s = slot_of(job);
	if (s)
		s->retry_delay_ms = ms > 0 ? ms : 0;
}

bool skl_job_lost(const skl_job *job)
{
	slot *s = slot_of(job);
	return s && s->lost;
}
