/*
 * stream.c — the streaming handler (docs/protocol.md, "The streaming
 * handler"): a kind's jobs go to a few long-lived processes, one JSON line
 * each on a process's stdin, and their outcomes come back as JSON lines on
 * its stdout, in any order, matched by job id.
 *
 * Threads.  A handler thread running a job (stream_run) builds its line,
 * queues it and sleeps on the job's own condition variable.  One
 * supervisor thread per stream handler, started and stopped with the
 * worker's run, owns the processes: it starts them (so PR_SET_PDEATHSIG
 * follows its life and the reaper lists them, spawn.h), hands queued lines
 * to the process with the fewest jobs in flight below --stream-inflight,
 * reads outcome lines and stderr, fails jobs whose deadline passed or whose
 * lease was lost, and restarts a process that died or was killed, after a
 * backoff.  Everything is under the stream's mutex except poll.
 *
 * A job (sjob) lives on its handler thread's stack: the supervisor
 * finishes it (done = true, outcome in its slot) exactly once, under the
 * mutex, and never touches it again.  Once finished, the job is no longer
 * in flight: a late answer for it is logged and ignored.
 *
 * A process's death (stdout closed) fails its jobs in flight as retryable;
 * a job past its deadline is failed and its process killed (SIGTERM, then
 * SIGKILL after the kill grace) and restarted; a malformed line fails the
 * job it names (or the only job in flight) and is logged with it, and
 * never stops the worker.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "core/buf.h"
#include "worker/worker_int.h"

#define LINE_MAX_BYTES (SKL_STDOUT_MAX + SKL_STDERR_TAIL + 64 * 1024)
#define STDERR_LINE_MAX 2048         /* bytes of one stderr line logged */
#define RESTART_FIRST_MS 100         /* restart backoff: 100 ms, doubled ... */
#define RESTART_CAP_MS 10000         /* ... up to 10 s; reset by a good line */
#define TICK_MS 50                   /* lost leases are seen within this */

typedef struct sjob {
	struct sjob *next;
	slot *s;
	char *line;                  /* the job's line, with its newline */
	size_t len;
	int64_t timeout_ms, deadline; /* deadline on the monotonic clock */
	pthread_cond_t cv;
	bool done;
	int code;
} sjob;

typedef struct sproc {
	skl_child ch;
	bool up, dying;              /* started; being killed (no new jobs) */
	skl_buf wbuf;                /* bytes for its stdin, from woff */
	size_t woff;
	skl_buf obuf, ebuf;          /* a partial stdout, stderr line */
	bool oskip, eskip;           /* dropping the rest of an over-long line */
	sjob *jobs;                  /* in flight */
	int njobs;
	int deaths;                  /* in a row, for the restart backoff */
	int64_t restart_at, term_at, kill_at;
	char why[128];               /* why it is being killed, for its jobs */
} sproc;

typedef struct stream {
	char *kind, *command;
	int nprocs, inflight;
	skl_worker *w;
	pthread_mutex_t mu;
	sjob *waiting, *waiting_tail;
	sproc *procs;
	pthread_t thread;
	bool started, stopping;
	int wake[2];
} stream;

void skl_stream_opts_init(skl_stream_opts *o)
{
	*o = (skl_stream_opts){.procs = 1, .inflight = 1};
}

/* ---- jobs ---- */

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
	return j->line != NULL && head != NULL;
}

static void wake_supervisor(stream *st)
{
	ssize_t ignored = write(st->wake[1], "j", 1);
	(void)ignored;
}

