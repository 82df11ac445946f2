/*
 * command.c — the command-handler protocol (see skiplock/worker.h).
 *
 * The child runs in a new process group so a timeout reaches everything
 * the shell started.  Pipes are non-blocking and served by one poll loop:
 * stdin is written as the child reads it, stdout is kept up to 64 KiB,
 * stderr keeps only its last 4 KiB.  Every wait is bounded by the timeout
 * plus the kill grace.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "worker/command.h"
#include "core/internal.h"

extern char **environ;

typedef struct child {
	pid_t pid;
	int in, out, err;
	const char *payload;
	size_t payload_len, written;
} child;

static char **child_env(const skl_job *job, char vars[5][160])
{
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 6, sizeof(char *));
	if (env == NULL)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "SKIPLOCK_", 9) != 0)
			env[k++] = environ[i];
	snprintf(vars[0], 160, "SKIPLOCK_JOB_ID=%" PRId64, job->id);
	snprintf(vars[1], 160, "SKIPLOCK_JOB_KIND=%s", job->kind);
	snprintf(vars[2], 160, "SKIPLOCK_QUEUE=%s", job->queue);
	snprintf(vars[3], 160, "SKIPLOCK_ATTEMPT=%d", job->attempt);
	snprintf(vars[4], 160, "SKIPLOCK_FENCING=%" PRId64, job->fencing);
	for (int i = 0; i < 5; i++)
		env[k++] = vars[i];
	return env;
}

static int spawn(const char *command, const skl_job *job, child *ch)
{
	int pin[2], pout[2], perr[2];
	if (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) || pipe2(perr, O_CLOEXEC))
		return errno;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, pin[0], 0);
	posix_spawn_file_actions_adddup2(&fa, pout[1], 1);
	posix_spawn_file_actions_adddup2(&fa, perr[1], 2);
	posix_spawnattr_init(&at);
	sigset_t none, dfl;
	sigemptyset(&none);
	sigemptyset(&dfl);
	sigaddset(&dfl, SIGPIPE);
	sigaddset(&dfl, SIGTERM);
	sigaddset(&dfl, SIGINT);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &dfl);
	posix_spawnattr_setpgroup(&at, 0);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
	                                  POSIX_SPAWN_SETSIGDEF);
	char vars[5][160];
	char **env = child_env(job, vars);
	char *argv[] = {"/bin/sh", "-c", (char *)command, NULL};
	int rc = env ? posix_spawn(&ch->pid, "/bin/sh", &fa, &at, argv, env) : ENOMEM;
	free(env);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(pin[0]);
	close(pout[1]);
	close(perr[1]);
	ch->in = pin[1];
	ch->out = pout[0];
	ch->err = perr[0];
	if (rc != 0) {
		close(ch->in);
		close(ch->out);
		close(ch->err);
		return rc;
	}
	for (int fd = 0; fd < 3; fd++)
		fcntl(fd == 0 ? ch->in : fd == 1 ? ch->out : ch->err, F_SETFL, O_NONBLOCK);
	return 0;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void feed_stdin(child *ch)
{
	while (ch->written < ch->payload_len) {
		ssize_t w = write(ch->in, ch->payload + ch->written, ch->payload_len - ch->written);
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
	close_fd(&ch->in);
}

static void drain_stdout(child *ch, skl_cmd_result *res)
{
	char buf[8192];
	ssize_t r;
	while ((r = read(ch->out, buf, sizeof(buf))) > 0) {
		size_t room = SKL_STDOUT_MAX - res->out_len, n = (size_t)r < room ? (size_t)r : room;
		memcpy(res->out + res->out_len, buf, n);
		res->out_len += n;
		res->out_truncated |= n < (size_t)r;
	}
	if (r == 0 || (r < 0 && errno != EAGAIN))
		close_fd(&ch->out);
}

static void drain_stderr(child *ch, skl_cmd_result *res)
{
	char buf[8192];
	ssize_t r;
	while ((r = read(ch->err, buf, sizeof(buf))) > 0) {
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
		close_fd(&ch->err);
}

/* Serves the pipes once, waiting at most wait_ms. */
static void serve_pipes(child *ch, skl_cmd_result *res, int wait_ms)
{
	struct pollfd p[3];
	int n = 0;
	if (ch->in >= 0)
		p[n++] = (struct pollfd){.fd = ch->in, .events = POLLOUT};
	if (ch->out >= 0)
		p[n++] = (struct pollfd){.fd = ch->out, .events = POLLIN};
	if (ch->err >= 0)
		p[n++] = (struct pollfd){.fd = ch->err, .events = POLLIN};
	if (n == 0 || poll(p, (nfds_t)n, wait_ms) <= 0) {
		if (n == 0)
			skl__sleep_ms(wait_ms < 10 ? wait_ms : 10);
		return;
	}
	if (ch->in >= 0)
		feed_stdin(ch);
	if (ch->out >= 0)
		drain_stdout(ch, res);
	if (ch->err >= 0)
		drain_stderr(ch, res);
}

void skl__command_run(const char *command, const skl_job *job, int64_t timeout_ms,
                      int64_t grace_ms, volatile sig_atomic_t *stop, skl_cmd_result *res)
{
	res->end = SKL_CMD_EXITED;
	res->code = 0;
	res->out_len = res->err_len = 0;
	res->out_truncated = false;
	res->out[0] = res->err[0] = '\0';
	child ch = {.payload = job->payload, .payload_len = strlen(job->payload)};
	int rc = spawn(command, job, &ch);
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
		pid_t w = waitpid(ch.pid, &status, WNOHANG);
		if (w == ch.pid)
			break;
		int64_t now = skl__now_ms();
		if (term_at == 0 && (now - start >= timeout_ms || (stop && *stop))) {
			why = now - start >= timeout_ms ? SKL_CMD_TIMEOUT : SKL_CMD_STOPPED;
			kill(-ch.pid, SIGTERM);
			term_at = now;
		} else if (term_at && now - term_at >= grace_ms) {
			kill(-ch.pid, SIGKILL);
		}
	}
	kill(-ch.pid, SIGKILL); /* anything the shell left behind in its group */
	for (int i = 0; i < 20 && (ch.out >= 0 || ch.err >= 0); i++)
		serve_pipes(&ch, res, 10);
	close_fd(&ch.in);
	close_fd(&ch.out);
	close_fd(&ch.err);
	res->out[res->out_len] = '\0';
	res->err[res->err_len] = '\0';
	res->end = why != SKL_CMD_EXITED ? why
	                                 : WIFSIGNALED(status) ? SKL_CMD_SIGNALED : SKL_CMD_EXITED;
	res->code = WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status);
}
