/*
 * itest.c — the integration-test runner: fork per case, timeout, a fresh
 * database per case, assertions that print both sides.
 */
#include "itest.h"
#include "skiplock.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *current_case = "?";

void itest_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "FAIL %s at %s:%d: ", current_case, file, line);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	fflush(stderr);
	_exit(1);
}

int64_t itest_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *env(const char *name)
{
	const char *v = getenv(name);
	if (v == NULL || *v == '\0') {
		fprintf(stderr, "itest: %s is not set; run the suite under tests/harness/with-cluster\n",
		        name);
		exit(1);
	}
	return v;
}

const char *itest_bin(void)
{
	return env("SKL_BIN");
}

PGconn *itest_connect(const char *url, const char *appname)
{
	const char *kw[] = {"dbname", "application_name", "connect_timeout", NULL};
	const char *val[] = {url, appname, "10", NULL};
	PGconn *c = PQconnectdbParams(kw, val, 1);
	if (PQstatus(c) != CONNECTION_OK)
		itest_fail(__FILE__, __LINE__, "connect %s: %s", url, PQerrorMessage(c));
	return c;
}

static PGresult *vsql(PGconn *conn, const char *fmt, va_list ap)
{
	char sql[8192];
	vsnprintf(sql, sizeof(sql), fmt, ap);
	PGresult *r = PQexec(conn, sql);
	ExecStatusType st = PQresultStatus(r);
	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
		itest_fail(__FILE__, __LINE__, "SQL failed: %s\n  %s", sql, PQerrorMessage(conn));
	return r;
}

PGresult *itest_sql(PGconn *conn, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	PGresult *r = vsql(conn, fmt, ap);
	va_end(ap);
	return r;
}

long long itest_int(PGconn *conn, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	PGresult *r = vsql(conn, fmt, ap);
	va_end(ap);
	if (PQntuples(r) < 1 || PQgetisnull(r, 0, 0))
		itest_fail(__FILE__, __LINE__, "query returned no value");
	long long v = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	return v;
}

const char *itest_text(PGconn *conn, const char *fmt, ...)
{
	static char buf[16384];
	va_list ap;
	va_start(ap, fmt);
	PGresult *r = vsql(conn, fmt, ap);
	va_end(ap);
	snprintf(buf, sizeof(buf), "%s", PQntuples(r) > 0 ? PQgetvalue(r, 0, 0) : "");
	PQclear(r);
	return buf;
}

static void collect_notice(void *arg, const char *msg)
{
	char *plan = arg;
	strncat(plan, msg, 65536 - strlen(plan) - 1);
}

/* The plans of sql: EXPLAIN's, or with `nested` those auto_explain logs
 * for every statement the call runs inside functions (in a transaction
 * that is rolled back, so a claim changes nothing). */
static void plan_of(PGconn *conn, bool nested, const char *sql, char *plan, size_t size)
{
	plan[0] = '\0';
	if (!nested) {
		PGresult *r = itest_sql(conn, "EXPLAIN %s", sql);
		for (int i = 0; i < PQntuples(r); i++) {
			strncat(plan, PQgetvalue(r, i, 0), size - strlen(plan) - 2);
			strcat(plan, "\n");
		}
		PQclear(r);
		return;
	}
	PQclear(itest_sql(conn, "LOAD 'auto_explain'"));
	bool outer = PQtransactionStatus(conn) == PQTRANS_INTRANS;
	PQclear(itest_sql(conn, "%s SET LOCAL auto_explain.log_min_duration = 0;"
	                        " SET LOCAL auto_explain.log_nested_statements = on;"
	                        " SET LOCAL client_min_messages = log", outer ? "SAVEPOINT p;" : "BEGIN;"));
	PQnoticeProcessor old = PQsetNoticeProcessor(conn, collect_notice, plan);
	PQclear(itest_sql(conn, "%s", sql));
	PQsetNoticeProcessor(conn, old, NULL);
	PQclear(itest_sql(conn, outer ? "ROLLBACK TO SAVEPOINT p" : "ROLLBACK"));
}

static void plan_checkv(PGconn *conn, bool nested, const char *index, const char *avoid,
                        const char *fmt, va_list ap)
{
	char sql[8192];
	vsnprintf(sql, sizeof(sql), fmt, ap);
	static char plan[65536];
	plan_of(conn, nested, sql, plan, sizeof(plan));
	printf("%s", plan);
	if (strstr(plan, index) == NULL ||
	    strstr(plan, nested ? "Seq Scan on jobs" : "Seq Scan") != NULL)
		itest_fail(__FILE__, __LINE__, "the plan does not use %s alone:\n%s", index, plan);
	if (avoid && strstr(plan, avoid) != NULL)
		itest_fail(__FILE__, __LINE__, "the plan uses %s:\n%s", avoid, plan);
}

