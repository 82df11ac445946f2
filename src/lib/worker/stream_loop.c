/*
 * stream_loop.c — the supervisor thread of a streaming handler
 * (stream_int.h): one turn tends every process (start, reap, stop,
 * deadlines, noise window), gives waiting jobs to processes with room,
 * writes their lines, then polls at most TICK_MS and serves what is ready
 * with bounded reads.  Whatever a process does, the next turn comes
 * within TICK_MS plus one bounded read per pipe.
 *
 * A job's deadline starts when it is given to a process.  Past it, a job
 * whose line the process read whole fails ("timed out after N ms") and the
 * process, which may be stuck, is killed and restarted (its other jobs
 * that it read fail too); a job whose line it has not read whole means it
 * does not read its input: it is killed, and the job waits again.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "worker/stream_int.h"

/* ---- job lines ---- */

static int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The payload as one line of JSON: as stored (jsonb's text has no
 * newline), re-encoded only if it has one. */
static char *payload_text(const char *payload)
{
	if (strchr(payload, '\n') == NULL)
		return strdup(payload);
	json_error_t e;
	json_t *v = json_loads(payload, JSON_DECODE_ANY, &e);
	char *t = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
	json_decref(v);
	return t;
}

/* {"id":…,"kind":…,"queue":…,"attempt":…,"fencing":…,"deadline":…,
 * "payload":…}\n — the payload spliced in as text, so it reaches the
 * process byte for byte. */
static bool job_line(const skl_job *job, int64_t timeout_ms, sjob *j)
{
	json_t *o = json_pack("{sI,ss,ss,si,sI,sI}", "id", (json_int_t)job->id, "kind", job->kind,
	                      "queue", job->queue, "attempt", job->attempt, "fencing",
	                      (json_int_t)job->fencing, "deadline",
	                      (json_int_t)(wall_ms() + timeout_ms));
	char *head = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	char *payload = payload_text(job->payload);
	json_decref(o);
	skl_buf b;
	skl_buf_init(&b, 0);
	if (head && payload) {
		skl_buf_add(&b, head, strlen(head) - 1); /* without its '}' */
		skl_buf_printf(&b, ",\"payload\":%s}\n", payload);
	}
	free(head);
	free(payload);
	j->len = b.len;
	j->line = skl_buf_take(&b);
	return j->line != NULL && j->len > 0;
}

/* ---- jobs to processes ---- */

static sproc *roomiest(stream *st)
{
	sproc *best = NULL;
	for (int i = 0; i < st->nprocs; i++) {
		sproc *p = &st->procs[i];
		if (p->up && !p->dying && p->njobs < st->inflight && (!best || p->njobs < best->njobs))
			best = p;
	}
	return best;
}

/* Waiting jobs, in order: a lost one ends; the others go to the process
 * with the fewest jobs in flight below the bound, while one has room. */
static void assign(stream *st, int64_t now)
{
	sjob *j;
	sproc *p;
	while ((j = st->waiting) != NULL) {
		if (j->s->lost) {
			skl__stream_finish(st, NULL, j, 1, "stopped: lease lost or worker shutting down",
			                   false);
			continue;
		}
		if ((p = roomiest(st)) == NULL)
			return;
		if (j->line == NULL && !job_line(&j->s->job, j->timeout_ms, j)) {
			skl__stream_finish(st, NULL, j, 1, "stream handler: cannot build the job's line",
			                   false);
			continue;
		}
		if (!skl_buf_add(&p->wbuf, j->line, j->len))
			return; /* out of memory: again once its input is written */
		st->waiting = j->next;
		if (st->waiting == NULL)
			st->waiting_tail = NULL;
		if (p->njobs == 0)
			p->tail_len = 0; /* its stderr from now on is context for its jobs */
		j->next = p->jobs;
		p->jobs = j;
		p->njobs++;
		j->deadline = now + j->timeout_ms;
		j->wend = p->wqueued += j->len;
	}
}

static void write_proc(stream *st, sproc *p, int64_t now)
{
	if (p->dying || skl__stream_reap(p))
		return; /* nothing more for a process that is going */
	while (p->ch.in >= 0 && p->woff < p->wbuf.len) {
		ssize_t n = write(p->ch.in, p->wbuf.data + p->woff, p->wbuf.len - p->woff);
		if (n <= 0) {
			if (n < 0 && errno != EAGAIN && errno != EINTR) {
				char why[128];
				snprintf(why, sizeof(why), "stream process (pid %d) closed its stdin",
				         (int)p->ch.pid);
				skl__stream_close_input(p);
				skl__stream_kill(st, p, now, why);
			}
			return;
		}
		p->woff += (size_t)n;
		p->wsent += (uint64_t)n;
	}
	skl_buf_reset(&p->wbuf);
	p->woff = 0;
}

/* ---- deadlines ---- */

static void timed_out(stream *st, sproc *p, sjob *j, int64_t now)
{
	char msg[128], why[sizeof(p->why)];
	if (j->wend > skl__stream_read_upto(p)) { /* it waits again once the process ended */
		snprintf(why, sizeof(why), "stream process (pid %d) did not read its input for %" PRId64
		         " ms", (int)p->ch.pid, j->timeout_ms);
		if (!p->dying)
			skl__wlog_job(st->w, SKL_LOG_WARNING, &j->s->job, "stream handler %s: %s; "
			              "restarting the process", st->kind, why);
		skl__stream_kill(st, p, now, why);
		return;
	}
	snprintf(msg, sizeof(msg), "timed out after %" PRId64 " ms", j->timeout_ms);
	skl__wlog_job(st->w, SKL_LOG_WARNING, &j->s->job, "stream handler %s (pid %d): %s; "
	              "restarting the process", st->kind, (int)p->ch.pid, msg);
	snprintf(why, sizeof(why), "stream process restarted: job %" PRId64 " timed out",
	         j->s->job.id);
	skl__stream_finish(st, p, j, 1, msg, p->njobs == 1);
	skl__stream_kill(st, p, now, why);
}

