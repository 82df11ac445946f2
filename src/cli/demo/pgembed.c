/*
 * pgembed.c — a private PostgreSQL cluster for `skiplock demo` (see
 * pgembed.h for the directory layout).
 *
 * Invariants: the server listens on a unix socket inside the cluster's
 * directory and nowhere else; nothing here waits without a deadline (every
 * subprocess is killed, with its process group, when its deadline passes);
 * the directory lock is close-on-exec, so a server started here never
 * inherits it; under root, every file of the cluster belongs to the OS
 * user the server runs as.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "demo/pgembed.h"

volatile sig_atomic_t pgembed_interrupted;

enum { RUN_NOSTART = -1, RUN_TIMEOUT = -2, RUN_SIGNALED = -3, RUN_INTERRUPTED = -4 };

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool join(char *out, size_t n, const char *a, const char *b)
{
	int w = snprintf(out, n, "%s/%s", a, b);
	return w > 0 && (size_t)w < n;
}

static bool executable(const char *dir, const char *name)
{
	char p[PATH_MAX];
	return join(p, sizeof(p), dir, name) && access(p, X_OK) == 0;
}

/* ---- subprocesses ---- */

static char runuser_path[PATH_MAX];

/* Reads what *fd has within wait_ms into cap (keeping capn - 1 bytes at
 * most); closes it at end of file.  True when something was read. */
static bool capture(int *fd, int wait_ms, char *cap, size_t capn, size_t *got)
{
	struct pollfd p = {.fd = *fd, .events = POLLIN};
	if (*fd < 0 || poll(&p, 1, wait_ms) <= 0)
		return false;
	char buf[512];
	ssize_t r = read(*fd, buf, sizeof(buf));
	if (r <= 0) {
		close(*fd);
		*fd = -1;
		return false;
	}
	size_t room = capn - 1 - *got, take = (size_t)r < room ? (size_t)r : room;
	memcpy(cap + *got, buf, take);
	*got += take;
	return true;
}

/* Runs argv (argv[0] a path, or a name looked up in PATH) in its own process
 * group, in the cluster's directory, stdin from /dev/null, stdout and stderr
 * appended to logpath (or /dev/null); with cap, stdout is captured there
 * instead (NUL-terminated, truncated to capn - 1).  As the cluster's OS user
 * when as_user.  Returns the exit status or a RUN_* code. */
static int run(const pgembed *pg, const char *const argv[], bool as_user, int timeout_ms,
               const char *logpath, char *cap, size_t capn)
{
	const char *full[32];
	size_t k = 0;
	if (as_user) {
		full[k++] = runuser_path;
		full[k++] = "-u";
		full[k++] = PGEMBED_USER;
		full[k++] = "--";
	}
	for (size_t i = 0; argv[i] && k < 31; i++)
		full[k++] = argv[i];
	full[k] = NULL;
	int pipefd[2] = {-1, -1};
	if (cap && pipe2(pipefd, O_CLOEXEC) != 0)
		return RUN_NOSTART;
	const char *cwd = pg && pg->dir[0] ? pg->dir : "/";
	pid_t pid = fork();
	if (pid < 0) {
		if (cap) {
			close(pipefd[0]);
			close(pipefd[1]);
		}
		return RUN_NOSTART;
	}
	if (pid == 0) {
		setpgid(0, 0);
		int in = open("/dev/null", O_RDONLY);
		int out = cap ? pipefd[1]
		              : open(logpath ? logpath : "/dev/null", O_WRONLY | O_CREAT | O_APPEND, 0644);
		int err = cap ? open("/dev/null", O_WRONLY) : out;
		if (in < 0 || out < 0 || err < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 ||
		    dup2(err, 2) < 0 || chdir(cwd) != 0)
			_exit(127);
		if (as_user && logpath && fchown(1, pg->uid, pg->gid) != 0)
			_exit(127);
		execvp(full[0], (char *const *)full);
		_exit(127);
	}
	setpgid(pid, pid);
	if (cap)
		close(pipefd[1]);
	size_t got = 0;
	int status = 0, result = RUN_TIMEOUT;
	int64_t deadline = now_ms() + timeout_ms;
	for (;;) {
		if (cap)
			capture(&pipefd[0], 20, cap, capn, &got);
		else
			poll(NULL, 0, 20);
		if (waitpid(pid, &status, WNOHANG) == pid) {
			result = WIFEXITED(status) ? WEXITSTATUS(status) : RUN_SIGNALED;
			break;
		}
		if (pgembed_interrupted || now_ms() > deadline) {
			result = pgembed_interrupted ? RUN_INTERRUPTED : RUN_TIMEOUT;
			kill(-pid, SIGTERM);
			int64_t grace = now_ms() + 3000;
			while (waitpid(pid, &status, WNOHANG) == 0 && now_ms() < grace)
				poll(NULL, 0, 20);
			kill(-pid, SIGKILL);
			waitpid(pid, &status, 0);
			break;
		}
	}
	if (cap) {
		for (int i = 0; i < 64 && capture(&pipefd[0], 0, cap, capn, &got); i++)
			continue; /* what it wrote just before it exited */
		if (pipefd[0] >= 0)
			close(pipefd[0]);
		cap[got] = '\0';
	}
	return result;
}

