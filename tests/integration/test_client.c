/*
 * Integration tests of the connection layer, direct and through PgBouncer:
 * reconnect after a terminated backend, permanent errors at once, client
 * deadlines against a frozen peer, unreachable databases, transaction-local
 * settings, retry of lock timeouts, and the prepared hot statements.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"
#include "itest.h"
#include "skiplock.h"

static skl_client *open_client(itest_ctx *t, const char *app, int call_ms, int retry_ms)
{
	skl_client_options o;
	skl_client_options_init(&o);
	o.url = t->url;
	o.application_name = app;
	o.call_timeout_ms = call_ms;
	o.retry_max_ms = retry_ms;
	skl_client *c = NULL;
	skl_error err;
	if (skl_client_open(&o, &c, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "open: %s", err.message);
	return c;
}

typedef struct sleeper {
	int calls;
	const char *sql;
} sleeper;

static skl_rc run_sql(skl_client *c, void *ctx, skl_error *err)
{
	sleeper *s = ctx;
	s->calls++;
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, s->sql, 0, NULL, &res, err);
	PQclear(res);
	return rc;
}

typedef struct killer {
	const char *url;
	const char *app;
	int killed;
} killer;

/* Waits until the application's query is active, then terminates its backend. */
static void *terminate_when_active(void *arg)
{
	killer *k = arg;
	PGconn *obs = itest_connect(k->url, "itest-killer");
	for (int i = 0; i < 200 && !k->killed; i++) {
		char sql[256];
		snprintf(sql, sizeof(sql),
		         "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
		         "state = 'active' AND query LIKE '%%pg_sleep%%' AND pid <> pg_backend_pid() "
		         "AND datname = current_database()");
		PGresult *r = PQexec(obs, sql);
		k->killed = atoi(PQgetvalue(r, 0, 0));
		PQclear(r);
		usleep(20000);
	}
	PQfinish(obs);
	return NULL;
}

static void terminated_backend_reconnects(itest_ctx *t)
{
	skl_client *c = open_client(t, "itest-victim", 10000, 20000);
	skl_error err;
	CHECK_EQ(skl_client_ping(c, &err), SKL_OK);
	killer k = {.url = t->direct_url, .app = "itest-victim"};
	pthread_t th;
	pthread_create(&th, NULL, terminate_when_active, &k);
	sleeper s = {.sql = "SELECT pg_sleep(1)"};
	skl_txn_opts o = {.txn = 1, .idempotent = 1};
	skl_rc rc = skl__run(c, &o, run_sql, &s, &err);
	pthread_join(th, NULL);
	if (rc != SKL_OK)
		itest_fail(__FILE__, __LINE__, "run: %s (%s)", err.message, err.sqlstate);
	CHECK_EQ(k.killed, 1);
	CHECK_EQ(s.calls, 2);
	if (!t->pooled)
		CHECK_EQ(skl_client_connects(c), 2);
	skl_client_close(c);
	itest_no_leftovers(t);
}

static void permanent_error_surfaces_at_once(itest_ctx *t)
{
	skl_client *c = open_client(t, "itest-permanent", 5000, 20000);
	skl_error err;
	sleeper s = {.sql = "SELECT * FROM no_such_table"};
	skl_txn_opts o = {.txn = 1, .idempotent = 1};
	int64_t start = itest_now_ms();
	CHECK_EQ(skl__run(c, &o, run_sql, &s, &err), SKL_DB);
	CHECK_STR(err.sqlstate, "42P01");
	CHECK(!err.indeterminate);
	CHECK_EQ(s.calls, 1);
	CHECK_INT(<, itest_now_ms() - start, 1000);
	/* the connection is still usable afterwards, the transaction is gone */
	CHECK_EQ(skl_client_ping(c, &err), SKL_OK);
	skl_client_close(c);
	itest_no_leftovers(t);
}

/* Freezes the peer (PgBouncer, or the backend itself when direct) for longer
 * than the call deadline: the call must come back indeterminate in time. */
