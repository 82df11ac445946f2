/*
 * lease_run.c — run a command only while holding a lease.
 *
 * Timeline of one run, on the boot-time clock (it keeps counting while
 * the process is stopped or the machine sleeps, so a pause is seen):
 *
 *   acquire ── renew every ttl/3 ── … ── command exits ── release
 *
 * held_from is when the last successful renewal (or the acquisition) was
 * sent.  The server set the expiry at least ttl after that moment, so the
 * lease is ours until held_from + ttl at the earliest.  Renewals that fail
 * transiently are retried with jittered backoff until
 *
 *   stop_at = held_from + ttl - attempt_ms - kill_grace
 *
 * (attempt_ms bounds one database call), and then the lease counts as
 * lost: the command's process group gets SIGTERM (and SIGCONT, should it
 * be stopped), then SIGKILL after kill_grace — all before held_from + ttl,
 * when another process may take the lease.  A renewal that matches no row
 * (the token is stale: expired and taken, or released by an operator)
 * loses the lease at once.  Nothing is held on the connection between
 * calls: each acquire, renewal and release is one autocommit statement,
 * so the connection may be cut, pooled or replaced at any time.
 *
 * Signals: SIGCHLD, SIGTERM, SIGINT and SIGHUP are blocked and taken with
 * sigtimedwait, so every wait is bounded and no handler runs.  TERM, INT
 * and HUP are passed on to the command's group; the lease is kept (and
 * renewed) until the command exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lease/lease_run.h"

extern char **environ;

typedef struct runner {
	const cli_common *cc;
	const lease_run_opts *o;
	skl_client *c;
	uint64_t rng;
	sigset_t sigs;          /* blocked, taken with sigtimedwait */
	sigset_t old_mask;      /* restored in the command and at the end */
	int64_t fencing;
	int64_t held_from;      /* when the last successful renewal was sent */
	int64_t next_renew;
	int failures;           /* consecutive failed renewals */
	pid_t child;            /* the command; also its process group */
	int status;             /* its wait status, once reaped */
	bool reaped;
	bool lost;
	int64_t term_at;        /* when the group got SIGTERM; 0: not yet */
	bool killed;
} runner;

