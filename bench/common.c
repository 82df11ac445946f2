/*
 * common.c — clocks, control connections, enqueue, the shared counter and
 * worker processes for the benchmark programs (see bench.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

double bench_mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double bench_wall(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void bench_sleep(double seconds)
{
	if (seconds <= 0)
		return;
	struct timespec ts = {.tv_sec = (time_t)seconds,
	                      .tv_nsec = (long)((seconds - (double)(time_t)seconds) * 1e9)};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

void bench_die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("bench: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

PGconn *bench_connect(const char *url, const char *appname)
{
	const char *kw[] = {"dbname", "application_name", "connect_timeout", NULL};
	const char *val[] = {url, appname, "10", NULL};
	PGconn *c = PQconnectdbParams(kw, val, 1);
	if (PQstatus(c) != CONNECTION_OK)
		bench_die("cannot connect: %s", PQerrorMessage(c));
	return c;
}

static PGresult *run(PGconn *c, const char *sql, bool fatal)
{
	PGresult *r = PQexec(c, sql);
	ExecStatusType st = PQresultStatus(r);
	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
		char msg[600];
		snprintf(msg, sizeof(msg), "%s", PQerrorMessage(c));
		msg[strcspn(msg, "\n")] = '\0';
		PQclear(r);
		if (fatal)
			bench_die("%.80s: %s", sql, msg);
		fprintf(stderr, "bench: %.80s: %s\n", sql, msg);
		return NULL;
	}
	return r;
}

void bench_exec(PGconn *c, const char *sql)
{
	PQclear(run(c, sql, true));
}

/* Empties the job tables of either schema: skiplock.jobs alone (before
 * step 0013, e.g. the baseline's) or with skiplock.finished_jobs; and
 * gives a schema from before step 0013 a skiplock.all_jobs to count in. */
void bench_reset_jobs(PGconn *c)
{
	bench_exec(c, "DO $$ BEGIN"
	              " TRUNCATE skiplock.jobs, skiplock.enqueue_tokens;"
	              " IF to_regclass('skiplock.finished_jobs') IS NOT NULL THEN"
	              "   TRUNCATE skiplock.finished_jobs; END IF;"
	              " IF to_regclass('skiplock.all_jobs') IS NULL THEN"
	              "   CREATE VIEW skiplock.all_jobs AS SELECT * FROM skiplock.jobs; END IF;"
	              " END $$");
}

bool bench_try(PGconn *c, const char *sql)
{
	PGresult *r = run(c, sql, false);
	PQclear(r);
	return r != NULL;
}

static const char *one_value(PGresult *r, const char *sql)
{
	if (PQntuples(r) != 1 || PQnfields(r) < 1)
		bench_die("%.80s: expected one value", sql);
	return PQgetvalue(r, 0, 0);
}

int64_t bench_int(PGconn *c, const char *sql)
{
	PGresult *r = run(c, sql, true);
	int64_t v = strtoll(one_value(r, sql), NULL, 10);
	PQclear(r);
	return v;
}

double bench_float(PGconn *c, const char *sql)
{
	PGresult *r = run(c, sql, true);
	double v = strtod(one_value(r, sql), NULL);
	PQclear(r);
	return v;
}

skl_client *bench_client(const char *url, bool pooled, const char *appname)
{
	skl_client_options o;
	skl_client_options_init(&o);
	o.url = url;
	o.pooler = pooled ? SKL_POOLER_TRANSACTION : SKL_POOLER_NONE;
	o.application_name = appname;
	o.call_timeout_ms = 120000;
	o.retry_max_ms = 60000;
	skl_client *c = NULL;
	skl_error err;
	if (skl_client_open(&o, &c, &err) != SKL_OK)
		bench_die("client: %s", err.message);
	return c;
}

