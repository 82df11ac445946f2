/*
 * worker_loop.c — the worker's run loop and its handler threads.
 *
 * Each lane (lanes.c: one connection, wo.connections of them, one by
 * default) is driven by one thread, and that thread does every database
 * call on it, so a worker holds wo.connections connections whatever its
 * concurrency: claim into the lane's free slots, record finished outcomes
 * in one fenced statement per batch, heartbeat the lane's running claims
 * every lease/3.  Lane 0 runs on the thread that called skl_worker_run
 * and alone rescues expired leases, ticks cron, maintains, LISTENs and
 * makes the idle poll.  No transaction is open while a handler runs.
 * Handler threads are shared by the lanes and only run handlers, each
 * through its handler_ops (worker_int.h): this file knows no handler
 * file.  A thread hands a finished slot back on its lane's done list and
 * wakes that lane through its pipe (the pipes skl_worker_stop writes, so
 * stopping is async-signal-safe).
 *
 * Slot states: QUEUED (claimed, waiting for a thread) -> RUNNING (a thread
 * runs its handler) -> DONE (outcome waiting to be recorded) -> freed after
 * the record.  A slot is heartbeated from claim to record.
 *
 * The calls, in order:
 *   skl_worker_run
 *     start_handlers          each handler's ops->start (stream processes)
 *     skl__retry_start        per-kind retry settings, breakers
 *     start_threads           thread_main x concurrency:
 *                               wait for a QUEUED slot -> run_and_settle
 *                               (run_slot: ops->run; skl__retry_settle)
 *                               -> the done list, wake
 *     turn, until the drain is complete:
 *       claim_turn -> claim_kinds  the kinds with room (a handler's
 *                               capacity) and how many jobs at most
 *                  -> exchange  record the done list and claim in one
 *                               statement; settle (log, count, free);
 *                               dispatch (new slots QUEUED); move_mark
 *       chores                  heartbeat, queue_stats, idle_poll,
 *                               rescue, cron_tick
 *       wait_wake               the pipe, a notification or the next due time
 *     stop_threads
 *     stop_handlers           each handler's ops->stop
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "skiplock/cron.h"
#include "skiplock/retention.h"
#include "worker/worker_int.h"

static void wake(lane *l)
{
	ssize_t ignored = write(l->wake[1], "d", 1);
	(void)ignored;
}

static double seconds_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void run_slot(skl_worker *w, slot *s)
{
	double start = seconds_now();
	int code = s->h->ops->run(w, s); /* the one call into a handler */
	s->seconds = seconds_now() - start;
	if (code == SKL_JOB_OK) {
		s->outcome = SKL_OUTCOME_COMPLETE;
		return;
	}
	if (s->error == NULL) {
		char msg[64];
		snprintf(msg, sizeof(msg), "handler returned %d", code);
		skl__set_text(&s->error, msg);
	}
	s->outcome = code == SKL_JOB_DISCARD ? SKL_OUTCOME_DISCARD : SKL_OUTCOME_RETRY;
}

/* Runs the handler, then decides the retry delay: a handler that asked
 * for one left it in s->retry_delay_ms (> 0) with a retry outcome. */
static void run_and_settle(skl_worker *w, slot *s)
{
	run_slot(w, s);
	skl__retry_settle(w, s);
}

/* A finished slot's job no longer counts against its handler's capacity. */
static void unhold(skl_worker *w, const slot *s)
{
	if (s->h->ops->capacity)
		atomic_fetch_sub(&w->held[s->h - w->handlers], 1);
}

/* Runs queued slots; a finished one goes on its lane's done list in the
 * same critical section that takes the next, and the lane gets one byte
 * on its wake pipe (non-blocking) per batch it has not taken yet. */