void itest_call_plans_use(PGconn *conn, const char *index, const char *avoid, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	plan_checkv(conn, true, index, avoid, fmt, ap);
	va_end(ap);
}

void itest_plan_uses(PGconn *conn, const char *index, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	plan_checkv(conn, false, index, NULL, fmt, ap);
	va_end(ap);
}

void itest_plan_uses_not(PGconn *conn, const char *index, const char *avoid, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	plan_checkv(conn, false, index, avoid, fmt, ap);
	va_end(ap);
}

int itest_sh(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	int st = system(cmd);
	if (st == -1)
		return 127;
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return WEXITSTATUS(st);
}

void itest_ctl(const char *args)
{
	int rc = itest_sh("%s/tests/harness/ctl %s", env("SKL_SOURCE_DIR"), args);
	if (rc != 0)
		itest_fail(__FILE__, __LINE__, "tests/harness/ctl %s exited %d", args, rc);
}

void itest_no_leftovers(itest_ctx *t)
{
	long long adv = itest_int(t->admin,
	                          "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = "
	                          "l.database WHERE l.locktype = 'advisory' AND d.datname = "
	                          "current_database()");
	long long iit = itest_int(t->admin,
	                          "SELECT count(*) FROM pg_stat_activity WHERE datname = "
	                          "current_database() AND state LIKE 'idle in transaction%%' "
	                          "AND pid <> pg_backend_pid()");
	CHECK_EQ(adv, 0);
	CHECK_EQ(iit, 0);
}

static void make_url(char *out, size_t cap, const char *port, const char *db)
{
	snprintf(out, cap, "postgresql://%s@%s:%s/%s", env("SKL_TEST_DBUSER"),
	         env("SKL_TEST_PGHOST"), port, db);
}

/* On a Citus cluster (with-cluster --citus) a case's database is a Citus
 * database: made on the workers too, the extension on every node, the
 * workers registered (ctl citus-db); dropped there after the case.
 * Returns ctl's exit status, 0 off Citus. */
static int citus_db(const char *what, const char *dbname)
{
	const char *citus = getenv("SKL_TEST_CITUS");
	if (!citus || strcmp(citus, "1") != 0)
		return 0;
	return itest_sh("%s/tests/harness/ctl citus-%s %s", env("SKL_SOURCE_DIR"), what, dbname);
}

static void setup_db(itest_ctx *t, const char *suite, const char *name)
{
	char admin_url[512];
	snprintf(t->dbname, sizeof(t->dbname), "t_%.16s_%.20s_%s_%d", suite, name,
	         t->pooled ? "p" : "d", (int)getpid());
	for (char *p = t->dbname; *p; p++)
		if (*p == '-')
			*p = '_';
	make_url(admin_url, sizeof(admin_url), env("SKL_TEST_PGPORT"), "postgres");
	PGconn *a = itest_connect(admin_url, "itest-admin");
	PQclear(itest_sql(a, "CREATE DATABASE \"%s\"", t->dbname));
	PQfinish(a);
	int rc = citus_db("db", t->dbname);
	if (rc != 0)
		itest_fail(__FILE__, __LINE__, "tests/harness/ctl citus-db %s exited %d", t->dbname, rc);
	make_url(t->direct_url, sizeof(t->direct_url), env("SKL_TEST_PGPORT"), t->dbname);
	make_url(t->pooled_url, sizeof(t->pooled_url), env("SKL_TEST_BOUNCER_PORT"), t->dbname);
	snprintf(t->url, sizeof(t->url), "%s", t->pooled ? t->pooled_url : t->direct_url);
	t->admin = itest_connect(t->direct_url, "itest-observer");
}

static void drop_db(const char *dbname)
{
	char admin_url[512];
	make_url(admin_url, sizeof(admin_url), env("SKL_TEST_PGPORT"), "postgres");
	PGconn *a = itest_connect(admin_url, "itest-admin");
	PGresult *r = PQexec(a, "SELECT 1");
	PQclear(r);
	char sql[256];
	snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", dbname);
	r = PQexec(a, sql);
	PQclear(r);
	PQfinish(a);
	if (citus_db("dropdb", dbname) != 0)
		fprintf(stderr, "warning: tests/harness/ctl citus-dropdb %s failed\n", dbname);
}