static const char *run_why(int rc, char *buf, size_t n)
{
	switch (rc) {
	case RUN_NOSTART: snprintf(buf, n, "could not be started"); break;
	case RUN_TIMEOUT: snprintf(buf, n, "did not finish in time and was killed"); break;
	case RUN_SIGNALED: snprintf(buf, n, "was killed by a signal"); break;
	case RUN_INTERRUPTED: snprintf(buf, n, "was interrupted"); break;
	case 127: snprintf(buf, n, "could not be executed"); break;
	default: snprintf(buf, n, "exited with status %d", rc); break;
	}
	return buf;
}

/* Prints the last lines of a log after an error. */
static void show_tail(const char *path, int lines)
{
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return;
	char ring[8][256];
	int n = 0;
	while (fgets(ring[n % 8], sizeof(ring[0]), f))
		n++;
	fclose(f);
	if (lines > 8)
		lines = 8;
	for (int i = n > lines ? n - lines : 0; i < n; i++) {
		char *l = ring[i % 8];
		l[strcspn(l, "\n")] = '\0';
		fprintf(stderr, "  %s\n", l);
	}
}

/* ---- binaries ---- */

static bool has_server(const char *dir)
{
	return executable(dir, "initdb") && executable(dir, "pg_ctl") &&
	       executable(dir, "postgres");
}

static bool in_path(const char *name, char *out, size_t n)
{
	const char *path = getenv("PATH");
	while (path && *path) {
		size_t len = strcspn(path, ":");
		char dir[PATH_MAX];
		if (len > 0 && len < sizeof(dir)) {
			memcpy(dir, path, len);
			dir[len] = '\0';
			if (executable(dir, name))
				return join(out, n, dir, name);
		}
		path += len + (path[len] == ':');
	}
	return false;
}

/* The highest /usr/lib/postgresql/N/bin holding tool. */
static bool debian_bindir(const char *tool, char *out, size_t n)
{
	glob_t g;
	bool found = false;
	if (glob("/usr/lib/postgresql/*/bin", GLOB_ONLYDIR, NULL, &g) != 0)
		return false;
	const char *best = NULL;
	for (size_t i = 0; i < g.gl_pathc; i++)
		if (executable(g.gl_pathv[i], tool) &&
		    (best == NULL || strverscmp(g.gl_pathv[i], best) > 0))
			best = g.gl_pathv[i];
	if (best && strlen(best) < n) {
		strcpy(out, best);
		found = true;
	}
	globfree(&g);
	return found;
}

/* pg_config --bindir, else the highest /usr/lib/postgresql/N/bin, else the
 * directory of the initdb found in PATH. */
