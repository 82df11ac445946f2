/*
 * retry_policy.c — the worker's retry decisions: per-kind settings, the
 * backoff strategy of a failed job, the handler's own delay, and the retry
 * budget per kind in this process (the Finagle / gRPC model: retries up to
 * a percentage of recent first attempts plus a small floor a second).
 *
 * The per-kind table is built before the handler threads start and never
 * resized afterwards; budget state changes under the worker's mutex.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "worker/worker_int.h"

void skl_retry_policy_init(skl_retry_policy *p)
{
	memset(p, 0, sizeof(*p));
	p->retry_budget_pct = -1;
}

kind_retry *skl__retry_kind(skl_worker *w, const char *kind, bool create)
{
	for (size_t i = 0; i < w->nretry; i++)
		if (strcmp(w->retry[i].kind, kind) == 0)
			return &w->retry[i];
	if (!create)
		return NULL;
	kind_retry *r = realloc(w->retry, (w->nretry + 1) * sizeof(*r));
	if (r == NULL)
		return NULL;
	w->retry = r;
	r = &w->retry[w->nretry];
	memset(r, 0, sizeof(*r));
	skl_retry_policy_init(&r->policy);
	r->kind = strdup(kind);
	if (r->kind == NULL)
		return NULL;
	w->nretry++;
	return r;
}

skl_rc skl_worker_retry_policy(skl_worker *w, const char *kind, const skl_retry_policy *p,
                               skl_error *err)
{
	if (skl__check_kind(kind, err) != SKL_OK)
		return SKL_INVALID;
	if (p == NULL || p->backoff_base_ms < 0 || p->backoff_cap_ms < 0 ||
	    (p->backoff != SKL_BACKOFF_DEFAULT && skl_backoff_name(p->backoff) == NULL))
		return skl__seterr(err, SKL_INVALID, "kind \"%s\": bad retry policy", kind);
	kind_retry *k = skl__retry_kind(w, kind, true);
	if (k == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	k->policy = *p;
	return SKL_OK;
}

skl_rc skl_worker_breaker(skl_worker *w, const char *kind, const skl_breaker_config *config,
                          skl_error *err)
{
	if (skl__check_kind(kind, err) != SKL_OK)
		return SKL_INVALID;
	kind_retry *k = skl__retry_kind(w, kind, true);
	if (k == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	k->breaker = true;
	skl_breaker_config_init(&k->breaker_config);
	if (config)
		k->breaker_config = *config;
	return SKL_OK;
}

skl_rc skl__retry_start(skl_worker *w, skl_error *err)
{
	for (size_t i = 0; i < w->nhandlers; i++)
		if (skl__retry_kind(w, w->handlers[i].kind, true) == NULL)
			return skl__seterr(err, SKL_NOMEM, "out of memory");
	for (size_t i = 0; i < w->nretry; i++) {
		if (!w->retry[i].breaker)
			continue;
		skl_rc rc = skl_breaker_configure(w->db, w->retry[i].kind, &w->retry[i].breaker_config,
		                                  err);
		if (rc != SKL_OK)
			return rc;
	}
	return SKL_OK;
}

void skl__retry_free(skl_worker *w)
{
	for (size_t i = 0; i < w->nretry; i++)
		free(w->retry[i].kind);
	free(w->retry);
	w->retry = NULL;
	w->nretry = 0;
}

/* ---- the budget ---- */

static void budget_advance(retry_budget *b, int64_t now)
{
	if (b->bucket_ms == 0 || now - b->bucket_ms >= SKL_RETRY_BUDGET_WINDOW_MS) {
		memset(b->firsts, 0, sizeof(b->firsts));
		memset(b->retries, 0, sizeof(b->retries));
		b->bucket_ms = now;
		b->head = 0;
		return;
	}
	while (now - b->bucket_ms >= 1000) {
		b->head = (b->head + 1) % BUDGET_BUCKETS;
		b->firsts[b->head] = b->retries[b->head] = 0;
		b->bucket_ms += 1000;
	}
}