static int run_case(const char *suite, const char *mode, const itest_case *c)
{
	itest_ctx t = {.mode = mode, .pooled = strcmp(mode, "pooled") == 0};
	int64_t start = itest_now_ms();
	pid_t pid = fork();
	if (pid == 0) {
		current_case = c->name;
		setpgid(0, 0);
		alarm((unsigned)(c->timeout_s > 0 ? c->timeout_s : 60));
		setup_db(&t, suite, c->name);
		c->fn(&t);
		PQfinish(t.admin);
		fflush(stdout);
		_exit(0);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	kill(-pid, SIGKILL); /* anything the case left running */
	char dbname[64];
	snprintf(dbname, sizeof(dbname), "t_%.16s_%.20s_%s_%d", suite, c->name,
	         t.pooled ? "p" : "d", (int)pid);
	for (char *p = dbname; *p; p++)
		if (*p == '-')
			*p = '_';
	drop_db(dbname);
	bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
	printf("%s %s [%s] (%lld ms)%s\n", ok ? "ok  " : "FAIL", c->name, mode,
	       (long long)(itest_now_ms() - start),
	       WIFSIGNALED(st) ? (WTERMSIG(st) == SIGALRM ? " timed out" : " killed by a signal")
	                       : "");
	fflush(stdout);
	return ok ? 0 : 1;
}

int itest_main(int argc, char **argv, const itest_case *cases, int ncases)
{
	const char *mode = NULL, *suite = strrchr(argv[0], '/');
	suite = suite ? suite + 1 : argv[0];
	int first = 1;
	if (argc > 2 && strcmp(argv[1], "--mode") == 0) {
		mode = argv[2];
		first = 3;
	}
	if (mode == NULL || (strcmp(mode, "direct") != 0 && strcmp(mode, "pooled") != 0)) {
		fprintf(stderr, "usage: %s --mode direct|pooled [CASE…]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	int failed = 0, ran = 0;
	for (int i = 0; i < ncases; i++) {
		bool selected = first >= argc;
		for (int a = first; a < argc; a++)
			selected |= strcmp(argv[a], cases[i].name) == 0;
		if (!selected)
			continue;
		failed += run_case(suite, mode, &cases[i]);
		ran++;
	}
	printf("%s [%s]: %d of %d cases passed\n", suite, mode, ran - failed, ran);
	return failed || ran == 0 ? 1 : 0;
}

/* SKL_ITEST_LAYOUT=distributed (citus.integ_distributed.*): a client that
 * installs the schema also spreads its tables over the Citus cluster, as
 * skiplock init --distributed does (once; later calls change nothing). */
static bool distributed_layout(void)
{
	const char *l = getenv("SKL_ITEST_LAYOUT");
	return l != NULL && strcmp(l, "distributed") == 0;
}

skl_client *itest_client(itest_ctx *t, const char *app, bool install)
{
	skl_client_options o;
	skl_client_options_init(&o);
	o.url = t->url;
	if (app)
		o.application_name = app;
	skl_client *c = NULL;
	skl_error err;
	if (skl_client_open(&o, &c, &err) != SKL_OK ||
	    (install && skl_schema_install(c, NULL, &err) != SKL_OK) ||
	    (install && distributed_layout() && skl_schema_distribute(c, NULL, &err) != SKL_OK))
		itest_fail(__FILE__, __LINE__, "open/init: %s", err.message);
	return c;
}

pid_t itest_start_proxy(itest_ctx *t, char *dir, char *proxy_url, size_t cap)
{
	const char *bin = getenv("SKL_CUTPROXY");
	CHECK(bin != NULL);
	snprintf(dir, 64, "/tmp/skl-proxy.%d", (int)getpid());
	CHECK_EQ(itest_sh("mkdir -p %s", dir), 0);
	const char *port = strrchr(t->url, ':') + 1; /* "PORT/db" */
	pid_t pid = fork();
	if (pid == 0) {
		char listen[] = "127.0.0.1:0", up[64], ctl[96], pf[96];
		snprintf(up, sizeof(up), "127.0.0.1:%d", atoi(port));
		snprintf(ctl, sizeof(ctl), "%s/ctl", dir);
		snprintf(pf, sizeof(pf), "%s/port", dir);
		execl(bin, "cutproxy", "--listen", listen, "--upstream", up, "--control", ctl,
		      "--port-file", pf, "--ttl", "120", (char *)NULL);
		_exit(127);
	}
	int proxy_port = 0;
	for (int i = 0; i < 200 && proxy_port == 0; i++) {
		char pf[96];
		snprintf(pf, sizeof(pf), "%s/port", dir);
		FILE *f = fopen(pf, "r");
		if (f == NULL || fscanf(f, "%d", &proxy_port) != 1)
			usleep(50000);
		if (f)
			fclose(f);
	}
	CHECK(proxy_port > 0);
	snprintf(proxy_url, cap, "postgresql://%s@127.0.0.1:%d/%s", getenv("SKL_TEST_DBUSER"),
	         proxy_port, t->dbname);
	return pid;
}