static bool find_bindir(char *out, size_t n)
{
	char pg_config[PATH_MAX], dir[PATH_MAX] = "";
	if (in_path("pg_config", pg_config, sizeof(pg_config))) {
		const char *argv[] = {pg_config, "--bindir", NULL};
		if (run(NULL, argv, false, 10000, NULL, dir, sizeof(dir)) == 0) {
			dir[strcspn(dir, "\r\n")] = '\0';
			if (has_server(dir) && strlen(dir) < n) {
				strcpy(out, dir);
				return true;
			}
		}
	}
	if (debian_bindir("initdb", dir, sizeof(dir)) && has_server(dir) && strlen(dir) < n) {
		strcpy(out, dir);
		return true;
	}
	char initdb[PATH_MAX], real[PATH_MAX];
	if (in_path("initdb", initdb, sizeof(initdb)) && realpath(initdb, real)) {
		*strrchr(real, '/') = '\0';
		if (has_server(real) && strlen(real) < n) {
			strcpy(out, real);
			return true;
		}
	}
	return false;
}

bool pgembed_find_psql(const char *bindir, char *out, size_t n)
{
	char dir[PATH_MAX];
	if (bindir && *bindir && executable(bindir, "psql"))
		return join(out, n, bindir, "psql");
	if (in_path("psql", out, n))
		return true;
	return debian_bindir("psql", dir, sizeof(dir)) && join(out, n, dir, "psql");
}

/* An existing cluster is best served by the binaries of its own version. */
static void prefer_cluster_version(pgembed *pg)
{
	char path[PATH_MAX], ver[16] = "", dir[PATH_MAX];
	if (!join(path, sizeof(path), pg->data, "PG_VERSION"))
		return;
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return;
	if (fgets(ver, sizeof(ver), f) == NULL)
		ver[0] = '\0';
	fclose(f);
	ver[strcspn(ver, "\r\n")] = '\0';
	if (ver[0] && snprintf(dir, sizeof(dir), "/usr/lib/postgresql/%s/bin", ver) > 0 &&
	    has_server(dir))
		strcpy(pg->bindir, dir);
}

/* ---- directory, user, lock ---- */

static bool mkdirs(const char *path, mode_t mode)
{
	char p[PATH_MAX];
	if (strlen(path) >= sizeof(p))
		return false;
	strcpy(p, path);
	for (char *s = p + 1; *s; s++)
		if (*s == '/') {
			*s = '\0';
			if (mkdir(p, 0755) != 0 && errno != EEXIST)
				return false;
			*s = '/';
		}
	return mkdir(p, mode) == 0 || errno == EEXIST;
}

static uid_t chown_uid;
static gid_t chown_gid;

static int chown_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)type;
	(void)ftw;
	if (st->st_uid != chown_uid || st->st_gid != chown_gid)
		return lchown(path, chown_uid, chown_gid) == 0 ? 0 : -1;
	return 0;
}

/* Hands dir and everything under it to the cluster's user when its top
 * belongs to someone else. */
static bool own_tree(const pgembed *pg, const char *dir)
{
	struct stat st;
	if (stat(dir, &st) != 0)
		return errno == ENOENT;
	if (st.st_uid == pg->uid && st.st_gid == pg->gid)
		return true;
	chown_uid = pg->uid;
	chown_gid = pg->gid;
	return nftw(dir, chown_one, 32, FTW_PHYS) == 0;
}

