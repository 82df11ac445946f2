/*
 * stream_proc.c — a stream process's life (stream_int.h, struct sproc):
 * started with spawn.c, watched by its pid as well as its pipes, signalled
 * as a pid and as a process group, ended without ever blocking.
 *
 * A process is out of reach in two ways, and both end it: its child exits
 * while a grandchild it left (daemonised with fork, setsid, fork) keeps
 * its stdout open, so the pipe never ends — the supervisor reaps the child
 * by pid with WNOHANG on every turn, and a reaped child is the end of the
 * process; or it leaves its process group (joins another, even the
 * worker's) and closes its stdout, so signals to its group miss it — every
 * signal goes to its pid too, while it is not reaped (a reaped pid may be
 * reused), and its end is waited for with WNOHANG, never waitpid(pid, 0).
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker/stream_int.h"

void skl__stream_close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

uint64_t skl__stream_read_upto(const sproc *p)
{
	int unread = 0;
	if (p->ch.in < 0)
		return p->wread;
	if (ioctl(p->ch.in, FIONREAD, &unread) != 0 || unread < 0)
		unread = 0; /* unknown: as if read */
	return p->wsent - ((uint64_t)unread < p->wsent ? (uint64_t)unread : p->wsent);
}

void skl__stream_close_input(sproc *p)
{
	if (p->ch.in < 0)
		return;
	p->wread = skl__stream_read_upto(p);
	skl__stream_close_fd(&p->ch.in);
}

static int64_t restart_delay(int deaths)
{
	int64_t ms = RESTART_FIRST_MS;
	for (int i = 1; i < deaths && ms < RESTART_CAP_MS; i++)
		ms *= 2;
	return ms < RESTART_CAP_MS ? ms : RESTART_CAP_MS;
}

void skl__stream_start(stream *st, sproc *p, int64_t now)
{
	int rc = skl__child_start(st->command, NULL, &st->w->cmd_env, &p->ch);
	if (rc == 0) {
		*p = (sproc){.ch = p->ch, .up = true, .deaths = p->deaths, .wbuf = p->wbuf,
		             .obuf = p->obuf, .ebuf = p->ebuf, .nz = {.since = now}};
		skl_buf_reset(&p->wbuf);
		skl_buf_reset(&p->obuf);
		skl_buf_reset(&p->ebuf);
		skl__wlog(st->w, SKL_LOG_INFO, "stream handler %s: started pid %d", st->kind,
		          (int)p->ch.pid);
		skl__worker_room_opened(st->w);
		return;
	}
	p->ch = (skl_child){.in = -1, .out = -1, .err = -1};
	p->deaths++;
	p->restart_at = now + restart_delay(p->deaths);
	skl__wlog(st->w, SKL_LOG_WARNING, "stream handler %s: cannot start /bin/sh: %s; again in "
	          "%" PRId64 " ms", st->kind, strerror(rc), restart_delay(p->deaths));
}

bool skl__stream_reap(sproc *p)
{
	if (!p->reaped && waitpid(p->ch.pid, &p->status, WNOHANG) == p->ch.pid)
		p->reaped = true;
	return p->reaped;
}

void skl__stream_signal(const sproc *p, int sig)
{
	if (!p->reaped)
		kill(p->ch.pid, sig);
	kill(-p->ch.pid, sig);
}

void skl__stream_kill(stream *st, sproc *p, int64_t now, const char *why)
{
	if (p->dying || p->closed)
		return;
	p->dying = true;
	snprintf(p->why, sizeof(p->why), "%s", why);
	skl__stream_signal(p, SIGTERM);
	p->kill_at = now + st->w->wo.kill_grace_ms;
}

void skl__stream_closed(sproc *p, int64_t now)
{
	skl__stream_close_fd(&p->ch.out);
	if (p->closed)
		return;
	p->closed = true;
	p->dying = true; /* nothing more is written to it */
	p->term_at = 0;
	if (p->kill_at == 0 || p->kill_at > now + CLOSE_GRACE_MS)
		p->kill_at = now + CLOSE_GRACE_MS;
}

/* How it ended, for its jobs and the log. */
static void describe(const sproc *p, char *how, size_t cap)
{
	if (p->why[0])
		snprintf(how, cap, "%s", p->why);
	else if (!p->reaped)
		snprintf(how, cap, "stream process (pid %d) not reaped after SIGKILL", (int)p->ch.pid);
	else if (WIFSIGNALED(p->status))
		snprintf(how, cap, "stream process (pid %d) killed by signal %d", (int)p->ch.pid,
		         WTERMSIG(p->status));
	else
		snprintf(how, cap, "stream process (pid %d) exited with status %d", (int)p->ch.pid,
		         WEXITSTATUS(p->status));
}

/* Back to the front of the waiting jobs, as if never given to a process
 * (it may have been written: it was never read whole). */
static void wait_again(stream *st, sjob *j)
{
	free(j->line);
	j->line = NULL;
	j->deadline = 0;
	j->next = st->waiting;
	st->waiting = j;
	if (st->waiting_tail == NULL)
		st->waiting_tail = j;
}

/* Its jobs in flight: those whose line it read whole fail (an attempt it
 * had), the others wait for the next process (their attempt is kept). */
static void settle_jobs(stream *st, sproc *p, const char *how, uint64_t read)
{
	bool alone = p->njobs == 1;
	while (p->jobs) { /* newest first: the oldest ends up in front */
		sjob *j = p->jobs;
		if (j->wend <= read) {
			skl__stream_finish(st, p, j, 1, how, alone);
			continue;
		}
		p->jobs = j->next;
		p->njobs--;
		wait_again(st, j);
	}
}

void skl__stream_ended(stream *st, sproc *p, int64_t now)
{
	for (int i = 0; i < 2; i++) { /* its last words, as far as they are there */
		int *fd = i == 0 ? &p->ch.err : &p->ch.out;
		if (*fd >= 0 && skl__stream_read(st, p, i == 1, LAST_WORDS) < 0)
			skl__stream_close_fd(fd);
	}
	if (!p->reaped)
		skl__wlog(st->w, SKL_LOG_WARNING, "stream handler %s: pid %d not reaped %" PRId64 " ms "
		          "after SIGKILL: left behind", st->kind, (int)p->ch.pid,
		          st->w->wo.kill_grace_ms);
	skl__child_forget(&p->ch);
	skl__stream_close_input(p);
	skl__stream_close_fd(&p->ch.out);
	skl__stream_close_fd(&p->ch.err);
	char how[200];
	describe(p, how, sizeof(how));
	settle_jobs(st, p, how, p->wread);
	p->up = p->dying = p->closed = false;
	p->deaths++;
	p->restart_at = now + restart_delay(p->deaths);
	if (!st->stopping)
		skl__wlog(st->w, SKL_LOG_WARNING, "stream handler %s: %s; restarting in %" PRId64 " ms",
		          st->kind, how, restart_delay(p->deaths));
}
