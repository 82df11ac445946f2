/*
 * spawn.c — a handler's child process (see spawn.h).
 *
 * The child is started vfork-style (skl__clone with shared memory, every
 * signal blocked in the calling thread), as posix_spawn does: no page
 * tables are copied, and no handler of ours can run in it.  Between clone
 * and exec it makes only async-signal-safe calls: its own process group,
 * PR_SET_PDEATHSIG, the reaper's list, default signals, the pipes.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/internal.h"
#include "worker/reaper.h"
#include "worker/spawn.h"

extern char **environ;

/* Code that runs in a child sharing our memory must not write the
 * sanitizer's shadow of its stack (it would stay behind in ours). */
#define SKL_NO_ASAN __attribute__((no_sanitize_address))

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

/* One allocation: the pointer array, then the job's five variables (none
 * without a job), each as long as its value needs. */
static char **child_env(const skl_job *job, const skl_cmd_env *ce)
{
	size_t n = 0;
	while (environ[n])
		n++;
	size_t room = job ? 5 * 48 + strlen(job->kind) + strlen(job->queue) : 0;
	char **env = malloc((n + 6) * sizeof(char *) + room);
	if (env == NULL)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (!withheld(environ[i], ce))
			env[k++] = environ[i];
	env[k] = NULL;
	if (job == NULL)
		return env;
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

int skl__child_start(const char *command, const skl_job *job, const skl_cmd_env *ce,
                     skl_child *ch)
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

void skl__child_forget(const skl_child *ch)
{
	kill(-ch->pid, SIGKILL); /* anything the shell left behind in its group */
	skl__reaper_forget(ch->pid);
}
