/*
 * command.c — the command-handler protocol (see skiplock/worker.h): one
 * child per attempt, and its end mapped to the job's outcome.
 *
 * The child (spawn.c) runs in a new process group so a timeout reaches
 * everything the shell started, and the group is killed if the worker
 * process dies (reaper.c).  Pipes are non-blocking and served by one poll
 * loop: stdin is written as the child reads it, stdout is kept up to
 * 64 KiB, stderr keeps only its last 4 KiB.  Every wait is bounded by the
 * timeout plus the kill grace.  Registered through handler_ops: the loop
 * calls command_run and knows nothing else of this file.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "core/internal.h"
#include "worker/command.h"
#include "worker/worker_int.h"

typedef struct child {
	skl_child c;
	const char *payload;
	size_t payload_len, written;
} child;

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void feed_stdin(child *ch)
{
	while (ch->written < ch->payload_len) {
		ssize_t w = write(ch->c.in, ch->payload + ch->written, ch->payload_len - ch->written);
		if (w > 0) {
			ch->written += (size_t)w;
		} else {
			if (w < 0 && errno == EAGAIN)
				return;
			if (w < 0 && errno == EPIPE) { /* the command does not read its payload */
				sigset_t pipe_set;
				sigemptyset(&pipe_set);
				sigaddset(&pipe_set, SIGPIPE);
				sigtimedwait(&pipe_set, NULL, &(struct timespec){0, 0});
			}
			break;
		}
	}
	close_fd(&ch->c.in);
}

static void drain_stdout(child *ch, skl_cmd_result *res)
{
	char buf[8192];
	ssize_t r;
	while ((r = read(ch->c.out, buf, sizeof(buf))) > 0) {
		size_t room = SKL_STDOUT_MAX - res->out_len, n = (size_t)r < room ? (size_t)r : room;
		memcpy(res->out + res->out_len, buf, n);
		res->out_len += n;
		res->out_truncated |= n < (size_t)r;
	}
	if (r == 0 || (r < 0 && errno != EAGAIN))
		close_fd(&ch->c.out);
}

static void drain_stderr(child *ch, skl_cmd_result *res)
{
	char buf[8192];
	ssize_t r;
	while ((r = read(ch->c.err, buf, sizeof(buf))) > 0) {
		size_t n = (size_t)r;
		const char *src = buf;
		if (n >= SKL_STDERR_TAIL) {
			src = buf + n - SKL_STDERR_TAIL;
			n = SKL_STDERR_TAIL;
			res->err_len = 0;
		} else if (res->err_len + n > SKL_STDERR_TAIL) {
			size_t drop = res->err_len + n - SKL_STDERR_TAIL;
			memmove(res->err, res->err + drop, res->err_len - drop);
			res->err_len -= drop;
		}
		memcpy(res->err + res->err_len, src, n);
		res->err_len += n;
	}
	if (r == 0 || (r < 0 && errno != EAGAIN))
		close_fd(&ch->c.err);
}

/* Serves the pipes once, waiting at most wait_ms. */
static void serve_pipes(child *ch, skl_cmd_result *res, int wait_ms)
{
	struct pollfd p[3];
	int n = 0;
	if (ch->c.in >= 0)
		p[n++] = (struct pollfd){.fd = ch->c.in, .events = POLLOUT};
	if (ch->c.out >= 0)
		p[n++] = (struct pollfd){.fd = ch->c.out, .events = POLLIN};
	if (ch->c.err >= 0)
		p[n++] = (struct pollfd){.fd = ch->c.err, .events = POLLIN};
	if (n == 0 || poll(p, (nfds_t)n, wait_ms) <= 0) {
		if (n == 0)
			skl__sleep_ms(wait_ms < 10 ? wait_ms : 10);
		return;
	}
	if (ch->c.in >= 0)
		feed_stdin(ch);
	if (ch->c.out >= 0)
		drain_stdout(ch, res);
	if (ch->c.err >= 0)
		drain_stderr(ch, res);
}