static void deadline_against_frozen_peer(itest_ctx *t)
{
	skl_client *c = open_client(t, "itest-frozen", 1000, 0);
	skl_error err;
	CHECK_EQ(skl_client_ping(c, &err), SKL_OK);
	long long backend = 0;
	if (t->pooled) {
		itest_ctl("bouncer-pause");
	} else {
		backend = itest_int(t->admin, "SELECT pid FROM pg_stat_activity WHERE "
		                              "application_name = 'itest-frozen'");
		kill((pid_t)backend, SIGSTOP);
	}
	int64_t start = itest_now_ms();
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, "INSERT INTO pg_temp_nothing VALUES (1)", 0, NULL, &res, &err);
	int64_t took = itest_now_ms() - start;
	if (t->pooled)
		itest_ctl("bouncer-resume");
	else
		kill((pid_t)backend, SIGCONT);
	CHECK_EQ(rc, SKL_INDETERMINATE);
	CHECK(err.indeterminate);
	CHECK_INT(>=, took, 950);
	CHECK_INT(<, took, 1500);
	printf("  frozen peer: call returned %s after %lld ms (deadline 1000 ms)\n",
	       skl_strerror(rc), (long long)took);
	CHECK_EQ(skl_client_ping(c, &err), SKL_OK);
	skl_client_close(c);
}

static void unreachable_is_bounded(itest_ctx *t)
{
	(void)t;
	skl_client_options o;
	skl_client_options_init(&o);
	o.url = "postgresql://nobody@127.0.0.1:1/none";
	o.retry_max_ms = 1500;
	skl_client *c = NULL;
	skl_error err;
	CHECK_EQ(skl_client_open(&o, &c, &err), SKL_OK);
	int64_t start = itest_now_ms();
	CHECK_EQ(skl_client_ping(c, &err), SKL_UNREACHABLE);
	int64_t took = itest_now_ms() - start;
	CHECK_INT(>=, took, 1400);
	CHECK_INT(<, took, 2500);
	CHECK(strstr(err.message, "could not connect") != NULL);
	skl_client_close(c);
}

static skl_rc read_settings(skl_client *c, void *ctx, skl_error *err)
{
	char *out = ctx;
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c,
	                      "SELECT current_setting('lock_timeout') || ' ' || "
	                      "current_setting('idle_in_transaction_session_timeout')",
	                      0, NULL, &res, err);
	if (rc == SKL_OK)
		snprintf(out, 64, "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	return rc;
}

static void settings_are_transaction_local(itest_ctx *t)
{
	skl_client *c = open_client(t, "itest-settings", 5000, 5000);
	skl_error err;
	char inside[64] = "", after[64] = "";
	skl_txn_opts o = {.txn = 1, .lock_timeout_ms = 1234, .idle_timeout_ms = 4321};
	CHECK_EQ(skl__run(c, &o, read_settings, inside, &err), SKL_OK);
	CHECK_STR(inside, "1234ms 4321ms");
	skl_txn_opts plain = {0};
	CHECK_EQ(skl__run(c, &plain, read_settings, after, &err), SKL_OK);
	CHECK_STR(after, "0 0");
	/* no session state on any backend of the database */
	long long leaked = itest_int(
		t->admin, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
		          "AND backend_type = 'client backend' AND pid <> pg_backend_pid() "
		          "AND query LIKE 'SET %%' AND query NOT LIKE '%%LOCAL%%'");
	CHECK_EQ(leaked, 0);
	skl_client_close(c);
	itest_no_leftovers(t);
}

static long long hot_value(skl_client *c, const char *sql, const char *arg)
{
	const char *vals[1] = {arg};
	PGresult *res = NULL;
	skl_error err;
	skl_rc rc = skl__exec_hot(c, sql, 1, vals, &res, &err);
	if (rc != SKL_OK)
		itest_fail(__FILE__, __LINE__, "hot statement: %s", err.message);
	long long v = atoll(PQgetvalue(res, 0, 0));
	PQclear(res);
	return v;
}

static long long prepared_here(skl_client *c)
{
	PGresult *res = NULL;
	skl_error err;
	CHECK_EQ(skl__exec(c, "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'skl\\_%'",
	                   0, NULL, &res, &err), SKL_OK);
	long long n = atoll(PQgetvalue(res, 0, 0));
	PQclear(res);
	return n;
}

/* Hot statements are prepared once on a connection marked direct, and go
 * plain when the server does not know their name: after a DEALLOCATE, or
 * through a transaction pooler that a client took for the server (here two
 * clients share PgBouncer's two backends, each statement's name landing on
 * whichever backend).  Every call must return its own statement's answer. */