static bool find_sbin(const char *name, char *out, size_t n)
{
	static const char *const dirs[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin"};
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
		if (executable(dirs[i], name))
			return join(out, n, dirs[i], name);
	return in_path(name, out, n);
}

static int ensure_user(pgembed *pg)
{
	if (!find_sbin("runuser", runuser_path, sizeof(runuser_path))) {
		cli_error(pg->cc, "running as root, and runuser is not installed: PostgreSQL "
		                  "refuses to run as root (install util-linux, or run as another user)");
		return CLI_PROBLEM;
	}
	struct passwd *pw = getpwnam(PGEMBED_USER);
	if (pw == NULL) {
		char useradd[PATH_MAX], why[64];
		if (!find_sbin("useradd", useradd, sizeof(useradd))) {
			cli_error(pg->cc, "running as root, and there is no OS user \"%s\" to run "
			                  "PostgreSQL as (and no useradd to create it)", PGEMBED_USER);
			return CLI_PROBLEM;
		}
		const char *argv[] = {useradd, "--system", "--no-create-home", PGEMBED_USER, NULL};
		int rc = run(NULL, argv, false, 30000, NULL, NULL, 0);
		pw = getpwnam(PGEMBED_USER);
		if (pw == NULL) {
			cli_error(pg->cc, "could not create the OS user \"%s\": useradd %s", PGEMBED_USER,
			          run_why(rc, why, sizeof(why)));
			return CLI_PROBLEM;
		}
	}
	pg->uid = pw->pw_uid;
	pg->gid = pw->pw_gid;
	fprintf(stderr, "demo: running as root: PostgreSQL runs as the OS user \"%s\"\n",
	        PGEMBED_USER);
	return CLI_OK;
}

static int prepare_dir(pgembed *pg)
{
	if (!mkdirs(pg->dir, 0700) || (mkdir(pg->sock, 0700) != 0 && errno != EEXIST)) {
		cli_error(pg->cc, "cannot create %s: %s", pg->dir, strerror(errno));
		return CLI_PROBLEM;
	}
	if (pg->as_user) {
		if (!own_tree(pg, pg->dir) || !own_tree(pg, pg->sock) || !own_tree(pg, pg->data)) {
			cli_error(pg->cc, "cannot hand %s to the OS user \"%s\": %s", pg->dir,
			          PGEMBED_USER, strerror(errno));
			return CLI_PROBLEM;
		}
		const char *argv[] = {"test", "-w", pg->dir, "-a", "-x", pg->dir, NULL};
		if (run(pg, argv, true, 15000, NULL, NULL, 0) != 0) {
			cli_error(pg->cc, "the OS user \"%s\" cannot reach %s (a parent directory is "
			          "closed to other users); pass --dir in a directory it can reach, "
			          "such as /var/tmp/skiplock-demo", PGEMBED_USER, pg->dir);
			return CLI_PROBLEM;
		}
	}
	char lock[PATH_MAX];
	if (!join(lock, sizeof(lock), pg->dir, ".lock") ||
	    (pg->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0) {
		cli_error(pg->cc, "cannot open the lock file in %s: %s", pg->dir, strerror(errno));
		return CLI_PROBLEM;
	}
	if (pg->as_user && fchown(pg->lock_fd, pg->uid, pg->gid) != 0) {
		cli_error(pg->cc, "cannot hand %s to the OS user \"%s\": %s", lock, PGEMBED_USER,
		          strerror(errno));
		pgembed_close(pg);
		return CLI_PROBLEM;
	}
	if (flock(pg->lock_fd, LOCK_EX | LOCK_NB) != 0) {
		cli_error(pg->cc, "another skiplock demo is using %s; wait for it or pass another --dir",
		          pg->dir);
		pgembed_close(pg); /* not ours: the caller must not stop that demo's server */
		return CLI_PROBLEM;
	}
	return CLI_OK;
}

int pgembed_open(pgembed *pg, const cli_common *cc, const char *dir)
{
	memset(pg, 0, sizeof(*pg));
	pg->cc = cc;
	pg->lock_fd = -1;
	pg->uid = geteuid();
	pg->gid = getegid();
	char cwd[PATH_MAX];
	if (dir[0] != '/' && getcwd(cwd, sizeof(cwd)) == NULL) {
		cli_error(cc, "cannot determine the current directory: %s", strerror(errno));
		return CLI_PROBLEM;
	}
	int w = dir[0] == '/' ? snprintf(pg->dir, sizeof(pg->dir), "%s", dir)
	                      : snprintf(pg->dir, sizeof(pg->dir), "%s/%s", cwd, dir);
	for (size_t n = w > 0 ? strlen(pg->dir) : 0; n > 1 && pg->dir[n - 1] == '/'; n--)
		pg->dir[n - 1] = '\0';
	if (w <= 0 || (size_t)w >= sizeof(pg->dir) ||
	    !join(pg->data, sizeof(pg->data), pg->dir, "data") ||
	    !join(pg->sock, sizeof(pg->sock), pg->dir, "socket")) {
		cli_error(cc, "--dir: path too long");
		return CLI_PROBLEM;
	}
	if (strpbrk(pg->dir, "\n\r") != NULL) {
		cli_error(cc, "--dir: a path with a line break cannot hold a cluster");
		return CLI_PROBLEM;
	}
	size_t socklen = strlen(pg->sock) + strlen("/.s.PGSQL." PGEMBED_PORT);
	if (socklen >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		cli_error(cc, "%s is too deep for a unix socket path (%zu bytes, at most %zu); pass "
		          "a shorter --dir", pg->dir, socklen,
		          sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		return CLI_PROBLEM;
	}
	if (!find_bindir(pg->bindir, sizeof(pg->bindir))) {
		cli_error(cc, "PostgreSQL server programs (initdb, pg_ctl) not found via pg_config, "
		          "/usr/lib/postgresql or PATH; install the Debian package postgresql, or "
		          "pass --url");
		return CLI_PROBLEM;
	}
	prefer_cluster_version(pg);
	pg->as_user = geteuid() == 0;
	int rc = pg->as_user ? ensure_user(pg) : CLI_OK;
	return rc == CLI_OK ? prepare_dir(pg) : rc;
}

void pgembed_close(pgembed *pg)
{
	if (pg->lock_fd >= 0)
		close(pg->lock_fd);
	pg->lock_fd = -1;
}

/* ---- cluster ---- */

static bool tool(const pgembed *pg, const char *name, char *out, size_t n)
{
	return join(out, n, pg->bindir, name);
}

static bool dir_empty(const char *path)
{
	char pattern[PATH_MAX];
	glob_t g;
	if (!join(pattern, sizeof(pattern), path, "*"))
		return false;
	int rc = glob(pattern, GLOB_PERIOD | GLOB_NOSORT, NULL, &g);
	size_t real = 0;
	for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++) {
		const char *b = strrchr(g.gl_pathv[i], '/') + 1;
		real += strcmp(b, ".") != 0 && strcmp(b, "..") != 0;
	}
	if (rc == 0)
		globfree(&g);
	return real == 0;
}

static int initdb(pgembed *pg)
{
	char exe[PATH_MAX], log[PATH_MAX], why[64];
	struct stat st;
	if (stat(pg->data, &st) == 0 && !dir_empty(pg->data)) {
		cli_error(pg->cc, "%s exists but holds no PostgreSQL cluster; remove it and run "
		          "again", pg->data);
		return CLI_PROBLEM;
	}
	if (!tool(pg, "initdb", exe, sizeof(exe)) || !join(log, sizeof(log), pg->dir, "initdb.log"))
		return CLI_PROBLEM;
	fprintf(stderr, "demo: creating a PostgreSQL cluster in %s\n", pg->dir);
	const char *argv[] = {exe, "-D", pg->data, "-U", PGEMBED_USER, "-A", "trust",
	                      "-E", "UTF8", "--locale=C", NULL};
	int rc = run(pg, argv, pg->as_user, 180000, log, NULL, 0);
	if (rc != 0) {
		cli_error(pg->cc, "initdb %s; its output is in %s", run_why(rc, why, sizeof(why)), log);
		show_tail(log, 5);
		return CLI_PROBLEM;
	}
	/* Settings live in a file rewritten at every start (write_settings), so a
	 * moved directory gets the right socket path. */
	char conf[PATH_MAX];
	if (!join(conf, sizeof(conf), pg->data, "postgresql.conf"))
		return CLI_PROBLEM;
	FILE *f = fopen(conf, "a");
	if (f == NULL || fputs("\n# skiplock demo\ninclude_if_exists = 'skiplock_demo.conf'\n", f) < 0 ||
	    fclose(f) != 0) {
		cli_error(pg->cc, "cannot append to %s: %s", conf, strerror(errno));
		return CLI_PROBLEM;
	}
	return CLI_OK;
}

static void put_quoted(FILE *f, const char *s)
{
	fputc('\'', f);
	for (; *s; s++) {
		if (*s == '\'' || *s == '\\')
			fputc(*s, f);
		fputc(*s, f);
	}
	fputc('\'', f);
}

static int write_settings(pgembed *pg)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	if (!join(path, sizeof(path), pg->data, "skiplock_demo.conf") ||
	    !join(tmp, sizeof(tmp), pg->data, "skiplock_demo.conf.tmp"))
		return CLI_PROBLEM;
	FILE *f = fopen(tmp, "w");
	if (f == NULL) {
		cli_error(pg->cc, "cannot write %s: %s", tmp, strerror(errno));
		return CLI_PROBLEM;
	}
	fputs("# Written by `skiplock demo` at every start: edits here are lost.\n"
	      "# The server listens on a unix socket in the cluster's directory only.\n"
	      "listen_addresses = ''\n"
	      "port = " PGEMBED_PORT "\n"
	      "unix_socket_directories = ", f);
	put_quoted(f, pg->sock);
	fputs("\n", f);
	bool ok = !ferror(f);
	ok &= fclose(f) == 0;
	if (ok && pg->as_user)
		ok = chown(tmp, pg->uid, pg->gid) == 0;
	if (!ok || rename(tmp, path) != 0) {
		cli_error(pg->cc, "cannot write %s: %s", path, strerror(errno));
		unlink(tmp);
		return CLI_PROBLEM;
	}
	return CLI_OK;
}

/* pg_ctl status: 0 running, 3 not running, else a problem. */
static int status(const pgembed *pg)
{
	char exe[PATH_MAX];
	if (!tool(pg, "pg_ctl", exe, sizeof(exe)))
		return RUN_NOSTART;
	const char *argv[] = {exe, "status", "-D", pg->data, NULL};
	return run(pg, argv, pg->as_user, 15000, NULL, NULL, 0);
}

static int create_db(const pgembed *pg, const char *dbname)
{
	char url[PATH_MAX * 3];
	pgembed_url(pg, "postgres", url, sizeof(url));
	/* a private, direct server: a session setting is harmless here */
	const char *const keys[] = {"dbname", "connect_timeout", "options", "application_name", NULL};
	const char *const vals[] = {url, "10", "-c statement_timeout=60000", "skiplock demo", NULL};
	PGconn *c = PQconnectdbParams(keys, vals, 1);
	const char *p[1] = {dbname};
	PGresult *r = NULL;
	int rc = CLI_PROBLEM;
	if (PQstatus(c) != CONNECTION_OK)
		goto done;
	r = PQexecParams(c, "SELECT 1 FROM pg_database WHERE datname = $1", 1, NULL, p, NULL,
	                 NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK)
		goto done;
	if (PQntuples(r) == 0) {
		PQclear(r);
		char *ident = PQescapeIdentifier(c, dbname, strlen(dbname));
		char sql[256];
		snprintf(sql, sizeof(sql), "CREATE DATABASE %s", ident ? ident : "\"\"");
		PQfreemem(ident);
		r = PQexec(c, sql);
		const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
		if (PQresultStatus(r) != PGRES_COMMAND_OK && !(state && strcmp(state, "42P04") == 0))
			goto done;
	}
	rc = CLI_OK;
done:
	if (rc != CLI_OK)
		cli_error(pg->cc, "cannot create database \"%s\" in the private cluster: %s", dbname,
		          PQerrorMessage(c));
	PQclear(r);
	PQfinish(c);
	return rc;
}

int pgembed_start(pgembed *pg, const char *dbname)
{
	char version[PATH_MAX], exe[PATH_MAX], log[PATH_MAX], ctl_log[PATH_MAX], why[64];
	if (!join(version, sizeof(version), pg->data, "PG_VERSION") ||
	    !tool(pg, "pg_ctl", exe, sizeof(exe)) ||
	    !join(log, sizeof(log), pg->dir, "postgres.log") ||
	    !join(ctl_log, sizeof(ctl_log), pg->dir, "pg_ctl.log"))
		return CLI_PROBLEM;
	int rc = access(version, F_OK) == 0 ? CLI_OK : initdb(pg);
	if (rc == CLI_OK)
		rc = write_settings(pg);
	if (rc != CLI_OK)
		return rc;
	int st = status(pg);
	if (st == 0) {
		fprintf(stderr, "demo: reusing the running PostgreSQL in %s\n", pg->dir);
	} else if (st == 3) {
		fprintf(stderr, "demo: starting PostgreSQL (%s) in %s\n", pg->bindir, pg->dir);
		const char *argv[] = {exe, "start", "-D", pg->data, "-l", log, "-w", "-t", "60", NULL};
		st = run(pg, argv, pg->as_user, 75000, ctl_log, NULL, 0);
		if (st != 0) {
			cli_error(pg->cc, "PostgreSQL did not start: pg_ctl %s; the server log is %s",
			          run_why(st, why, sizeof(why)), log);
			show_tail(log, 5);
			return CLI_PROBLEM;
		}
	} else {
		cli_error(pg->cc, "cannot tell whether PostgreSQL runs in %s: pg_ctl status %s",
		          pg->data, run_why(st, why, sizeof(why)));
		return CLI_PROBLEM;
	}
	return create_db(pg, dbname);
}

int pgembed_stop(pgembed *pg)
{
	char exe[PATH_MAX], ctl_log[PATH_MAX], why[64];
	if (!tool(pg, "pg_ctl", exe, sizeof(exe)) ||
	    !join(ctl_log, sizeof(ctl_log), pg->dir, "pg_ctl.log"))
		return CLI_PROBLEM;
	int st = status(pg);
	if (st == 3 || st == 4) /* not running, or no cluster at all */
		return CLI_OK;
	const char *fast[] = {exe, "stop", "-D", pg->data, "-m", "fast", "-w", "-t", "60", NULL};
	st = run(pg, fast, pg->as_user, 75000, ctl_log, NULL, 0);
	if (st != 0) {
		const char *now[] = {exe, "stop", "-D", pg->data, "-m", "immediate", "-w", "-t", "30",
		                     NULL};
		st = run(pg, now, pg->as_user, 45000, ctl_log, NULL, 0);
	}
	if (st != 0 && status(pg) != 3) {
		cli_error(pg->cc, "PostgreSQL in %s did not stop: pg_ctl %s; see %s", pg->dir,
		          run_why(st, why, sizeof(why)), ctl_log);
		return CLI_PROBLEM;
	}
	return CLI_OK;
}

void pgembed_url(const pgembed *pg, const char *dbname, char *out, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";
	char host[PATH_MAX * 3];
	size_t k = 0;
	for (const unsigned char *s = (const unsigned char *)pg->sock; *s && k + 4 < sizeof(host); s++) {
		if ((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
		    strchr("/._-~", *s)) {
			host[k++] = (char)*s;
		} else {
			host[k++] = '%';
			host[k++] = hex[*s >> 4];
			host[k++] = hex[*s & 15];
		}
	}
	host[k] = '\0';
	/* port and sslmode spelled out, so PGPORT or PGSSLMODE cannot redirect it */
	snprintf(out, n, "postgresql://" PGEMBED_USER "@/%s?host=%s&port=" PGEMBED_PORT
	         "&sslmode=disable", dbname, host);
}
