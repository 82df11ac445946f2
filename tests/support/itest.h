/*
 * itest.h — a small runner for integration tests against the harness's
 * PostgreSQL and PgBouncer (tests/harness/with-cluster).
 *
 * A suite is one binary of named cases: `suite --mode direct|pooled [CASE…]`.
 * Each case runs in its own process with a timeout, on a fresh database of
 * its own (created directly, reachable through the pooler by name), which
 * is dropped afterwards.  Assertions print both operands and the location.
 */
#ifndef SKL_ITEST_H
#define SKL_ITEST_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct itest_ctx {
	const char *mode;        /* "direct" or "pooled" */
	bool pooled;
	char dbname[64];
	char url[512];           /* the test database in this run's mode */
	char direct_url[512];    /* the same database, direct */
	char pooled_url[512];    /* the same database, through PgBouncer */
	PGconn *admin;           /* direct observer connection to the database */
} itest_ctx;

typedef void (*itest_fn)(itest_ctx *t);

/* A skiplock client on the case's URL named app (NULL: the default name),
 * with skiplock's schema installed when install; fails the case when
 * either fails. */
typedef struct skl_client skl_client;
skl_client *itest_client(itest_ctx *t, const char *app, bool install);

typedef struct itest_case {
	const char *name;
	itest_fn fn;
	int timeout_s;           /* 0: 60 */
} itest_case;

int itest_main(int argc, char **argv, const itest_case *cases, int ncases);

/* Failing ends the case's process with status 1 after printing why. */
void itest_fail(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4), noreturn));

#define CHECK(cond)                                                                 \
	do {                                                                            \
		if (!(cond))                                                                \
			itest_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond);              \
	} while (0)
#define CHECK_INT(op, a, b)                                                         \
	do {                                                                            \
		long long a_ = (long long)(a), b_ = (long long)(b);                         \
		if (!(a_ op b_))                                                            \
			itest_fail(__FILE__, __LINE__, "CHECK(%s %s %s): %lld vs %lld", #a, #op, \
			           #b, a_, b_);                                                 \
	} while (0)
#define CHECK_EQ(a, b) CHECK_INT(==, a, b)
#define CHECK_STR(a, b)                                                             \
	do {                                                                            \
		const char *a_ = (a), *b_ = (b);                                            \
		if (a_ == NULL || b_ == NULL || strcmp(a_, b_) != 0)                        \
			itest_fail(__FILE__, __LINE__, "CHECK_STR(%s, %s): \"%s\" vs \"%s\"", #a, \
			           #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");                 \
	} while (0)

/* Runs SQL on conn; fails the case on error.  Returns the result (PQclear). */
PGresult *itest_sql(PGconn *conn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Runs SQL and returns the first column of the first row as an integer. */
long long itest_int(PGconn *conn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Runs SQL and returns the first value as text (a static buffer, valid
 * until the next call; "" for NULL). */
const char *itest_text(PGconn *conn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* EXPLAINs a statement on conn, prints the plan and fails the case unless
 * it uses the index named `index` and no sequential scan. */
void itest_plan_uses(PGconn *conn, const char *index, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The same, and fails the case if the plan also names `avoid`. */
void itest_plan_uses_not(PGconn *conn, const char *index, const char *avoid, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Runs a call (in a transaction rolled back) and checks the plans of the
 * statements it runs inside functions, as auto_explain logs them: each
 * index named, no sequential scan of skiplock.jobs, and `avoid` (may be
 * NULL) nowhere.  conn must be a superuser's direct connection. */
void itest_call_plans_use(PGconn *conn, const char *index, const char *avoid, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Opens a blocking libpq connection (fails the case on error). */
PGconn *itest_connect(const char *url, const char *appname);
/* Runs a shell command; returns its exit status (or 128+signal). */
int itest_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Runs tests/harness/ctl ARGS (fault helpers); fails the case on error. */
void itest_ctl(const char *args);
/* Milliseconds on the monotonic clock. */
int64_t itest_now_ms(void);
/* Starts tests/tools/cutproxy ($SKL_CUTPROXY) in front of the case's
 * database, controlled through DIR/ctl (dir: 64 bytes, filled in); puts a
 * URL through it in proxy_url and returns the proxy's pid. */
pid_t itest_start_proxy(itest_ctx *t, char *dir, char *proxy_url, size_t cap);
/* Asserts the database has no advisory lock and no idle-in-transaction
 * session left (other than the observer). */
void itest_no_leftovers(itest_ctx *t);
/* Path of the built skiplock binary ($SKL_BIN). */
const char *itest_bin(void);

#endif
