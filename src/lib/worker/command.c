/*
 * command.c — the command-handler protocol (see skiplock/worker.h).
 *
 * The child runs in a new process group so a timeout reaches everything
 * the shell started, and the group is killed if the worker process dies
 * (reaper.c).  The environment rule is in command.h.  Pipes are non-blocking and served by one poll loop:
 * stdin is written as the child reads it, stdout is kept up to 64 KiB,
 * stderr keeps only its last 4 KiB.  Every wait is bounded by the timeout
 * plus the kill grace.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "worker/command.h"
#include "worker/reaper.h"

extern char **environ;

/* Code that runs in a child sharing our memory must not write the
 * sanitizer's shadow of its stack (it would stay behind in ours). */
#define SKL_NO_ASAN __attribute__((no_sanitize_address))

typedef struct child {
	pid_t pid;
	int in, out, err;
	const char *payload;
	size_t payload_len, written;
} child;

/* What the child needs between clone and exec; err is its answer (the
 * child shares our memory until it execs). */
typedef struct spawn_args {
	const char *command;
	char **env;
	int fds[3];                  /* the child's stdin, stdout, stderr */
	int reaper;
	pid_t parent;
	int err;                     /* set by the child when it could not exec */
} spawn_args;

bool skl__cmd_env_add(char ***list, const char *name)
{
	size_t n = 0;
	while (*list && (*list)[n])
		n++;
	char *copy = strdup(name);
	char **l = copy ? realloc(*list, (n + 2) * sizeof(char *)) : NULL;
	if (l == NULL) {
		free(copy);
		return false;
	}
	l[n] = copy;
	l[n + 1] = NULL;
	*list = l;
	return true;
}

static void free_list(char **l)
{
	for (size_t i = 0; l && l[i]; i++)
		free(l[i]);
	free(l);
}

void skl__cmd_env_free(skl_cmd_env *ce)
{
	free_list(ce->hide);
	free_list(ce->pass);
	ce->hide = ce->pass = NULL;
}

static bool named(const char *entry, size_t n, const char *const *names)
{
	for (size_t i = 0; names && names[i]; i++)
		if (strlen(names[i]) == n && strncmp(entry, names[i], n) == 0)
			return true;
	return false;
}

/* The rule in command.h: skiplock's own settings and secrets stay here. */
static bool withheld(const char *entry, const skl_cmd_env *ce)
{
	static const char *const fixed[] = {"DATABASE_URL", "DIRECT_DATABASE_URL", "PGPASSWORD",
	                                    NULL};
	size_t n = strcspn(entry, "=");
	if (strncmp(entry, "SKIPLOCK_", 9) == 0)
		return true;
	if (ce && named(entry, n, (const char *const *)ce->pass))
		return false;
	return named(entry, n, fixed) || (ce && named(entry, n, (const char *const *)ce->hide));
}

/* One allocation: the pointer array, then the job's five variables, each
 * as long as its value needs. */
static char **child_env(const skl_job *job, const skl_cmd_env *ce)
{
	size_t n = 0;
	while (environ[n])
		n++;
	size_t room = 5 * 48 + strlen(job->kind) + strlen(job->queue);
	char **env = malloc((n + 6) * sizeof(char *) + room);
	if (env == NULL)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (!withheld(environ[i], ce))
			env[k++] = environ[i];
	char *p = (char *)(env + n + 6);
	int w[5];
	w[0] = sprintf(p, "SKIPLOCK_JOB_ID=%" PRId64, job->id);
	w[1] = sprintf(p + w[0] + 1, "SKIPLOCK_JOB_KIND=%s", job->kind);
	char *q = p + w[0] + 1 + w[1] + 1;
	w[2] = sprintf(q, "SKIPLOCK_QUEUE=%s", job->queue);
	w[3] = sprintf(q + w[2] + 1, "SKIPLOCK_ATTEMPT=%d", job->attempt);
	sprintf(q + w[2] + 1 + w[3] + 1, "SKIPLOCK_FENCING=%" PRId64, job->fencing);
	env[k++] = p;
	env[k++] = p + w[0] + 1;
	env[k++] = q;
	env[k++] = q + w[2] + 1;
	env[k++] = q + w[2] + 1 + w[3] + 1;
	env[k] = NULL;
	return env;
}

/* Every signal this process catches goes back to its default (a handler
 * must not run in the child: it shares our memory), and so do the ones
 * the command expects at their default although we ignore them. */
SKL_NO_ASAN static void default_signals(void)
{
	struct sigaction dfl = {.sa_handler = SIG_DFL}, cur;
	sigemptyset(&dfl.sa_mask);
	for (int sig = 1; sig < NSIG; sig++) {
		bool reset = sig == SIGPIPE || sig == SIGTERM || sig == SIGINT || sig == SIGHUP ||
		             sig == SIGQUIT;
		if (reset || (sigaction(sig, NULL, &cur) == 0 && cur.sa_handler != SIG_IGN &&
		              cur.sa_handler != SIG_DFL))
			sigaction(sig, &dfl, NULL);
	}
}

/* In the child, in our memory, signals blocked (async-signal-safe calls
 * only): own group, killed with the thread that started it, listed with
 * the reaper, default signals, exec. */
SKL_NO_ASAN static int child_main(void *arg)
{
	spawn_args *a = arg;
	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != a->parent) {
		a->err = ESRCH; /* the worker is already gone */
		return 127;
	}
	skl__reaper_register(a->reaper, getpid());
	int fds[3];
	for (int i = 0; i < 3; i++) /* above 2 first, so no dup2 below overwrites one */
		fds[i] = a->fds[i] > 2 ? a->fds[i] : fcntl(a->fds[i], F_DUPFD_CLOEXEC, 3);
	for (int i = 0; i < 3; i++)
		if (dup2(fds[i], i) != i) {
			a->err = errno;
			return 127;
		}
	default_signals();
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	char *argv[] = {"/bin/sh", "-c", (char *)a->command, NULL};
	execve("/bin/sh", argv, a->env);
	a->err = errno;
	return 127;
}

/* Starts the child with every signal blocked in this thread (restored
 * after), so no handler of ours runs in it; our errno survives it. */
static pid_t start_child(spawn_args *a)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int saved = errno;
	pid_t pid = skl__clone(child_main, a, true);
	int e = pid < 0 ? errno : a->err;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = saved;
	if (pid > 0 && e != 0)
		waitpid(pid, NULL, 0); /* it returned without exec */
	a->err = e;
	return e != 0 ? -1 : pid;
}

static int spawn(const char *command, const skl_job *job, const skl_cmd_env *ce, child *ch)
{
	int pin[2], pout[2], perr[2];
	if (pipe2(pin, O_CLOEXEC) || pipe2(pout, O_CLOEXEC) || pipe2(perr, O_CLOEXEC))
		return errno;
	spawn_args a = {.command = command, .env = child_env(job, ce),
	                .fds = {pin[0], pout[1], perr[1]}, .reaper = skl__reaper_fd(),
	                .parent = getpid()};
	pid_t pid = a.env ? start_child(&a) : -1;
	int rc = a.env == NULL ? ENOMEM : a.err;
	free(a.env);
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
	ch->pid = pid;
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
	int rc = spawn(command, job, env, &ch);
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
	skl__reaper_forget(ch.pid);
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
