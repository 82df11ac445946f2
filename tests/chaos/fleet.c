/*
 * fleet.c — the processes under test, supervised: two fault proxies, four
 * `skiplock worker`s (two through proxy 0, two through PgBouncer) and two
 * `skiplock lease run` contenders.  A process that exits is started again;
 * one the nemesis killed, when the nemesis says.
 */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "chaos.h"

extern char **environ;

/* fork + exec with stdout/stderr appended to logfile, in a process group
 * of its own, with extra "NAME=VALUE" entries put first in the
 * environment.  Only async-signal-safe calls between fork and exec. */
static pid_t spawn(char *const argv[], char *const extra[], const char *logfile)
{
	static char *envp[512];
	size_t n = 0;
	for (size_t i = 0; extra && extra[i] && n < 64; i++)
		envp[n++] = extra[i];
	for (size_t i = 0; environ[i] && n < 510; i++) {
		bool shadowed = false;
		for (size_t j = 0; extra && extra[j]; j++) {
			size_t k = strcspn(extra[j], "=");
			shadowed |= strncmp(environ[i], extra[j], k + 1) == 0;
		}
		if (!shadowed)
			envp[n++] = environ[i];
	}
	envp[n] = NULL;
	int fd = open(logfile, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	pid_t pid = fork();
	if (pid == 0) {
		setpgid(0, 0);
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the campaign */
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		int devnull = open("/dev/null", O_RDONLY);
		if (devnull >= 0)
			dup2(devnull, 0);
		execve(argv[0], argv, envp);
		_exit(127);
	}
	if (fd >= 0)
		close(fd);
	return pid;
}

const char *faketime_lib(void)
{
	static char path[256];
	glob_t g;
	if (path[0] == '\0' && glob("/usr/lib/*/faketime/libfaketimeMT.so.1", 0, NULL, &g) == 0) {
		snprintf(path, sizeof(path), "%s", g.gl_pathv[0]);
		globfree(&g);
	}
	return path[0] ? path : NULL;
}

bool fleet_start_proxies(chaos *c)
{
	for (int i = 0; i < 2; i++) {
		char listen[] = "127.0.0.1:0", up[128], portf[600], ttl[32], logf[600];
		snprintf(up, sizeof(up), "%s:%s", getenv("SKL_TEST_PGHOST"), getenv("SKL_TEST_PGPORT"));
		snprintf(c->ctl_sock[i], sizeof(c->ctl_sock[i]), "%s/proxy%d.sock", c->logdir, i);
		snprintf(portf, sizeof(portf), "%s/proxy%d.port", c->logdir, i);
		snprintf(ttl, sizeof(ttl), "%lld", (long long)c->duration_s + 900);
		snprintf(logf, sizeof(logf), "%s/proxy%d.log", c->logdir, i);
		char *argv[] = {(char *)c->cutproxy, "--listen", listen, "--upstream", up, "--control",
		                c->ctl_sock[i], "--port-file", portf, "--ttl", ttl, NULL};
		c->proxy_pid[i] = spawn(argv, NULL, logf);
		int port = 0;
		for (int64_t end = now_ms() + 15000; port == 0 && now_ms() < end; sleep_ms(50)) {
			FILE *f = fopen(portf, "r");
			if (f && fscanf(f, "%d", &port) != 1)
				port = 0;
			if (f)
				fclose(f);
		}
		if (port == 0) {
			logf_("cutproxy %d did not start; see %s", i, logf);
			return false;
		}
		snprintf(c->proxy_url[i], sizeof(c->proxy_url[i]),
		         "postgresql://%s@127.0.0.1:%d/%s?sslmode=disable", getenv("SKL_TEST_DBUSER"),
		         port, c->db);
	}
	return true;
}

/* One command on the proxy's control socket; its one-line reply. */
int proxy_ctl(chaos *c, int which, const char *cmd)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t plen = strlen(c->ctl_sock[which]);
	if (plen >= sizeof(sa.sun_path))
		plen = sizeof(sa.sun_path) - 1;
	memcpy(sa.sun_path, c->ctl_sock[which], plen);
	char line[256], reply[256] = "";
	int len = snprintf(line, sizeof(line), "%s\n", cmd);
	struct timeval tv = {.tv_sec = 5};
	bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
	          connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	          write(fd, line, (size_t)len) == len;
	ssize_t n = ok ? read(fd, reply, sizeof(reply) - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (n > 0)
		reply[n] = '\0';
	if (n <= 0 || strncmp(reply, "ok", 2) != 0) {
		logf_("cutproxy %d: %s: %s", which, cmd, n > 0 ? reply : "no answer");
		return 1;
	}
	return 0;
}

void fleet_init(fleet *f, uint64_t seed)
{
	memset(f, 0, sizeof(*f));
	f->r.s = seed ^ 0x5eed5eedULL;
	for (int i = 0; i < NWORKERS; i++)
		f->workers[i] = (slot){.kind = SLOT_WORKER, .n = i, .pooled = i >= NWORKERS / 2};
	for (int i = 0; i < NCONTENDERS; i++)
		f->contenders[i] = (slot){.kind = SLOT_CONTENDER, .n = i, .pooled = i == 1};
}

static const char *slot_url(chaos *c, const slot *s)
{
	return s->pooled ? c->bouncer_url : c->proxy_url[0];
}

static pid_t start_worker(chaos *c, slot *s)
{
	static char urlenv[600], wenv[32], ftlib[300], ft[64], asan[600], owner[32], cmd[600];
	snprintf(urlenv, sizeof(urlenv), "CHAOS_URL=%s", slot_url(c, s));
	snprintf(wenv, sizeof(wenv), "CHAOS_WORKER=w%d", s->n);
	snprintf(owner, sizeof(owner), "chaos-w%d", s->n);
	snprintf(cmd, sizeof(cmd), "exec %s handler", c->self);
	char *extra[8] = {urlenv, wenv, NULL};
	if (s->skew_min != 0 && faketime_lib()) {
		snprintf(ftlib, sizeof(ftlib), "LD_PRELOAD=%s", faketime_lib());
		snprintf(ft, sizeof(ft), "FAKETIME=%+d", s->skew_min * 60);
		const char *ao = getenv("ASAN_OPTIONS");
		snprintf(asan, sizeof(asan), "ASAN_OPTIONS=%s%sverify_asan_link_order=0", ao ? ao : "",
		         ao && *ao ? ":" : "");
		extra[2] = ftlib;
		extra[3] = ft;
		extra[4] = "DONT_FAKE_MONOTONIC=1";
		extra[5] = asan;
	}
	char h[6][640];
	const char *kinds[] = {"fast", "slow", "flaky", "poison", "dup", "cron"};
	for (int i = 0; i < 6; i++)
		snprintf(h[i], sizeof(h[i]), "%s=%s", kinds[i], cmd);
	char *argv[] = {(char *)c->bin, "worker", "--url", (char *)slot_url(c, s),
	                "--pooler", s->pooled ? "transaction" : "none", "--queue", CHAOS_QUEUE,
	                "--handler", h[0], "--handler", h[1], "--handler", h[2],
	                "--handler", h[3], "--handler", h[4], "--handler", h[5],
	                "--concurrency", "4", "--lease", "3s", "--poll", "100ms",
	                "--poll-max", "500ms", "--rescue-every", "1s", "--timeout", "20s",
	                "--kill-grace", "1s", "--shutdown-timeout", "8s", "--backoff-base", "200ms",
	                "--backoff-cap", "1s", "--call-timeout", CALL_TIMEOUT, "--retry-for", "120s",
	                "--no-cron", "--owner", owner, "--log-level", "warning", NULL};
	char logf[600];
	snprintf(logf, sizeof(logf), "%s/worker%d.log", c->logdir, s->n);
	return spawn(argv, extra, logf);
}

static pid_t start_contender(chaos *c, fleet *f, slot *s)
{
	char ms[32], writer[16], logf[600];
	snprintf(ms, sizeof(ms), "%lld", (long long)rng_range(&f->r, 4000, 10000));
	snprintf(writer, sizeof(writer), "c%d", s->n);
	snprintf(logf, sizeof(logf), "%s/lease%d.log", c->logdir, s->n);
	char *argv[] = {(char *)c->bin, "lease", "run", CHAOS_LEASE, "--ttl", LEASE_TTL,
	                "--wait-for", "5s", "--url", (char *)slot_url(c, s),
	                "--pooler", s->pooled ? "transaction" : "none", "--log-level", "warning",
	                "--", (char *)c->self, "lease-writer", (char *)slot_url(c, s), writer, ms,
	                NULL};
	return spawn(argv, NULL, logf);
}

static slot *find(fleet *f, pid_t pid)
{
	for (int i = 0; i < NWORKERS; i++)
		if (f->workers[i].pid == pid)
			return &f->workers[i];
	for (int i = 0; i < NCONTENDERS; i++)
		if (f->contenders[i].pid == pid)
			return &f->contenders[i];
	return NULL;
}

static void reaped(chaos *c, fleet *f, pid_t pid, int st)
{
	slot *s = find(f, pid);
	if (s == NULL) {
		if (pid == c->proxy_pid[0] || pid == c->proxy_pid[1])
			logf_("a fault proxy exited (status 0x%x)", st);
		return;
	}
	s->pid = 0;
	s->stopped = false;
	s->term_at = 0;
	if (s->kind == SLOT_CONTENDER) {
		s->restart_at = now_ms() + rng_range(&f->r, 100, 800);
	} else if (!s->expect_exit) {
		c->worker_exits++;
		logf_("worker w%d exited by itself (status 0x%x); starting it again", s->n, st);
		s->restart_at = now_ms() + 1000;
	}
	s->expect_exit = false;
}

static void supervise(chaos *c, fleet *f, slot *s)
{
	int64_t now = now_ms();
	if (s->pid == 0 && now >= s->restart_at)
		s->pid = s->kind == SLOT_WORKER ? start_worker(c, s) : start_contender(c, f, s);
	if (s->pid > 0 && s->term_at > 0 && now - s->term_at > 10000) {
		kill(s->pid, SIGKILL);
		s->term_at = 0;
	}
}

void fleet_tick(chaos *c, fleet *f)
{
	int st;
	pid_t pid;
	for (int i = 0; i < 64 && (pid = waitpid(-1, &st, WNOHANG)) > 0; i++)
		reaped(c, f, pid, st);
	for (int i = 0; i < NWORKERS; i++)
		supervise(c, f, &f->workers[i]);
	for (int i = 0; i < NCONTENDERS; i++)
		supervise(c, f, &f->contenders[i]);
}

void slot_signal(slot *s, int sig)
{
	if (s->pid > 0)
		kill(s->pid, sig);
}

void fleet_heal(chaos *c, fleet *f)
{
	for (int i = 0; i < NWORKERS; i++)
		if (f->workers[i].stopped) {
			slot_signal(&f->workers[i], SIGCONT);
			f->workers[i].stopped = false;
		}
	for (int i = 0; i < NCONTENDERS; i++)
		if (f->contenders[i].stopped) {
			slot_signal(&f->contenders[i], SIGCONT);
			f->contenders[i].stopped = false;
		}
	for (int i = 0; i < 2; i++) {
		proxy_ctl(c, i, "mode pass");
		proxy_ctl(c, i, "delay 0");
		proxy_ctl(c, i, "drop-commit-reply off");
	}
}

static bool any_running(fleet *f)
{
	for (int i = 0; i < NWORKERS; i++)
		if (f->workers[i].pid > 0)
			return true;
	for (int i = 0; i < NCONTENDERS; i++)
		if (f->contenders[i].pid > 0)
			return true;
	return false;
}

void fleet_stop(chaos *c, fleet *f)
{
	slot *all[NWORKERS + NCONTENDERS];
	for (int i = 0; i < NWORKERS; i++)
		all[i] = &f->workers[i];
	for (int i = 0; i < NCONTENDERS; i++)
		all[NWORKERS + i] = &f->contenders[i];
	for (int i = 0; i < NWORKERS + NCONTENDERS; i++) {
		all[i]->expect_exit = true;
		all[i]->restart_at = INT64_MAX;
		slot_signal(all[i], SIGCONT);
		slot_signal(all[i], SIGTERM);
	}
	int64_t end = now_ms() + 20000;
	while (any_running(f) && now_ms() < end) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid > 0) {
			slot *s = find(f, pid);
			if (s)
				s->pid = 0;
		} else {
			sleep_ms(50);
		}
	}
	for (int i = 0; i < NWORKERS + NCONTENDERS; i++)
		if (all[i]->pid > 0) {
			logf_("pid %d did not exit after SIGTERM; SIGKILL", (int)all[i]->pid);
			kill(all[i]->pid, SIGKILL);
			waitpid(all[i]->pid, NULL, 0);
			all[i]->pid = 0;
		}
	for (int i = 0; i < 2; i++) {
		proxy_ctl(c, i, "quit");
		if (c->proxy_pid[i] > 0)
			waitpid(c->proxy_pid[i], NULL, 0);
	}
}