/* Withdraws one retry when the window's balance allows it. */
static bool budget_take(retry_budget *b, int pct)
{
	long firsts = 0, retries = 0;
	for (int i = 0; i < BUDGET_BUCKETS; i++) {
		firsts += b->firsts[i];
		retries += b->retries[i];
	}
	double balance = (double)SKL_RETRY_BUDGET_MIN_PER_S * (SKL_RETRY_BUDGET_WINDOW_MS / 1000) +
	                 (double)pct * (double)firsts / 100.0 - (double)retries;
	if (balance < 1.0)
		return false;
	b->retries[b->head]++;
	return true;
}

/* ---- the inputs of the retry decision ---- */

/* The kind's policy, else the worker's: the database uses them where the
 * job sets none of its own (skiplock.retry_delay_ms). */
typedef struct retry_inputs {
	skl_backoff backoff;
	int64_t base, cap;
	int pct;
} retry_inputs;

static retry_inputs inputs_of(const skl_worker *w, const kind_retry *k)
{
	const skl_retry_policy *p = k ? &k->policy : NULL;
	retry_inputs in = {
		.backoff = p && p->backoff ? p->backoff : w->wo.backoff,
		.base = p && p->backoff_base_ms > 0 ? p->backoff_base_ms : w->wo.backoff_base_ms,
		.cap = p && p->backoff_cap_ms > 0 ? p->backoff_cap_ms : w->wo.backoff_cap_ms,
		.pct = p && p->retry_budget_pct >= 0 ? p->retry_budget_pct : w->wo.retry_budget_pct,
	};
	return in;
}

/* Counts the attempt in the kind's budget and, for a retry the budget
 * refuses, marks it deferred: the database then spreads it over
 * [cap/2, cap] instead of retrying early. */
static bool budget_defers(skl_worker *w, kind_retry *k, const skl_job *j, bool retry, int pct,
                          int64_t *denied)
{
	int64_t now = skl__now_ms();
	retry_budget *b = k ? &k->budget : NULL;
	if (b == NULL)
		return false;
	pthread_mutex_lock(&w->mu);
	budget_advance(b, now);
	if (j->attempt <= 1)
		b->firsts[b->head]++;
	bool defer = retry && pct > 0 && !budget_take(b, pct);
	if (defer) {
		b->denied++;
		if (now - b->logged_ms >= SKL_RETRY_BUDGET_WINDOW_MS) {
			*denied = b->denied;
			b->denied = 0;
			b->logged_ms = now;
		}
	}
	pthread_mutex_unlock(&w->mu);
	return defer;
}

void skl__retry_settle(skl_worker *w, slot *s)
{
	const skl_job *j = &s->job;
	kind_retry *k = skl__retry_kind(w, j->kind, false);
	retry_inputs in = inputs_of(w, k);
	bool retry = s->outcome == SKL_OUTCOME_RETRY && j->attempt < j->max_attempts;
	int64_t denied = 0;
	s->deferred = budget_defers(w, k, j, retry, in.pct, &denied);
	s->backoff = in.backoff;
	s->backoff_base_ms = in.base;
	s->backoff_cap_ms = in.cap;
	if (s->retry_delay_ms < 0)
		s->retry_delay_ms = 0;
	if (denied)
		skl__wlog(w, SKL_LOG_WARNING,
		          "kind=%s: retry budget spent (%d%% of first attempts + %d/s over %d s): "
		          "%" PRId64 " failed job(s) since the last report deferred to between half "
		          "the cap and the cap (%" PRId64 " ms) instead of retried early",
		          j->kind, in.pct, SKL_RETRY_BUDGET_MIN_PER_S, SKL_RETRY_BUDGET_WINDOW_MS / 1000,
		          denied, in.cap);
}