/* Deadlines and lost leases of p's jobs in flight; its pending signals;
 * the end of a process not reaped a kill grace after SIGKILL. */
static void watch_proc(stream *st, sproc *p, int64_t now)
{
	for (sjob *j = p->jobs, *next; j; j = next) {
		next = j->next;
		if (j->s->lost)
			skl__stream_finish(st, p, j, 1, "stopped: lease lost or worker shutting down",
			                   false);
		else if (now >= j->deadline)
			timed_out(st, p, j, now);
	}
	if (p->term_at && now >= p->term_at) {
		p->term_at = 0;
		skl__stream_signal(p, SIGTERM);
	}
	if (p->kill_at && now >= p->kill_at) {
		p->kill_at = 0;
		p->reap_by = now + st->w->wo.kill_grace_ms;
		skl__stream_signal(p, SIGKILL);
	}
	if (p->reap_by && now >= p->reap_by)
		skl__stream_ended(st, p, now); /* not reaped after SIGKILL: left behind */
}

/* ---- the supervisor ---- */

/* A stopping stream (its jobs all ended: what is left to write is for
 * none of them): end of input; SIGTERM and SIGKILL follow after the kill
 * grace each. */
static void stop_proc(stream *st, sproc *p, int64_t now)
{
	if (p->ch.in < 0)
		return;
	skl__stream_close_input(p);
	if (!p->dying) {
		p->dying = true;
		p->term_at = now + st->w->wo.kill_grace_ms;
		p->kill_at = now + 2 * st->w->wo.kill_grace_ms;
	}
}

static void tend_proc(stream *st, sproc *p, int64_t now)
{
	if (!p->up && !st->stopping && now >= p->restart_at)
		skl__stream_start(st, p, now);
	if (!p->up)
		return;
	if (skl__stream_reap(p)) { /* its child ended, whoever holds its pipes */
		skl__stream_ended(st, p, now);
		return;
	}
	if (st->stopping)
		stop_proc(st, p, now);
	watch_proc(st, p, now);
	skl__stream_noise_tick(st, p, now);
}

static int add_fd(stream *st, int n, sproc *p, int fd, short events)
{
	st->map[n] = p;
	st->fds[n] = (struct pollfd){.fd = fd, .events = events};
	return n + 1;
}

/* One pass without waiting; the descriptors to poll go to st->fds. */
static int tend(stream *st, int64_t now)
{
	for (int i = 0; i < st->nprocs; i++)
		tend_proc(st, &st->procs[i], now);
	assign(st, now);
	int n = add_fd(st, 0, NULL, st->wake[0], POLLIN);
	for (int i = 0; i < st->nprocs; i++) {
		sproc *p = &st->procs[i];
		if (!p->up)
			continue;
		write_proc(st, p, now);
		bool quiet = skl__stream_throttled(p); /* its writes wait: it is noisy */
		if (p->ch.out >= 0 && !quiet)
			n = add_fd(st, n, p, p->ch.out, POLLIN);
		if (p->ch.err >= 0 && !quiet)
			n = add_fd(st, n, p, p->ch.err, POLLIN);
		if (p->ch.in >= 0 && !p->dying && p->woff < p->wbuf.len)
			n = add_fd(st, n, p, p->ch.in, POLLOUT);
	}
	return n;
}

static bool any_up(const stream *st)
{
	for (int i = 0; i < st->nprocs; i++)
		if (st->procs[i].up)
			return true;
	return false;
}

static void read_err(stream *st, sproc *p)
{
	if (p->ch.err >= 0 && skl__stream_read(st, p, false, READ_BUDGET) < 0)
		skl__stream_close_fd(&p->ch.err); /* its end: the process's end is seen elsewhere */
}

static void serve(stream *st, int n, int64_t now)
{
	char drain[256];
	while (read(st->wake[0], drain, sizeof(drain)) > 0)
		;
	for (int i = 1; i < n; i++) {
		sproc *p = st->map[i];
		int fd = st->fds[i].fd;
		if (!p->up || st->fds[i].revents == 0)
			continue;
		if (fd == p->ch.in) {
			write_proc(st, p, now);
		} else if (fd == p->ch.err) {
			read_err(st, p);
		} else if (fd == p->ch.out) {
			read_err(st, p); /* first: what it said before its answer is its context */
			if (p->ch.out >= 0 && skl__stream_read(st, p, true, READ_BUDGET) < 0)
				skl__stream_closed(p, now);
		}
	}
}

void *skl__stream_supervise(void *arg)
{
	stream *st = arg;
	pthread_mutex_lock(&st->mu);
	while (!(st->stopping && !any_up(st))) {
		int n = tend(st, skl__now_ms());
		pthread_mutex_unlock(&st->mu);
		poll(st->fds, (nfds_t)n, TICK_MS);
		pthread_mutex_lock(&st->mu);
		serve(st, n, skl__now_ms());
	}
	pthread_mutex_unlock(&st->mu);
	return NULL;
}