void bench_enqueue(skl_client *c, const char *kind, long n, int batch)
{
	if (batch < 1)
		batch = 1;
	skl_job_spec *specs = calloc((size_t)batch, sizeof(*specs));
	int64_t *ids = calloc((size_t)batch, sizeof(*ids));
	if (specs == NULL || ids == NULL)
		bench_die("out of memory");
	for (int i = 0; i < batch; i++) {
		specs[i].kind = kind;
		specs[i].payload = BENCH_PAYLOAD;
		skl_enqueue_opts_init(&specs[i].opts);
	}
	for (long done = 0; done < n;) {
		size_t k = (size_t)(n - done < batch ? n - done : batch);
		skl_error err;
		if (skl_enqueue_bulk(c, specs, k, ids, &err) != SKL_OK)
			bench_die("enqueue: %s", err.message);
		done += (long)k;
	}
	free(specs);
	free(ids);
}

_Atomic uint64_t *bench_counter(const char *path, bool create)
{
	int fd = open(path, create ? O_RDWR | O_CREAT | O_TRUNC : O_RDWR, 0600);
	if (fd < 0)
		bench_die("cannot open counter file %s: %s", path, strerror(errno));
	if (create && ftruncate(fd, 4096) != 0)
		bench_die("cannot size counter file: %s", strerror(errno));
	void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		bench_die("cannot map counter file: %s", strerror(errno));
	return p;
}

static char *self_dir(void)
{
	static char dir[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	if (n <= 0)
		bench_die("cannot read /proc/self/exe");
	dir[n] = '\0';
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	return dir;
}

/* Workers outlive nothing: the driver kills those still running when it
 * exits (bench_die included), and a worker gets SIGTERM if the driver dies. */
static pid_t spawned[64];
static int nspawned;

static void kill_spawned(void)
{
	for (int i = 0; i < nspawned; i++)
		if (spawned[i] > 0 && bench_alive(spawned[i])) {
			kill(spawned[i], SIGKILL);
			waitpid(spawned[i], NULL, 0);
		}
}

pid_t bench_spawn_worker(char *const args[], const char *logpath)
{
	char exe[PATH_MAX + 32];
	snprintf(exe, sizeof(exe), "%s/skl-bench-worker", self_dir());
	char *argv[64] = {exe};
	for (int i = 0; args[i] && i < 62; i++)
		argv[i + 1] = args[i];
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		bench_die("fork: %s", strerror(errno));
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (logpath) {
			int fd = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
			if (fd >= 0) {
				dup2(fd, 2);
				close(fd);
			}
		}
		execv(exe, argv);
		fprintf(stderr, "bench: cannot run %s: %s\n", exe, strerror(errno));
		_exit(127);
	}
	if (nspawned == 0)
		atexit(kill_spawned);
	if (nspawned < (int)(sizeof(spawned) / sizeof(spawned[0])))
		spawned[nspawned++] = pid;
	return pid;
}

bool bench_alive(pid_t pid)
{
	int st;
	return waitpid(pid, &st, WNOHANG) == 0;
}

int bench_stop(pid_t pid, double grace)
{
	int st = 0;
	kill(pid, SIGTERM);
	double until = bench_mono() + grace;
	while (bench_mono() < until) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return st;
		if (r < 0)
			return -1;
		bench_sleep(0.02);
	}
	fprintf(stderr, "bench: worker %d did not stop within %.0f s; killing it\n", (int)pid, grace);
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return st;
}

long bench_proc_kb(pid_t pid, const char *field)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return 0;
	long kb = 0;
	size_t fl = strlen(field);
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, field, fl) == 0 && line[fl] == ':') {
			kb = strtol(line + fl + 1, NULL, 10);
			break;
		}
	fclose(f);
	return kb;
}

const char *bench_opt(int argc, char **argv, const char *name, const char *dflt)
{
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], name) == 0)
			return argv[i + 1];
	return dflt;
}

bool bench_flag(int argc, char **argv, const char *name)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], name) == 0)
			return true;
	return false;
}