void skl__command_run(const char *command, const skl_job *job, const skl_cmd_env *env,
                      int64_t timeout_ms, int64_t grace_ms, volatile sig_atomic_t *stop,
                      skl_cmd_result *res)
{
	res->end = SKL_CMD_EXITED;
	res->code = 0;
	res->out_len = res->err_len = 0;
	res->out_truncated = false;
	res->out[0] = res->err[0] = '\0';
	child ch = {.payload = job->payload, .payload_len = strlen(job->payload)};
	int rc = skl__child_start(command, job, env, &ch.c);
	if (rc != 0) {
		res->end = SKL_CMD_SPAWN;
		res->code = rc;
		return;
	}
	int64_t start = skl__now_ms(), term_at = 0;
	skl_cmd_end why = SKL_CMD_EXITED;
	int status = 0;
	for (;;) {
		serve_pipes(&ch, res, 50);
		pid_t w = waitpid(ch.c.pid, &status, WNOHANG);
		if (w == ch.c.pid)
			break;
		int64_t now = skl__now_ms();
		if (term_at == 0 && (now - start >= timeout_ms || (stop && *stop))) {
			why = now - start >= timeout_ms ? SKL_CMD_TIMEOUT : SKL_CMD_STOPPED;
			kill(-ch.c.pid, SIGTERM);
			term_at = now;
		} else if (term_at && now - term_at >= grace_ms) {
			kill(-ch.c.pid, SIGKILL);
		}
	}
	skl__child_forget(&ch.c);
	for (int i = 0; i < 20 && (ch.c.out >= 0 || ch.c.err >= 0); i++)
		serve_pipes(&ch, res, 10);
	close_fd(&ch.c.in);
	close_fd(&ch.c.out);
	close_fd(&ch.c.err);
	res->out[res->out_len] = '\0';
	res->err[res->err_len] = '\0';
	res->end = why != SKL_CMD_EXITED ? why
	                                 : WIFSIGNALED(status) ? SKL_CMD_SIGNALED : SKL_CMD_EXITED;
	res->code = WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status);
}

/* ---- the handler: a command's end mapped to the job's outcome ---- */

static bool is_json(const char *s)
{
	json_error_t e;
	json_t *v = json_loads(s, JSON_DECODE_ANY, &e);
	json_decref(v);
	return v != NULL;
}

/* "retry-after: SECONDS" on a line of stderr (the last one wins): the
 * command's own delay before the next attempt, in ms; 0 when absent. */
static int64_t retry_after_line(const char *err)
{
	int64_t ms = 0;
	for (const char *p = err; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (strncasecmp(p, "retry-after:", 12) != 0)
			continue;
		char *end;
		double secs = strtod(p + 12, &end);
		while (*end == ' ' || *end == '\t' || *end == '\r')
			end++;
		if (end != p + 12 && (*end == '\n' || *end == '\0') && secs > 0 && secs <= 31536000)
			ms = (int64_t)(secs * 1000.0 + 0.5);
	}
	return ms;
}

/* The handler code of a command's end (its exit status when it exited);
 * why says how it ended otherwise. */
static int end_code(const skl_cmd_result *r, int64_t timeout, char *why, size_t cap)
{
	why[0] = '\0';
	switch (r->end) {
	case SKL_CMD_EXITED: return r->code;
	case SKL_CMD_SIGNALED: snprintf(why, cap, "killed by signal %d", r->code); break;
	case SKL_CMD_TIMEOUT: snprintf(why, cap, "timed out after %" PRId64 " ms", timeout); break;
	case SKL_CMD_STOPPED: snprintf(why, cap, "stopped: lease lost or worker shutting down"); break;
	case SKL_CMD_SPAWN: snprintf(why, cap, "cannot start /bin/sh: %s", strerror(r->code)); break;
	}
	return 1;
}

static int command_run(skl_worker *w, slot *s)
{
	skl_cmd_result *r = malloc(sizeof(*r));
	if (r == NULL) {
		skl__set_text(&s->error, "out of memory running the command");
		return 1;
	}
	int64_t timeout = s->job.timeout_ms > 0 ? s->job.timeout_ms : w->wo.job_timeout_ms;
	skl__command_run(s->h->ctx, &s->job, &w->cmd_env, timeout, w->wo.kill_grace_ms, &s->lost,
	                 r);
	char why[160];
	int code = end_code(r, timeout, why, sizeof(why));
	if (code == 0 && r->out_len > 0 && !r->out_truncated && is_json(r->out))
		skl__set_text(&s->result, r->out);
	if (code == SKL_JOB_RETRY && r->end == SKL_CMD_EXITED)
		s->retry_delay_ms = retry_after_line(r->err);
	if (code != 0) {
		char *msg = malloc(r->err_len + sizeof(why) + 32);
		if (msg) {
			if (why[0])
				sprintf(msg, "%s%s%s", why, r->err_len ? "; stderr: " : "", r->err);
			else
				sprintf(msg, "exit status %d%s%s", code, r->err_len ? "; stderr: " : "", r->err);
		}
		free(s->error);
		s->error = msg;
	}
	free(r);
	return code;
}

static const handler_ops command_ops = {.name = "command", .run = command_run, .free = free};

skl_rc skl_worker_handle_command(skl_worker *w, const char *kind, const char *command,
                                 skl_error *err)
{
	if (command == NULL || *command == '\0')
		return skl__seterr(err, SKL_INVALID, "handler command for \"%s\" is empty",
		                   kind ? kind : "");
	char *copy = strdup(command);
	if (copy == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	return skl__handler_add(w, kind, &command_ops, copy, err);
}