static const char *const hot_a = "SELECT $1::bigint + 1";
static const char *const hot_b = "SELECT $1::bigint * 2";

static void hot_statements_prepared_or_plain(itest_ctx *t)
{
	skl_client *c = open_client(t, "itest-hot", 5000, 5000);
	skl_client *d = open_client(t, "itest-hot2", 5000, 5000);
	skl_error err;
	CHECK_EQ(skl_client_ping(c, &err), SKL_OK);
	CHECK_EQ(skl_client_ping(d, &err), SKL_OK);
	if (!t->pooled) {
		CHECK_EQ(hot_value(c, hot_a, "1"), 2); /* not marked: plain */
		CHECK_EQ(prepared_here(c), 0);
	}
	skl__set_direct(c);
	skl__set_direct(d);
	for (int i = 0; i < 50; i++) {
		char arg[16];
		snprintf(arg, sizeof(arg), "%d", i);
		CHECK_EQ(hot_value(c, hot_a, arg), i + 1);
		CHECK_EQ(hot_value(d, hot_b, arg), 2 * i);
		CHECK_EQ(hot_value(d, hot_a, arg), i + 1);
		CHECK_EQ(hot_value(c, hot_b, arg), 2 * i);
	}
	if (!t->pooled) {
		CHECK_EQ(prepared_here(c), 2);
		PGresult *res = NULL;
		CHECK_EQ(skl__exec(c, "DEALLOCATE ALL", 0, NULL, &res, &err), SKL_OK);
		PQclear(res);
		CHECK_EQ(hot_value(c, hot_a, "41"), 42);
		CHECK_EQ(hot_value(c, hot_b, "21"), 42);
		CHECK_EQ(prepared_here(c), 0); /* plain from then on */
	}
	skl_client_close(c);
	skl_client_close(d);
}

typedef struct holder {
	const char *url;
	int hold_ms;
} holder;

static void *hold_table_lock(void *arg)
{
	holder *h = arg;
	PGconn *conn = itest_connect(h->url, "itest-holder");
	PQclear(itest_sql(conn, "BEGIN; LOCK TABLE target IN ACCESS EXCLUSIVE MODE"));
	usleep((useconds_t)h->hold_ms * 1000);
	PQclear(itest_sql(conn, "COMMIT"));
	PQfinish(conn);
	return NULL;
}

/* A lock_timeout (55P03) is transient: retried until the holder lets go. */
static void lock_timeout_is_retried(itest_ctx *t)
{
	PQclear(itest_sql(t->admin, "CREATE TABLE target (x int)"));
	holder h = {.url = t->direct_url, .hold_ms = 1200};
	pthread_t th;
	pthread_create(&th, NULL, hold_table_lock, &h);
	while (itest_int(t->admin, "SELECT count(*) FROM pg_stat_activity WHERE application_name "
	                           "= 'itest-holder' AND state = 'idle in transaction'") == 0)
		usleep(10000);
	skl_client *c = open_client(t, "itest-waiter", 5000, 10000);
	skl_error err;
	sleeper s = {.sql = "INSERT INTO target VALUES (1)"};
	skl_txn_opts o = {.txn = 1, .lock_timeout_ms = 200};
	int64_t start = itest_now_ms();
	skl_rc rc = skl__run(c, &o, run_sql, &s, &err);
	int64_t took = itest_now_ms() - start;
	pthread_join(th, NULL);
	if (rc != SKL_OK)
		itest_fail(__FILE__, __LINE__, "run: %s", err.message);
	CHECK_INT(>=, s.calls, 2);
	CHECK_INT(>=, took, 900);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM target"), 1);
	printf("  lock timeout: %d attempts, done after %lld ms\n", s.calls, (long long)took);
	skl_client_close(c);
	itest_no_leftovers(t);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"terminated_backend_reconnects", terminated_backend_reconnects, 30},
		{"permanent_error_surfaces_at_once", permanent_error_surfaces_at_once, 30},
		{"deadline_against_frozen_peer", deadline_against_frozen_peer, 30},
		{"unreachable_is_bounded", unreachable_is_bounded, 30},
		{"settings_are_transaction_local", settings_are_transaction_local, 30},
		{"lock_timeout_is_retried", lock_timeout_is_retried, 30},
		{"hot_statements_prepared_or_plain", hot_statements_prepared_or_plain, 30},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