static int64_t boot_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t next_rand(runner *r)
{
	uint64_t x = r->rng ? r->rng : 0x9e3779b97f4a7c15ULL;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	r->rng = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* Full jitter: uniform in [0, min(cap, base * 2^attempt)]. */
static int64_t jitter(runner *r, int attempt, int64_t base, int64_t cap)
{
	int64_t ceiling = base;
	for (int i = 0; i < attempt && ceiling < cap; i++)
		ceiling *= 2;
	if (ceiling > cap)
		ceiling = cap;
	return ceiling > 0 ? (int64_t)(next_rand(r) % (uint64_t)(ceiling + 1)) : 0;
}

static bool transient(skl_rc rc)
{
	return rc == SKL_RETRY || rc == SKL_INDETERMINATE || rc == SKL_UNREACHABLE;
}

static int64_t stop_at(const runner *r)
{
	return r->held_from + r->o->ttl_ms - r->o->attempt_ms - r->o->kill_grace_ms;
}

/* ---- signals and the child ---- */

static void reap(runner *r)
{
	if (r->reaped || r->child <= 0)
		return;
	int st;
	if (waitpid(r->child, &st, WNOHANG) == r->child) {
		r->status = st;
		r->reaped = true;
	}
}

/* Waits up to ms for a signal; returns it, or 0. */
static int wait_signal(runner *r, int64_t ms)
{
	if (ms < 0)
		ms = 0;
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
	siginfo_t info;
	int sig = sigtimedwait(&r->sigs, &info, &ts);
	return sig > 0 ? sig : 0;
}

/* Sleeps up to ms while supervising: reaps, passes signals on. */
static void supervise_wait(runner *r, int64_t ms)
{
	int sig = wait_signal(r, ms > 500 ? 500 : ms);
	if (sig != 0 && sig != SIGCHLD && r->child > 0 && !r->reaped) {
		cli_log(SKL_LOG_INFO, "passing %s on to the command", strsignal(sig));
		kill(-r->child, sig);
	}
	reap(r);
}

static void lose(runner *r, const char *why)
{
	r->lost = true;
	cli_error(r->cc, "lease \"%s\" lost (token %lld): %s; stopping the command", r->o->name,
	          (long long)r->fencing, why);
	if (r->child > 0 && !r->reaped) {
		kill(-r->child, SIGTERM);
		kill(-r->child, SIGCONT);
	}
	r->term_at = boot_ms();
}

/* ---- renewals ---- */

static void renew(runner *r)
{
	skl_error err;
	int64_t sent = boot_ms();
	skl_rc rc = skl_lease_renew(r->c, r->o->name, r->o->owner, r->fencing, r->o->ttl_ms, &err);
	if (rc == SKL_OK) {
		cli_log(SKL_LOG_DEBUG, "renewed lease \"%s\" (token %lld)", r->o->name,
		        (long long)r->fencing);
		r->held_from = sent;
		r->next_renew = sent + r->o->ttl_ms / 3;
		r->failures = 0;
		return;
	}
	if (rc == SKL_FENCED) {
		lose(r, "the renewal matched no row (it expired and was taken, or was released)");
		return;
	}
	int64_t left = stop_at(r) - boot_ms();
	cli_log(SKL_LOG_WARNING, "could not renew lease \"%s\" (%.1fs left to retry): %s",
	        r->o->name, left > 0 ? left / 1000.0 : 0.0, err.message);
	int64_t delay = jitter(r, r->failures++, r->o->ttl_ms / 50 + 1, r->o->ttl_ms / 10 + 1);
	r->next_renew = boot_ms() + delay;
}

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/* Past stop_at the lease may be gone by the time anything else happens. */
static bool past_deadline(runner *r)
{
	int64_t now = boot_ms();
	if (r->lost || now < stop_at(r))
		return false;
	char why[160];
	snprintf(why, sizeof(why),
	         "no renewal succeeded for %.1fs (ttl %.1fs): the process was paused or the "
	         "database was unreachable",
	         (now - r->held_from) / 1000.0, r->o->ttl_ms / 1000.0);
	lose(r, why);
	return true;
}

/* Until the command exits: renew, lose the lease in time, escalate.  A
 * command that ended while this process was paused past its deadline
 * counts as having outlived the lease. */
static void supervise(runner *r)
{
	while (!r->reaped) {
		int64_t now = boot_ms();
		if (!past_deadline(r) && !r->lost && now >= r->next_renew) {
			renew(r);
			continue;
		}
		if (r->term_at && !r->killed && now >= r->term_at + r->o->kill_grace_ms) {
			kill(-r->child, SIGKILL);
			r->killed = true;
		}
		int64_t until = now + 500;
		if (!r->lost)
			until = min64(until, min64(r->next_renew, stop_at(r)));
		if (r->term_at && !r->killed)
			until = min64(until, r->term_at + r->o->kill_grace_ms);
		supervise_wait(r, until - boot_ms());
	}
	past_deadline(r);
}

/* ---- starting the command ---- */

/* "SKIPLOCK_LEASE=" and a name of up to 256 characters of UTF-8. */
#define ENV_VAR_MAX (4 * SKL_LEASE_NAME_MAX + 64)

/* environ without SKIPLOCK_LEASE / SKIPLOCK_FENCING, plus ours. */
static char **command_env(const runner *r, char vars[2][ENV_VAR_MAX])
{
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 3, sizeof(char *));
	if (env == NULL)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "SKIPLOCK_LEASE=", 15) != 0 &&
		    strncmp(environ[i], "SKIPLOCK_FENCING=", 17) != 0)
			env[k++] = environ[i];
	snprintf(vars[0], sizeof(vars[0]), "SKIPLOCK_LEASE=%s", r->o->name);
	snprintf(vars[1], sizeof(vars[1]), "SKIPLOCK_FENCING=%lld", (long long)r->fencing);
	env[k++] = vars[0];
	env[k++] = vars[1];
	return env;
}

/* In the child: own process group, killed when skiplock dies, signals as
 * they were, then exec.  Reports errno on the pipe if exec fails. */