static void *thread_main(void *arg)
{
	skl_worker *w = arg;
	/* A command that does not read its payload must not kill the process
	 * with SIGPIPE: writes to its stdin fail with EPIPE instead. */
	sigset_t pipe_set;
	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
	slot *s = NULL;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		if (s != NULL) {
			lane *l = s->lane;
			unhold(w, s);
			s->next = l->done;
			l->done = s;
			if (!l->done_woken) {
				l->done_woken = true;
				wake(l);
			}
		}
		while (w->queued == NULL && !w->threads_exit)
			pthread_cond_wait(&w->work, &w->mu);
		s = w->queued;
		if (s == NULL)
			break;
		w->queued = s->next;
		if (w->queued == NULL)
			w->queued_tail = NULL;
		pthread_mutex_unlock(&w->mu);
		run_and_settle(w, s);
		pthread_mutex_lock(&w->mu);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

static void forget_running(lane *l, slot *s)
{
	for (size_t i = 0; i < l->nrunning; i++)
		if (l->running[i] == s) {
			l->running[i] = l->running[--l->nrunning];
			return;
		}
}

/* Takes the lane's done list; *n receives its length. */
static slot *take_done(lane *l, size_t *n)
{
	skl_worker *w = l->w;
	pthread_mutex_lock(&w->mu);
	slot *list = l->done;
	l->done = NULL;
	l->done_woken = false;
	pthread_mutex_unlock(&w->mu);
	*n = 0;
	for (slot *s = list; s; s = s->next)
		(*n)++;
	return list;
}

/* Puts slots back on the done list after a failed record. */
static void give_back(lane *l, slot *list)
{
	if (list == NULL)
		return;
	pthread_mutex_lock(&l->w->mu);
	slot *tail = list;
	while (tail->next)
		tail = tail->next;
	tail->next = l->done;
	l->done = list;
	pthread_mutex_unlock(&l->w->mu);
}

static void count(skl_worker *w, const slot *s, skl_wm_counter c)
{
	skl__wm_count(w->metrics, s->job.queue, s->job.kind, c, 1);
}

static void log_outcome(skl_worker *w, slot *s, const skl_recorded *rec)
{
	const skl_job *j = &s->job;
	skl__wm_duration(w->metrics, j->queue, j->kind, s->seconds);
	s->retry_delay_ms = rec->delay_ms;
	if (!rec->accepted && skl__slot_completed_in_tx(s)) {
		w->st_completed++; /* the handler's transaction committed the completion */
		count(w, s, WM_COMPLETED);
		skl__wlog_job(w, SKL_LOG_DEBUG, j, "completed by the handler's transaction");
	} else if (!rec->accepted) {
		w->st_fenced++;
		count(w, s, WM_FENCED);
		skl__wlog_job(w, SKL_LOG_WARNING, j, "lease lost, outcome dropped");
	} else if (s->outcome == SKL_OUTCOME_COMPLETE) {
		w->st_completed++;
		count(w, s, WM_COMPLETED);
		skl__wlog_job(w, SKL_LOG_DEBUG, j, "completed in %.3f s", s->seconds);
	} else if (rec->discarded) {
		w->st_discarded++;
		count(w, s, WM_FAILED);
		count(w, s, WM_DISCARDED);
		skl__wlog_job(w, SKL_LOG_WARNING, j, "discarded: %s", s->error ? s->error : "");
	} else {
		w->st_retried++;
		count(w, s, WM_FAILED);
		count(w, s, WM_RETRIED);
		skl__wlog_job(w, SKL_LOG_INFO, j, "failed, retry in %" PRId64 " ms: %s",
		              s->retry_delay_ms, s->error ? s->error : "");
	}
}

/* Counts and frees slots whose handler completed the job in its own
 * transaction (skl_job_complete_with): there is no outcome to record. */
static void settle_in_tx(lane *l, slot *list)
{
	skl_worker *w = l->w;
	for (slot *s = list, *next; s; s = next) {
		next = s->next;
		skl__wm_duration(w->metrics, s->job.queue, s->job.kind, s->seconds);
		w->st_completed++;
		count(w, s, WM_COMPLETED);
		skl__wlog_job(w, SKL_LOG_DEBUG, &s->job, "completed in its handler's transaction "
		              "in %.3f s", s->seconds);
		forget_running(l, s);
		skl__slot_free(s);
	}
}

/* Logs, counts and frees recorded slots. */
static void settle(lane *l, slot *list, const skl_recorded *rec)
{
	skl_worker *w = l->w;
	size_t i = 0;
	for (slot *s = list, *next; s; s = next, i++) {
		next = s->next;
		log_outcome(w, s, &rec[i]);
		forget_running(l, s);
		skl__slot_free(s);
	}
}

static skl_outcome *outcomes_of(slot *list, size_t n)
{
	skl_outcome *outs = calloc(n ? n : 1, sizeof(*outs));
	size_t i = 0;
	for (slot *s = list; outs && s; s = s->next, i++) {
		/* a handler's error text (a command's stderr, cut to its tail) may
		 * not be UTF-8: refused by the server, it would hold back every
		 * outcome of the batch, retried for ever */
		if (s->error)
			skl__utf8_scrub(s->error);
		outs[i] = (skl_outcome){.id = s->job.id, .fencing = s->job.fencing,
		                        .kind = s->outcome, .result = s->result, .error = s->error,
		                        .retry_delay_ms = s->retry_delay_ms, .deferred = s->deferred,
		                        .backoff = s->backoff, .backoff_base_ms = s->backoff_base_ms,
		                        .backoff_cap_ms = s->backoff_cap_ms, .queue = s->job.queue};
	}
	return outs;
}

static const handler *find_handler(const skl_worker *w, const char *kind)
{
	for (size_t i = 0; i < w->nhandlers; i++)
		if (strcmp(w->handlers[i].kind, kind) == 0)
			return &w->handlers[i];
	return NULL;
}

/* Hands claimed jobs to the handler threads: queued in one critical
 * section, then a thread woken per job (a signal without waiters is
 * free). */
static void dispatch(lane *l, skl_job *jobs, size_t n)
{
	skl_worker *w = l->w;
	slot *head = NULL, *tail = NULL;
	size_t queued = 0;
	for (size_t i = 0; i < n; i++) {
		slot *s = calloc(1, sizeof(*s));
		if (s == NULL) { /* leave it to the rescue: its lease will expire */
			free(jobs[i].internal);
			continue;
		}
		s->job = jobs[i];
		s->magic = SLOT_MAGIC;
		s->h = find_handler(w, s->job.kind);
		s->lane = l;
		if (s->h->ops->capacity)
			atomic_fetch_add(&w->held[s->h - w->handlers], 1);
		l->running[l->nrunning++] = s;
		count(w, s, WM_CLAIMED);
		skl__wlog_job(w, SKL_LOG_DEBUG, &s->job, "claimed");
		if (tail)
			tail->next = s;
		else
			head = s;
		tail = s;
		queued++;
	}
	free(jobs);
	w->st_claimed += n;
	if (head == NULL)
		return;
	pthread_mutex_lock(&w->mu);
	if (w->queued_tail)
		w->queued_tail->next = head;
	else
		w->queued = head;
	w->queued_tail = tail;
	pthread_mutex_unlock(&w->mu);
	if (queued >= (size_t)w->wo.concurrency)
		pthread_cond_broadcast(&w->work);
	else
		for (size_t i = 0; i < queued; i++)
			pthread_cond_signal(&w->work);
}

/* Claims after the mark while one is set and a claim from the front was
 * made within this bound: a job placed before the mark (a higher
 * priority, an old run_at, a claim rolled back) waits at most this long
 * more than it would otherwise (or walk_period() of a slow claim from
 * the front). */
#define SKL_CLAIM_FRONT_EVERY_MS 2000

/* A walk that is slow because a held snapshot keeps every dead entry in
 * its way (the claim from the front, the rescue) waits this many times its
 * own duration before the next, up to a minute (a call slowed by a
 * reconnect must not postpone them for long): at most 2 % of the
 * worker's time.  Normally both take milliseconds and their periods stay
 * as set. */
#define SKL_SLOW_WALK_FACTOR 50
#define SKL_SLOW_WALK_CAP_MS 60000

/* The period of a walk that took `took` ms, normally `every`. */
static int64_t walk_period(int64_t every, int64_t took)
{
	int64_t slow = took < SKL_SLOW_WALK_CAP_MS / SKL_SLOW_WALK_FACTOR
	                   ? took * SKL_SLOW_WALK_FACTOR : SKL_SLOW_WALK_CAP_MS;
	return slow > every ? slow : every;
}

static bool before(int p1, int64_t r1, int64_t i1, const skl_job *j)
{
	if (p1 != j->priority)
		return p1 > j->priority;
	return r1 != j->run_at_us ? r1 < j->run_at_us : i1 < j->id;
}

/* After a claim of `want` that got jobs[0..n): the new mark, or none when
 * the claim came back short (what is left may sit before the mark). */
static void move_mark(lane *l, const skl_job *jobs, size_t n, size_t want, bool front,
                      int64_t now, int64_t took)
{
	if (front)
		l->mark_front_at = now + walk_period(SKL_CLAIM_FRONT_EVERY_MS, took);
	l->mark_set = n > 0 && n >= want;
	for (size_t i = 0; l->mark_set && i < n; i++)
		if (i == 0 || before(l->mark_priority, l->mark_run_at_us, l->mark_id, &jobs[i])) {
			l->mark_priority = jobs[i].priority;
			l->mark_run_at_us = jobs[i].run_at_us;
			l->mark_id = jobs[i].id;
		}
}

/* Records finished outcomes and, when `claim` slots are wanted, claims in
 * the same statement.  Returns the number of jobs claimed, or -1 when the
 * database call failed (the outcomes are kept and tried again); *wait_ms
 * receives how soon a limit that held due jobs back may have room, or -1
 * (docs/flow-control.md).  Only a
 * claim of every kind uses and moves the mark: one that leaves a full kind
 * out (claim_kinds) starts from the front and leaves the mark as it was,
 * or the jobs of the kind it left out would end up before the mark. */
static int exchange(lane *l, size_t claim, const char *const *kinds, size_t nkinds,
                    int64_t *wait_ms)
{
	skl_worker *w = l->w;
	size_t ndone;
	*wait_ms = -1;
	slot *list = take_done(l, &ndone);
	settle_in_tx(l, skl__take_completed_in_tx(&list, &ndone));
	if (ndone == 0 && claim == 0)
		return 0;
	skl_outcome *outs = outcomes_of(list, ndone);
	skl_recorded *ok = calloc(ndone ? ndone : 1, sizeof(*ok));
	skl_claim_opts o = {.queues = w->wo.queues, .nqueues = w->wo.nqueues, .kinds = kinds,
	                    .nkinds = nkinds, .limit = claim, .lease_ms = w->wo.lease_ms,
	                    .owner = w->wo.owner};
	int64_t now = skl__now_ms();
	bool every = nkinds == w->nhandlers;
	o.after_set = every && l->mark_set && now < l->mark_front_at;
	o.after_priority = l->mark_priority;
	o.after_run_at_us = l->mark_run_at_us;
	o.after_id = l->mark_id;
	skl_job *jobs = NULL;
	size_t n = 0;
	skl_error err;
	skl_rc rc = SKL_NOMEM;
	if (outs && ok)
		rc = claim ? skl__record_and_claim(l->db, outs, ndone, ok, &o, &jobs, &n, wait_ms, &err)
		           : skl__record(l->db, outs, ndone, ok, &err);
	if (rc == SKL_OK || rc == SKL_EMPTY) {
		if (claim && every)
			move_mark(l, jobs, n, claim, !o.after_set, now, skl__now_ms() - now);
		settle(l, list, ok);
		dispatch(l, jobs, n);
	} else {
		skl__wlog(w, SKL_LOG_WARNING, "%s failed, will retry: %s",
		          ndone ? "recording outcomes" : "claim",
		          rc == SKL_NOMEM ? "out of memory" : err.message);
		give_back(l, list);
	}
	free(outs);
	free(ok);
	return rc == SKL_OK || rc == SKL_EMPTY ? (int)n : -1;
}

/* While a claim's row is held by a transaction (its handler's job_fence)
 * the heartbeat cannot extend its lease, and nothing can take the job.
 * When that transaction ends the lease may have expired, and a rescue
 * anywhere in the fleet may end the claim before the next heartbeat; so
 * the heartbeat comes sooner meanwhile: lease/10, from 50 ms to 1 s. */
#define HB_LOCKED_MIN_MS 50
#define HB_LOCKED_MAX_MS 1000

static void note_hb_state(skl_worker *w, slot *s, skl_hb_state st)
{
	if (st == SKL_HB_LOST && !s->lost && !skl__slot_completed_in_tx(s)) {
		s->lost = 1;
		skl__wlog_job(w, SKL_LOG_WARNING, &s->job, "lease lost; stopping it");
	} else if ((st == SKL_HB_LOCKED) != s->row_locked) {
		s->row_locked = st == SKL_HB_LOCKED;
		skl__wlog_job(w, SKL_LOG_DEBUG, &s->job, s->row_locked
		              ? "heartbeat: a transaction holds the job's row (a job_fence?); "
		                "lease kept, not extended"
		              : "heartbeat: the job's row is free again; lease extended");
	}
}

/* Heartbeats every claim held; returns the ms until the next heartbeat:
 * lease/3, or sooner while a claim's row is locked.  The statement never
 * waits for a row lock (sql/0020_heartbeat_idem.sql), so one job's open
 * effect transaction cannot cost the others their leases. */
static int64_t heartbeat(lane *l)
{
	skl_worker *w = l->w;
	int64_t every = w->wo.lease_ms / 3, soon = w->wo.lease_ms / 10;
	size_t n = l->nrunning;
	if (n == 0)
		return every;
	int64_t *ids = calloc(n, sizeof(int64_t)), *fen = calloc(n, sizeof(int64_t));
	const char **qs = calloc(n, sizeof(char *));
	skl_hb_state *st = calloc(n, sizeof(skl_hb_state));
	skl_error err;
	for (size_t i = 0; ids && fen && qs && i < n; i++) {
		ids[i] = l->running[i]->job.id;
		fen[i] = l->running[i]->job.fencing;
		qs[i] = l->running[i]->job.queue;
	}
	skl_rc rc = ids && fen && qs && st
	                ? skl_heartbeat_queued(l->db, qs, ids, fen, n, w->wo.lease_ms, st, &err)
	                : SKL_NOMEM;
	bool locked = false;
	if (rc == SKL_OK) {
		w->st_heartbeats++;
		for (size_t i = 0; i < n; i++) {
			note_hb_state(w, l->running[i], st[i]);
			locked = locked || st[i] == SKL_HB_LOCKED;
		}
	} else {
		skl__wlog(w, SKL_LOG_WARNING, "heartbeat failed: %s",
		          rc == SKL_NOMEM ? "out of memory" : err.message);
	}
	free(ids);
	free(fen);
	free(qs);
	free(st);
	soon = soon < HB_LOCKED_MIN_MS ? HB_LOCKED_MIN_MS
	       : soon > HB_LOCKED_MAX_MS ? HB_LOCKED_MAX_MS : soon;
	return locked && soon < every ? soon : every;
}

static void count_rescue(void *ctx, const char *queue, const char *kind, bool discarded)
{
	skl_worker *w = ctx;
	skl__wm_count(w->metrics, queue, kind, WM_RESCUED, 1);
	if (discarded)
		skl__wm_count(w->metrics, queue, kind, WM_DISCARDED, 1);
}

/* Returns the number of jobs whose expired lease it ended. */
static int rescue(skl_worker *w)
{
	int rescued = 0, discarded = 0;
	skl_error err;
	if (skl__rescue_each(w->db, 1000, count_rescue, w, &rescued, &discarded, &err) != SKL_OK) {
		skl__wlog(w, SKL_LOG_WARNING, "rescue failed: %s", err.message);
		return 0;
	}
	w->st_rescued += (uint64_t)(rescued + discarded);
	if (rescued + discarded > 0)
		skl__wlog(w, SKL_LOG_INFO, "rescued %d job(s) with expired leases (%d discarded)",
		          rescued, discarded);
	return rescued + discarded;
}

static size_t pending_count(lane *l)
{
	return l->nrunning; /* claimed and not yet recorded */
}

/* Jobs the lane may hold claimed: its share of the handler threads, plus
 * of the prefetched jobs waiting for one (lanes.c). */
static size_t capacity(const lane *l)
{
	return l->capacity;
}

static size_t done_count(lane *l)
{
	size_t n = 0;
	pthread_mutex_lock(&l->w->mu);
	for (slot *s = l->done; s; s = s->next)
		n++;
	pthread_mutex_unlock(&l->w->mu);
	return n;
}

/* Waits for the wake pipe, a notification or ms; true when a
 * notification arrived or the connection was lost (claim soon).  With
 * hints false a notification could not bring the next claim forward (see
 * hint_helps): what arrived is read and counted, the socket is not
 * polled, so a flood of them cannot spin the loop. */
static bool wait_wake(lane *l, int64_t ms, bool hints)
{
	skl_worker *w = l->w;
	bool primary = l->index == 0; /* the only lane that may LISTEN */
	int woken = primary ? skl__idle_drain(w) : 0; /* read while the last statement ran */
	int fd = hints && primary ? skl__idle_fd(w) : -1;
	struct pollfd p[2] = {{.fd = l->wake[0], .events = POLLIN}, {.fd = fd, .events = POLLIN}};
	if (ms > 0 && (woken == 0 || !hints) &&
	    poll(p, fd >= 0 ? 2 : 1, ms > 1000 ? 1000 : (int)ms) > 0 && fd >= 0 && p[1].revents)
		woken = skl__idle_drain(w);
	char buf[256];
	while (read(l->wake[0], buf, sizeof(buf)) > 0)
		;
	return hints && woken != 0;
}

static skl_rc start_threads(skl_worker *w, skl_error *err)
{
	w->threads = calloc((size_t)w->wo.concurrency, sizeof(pthread_t));
	free((void *)w->held);
	free((void *)w->reserved);
	w->held = calloc(w->nhandlers, sizeof(*w->held));
	w->reserved = calloc(w->nhandlers, sizeof(*w->reserved));
	if (w->threads == NULL || w->held == NULL || w->reserved == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	pthread_attr_t at;
	pthread_attr_init(&at);
	pthread_attr_setstacksize(&at, 512 * 1024);
	for (int i = 0; i < w->wo.concurrency; i++, w->nthreads++)
		if (pthread_create(&w->threads[i], &at, thread_main, w) != 0) {
			pthread_attr_destroy(&at);
			return skl__seterr(err, SKL_IO, "cannot start handler thread %d", i + 1);
		}
	pthread_attr_destroy(&at);
	return SKL_OK;
}

static void stop_threads(skl_worker *w)
{
	pthread_mutex_lock(&w->mu);
	w->threads_exit = true;
	pthread_mutex_unlock(&w->mu);
	pthread_cond_broadcast(&w->work);
	for (int i = 0; i < w->nthreads; i++)
		pthread_join(w->threads[i], NULL);
	w->nthreads = 0;
}

typedef struct loop_state {
	lane *l;                     /* the lane whose loop this is */
	const char **pick;           /* the kinds of this claim (claim_kinds) */
	size_t *at;                  /* their handlers' indexes */
	int64_t poll, next_claim, next_hb, next_rescue, stop_at, kill_sent, next_cron, cron_warned;
	int64_t next_stats, stats_warned, next_maint;
	bool idle;                   /* nothing claimed for idle_after(): see idle_poll */
	bool woken;                  /* a notification or a new LISTEN: see on_wake */
	bool empty;                  /* the last claim found nothing, at empty_at */
	int64_t last_work, next_idle, idle_warned, empty_at;
} loop_state;

/* Uniform in [ms/2, 3ms/2). The generator is shared with handler threads. */
static int64_t jitter(skl_worker *w, int64_t ms)
{
	pthread_mutex_lock(&w->mu);
	double r = skl__rand01(&w->rng);
	pthread_mutex_unlock(&w->mu);
	return ms / 2 + (int64_t)(r * (double)ms);
}

/* Periodic jobs: every worker fires the due schedules, the database
 * decides the fire times and which tick enqueues each (schedule.c).  The
 * next tick comes when the earliest schedule is next due, at least
 * cron_every apart and at most five times that (a schedule added
 * meanwhile is seen within it).  A failure is logged at most once a
 * minute. */
static void cron_tick(skl_worker *w, loop_state *ls, int64_t now)
{
	skl_cron_tick_result r;
	skl_error err;
	skl_rc rc = skl_cron_tick(w->db, NULL, &r, &err);
	const char *why = rc != SKL_OK ? err.message : r.failed ? r.failure : NULL;
	if (why && now - ls->cron_warned >= 60000) {
		ls->cron_warned = now;
		skl__wlog(w, SKL_LOG_WARNING, "cron: %s", why);
	}
	int64_t every = w->wo.cron_every_ms > 0 ? w->wo.cron_every_ms : 1000;
	int64_t wait = rc == SKL_OK && r.next_in_ms >= 0 ? r.next_in_ms : 5 * every;
	ls->next_cron = now + jitter(w, wait < every ? every : wait > 5 * every ? 5 * every : wait);
}

/* Retention and partitions (skiplock/retention.h): a busy worker offers
 * every SKL_MAINTENANCE_EVERY_MS (jittered) to do up to MAINT_STEPS steps;
 * the lease lets one worker of the fleet do it at a time.  Each step is
 * short and commits by itself (its locks are held for catalog work only);
 * they run on the loop's own connection, between its claims and
 * heartbeats (a big move after an upgrade is `skiplock init`'s, or a
 * little each minute). */
#define MAINT_STEPS 32

static void maintenance(skl_worker *w, loop_state *ls, int64_t now)
{
	skl_maintenance m;
	skl_error err;
	bool ran = false;
	if (skl_maintain(w->db, w->wo.owner, MAINT_STEPS, NULL, NULL, &m, &ran, &err) != SKL_OK)
		skl__wlog(w, SKL_LOG_WARNING, "maintenance: %s", err.message);
	else if (ran && (m.created || m.dropped || m.deleted || m.moved))
		skl__wlog(w, SKL_LOG_INFO,
		          "maintenance: %" PRId64 " partition(s) created, %" PRId64 " dropped, %" PRId64
		          " expired row(s) deleted, %" PRId64 " finished job(s) moved",
		          m.created, m.dropped, m.deleted, m.moved);
	ls->next_maint = now + jitter(w, SKL_MAINTENANCE_EVERY_MS);
}

/* The cached queue gauges of skl_worker_metrics; a failure keeps the old
 * values and is logged at most once a minute. */
static void queue_stats(skl_worker *w, loop_state *ls, int64_t now)
{
	skl_error err;
	skl_rc rc = skl__wm_refresh(w->metrics, w->db, w->wo.queues, w->wo.nqueues, &err);
	if (rc != SKL_OK && now - ls->stats_warned >= 60000) {
		ls->stats_warned = now;
		skl__wlog(w, SKL_LOG_WARNING, "queue gauges: %s", err.message);
	}
	ls->next_stats = now + w->wo.queue_stats_every_ms;
}

static int64_t idle_after(const skl_worker *w)
{
	return 10 * w->wo.poll_max_ms;
}

/* Back to claiming on --poll: work appeared, or may have.  Lane 0 takes
 * the other lanes along (they idle only while it does). */
static void leave_idle(lane *l, loop_state *ls, int64_t now)
{
	skl_worker *w = l->w;
	if (l->index == 0 && atomic_exchange(&w->primary_idle, false))
		skl__lanes_wake(w, l);
	if (ls->idle) {
		ls->idle = false;
		ls->next_rescue = now + jitter(w, w->wo.rescue_every_ms);
		ls->next_cron = now + jitter(w, w->wo.cron_every_ms > 0 ? w->wo.cron_every_ms : 1000);
		skl__wlog(w, SKL_LOG_DEBUG, "no longer idle");
	}
	ls->last_work = now;
	ls->poll = w->wo.poll_ms;
	ls->next_claim = now;
}

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/* When a wake-up (a notification, a new LISTEN) may claim: at once,
 * unless the last claim found nothing less than poll_ms ago; then poll_ms
 * after it. */
static int64_t wake_claim_at(const skl_worker *w, const loop_state *ls, int64_t now)
{
	int64_t at = ls->empty ? ls->empty_at + w->wo.poll_ms : now;
	return at > now ? at : now;
}

/* A notification is a hint that a job may be due, never a promise, and
 * any role can send one (NOTIFY cannot be restricted).  So hints are
 * coalesced (all that arrived count as one), never delay a claim, and,
 * while claims find nothing, bring one forward at most to poll_ms after
 * the last: a flood of them costs a worker at most about 1000 / poll_ms
 * claims a second (5 with the default --poll 200ms), and a real job is
 * still claimed within poll_ms.  They neither reset the backoff of an
 * empty claim nor count as work (only an idle worker leaves idleness). */
static void on_wake(lane *l, loop_state *ls, int64_t now, bool hint)
{
	skl_worker *w = l->w;
	int64_t at = wake_claim_at(w, ls, now);
	if (hint && l->index == 0)
		skl__lanes_wake(w, l); /* the others claim too, each as bounded as this one */
	if (ls->idle)
		leave_idle(l, ls, now);
	else if (ls->next_claim < at)
		at = ls->next_claim;
	ls->next_claim = at;
}

/* Whether a notification now would bring a claim forward: the lane has
 * room for a job, and is idle or next claims later than a wake-up would;
 * with other lanes, lane 0 passes it on to them anyway. */
static bool hint_helps(lane *l, const loop_state *ls, int64_t now)
{
	skl_worker *w = l->w;
	if (w->stop)
		return false;
	if (w->nlanes > 1)
		return true;
	if (pending_count(l) >= capacity(l))
		return false;
	return ls->idle || ls->next_claim > wake_claim_at(w, ls, now);
}

/* How long an idle worker sleeps after its idle poll: poll_idle_ms
 * (drawn in [1, 1.25) times it, so never more often), or less when a job,
 * a fire time or a lease expiry is due earlier. */
static int64_t idle_sleep(skl_worker *w, const skl_idle_view *v)
{
	pthread_mutex_lock(&w->mu);
	double r = skl__rand01(&w->rng);
	pthread_mutex_unlock(&w->mu);
	int64_t d = w->wo.poll_idle_ms, ms = d + (int64_t)(r * (double)(d / 4));
	ms = min64(ms, v->run_in < INT64_MAX - 10 ? v->run_in + 10 : INT64_MAX);
	if (!w->wo.no_cron)
		ms = min64(ms, v->fire_in < INT64_MAX - 10 ? v->fire_in + 10 : INT64_MAX);
	if (v->expire_in < INT64_MAX - 10) /* rescued within rescue_every of expiring */
		ms = min64(ms, v->expire_in + 10 > w->wo.rescue_every_ms ? v->expire_in + 10
		                                                         : w->wo.rescue_every_ms);
	return ms > 0 ? ms : 1;
}

/* An idle worker's one statement: instead of claim polls, cron ticks and
 * rescue passes on their periods, it asks when any of them is next due. */
static void idle_poll(lane *l, loop_state *ls, const char *const *kinds, int64_t now)
{
	skl_worker *w = l->w;
	skl_idle_view v;
	skl_error err;
	if (skl__idle_poll(w, kinds, &v, &err) != SKL_OK) {
		if (now - ls->idle_warned >= 60000) {
			ls->idle_warned = now;
			skl__wlog(w, SKL_LOG_WARNING, "idle poll failed: %s", err.message);
		}
		ls->next_idle = now + jitter(w, w->wo.poll_max_ms);
		return;
	}
	bool work = v.run_in <= 0;
	if (v.expire_in <= 0 && rescue(w) > 0)
		work = true;
	if (!w->wo.no_cron && v.fire_in <= 0) {
		cron_tick(w, ls, now);
		work = true;
	}
	if (work)
		leave_idle(l, ls, now);
	else
		ls->next_idle = now + idle_sleep(w, &v);
}

/* The gauges (lane 0 sets them): leases held, reconnects and statements
 * whose outcome is unknown, summed over the lanes; each lane publishes its
 * connection's. */
static void gauges(lane *l)
{
	skl_worker *w = l->w;
	uint64_t connects = skl_client_connects(l->db);
	atomic_store(&l->reconnects, connects ? connects - 1 : 0);
	atomic_store(&l->indeterminate, skl_client_indeterminate(l->db));
	if (l->index > 0)
		return;
	uint64_t held = 0, reconnects = 0, indeterminate = 0;
	for (int i = 0; i < w->nlanes; i++) {
		held += atomic_load(&w->lanes[i].nrunning);
		reconnects += atomic_load(&w->lanes[i].reconnects);
		indeterminate += atomic_load(&w->lanes[i].indeterminate);
	}
	skl__wm_set_scalars(w->metrics, held, reconnects, indeterminate);
	skl__wm_set_wakeups(w->metrics, w->st_claims, w->st_empty_claims, w->st_notifications);
}

/* Periodic work besides claims and outcomes; returns the earliest time
 * one of them is due next.  A lane heartbeats its own claims; lane 0
 * alone does the rest. */
static int64_t chores(lane *l, loop_state *ls, const char *const *kinds, int64_t now)
{
	skl_worker *w = l->w;
	if (now >= ls->next_hb)
		ls->next_hb = now + heartbeat(l);
	gauges(l);
	if (l->index > 0)
		return ls->next_hb;
	bool stats = !w->stop && w->wo.queue_stats_every_ms > 0;
	if (stats && now >= ls->next_stats) /* metrics stay fresh, idle or not */
		queue_stats(w, ls, now);
	if (ls->idle && !w->stop) {
		if (now >= ls->next_idle)
			idle_poll(l, ls, kinds, now);
		if (ls->idle)
			return min64(min64(ls->next_hb, ls->next_idle),
			             stats ? ls->next_stats : INT64_MAX);
	}
	if (!w->stop && now >= ls->next_rescue) {
		int64_t t0 = skl__now_ms();
		rescue(w);
		int64_t took = skl__now_ms() - t0;
		ls->next_rescue = now + walk_period(jitter(w, w->wo.rescue_every_ms), took);
	}
	if (!w->stop && !w->wo.no_cron && now >= ls->next_cron)
		cron_tick(w, ls, now);
	if (!w->stop && now >= ls->next_maint)
		maintenance(w, ls, now);
	int64_t until = ls->next_hb;
	if (!w->stop && ls->next_maint < until)
		until = ls->next_maint;
	if (!w->stop && ls->next_rescue < until)
		until = ls->next_rescue;
	if (!w->stop && !w->wo.no_cron && ls->next_cron < until)
		until = ls->next_cron;
	if (stats && ls->next_stats < until)
		until = ls->next_stats;
	return until;
}

/* Adds delta to the room reserved for each kind of the claim (ls->at)
 * that has a capacity. */
static void reserve(skl_worker *w, const loop_state *ls, size_t nkinds, int delta)
{
	for (size_t k = 0; k < nkinds; k++)
		if (w->handlers[ls->at[k]].ops->capacity)
			atomic_fetch_add(&w->reserved[ls->at[k]], delta);
}

/* The kinds a claim of up to `free_slots` jobs may take now, in ls->pick
 * (*n of them; their handlers' indexes in ls->at), and how many jobs it
 * may take: a handler with a capacity (a stream's processes and their
 * room) gets no more jobs than it can take, so none waits in the worker
 * for it with its attempt counted.  One claim names several kinds and
 * takes any mix of them, so its limit is the smallest room among such
 * kinds; a full one is left out.  Lanes claim at the same time: the room
 * a claim may take is reserved until its jobs are held (claim_turn). */
static size_t claim_kinds(lane *l, loop_state *ls, size_t free_slots, size_t *n)
{
	skl_worker *w = l->w;
	size_t limit = free_slots;
	*n = 0;
	pthread_mutex_lock(&w->claim_mu);
	for (size_t i = 0; i < w->nhandlers; i++) {
		const handler *h = &w->handlers[i];
		int cap = h->ops->capacity ? h->ops->capacity(h->ctx) : -1;
		if (cap >= 0) {
			int held = atomic_load(&w->held[i]) + atomic_load(&w->reserved[i]);
			size_t room = cap > held ? (size_t)(cap - held) : 0;
			if (room == 0)
				continue;
			if (room < limit)
				limit = room;
		}
		ls->at[*n] = i;
		ls->pick[(*n)++] = h->kind;
	}
	if (*n > 0)
		reserve(w, ls, *n, (int)limit);
	pthread_mutex_unlock(&w->claim_mu);
	return *n > 0 ? limit : 0;
}

/* After a claim that took nothing: the next one when a limit that held
 * due jobs back may have room (wait_ms, spread over a quarter of poll_ms
 * so that the fleet does not come at once), else backed off up to
 * poll_max_ms; after idle_after() without work the worker turns idle. */
static void after_empty(lane *l, loop_state *ls, int64_t now, int got, int64_t wait_ms)
{
	skl_worker *w = l->w;
	if (got == 0 && wait_ms >= 0) {
		ls->next_claim = now + wait_ms + jitter(w, w->wo.poll_ms / 4 + 1) / 2;
		ls->last_work = now; /* work is waiting: not idle */
		return;
	}
	ls->next_claim = now + jitter(w, ls->poll);
	ls->poll = ls->poll * 2 > w->wo.poll_max_ms ? w->wo.poll_max_ms : ls->poll * 2;
	if (got == 0 && pending_count(l) == 0 && now - ls->last_work >= idle_after(w) &&
	    (l->index == 0 || atomic_load(&w->primary_idle))) {
		ls->idle = true;
		if (l->index == 0)
			atomic_store(&w->primary_idle, true);
		ls->next_idle = now; /* learn at once when the next job or fire time is due */
		skl__wlog(w, SKL_LOG_DEBUG, "idle: polling every %" PRId64 " ms at most",
		          w->wo.poll_idle_ms);
	}
}

/* Records outcomes and claims into free slots when a claim is due (see
 * after_empty for an empty one).  While every kind with room is full, the
 * claim waits for a slot or for room (skl__worker_room_opened). */
static void claim_turn(lane *l, loop_state *ls, int64_t now)
{
	skl_worker *w = l->w;
	size_t ndone = done_count(l), nkinds = 0;
	size_t free_slots = capacity(l) - pending_count(l) + ndone;
	bool want = !w->stop && !ls->idle && free_slots > 0 && (now >= ls->next_claim || ndone > 0);
	size_t limit = want ? claim_kinds(l, ls, free_slots, &nkinds) : 0;
	int64_t wait_ms;
	if (ndone > 0)
		ls->last_work = now;
	if (want && limit == 0)
		ls->next_claim = now + ls->poll; /* every kind is full */
	if (limit == 0) {
		exchange(l, 0, NULL, 0, &wait_ms); /* outcomes only */
		return;
	}
	int got = exchange(l, limit, ls->pick, nkinds, &wait_ms);
	reserve(w, ls, nkinds, -(int)limit); /* what it took is held now */
	if (got >= 0) {
		w->st_claims++;
		w->st_empty_claims += got == 0;
		ls->empty = got == 0;
		ls->empty_at = now;
	}
	if (got > 0) {
		ls->poll = w->wo.poll_ms;
		ls->next_claim = now; /* more may be due as soon as a slot frees */
		ls->last_work = now;
		return;
	}
	after_empty(l, ls, now, got, wait_ms);
}

/* One turn of the loop; returns false when the drain is complete. */
static bool turn(lane *l, loop_state *ls, const char *const *kinds)
{
	skl_worker *w = l->w;
	int64_t now = skl__now_ms();
	if (w->stop && ls->stop_at == 0) {
		ls->stop_at = now + w->wo.shutdown_timeout_ms;
		skl__wlog(w, SKL_LOG_INFO, "stopping: draining %zu running job(s)%s", pending_count(l),
		          w->nlanes > 1 ? " of one connection" : "");
	}
	if (w->stop && pending_count(l) == 0)
		return false;
	if (w->stop && now >= ls->stop_at && !ls->kill_sent) {
		ls->kill_sent = now;
		for (size_t i = 0; i < l->nrunning; i++)
			l->running[i]->lost = 1; /* commands get SIGTERM, then SIGKILL */
		skl__wlog(w, SKL_LOG_WARNING, "shutdown timeout: stopping %zu job(s)",
		          (size_t)l->nrunning);
	}
	if (ls->kill_sent && now - ls->kill_sent > w->wo.kill_grace_ms + 2000)
		return false; /* C handlers that ignore skl_job_lost: leave them to the rescue */
	bool hint = ls->woken;
	if (hint || atomic_exchange(&l->poked, false)) {
		ls->woken = false;
		on_wake(l, ls, now, hint);
	}
	claim_turn(l, ls, now);
	int64_t until = chores(l, ls, kinds, now);
	if (!w->stop && !ls->idle && pending_count(l) < capacity(l) &&
	    ls->next_claim < until)
		until = ls->next_claim;
	if (l->index == 0 && skl__idle_relisten(w))
		ls->woken = true;
	else if (wait_wake(l, until - skl__now_ms(), hint_helps(l, ls, skl__now_ms())))
		ls->woken = true;
	return true;
}

/* Starts the handlers that have a start (a stream's processes); *n
 * receives how many handlers, in order, were started or need none. */
static skl_rc start_handlers(skl_worker *w, size_t *n, skl_error *err)
{
	for (*n = 0; *n < w->nhandlers; (*n)++) {
		const handler *h = &w->handlers[*n];
		skl_rc rc = h->ops->start ? h->ops->start(w, h->ctx, err) : SKL_OK;
		if (rc != SKL_OK)
			return rc;
	}
	return SKL_OK;
}

static void stop_handlers(skl_worker *w, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (w->handlers[i].ops->stop)
			w->handlers[i].ops->stop(w->handlers[i].ctx);
}

static void loop_init(lane *l, loop_state *ls, const char **pick, size_t *at)
{
	skl_worker *w = l->w;
	int64_t now = skl__now_ms();
	*ls = (loop_state){.l = l, .pick = pick, .at = at, .poll = w->wo.poll_ms, .next_claim = now,
	                   .next_hb = now + w->wo.lease_ms / 3,
	                   .next_rescue = now + jitter(w, w->wo.rescue_every_ms),
	                   .next_cron = now, .cron_warned = now - 60000, .next_stats = now,
	                   .next_maint = now, .stats_warned = now - 60000, .last_work = now,
	                   .idle_warned = now - 60000};
}

/* The loop of a lane other than lane 0 (which runs on skl_worker_run's
 * thread): until its drain is complete. */
static void *lane_main(void *arg)
{
	loop_state *ls = arg;
	while (turn(ls->l, ls, NULL))
		;
	return NULL;
}

/* Starts lanes 1 and on, each on its thread; *n receives the number of
 * lanes running, lane 0 included. */
static skl_rc start_lanes(skl_worker *w, loop_state *ls, int *n, skl_error *err)
{
	for (*n = 1; *n < w->nlanes; (*n)++)
		if (pthread_create(&w->lanes[*n].thread, NULL, lane_main, &ls[*n]) != 0)
			return skl__seterr(err, SKL_IO, "cannot start the thread of connection %d",
			                   *n + 1);
	return SKL_OK;
}

/* Waits for lanes 1 to n-1 to drain; when lane 0 did not run to the
 * end of a drain (an error), they are stopped first. */
static void stop_lanes(skl_worker *w, int n)
{
	if (n > 1 && !w->stop)
		skl_worker_stop(w);
	for (int i = 1; i < n; i++)
		pthread_join(w->lanes[i].thread, NULL);
}

/* How long a starting worker tries to reach its database (at most). */
#define START_WITHIN_MS 4000

skl_rc skl_worker_run(skl_worker *w, skl_error *err)
{
	if (w->nhandlers == 0)
		return skl__seterr(err, SKL_MISUSE, "the worker has no handlers");
	/* Fails fast, as every client's start() does: the database not reached
	 * within 4 s, a refusal, or no schema (docs/protocol.md, start-up). */
	skl_rc rc = skl__start_check(w->db, START_WITHIN_MS, err);
	if (rc != SKL_OK)
		return rc;
	size_t nh = w->nhandlers, nl = (size_t)w->nlanes;
	const char **kinds = calloc(nh, sizeof(char *));
	const char **pick = calloc(nh * nl, sizeof(char *));
	size_t *at = calloc(nh * nl, sizeof(size_t));
	loop_state *ls = calloc(nl, sizeof(loop_state));
	if (kinds == NULL || pick == NULL || at == NULL || ls == NULL) {
		free(kinds);
		free(pick);
		free(at);
		free(ls);
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	}
	for (size_t i = 0; i < nh; i++)
		kinds[i] = w->handlers[i].kind;
	for (size_t i = 0; i < nl; i++)
		loop_init(&w->lanes[i], &ls[i], pick + i * nh, at + i * nh);
	size_t started = 0;
	int lanes = 1;
	rc = start_handlers(w, &started, err);
	if (rc == SKL_OK)
		rc = skl__retry_start(w, err);
	if (rc == SKL_OK)
		rc = start_threads(w, err);
	char lanes_note[40] = "";
	if (w->nlanes > 1)
		snprintf(lanes_note, sizeof(lanes_note), ", %d connections", w->nlanes);
	skl__wlog(w, SKL_LOG_INFO, "worker %s started: %zu kind(s), concurrency %d, lease %" PRId64
	          " ms%s", w->wo.owner, w->nhandlers, w->wo.concurrency, w->wo.lease_ms, lanes_note);
	if (rc == SKL_OK)
		rc = start_lanes(w, ls, &lanes, err);
	while (rc == SKL_OK && turn(&w->lanes[0], &ls[0], kinds))
		;
	stop_lanes(w, lanes);
	stop_threads(w);
	stop_handlers(w, started);
	free(kinds);
	free(pick);
	free(at);
	free(ls);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}
