/*
 * reaper.c — command handlers never outlive the process that started them.
 *
 * A command runs in its own process group, so a timeout reaches whatever
 * the shell started.  When the worker process itself dies (any signal,
 * SIGKILL included, or an exit without a drain), nobody would be left to
 * kill those groups: PR_SET_PDEATHSIG (set in each command's child) stops
 * only the shell, not the shell's own children.  Hence the reaper: one
 * small process per process using the library, started with the first
 * command and again if it died.
 *
 * The reaper and this process share a SOCK_SEQPACKET socket pair.  Each
 * command's child, before exec, sends {+1, its pid} (its process group);
 * the handler thread sends {-1, pgid} once the group was killed and its
 * leader reaped.  Only this process (and children between clone and exec)
 * hold our end, close-on-exec; when this process dies the kernel closes
 * it, the reaper reads end-of-file after every message still queued, sends
 * SIGKILL to each group still listed and ends.
 *
 * The reaper is a copy of this process that runs only reaper_main: recv,
 * kill, close; it closes every descriptor it inherited (so it keeps no
 * pipe or socket of ours open) and ignores the terminal's and service
 * manager's stop signals, which are for the worker: the worker drains
 * first, and the reaper goes when the worker has gone.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker/reaper.h"

#define CLONE_STACK (64 * 1024)
#define REAPER_GROUPS 16384      /* groups listed at once; beyond, only PDEATHSIG */

typedef struct reaper_msg {
	int32_t op;                  /* +1 list, -1 forget */
	int32_t pgid;
} reaper_msg;

static pthread_mutex_t reaper_mu = PTHREAD_MUTEX_INITIALIZER;
static int reaper_sock = -1;     /* our end; its number never changes once set */
static pid_t reaper_pid = -1;
static pid_t groups[REAPER_GROUPS]; /* touched only in the reaper's copy */

pid_t skl__clone(int (*fn)(void *), void *arg, bool share_memory)
{
	/* a stack of its own; with shared memory the child must not write
	 * to the caller's, and mmap keeps it clear of the sanitizers' heap */
	void *stack = mmap(NULL, CLONE_STACK, PROT_READ | PROT_WRITE,
	                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED)
		return -1;
	int flags = SIGCHLD | (share_memory ? CLONE_VM | CLONE_VFORK : 0);
	uintptr_t top = ((uintptr_t)stack + CLONE_STACK) & ~(uintptr_t)15;
	pid_t pid = clone(fn, (void *)top, flags, arg);
	int e = errno;
	munmap(stack, CLONE_STACK);
	errno = e;
	return pid;
}

static void track(const reaper_msg *m)
{
	int32_t want = m->op > 0 ? 0 : m->pgid, put = m->op > 0 ? m->pgid : 0;
	for (size_t i = 0; i < REAPER_GROUPS; i++)
		if (groups[i] == want) {
			groups[i] = put;
			return;
		}
}

static int reaper_main(void *arg)
{
	int sock = *(int *)arg;
	prctl(PR_SET_NAME, "skiplock-reaper");
	struct sigaction ign = {.sa_handler = SIG_IGN};
	sigemptyset(&ign.sa_mask);
	const int stops[] = {SIGINT, SIGHUP, SIGTERM, SIGQUIT, SIGPIPE};
	for (size_t i = 0; i < sizeof(stops) / sizeof(stops[0]); i++)
		sigaction(stops[i], &ign, NULL);
	if (sock != 3 && dup2(sock, 3) != 3)
		return 1;
	close_range(0, 2, 0);
	close_range(4, ~0U, 0);
	memset(groups, 0, sizeof(groups));
	reaper_msg m;
	for (;;) {
		ssize_t n = recv(3, &m, sizeof(m), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n != (ssize_t)sizeof(m))
			break; /* end-of-file: the worker process is gone */
		if (m.pgid > 1)
			track(&m);
	}
	for (size_t i = 0; i < REAPER_GROUPS; i++)
		if (groups[i] > 1)
			kill(-groups[i], SIGKILL);
	return 0;
}

/* Under reaper_mu: a new reaper; its socket takes reaper_sock's number. */
static void start_reaper(void)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
		return;
	pid_t pid = skl__clone(reaper_main, &sv[1], false);
	close(sv[1]);
	if (pid < 0) {
		close(sv[0]);
		return;
	}
	if (reaper_sock < 0) {
		reaper_sock = sv[0];
	} else {
		dup3(sv[0], reaper_sock, O_CLOEXEC);
		close(sv[0]);
	}
	reaper_pid = pid;
}

int skl__reaper_fd(void)
{
	pthread_mutex_lock(&reaper_mu);
	/* gone (reaped here, or by someone else: ECHILD) or never started */
	if (reaper_pid < 0 || waitpid(reaper_pid, NULL, WNOHANG) != 0) {
		reaper_pid = -1;
		start_reaper();
	}
	int fd = reaper_pid > 0 ? reaper_sock : -1;
	pthread_mutex_unlock(&reaper_mu);
	return fd;
}

/* Runs in a command's child, which shares our memory: no sanitizer
 * shadow writes for its stack. */
__attribute__((no_sanitize_address)) void skl__reaper_register(int fd, pid_t pgid)
{
	reaper_msg m = {.op = 1, .pgid = (int32_t)pgid};
	if (fd >= 0)
		send(fd, &m, sizeof(m), MSG_NOSIGNAL);
}

void skl__reaper_forget(pid_t pgid)
{
	reaper_msg m = {.op = -1, .pgid = (int32_t)pgid};
	pthread_mutex_lock(&reaper_mu);
	if (reaper_pid > 0)
		send(reaper_sock, &m, sizeof(m), MSG_NOSIGNAL);
	pthread_mutex_unlock(&reaper_mu);
}