/* Handler thread: queue the line, sleep until the supervisor finished it. */
static int stream_run(skl_worker *w, slot *s)
{
	stream *st = s->h->ctx;
	sjob j = {.s = s};
	j.timeout_ms = s->job.timeout_ms > 0 ? s->job.timeout_ms : w->wo.job_timeout_ms;
	j.deadline = skl__now_ms() + j.timeout_ms;
	if (!job_line(&s->job, j.timeout_ms, &j)) {
		free(j.line);
		skl__set_text(&s->error, "stream handler: cannot build the job's line");
		return 1;
	}
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

static void unlink_job(sjob **list, sjob *j, sjob **tail)
{
	sjob *prev = NULL;
	for (sjob *p = *list; p; prev = p, p = p->next)
		if (p == j) {
			*(prev ? &prev->next : list) = j->next;
			if (tail && *tail == j)
				*tail = prev;
			return;
		}
}

/* Ends job j (waiting, or in flight on p) with code and, when given, error. */
static void finish(stream *st, sproc *p, sjob *j, int code, const char *error)
{
	if (p) {
		unlink_job(&p->jobs, j, NULL);
		p->njobs--;
	} else {
		unlink_job(&st->waiting, j, &st->waiting_tail);
	}
	if (error)
		skl__set_text(&j->s->error, error);
	j->code = code;
	j->done = true;
	pthread_cond_signal(&j->cv);
}

/* ---- outcome lines ---- */

static sjob *in_flight(sproc *p, json_int_t id, const json_t *fencing)
{
	for (sjob *j = p->jobs; j; j = j->next)
		if (j->s->job.id == id &&
		    (!json_is_integer(fencing) || json_integer_value(fencing) == j->s->job.fencing))
			return j;
	return NULL;
}

static const char *const OUTCOMES[] = {"ok", "retry", "fail", "discard"};
static const int CODES[] = {SKL_JOB_OK, SKL_JOB_RETRY, 1, SKL_JOB_DISCARD};

/* Applies a well-formed outcome object to j; NULL, or why it is not one. */
static const char *apply(stream *st, sproc *p, sjob *j, json_t *o)
{
	const char *out = json_string_value(json_object_get(o, "outcome"));
	json_t *result = json_object_get(o, "result"), *error = json_object_get(o, "error");
	json_t *after = json_object_get(o, "retry_after");
	int k = 0;
	while (out && k < 4 && strcmp(out, OUTCOMES[k]) != 0)
		k++;
	if (out == NULL || k == 4)
		return "\"outcome\" is not \"ok\", \"retry\", \"fail\" or \"discard\"";
	if (error && !json_is_string(error) && !json_is_null(error))
		return "\"error\" is not a string";
	if (after && !json_is_number(after) && !json_is_null(after))
		return "\"retry_after\" is not a number of seconds";
	slot *s = j->s;
	char *text = k == 0 && result && !json_is_null(result)
	                 ? json_dumps(result, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
	if (text && strlen(text) <= SKL_STDOUT_MAX)
		skl__set_text(&s->result, text);
	else if (text)
		skl__wlog_job(st->w, SKL_LOG_WARNING, &s->job, "stream handler: result over %d bytes "
		              "dropped", SKL_STDOUT_MAX);
	free(text);
	double secs = after ? json_number_value(after) : 0;
	if (k == 1 && secs > 0 && secs <= 31536000)
		s->retry_delay_ms = (int64_t)(secs * 1000.0 + 0.5);
	char msg[64];
	snprintf(msg, sizeof(msg), "stream handler answered \"%s\"", OUTCOMES[k]);
	const char *e = json_string_value(error);
	char *err = k == 0 ? NULL : strndup(e && *e ? e : msg, SKL_STDERR_TAIL);
	finish(st, p, j, CODES[k], err);
	free(err);
	p->deaths = 0;
	return NULL;
}

/* A line that is not a well-formed outcome: logged with the job it names,
 * or the only job in flight, which fails; otherwise logged alone. */
static void malformed(stream *st, sproc *p, sjob *j, const char *why, const char *line)
{
	if (j == NULL && p->njobs == 1)
		j = p->jobs;
	char err[256];
	snprintf(err, sizeof(err), "stream handler: malformed outcome line: %s", why);
	if (j == NULL) {
		skl__wlog(st->w, SKL_LOG_WARNING, "stream handler %s (pid %d): malformed line, for "
		          "none of its %d job(s) in flight: %s: %.200s", st->kind, (int)p->ch.pid,
		          p->njobs, why, line);
		return;
	}
	skl__wlog_job(st->w, SKL_LOG_WARNING, &j->s->job, "stream handler %s (pid %d): malformed "
	              "line: %s: %.200s", st->kind, (int)p->ch.pid, why, line);
	finish(st, p, j, 1, err);
}

static void on_line(stream *st, sproc *p, const char *line, size_t len)
{
	json_error_t e;
	json_t *o = json_loadb(line, len, 0, &e);
	json_t *id = json_object_get(o, "id");
	char why[200];
	sjob *j = json_is_integer(id) ? in_flight(p, json_integer_value(id),
	                                          json_object_get(o, "fencing")) : NULL;
	const char *bad = NULL;
	if (o == NULL) {
		snprintf(why, sizeof(why), "not JSON (%s at byte %d)", e.text, e.position);
		bad = why;
	} else if (!json_is_object(o)) {
		bad = "not a JSON object";
	} else if (!json_is_integer(id)) {
		bad = "no integer \"id\"";
	} else if (j == NULL) {
		skl__wlog(st->w, SKL_LOG_INFO, "stream handler %s (pid %d): outcome for job %" PRId64
		          ", which is not in flight (timed out or stopped): ignored", st->kind,
		          (int)p->ch.pid, (int64_t)json_integer_value(id));
	} else {
		bad = apply(st, p, j, o);
	}
	if (bad)
		malformed(st, p, j, bad, line);
	json_decref(o);
}

/* Lines from a pipe: whole lines to on_line (stdout) or the log (stderr);
 * an over-long line is cut at max and the rest of it dropped. */
static void split_lines(stream *st, sproc *p, skl_buf *b, bool *skip, size_t max, bool out)
{
	size_t at = 0;
	if (b->data == NULL)
		return;
	for (char *nl; (nl = memchr(b->data + at, '\n', b->len - at)) != NULL;
	     at = (size_t)(nl - b->data) + 1) {
		*nl = '\0';
		if (*skip)
			*skip = false;
		else if (out)
			on_line(st, p, b->data + at, (size_t)(nl - b->data) - at);
		else
			skl__wlog(st->w, SKL_LOG_INFO, "stream handler %s (pid %d) stderr: %s", st->kind,
			          (int)p->ch.pid, b->data + at);
	}
	memmove(b->data, b->data + at, b->len - at);
	b->len -= at;
	if (b->len >= max && !*skip) {
		b->data[max - 1] = '\0';
		if (out)
			malformed(st, p, NULL, "line too long", b->data);
		else
			skl__wlog(st->w, SKL_LOG_INFO, "stream handler %s (pid %d) stderr: %s…", st->kind,
			          (int)p->ch.pid, b->data);
		*skip = true;
	}
	if (*skip)
		b->len = 0;
}

/* Reads what fd has; false at its end (or an error). */
static bool read_pipe(stream *st, sproc *p, int fd, bool out)
{
	char chunk[16384];
	ssize_t r;
	skl_buf *b = out ? &p->obuf : &p->ebuf;
	while ((r = read(fd, chunk, sizeof(chunk))) > 0) {
		skl_buf_add(b, chunk, (size_t)r);
		split_lines(st, p, b, out ? &p->oskip : &p->eskip,
		            out ? LINE_MAX_BYTES : STDERR_LINE_MAX, out);
	}
	return r < 0 && (errno == EAGAIN || errno == EINTR);
}

/* ---- processes ---- */

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static int64_t restart_delay(int deaths)
{
	int64_t ms = RESTART_FIRST_MS;
	for (int i = 1; i < deaths && ms < RESTART_CAP_MS; i++)
		ms *= 2;
	return ms < RESTART_CAP_MS ? ms : RESTART_CAP_MS;
}

static void start_proc(stream *st, sproc *p, int64_t now)
{
	int rc = skl__child_start(st->command, NULL, &st->w->cmd_env, &p->ch);
	if (rc == 0) {
		*p = (sproc){.ch = p->ch, .up = true, .deaths = p->deaths, .wbuf = p->wbuf,
		             .obuf = p->obuf, .ebuf = p->ebuf};
		skl_buf_reset(&p->wbuf);
		skl_buf_reset(&p->obuf);
		skl_buf_reset(&p->ebuf);
		skl__wlog(st->w, SKL_LOG_INFO, "stream handler %s: started pid %d", st->kind,
		          (int)p->ch.pid);
		return;
	}
	p->ch = (skl_child){.in = -1, .out = -1, .err = -1};
	p->deaths++;
	p->restart_at = now + restart_delay(p->deaths);
	skl__wlog(st->w, SKL_LOG_WARNING, "stream handler %s: cannot start /bin/sh: %s; again in "
	          "%" PRId64 " ms", st->kind, strerror(rc), restart_delay(p->deaths));
}

/* Its stdout ended: reap it, fail its jobs in flight (retryable), and
 * schedule the restart. */
static void proc_ended(stream *st, sproc *p, int64_t now)
{
	if (p->ch.err >= 0)
		read_pipe(st, p, p->ch.err, false); /* its last words */
	int status = 0;
	if (waitpid(p->ch.pid, &status, WNOHANG) != p->ch.pid) {
		kill(-p->ch.pid, SIGKILL); /* stdout closed but still running */
		waitpid(p->ch.pid, &status, 0);
	}
	skl__child_forget(&p->ch);
	close_fd(&p->ch.in);
	close_fd(&p->ch.out);
	close_fd(&p->ch.err);
	char how[200];
	if (p->why[0])
		snprintf(how, sizeof(how), "%s", p->why);
	else if (WIFSIGNALED(status))
		snprintf(how, sizeof(how), "stream process (pid %d) killed by signal %d",
		         (int)p->ch.pid, WTERMSIG(status));
	else
		snprintf(how, sizeof(how), "stream process (pid %d) exited with status %d",
		         (int)p->ch.pid, WEXITSTATUS(status));
	while (p->jobs)
		finish(st, p, p->jobs, 1, how);
	p->up = p->dying = false;
	p->deaths++;
	p->restart_at = now + restart_delay(p->deaths);
	if (!st->stopping)
		skl__wlog(st->w, SKL_LOG_WARNING, "stream handler %s: %s; restarting in %" PRId64 " ms",
		          st->kind, how, restart_delay(p->deaths));
}

/* SIGTERM to its group now, SIGKILL after the grace; no new jobs. */
static void kill_proc(stream *st, sproc *p, int64_t now, const char *why)
{
	if (p->dying)
		return;
	p->dying = true;
	snprintf(p->why, sizeof(p->why), "%s", why);
	kill(-p->ch.pid, SIGTERM);
	p->kill_at = now + st->w->wo.kill_grace_ms;
}

/* Deadlines and lost leases of p's jobs in flight; the signals of a
 * process being stopped. */
static void watch_proc(stream *st, sproc *p, int64_t now)
{
	for (sjob *j = p->jobs, *next; j; j = next) {
		next = j->next;
		char msg[128];
		if (j->s->lost) {
			finish(st, p, j, 1, "stopped: lease lost or worker shutting down");
		} else if (now >= j->deadline) {
			snprintf(msg, sizeof(msg), "timed out after %" PRId64 " ms", j->timeout_ms);
			skl__wlog_job(st->w, SKL_LOG_WARNING, &j->s->job, "stream handler %s (pid %d): %s; "
			              "restarting the process", st->kind, (int)p->ch.pid, msg);
			char why[sizeof(p->why)];
			snprintf(why, sizeof(why), "stream process restarted: job %" PRId64 " timed out",
			         j->s->job.id);
			finish(st, p, j, 1, msg);
			kill_proc(st, p, now, why);
		}
	}
	if (p->term_at && now >= p->term_at) {
		p->term_at = 0;
		kill(-p->ch.pid, SIGTERM);
	}
	if (p->kill_at && now >= p->kill_at) {
		p->kill_at = 0;
		kill(-p->ch.pid, SIGKILL);
	}
}

/* Waiting jobs: lost or past their deadline, else to the process with the
 * fewest jobs in flight below the bound. */
static void assign(stream *st, int64_t now)
{
	for (sjob *j = st->waiting, *next; j; j = next) {
		next = j->next;
		char msg[128];
		if (j->s->lost || now >= j->deadline) {
			snprintf(msg, sizeof(msg), "timed out after %" PRId64 " ms waiting for a stream "
			         "process", j->timeout_ms);
			finish(st, NULL, j, 1, j->s->lost ? "stopped: lease lost or worker shutting down"
			                                  : msg);
			continue;
		}
		sproc *best = NULL;
		for (int i = 0; i < st->nprocs; i++) {
			sproc *p = &st->procs[i];
			if (p->up && !p->dying && p->njobs < st->inflight && (!best || p->njobs < best->njobs))
				best = p;
		}
		if (best == NULL)
			return; /* FIFO: the rest waits too */
		unlink_job(&st->waiting, j, &st->waiting_tail);
		j->next = best->jobs;
		best->jobs = j;
		best->njobs++;
		skl_buf_add(&best->wbuf, j->line, j->len);
	}
}

static void write_proc(sproc *p)
{
	while (p->ch.in >= 0 && p->woff < p->wbuf.len) {
		ssize_t n = write(p->ch.in, p->wbuf.data + p->woff, p->wbuf.len - p->woff);
		if (n <= 0) {
			if (n < 0 && errno != EAGAIN && errno != EINTR)
				close_fd(&p->ch.in); /* it is going: its stdout's end tells */
			return;
		}
		p->woff += (size_t)n;
	}
	skl_buf_reset(&p->wbuf);
	p->woff = 0;
}

/* ---- the supervisor ---- */

/* One pass without waiting: starts, stops, deadlines, assignments; the
 * descriptors to poll go to fds (map[i]: the process of fds[i]). */
static int tend(stream *st, int64_t now, struct pollfd *fds, sproc **map)
{
	int n = 0;
	for (int i = 0; i < st->nprocs; i++) {
		sproc *p = &st->procs[i];
		if (!p->up && !st->stopping && now >= p->restart_at)
			start_proc(st, p, now);
		if (!p->up)
			continue;
		if (st->stopping && p->ch.in >= 0 && p->woff >= p->wbuf.len) {
			close_fd(&p->ch.in); /* end of input: the process should exit */
			p->term_at = now + st->w->wo.kill_grace_ms;
			p->kill_at = now + 2 * st->w->wo.kill_grace_ms;
		}
		watch_proc(st, p, now);
	}
	assign(st, now);
	fds[n++] = (struct pollfd){.fd = st->wake[0], .events = POLLIN};
	for (int i = 0; i < st->nprocs; i++) {
		sproc *p = &st->procs[i];
		if (!p->up)
			continue;
		write_proc(p);
		map[n] = p;
		fds[n++] = (struct pollfd){.fd = p->ch.out, .events = POLLIN};
		if (p->ch.err >= 0) {
			map[n] = p;
			fds[n++] = (struct pollfd){.fd = p->ch.err, .events = POLLIN};
		}
		if (p->ch.in >= 0 && p->woff < p->wbuf.len) {
			map[n] = p;
			fds[n++] = (struct pollfd){.fd = p->ch.in, .events = POLLOUT};
		}
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

static void serve(stream *st, struct pollfd *fds, sproc **map, int n)
{
	char drain[256];
	while (read(st->wake[0], drain, sizeof(drain)) > 0)
		;
	for (int i = 1; i < n; i++) {
		sproc *p = map[i];
		if (!p->up || fds[i].revents == 0)
			continue;
		if (fds[i].fd == p->ch.in)
			write_proc(p);
		else if (fds[i].fd == p->ch.err && !read_pipe(st, p, p->ch.err, false))
			close_fd(&p->ch.err); /* its end: stdout's end reaps it */
		else if (fds[i].fd == p->ch.out && !read_pipe(st, p, p->ch.out, true))
			proc_ended(st, p, skl__now_ms());
	}
}

static void *supervise(void *arg)
{
	stream *st = arg;
	size_t cap = 1 + 3 * (size_t)st->nprocs;
	struct pollfd *fds = calloc(cap, sizeof(*fds));
	sproc **map = calloc(cap, sizeof(*map));
	pthread_mutex_lock(&st->mu);
	while (fds && map && !(st->stopping && !any_up(st))) {
		int n = tend(st, skl__now_ms(), fds, map);
		pthread_mutex_unlock(&st->mu);
		poll(fds, (nfds_t)n, TICK_MS);
		pthread_mutex_lock(&st->mu);
		serve(st, fds, map, n);
	}
	pthread_mutex_unlock(&st->mu);
	free(fds);
	free(map);
	return NULL;
}

/* ---- the handler's life ---- */

static skl_rc stream_start(skl_worker *w, void *ctx, skl_error *err)
{
	stream *st = ctx;
	st->w = w;
	st->stopping = false; /* a worker may run again after a stop */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* no signal handler runs on it */
	int rc = pthread_create(&st->thread, NULL, supervise, st);
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
                                       .free = stream_free};

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
	for (int i = 0; st->procs && i < o->procs; i++)
		st->procs[i].ch = (skl_child){.in = -1, .out = -1, .err = -1};
	if (!st->kind || !st->command || !st->procs || pipe2(st->wake, O_CLOEXEC | O_NONBLOCK)) {
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