static void exec_child(const runner *r, char **env, int report, pid_t parent)
{
	setpgid(0, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	signal(SIGPIPE, SIG_DFL);
	sigprocmask(SIG_SETMASK, &r->old_mask, NULL);
	execvpe(r->o->argv[0], r->o->argv, env);
	int e = errno;
	if (write(report, &e, sizeof(e)) < 0)
		_exit(127);
	_exit(e == ENOENT ? 127 : 126);
}

/* Reads the child's exec report: 0 once exec succeeded (the pipe closed),
 * else its errno.  Bounded: a child that neither execs nor fails in 10s
 * is taken as started. */
static int exec_report(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	int e = 0;
	for (int64_t end = boot_ms() + 10000; boot_ms() < end;) {
		int n = poll(&p, 1, 100);
		if (n < 0 && errno != EINTR)
			break;
		if (n <= 0)
			continue;
		ssize_t got = read(fd, &e, sizeof(e));
		if (got < 0 && errno == EINTR)
			continue;
		return got == (ssize_t)sizeof(e) ? e : 0;
	}
	return 0;
}

static int start_command(runner *r)
{
	char vars[2][ENV_VAR_MAX];
	char **env = command_env(r, vars);
	int pfd[2];
	if (env == NULL || pipe2(pfd, O_CLOEXEC) != 0) {
		free(env);
		cli_error(r->cc, "cannot start the command: %s", strerror(errno ? errno : ENOMEM));
		return 126;
	}
	pid_t parent = getpid(), pid = fork();
	if (pid == 0)
		exec_child(r, env, pfd[1], parent);
	int fork_errno = errno;
	free(env);
	close(pfd[1]);
	if (pid < 0) {
		close(pfd[0]);
		cli_error(r->cc, "cannot start the command: fork: %s", strerror(fork_errno));
		return 126;
	}
	setpgid(pid, pid); /* also here, so no signal can miss the group */
	r->child = pid;
	int e = exec_report(pfd[0]);
	close(pfd[0]);
	if (e == 0)
		return CLI_OK;
	cli_error(r->cc, "cannot run \"%s\": %s", r->o->argv[0], strerror(e));
	waitpid(pid, &r->status, 0); /* it exits right after reporting */
	r->reaped = true;
	return e == ENOENT ? 127 : 126;
}

/* ---- acquire and release ---- */

enum { HELD = -1, KEEP_WAITING = -2 };

/* Sleeps up to ms waiting for the lease: KEEP_WAITING, or the exit status
 * after a TERM/INT/HUP. */
static int pause_or_signal(runner *r, int64_t ms)
{
	for (int64_t end = boot_ms() + ms; boot_ms() < end;) {
		int sig = wait_signal(r, end - boot_ms());
		if (sig != 0 && sig != SIGCHLD) {
			cli_log(SKL_LOG_INFO, "%s while waiting for lease \"%s\"; not running the command",
			        strsignal(sig), r->o->name);
			return 128 + sig;
		}
	}
	return KEEP_WAITING;
}

static int acquire(runner *r)
{
	int64_t start = boot_ms(), poll_base = r->o->ttl_ms / 4;
	poll_base = poll_base < 200 ? 200 : poll_base > 2000 ? 2000 : poll_base;
	bool said = false;
	for (int attempt = 0;;) {
		skl_error err;
		int64_t sent = boot_ms(), delay;
		skl_rc rc = skl_lease_acquire(r->c, r->o->name, r->o->owner, r->o->ttl_ms, &r->fencing,
		                              &err);
		if (rc == SKL_OK) {
			r->held_from = sent;
			r->next_renew = sent + r->o->ttl_ms / 3;
			return HELD;
		}
		bool waited_enough = r->o->wait_for_ms > 0 && boot_ms() - start >= r->o->wait_for_ms;
		if (rc == SKL_CONFLICT && (!r->o->wait || waited_enough)) {
			cli_log(SKL_LOG_INFO, "%s; not running the command", err.message);
			return CLI_OK;
		}
		if (rc == SKL_CONFLICT) {
			if (!said)
				cli_log(SKL_LOG_INFO, "%s; waiting", err.message);
			said = true;
			delay = poll_base / 2 + jitter(r, 0, poll_base, poll_base);
		} else if (transient(rc) && boot_ms() - start < r->o->retry_for_ms) {
			delay = jitter(r, attempt++, 50, 2000);
		} else {
			return cli_fail(r->cc, &err);
		}
		int rc2 = pause_or_signal(r, delay);
		if (rc2 != KEEP_WAITING)
			return rc2;
	}
}

static void release(runner *r)
{
	int64_t bound = min64(r->o->retry_for_ms, r->o->ttl_ms);
	int64_t end = boot_ms() + bound;
	for (int attempt = 0;; attempt++) {
		skl_error err;
		skl_rc rc = skl_lease_release(r->c, r->o->name, r->o->owner, r->fencing, &err);
		if (rc == SKL_OK || (rc == SKL_FENCED && r->lost))
			return;
		if (rc == SKL_FENCED || !transient(rc) || boot_ms() >= end) {
			cli_log(SKL_LOG_WARNING, "could not release lease \"%s\" (it expires by itself "
			        "within %.1fs): %s", r->o->name, r->o->ttl_ms / 1000.0, err.message);
			return;
		}
		wait_signal(r, jitter(r, attempt, 50, 1000));
	}
}

static int exit_status(const runner *r)
{
	if (r->lost)
		return CLI_PROBLEM;
	if (WIFSIGNALED(r->status))
		return 128 + WTERMSIG(r->status);
	return WEXITSTATUS(r->status);
}

int lease_run(const cli_common *cc, skl_client *c, const lease_run_opts *o)
{
	runner r = {.cc = cc, .o = o, .c = c};
	if (getrandom(&r.rng, sizeof(r.rng), 0) != (ssize_t)sizeof(r.rng))
		r.rng = (uint64_t)boot_ms() ^ ((uint64_t)getpid() << 32);
	sigemptyset(&r.sigs);
	sigaddset(&r.sigs, SIGCHLD);
	sigaddset(&r.sigs, SIGTERM);
	sigaddset(&r.sigs, SIGINT);
	sigaddset(&r.sigs, SIGHUP);
	sigprocmask(SIG_BLOCK, &r.sigs, &r.old_mask);
	int rc = acquire(&r);
	if (rc == HELD) {
		cli_log(SKL_LOG_DEBUG, "holding lease \"%s\" as %s with token %lld", o->name, o->owner,
		        (long long)r.fencing);
		rc = start_command(&r);
		if (rc == CLI_OK) {
			supervise(&r);
			rc = exit_status(&r);
		}
		if (r.child > 0)
			kill(-r.child, SIGKILL); /* what the command left in its group */
		release(&r);
	}
	/* The signals stay blocked: one that arrives now must not change the
	 * exit status the caller is about to return. */
	return rc;
}
