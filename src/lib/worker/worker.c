/*
 * worker.c — a worker's life outside its run: skl_worker_new and
 * skl_worker_free, handler registration (one interface, handler_ops, for
 * every kind of handler; C functions are registered here, commands in
 * command.c, webhooks in webhook.c, streams in stream.c), and the calls a
 * handler or another thread makes (stop, stats, metrics, skl_job_*).  The
 * run loop is worker_loop.c.  This file calls no handler file.
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

#include "core/internal.h"
#include "worker/worker_int.h"

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
	pthread_mutex_init(&w->claim_mu, NULL);
	w->wake[0] = w->wake[1] = -1;
	w->metrics = skl__wm_new();
	if (w->queues == NULL || !env_ok || w->metrics == NULL || pipe2(w->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		skl_worker_free(w);
		return skl__seterr(err, SKL_IO, "cannot create the worker's wake-up pipe");
	}
	skl_rc rc = skl_client_open(&w->co, &w->db, err);
	if (rc == SKL_OK)
		rc = skl__lanes_open(w, err);
	if (rc != SKL_OK) {
		skl_worker_free(w);
		return rc;
	}
	*out = w;
	return SKL_OK;
}

void skl__worker_room_opened(skl_worker *w)
{
	skl__lanes_wake(w, NULL);
}

void skl__set_text(char **dst, const char *text)
{
	free(*dst);
	*dst = text ? strdup(text) : NULL;
}

void skl__slot_free(slot *s)
{
	free(s->job.internal);
	free(s->result);
	free(s->error);
	free(s);
}

void skl_worker_free(skl_worker *w)
{
	if (w == NULL)
		return;
	for (int i = 0; w->lanes && i < w->nlanes; i++) /* the run ended with its threads */
		for (size_t j = 0; j < w->lanes[i].nrunning; j++)
			skl__slot_free(w->lanes[i].running[j]);
	skl__lanes_free(w);
	free((void *)w->held);
	free((void *)w->reserved);
	free(w->threads);
	for (size_t i = 0; i < w->nhandlers; i++) {
		free(w->handlers[i].kind);
		if (w->handlers[i].ops->free)
			w->handlers[i].ops->free(w->handlers[i].ctx);
	}
	free(w->handlers);
	skl__cmd_env_free(&w->cmd_env);
	skl__retry_free(w);
	for (size_t i = 0; w->queues && w->queues[i]; i++)
		free(w->queues[i]);
	free(w->queues);
	for (size_t i = 0; i < SKL_ARRAY_LEN(w->strings); i++)
		free(w->strings[i]);
	skl_client_close(w->db);
	skl_client_close(w->listen_db);
	if (w->wake[0] >= 0)
		close(w->wake[0]);
	if (w->wake[1] >= 0)
		close(w->wake[1]);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->work);
	pthread_mutex_destroy(&w->claim_mu);
	skl__wm_free(w->metrics);
	free(w);
}

static skl_rc handler_add(skl_worker *w, const char *kind, const handler_ops *ops, void *ctx,
                          skl_error *err)
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
	h[w->nhandlers++] = (handler){.kind = k, .ops = ops, .ctx = ctx};
	return SKL_OK;
}

skl_rc skl__handler_add(skl_worker *w, const char *kind, const handler_ops *ops, void *ctx,
                        skl_error *err)
{
	skl_rc rc = handler_add(w, kind, ops, ctx, err);
	if (rc != SKL_OK && ops->free)
		ops->free(ctx);
	return rc;
}

/* A C handler: ctx is its function and the application's pointer. */
typedef struct c_handler {
	skl_handler_fn fn;
	void *ctx;
} c_handler;

static int c_run(skl_worker *w, slot *s)
{
	(void)w;
	const c_handler *c = s->h->ctx;
	skl__handler_slot_set(s); /* skl_job_complete_with finds the slot */
	int code = c->fn(&s->job, c->ctx);
	skl__handler_slot_set(NULL);
	return code;
}

static const handler_ops c_ops = {.name = "C", .run = c_run, .free = free};

skl_rc skl_worker_handle(skl_worker *w, const char *kind, skl_handler_fn fn, void *ctx,
                         skl_error *err)
{
	if (fn == NULL)
		return skl__seterr(err, SKL_MISUSE, "handler function is NULL");
	c_handler *c = malloc(sizeof(*c));
	if (c == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	*c = (c_handler){.fn = fn, .ctx = ctx};
	return skl__handler_add(w, kind, &c_ops, c, err);
}

void skl_worker_stop(skl_worker *w)
{
	w->stop = 1;
	skl__lanes_wake(w, NULL); /* async-signal-safe: the lanes exist since skl_worker_new */
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
