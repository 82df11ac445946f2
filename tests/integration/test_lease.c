/*
 * Integration tests of leases, direct and through PgBouncer: one token
 * among concurrent acquirers, tokens that only grow, renew and release
 * that refuse a wrong owner or an old token, lease_fence aborting a stale
 * writer's transaction, the FOR SHARE ordering of fenced writes against a
 * takeover, renewals across a terminated backend, and no session state on
 * the pooled backends afterwards.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"
#include "itest.h"
#include "skiplock.h"

static skl_client *open_client(const char *url, const char *app)
{
	skl_client_options o;
	skl_client_options_init(&o);
	o.url = url;
	o.application_name = app;
	o.call_timeout_ms = 10000;
	o.retry_max_ms = 20000;
	skl_client *c = NULL;
	skl_error err;
	if (skl_client_open(&o, &c, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "open: %s", err.message);
	return c;
}

static void install(itest_ctx *t)
{
	skl_client *c = open_client(t->url, "itest-init");
	skl_error err;
	if (skl_schema_install(c, NULL, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "install: %s", err.message);
	skl_client_close(c);
}

static int64_t acquire_ok(skl_client *c, const char *name, const char *owner, int64_t ttl_ms)
{
	int64_t tok = 0;
	skl_error err;
	skl_rc rc = skl_lease_acquire(c, name, owner, ttl_ms, &tok, &err);
	if (rc != SKL_OK)
		itest_fail(__FILE__, __LINE__, "acquire %s for %s: %s: %s", name, owner,
		           skl_strerror(rc), err.message);
	return tok;
}

/* Waits (bounded) until the database clock says the lease expired. */
static void wait_expired(itest_ctx *t, const char *name, int bound_ms)
{
	int64_t end = itest_now_ms() + bound_ms;
	while (itest_int(t->admin, "SELECT count(*) FROM skiplock.leases WHERE name = '%s' "
	                           "AND expires_at > now()", name) > 0) {
		if (itest_now_ms() > end)
			itest_fail(__FILE__, __LINE__, "lease %s still live after %d ms", name, bound_ms);
		usleep(20000);
	}
}

/* ---- 16 concurrent acquires ---- */

enum { NRACERS = 16 };

typedef struct racer {
	const char *url;
	pthread_barrier_t *start;
	int index;
	skl_rc rc;
	int64_t token;
	char message[512];
} racer;

static void *race(void *arg)
{
	racer *r = arg;
	char app[32], owner[32];
	snprintf(app, sizeof(app), "itest-racer-%d", r->index);
	snprintf(owner, sizeof(owner), "racer-%d", r->index);
	skl_client *c = open_client(r->url, app);
	skl_error err;
	skl_client_ping(c, &err); /* connect before the start line */
	pthread_barrier_wait(r->start);
	r->rc = skl_lease_acquire(c, "nightly", owner, 4000, &r->token, &err);
	snprintf(r->message, sizeof(r->message), "%s", err.message);
	skl_client_close(c);
	return NULL;
}

static void concurrent_acquire_one_token(itest_ctx *t)
{
	install(t);
	pthread_barrier_t start;
	pthread_barrier_init(&start, NULL, NRACERS);
	racer r[NRACERS];
	pthread_t th[NRACERS];
	int64_t began = itest_now_ms();
	for (int i = 0; i < NRACERS; i++) {
		r[i] = (racer){.url = t->url, .start = &start, .index = i};
		pthread_create(&th[i], NULL, race, &r[i]);
	}
	int winners = 0, conflicts = 0, winner = -1;
	for (int i = 0; i < NRACERS; i++) {
		pthread_join(th[i], NULL);
		winners += r[i].rc == SKL_OK;
		conflicts += r[i].rc == SKL_CONFLICT;
		if (r[i].rc == SKL_OK)
			winner = i;
		else if (r[i].rc != SKL_CONFLICT)
			itest_fail(__FILE__, __LINE__, "racer %d: %s: %s", i, skl_strerror(r[i].rc),
			           r[i].message);
	}
	pthread_barrier_destroy(&start);
	/* all 16 must have raced inside one ttl, or the test proves nothing */
	CHECK_INT(<, itest_now_ms() - began, 4000);
	CHECK_EQ(winners, 1);
	CHECK_EQ(conflicts, NRACERS - 1);
	CHECK_EQ(r[winner].token, 1);
	CHECK_EQ(itest_int(t->admin, "SELECT fencing FROM skiplock.leases WHERE name = 'nightly'"), 1);
	printf("  16 racers: racer-%d won token %lld; a loser saw: %s\n", winner,
	       (long long)r[winner].token, r[(winner + 1) % NRACERS].message);
	CHECK(strstr(r[(winner + 1) % NRACERS].message, "is held by racer-") != NULL);

	wait_expired(t, "nightly", 8000);
	skl_client *c = open_client(t->url, "itest-late");
	int64_t next = acquire_ok(c, "nightly", "late", 2000);
	CHECK_INT(>, next, r[winner].token);
	CHECK_EQ(next, 2);
	skl_client_close(c);
	itest_no_leftovers(t);
}

/* ---- tokens only grow ---- */

static void tokens_grow_after_release(itest_ctx *t)
{
	install(t);
	skl_client *c = open_client(t->url, "itest-grow");
	skl_error err;
	int64_t t1 = acquire_ok(c, "report", "a", 30000);
	int64_t again = 0;
	/* held: nobody may take it, the same owner included */
	CHECK_EQ(skl_lease_acquire(c, "report", "a", 30000, &again, &err), SKL_CONFLICT);
	CHECK_EQ(again, 0);
	CHECK_EQ(skl_lease_release(c, "report", "a", t1, &err), SKL_OK);
	/* a repeated release answers the same */
	CHECK_EQ(skl_lease_release(c, "report", "a", t1, &err), SKL_OK);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.leases WHERE name = 'report' "
	                             "AND expires_at <= now() AND fencing = %lld", (long long)t1), 1);
	int64_t t2 = acquire_ok(c, "report", "b", 30000);
	CHECK_EQ(t2, t1 + 1);
	/* rows are never deleted: a delete would restart the tokens */
	PGresult *r = PQexec(t->admin, "DELETE FROM skiplock.leases");
	CHECK_STR(PQresultErrorField(r, PG_DIAG_SQLSTATE), "55000");
	PQclear(r);
	r = PQexec(t->admin, "TRUNCATE skiplock.leases");
	CHECK_STR(PQresultErrorField(r, PG_DIAG_SQLSTATE), "55000");
	PQclear(r);
	CHECK_EQ(skl_lease_release(c, "report", "b", t2, &err), SKL_OK);
	int64_t t3 = acquire_ok(c, "report", "a", 30000);
	CHECK_EQ(t3, t2 + 1);
	/* the old holder's token stays stale */
	CHECK_EQ(skl_lease_renew(c, "report", "a", t1, 30000, &err), SKL_FENCED);
	skl_client_close(c);
	itest_no_leftovers(t);
}

/* ---- wrong owner, old token ---- */

static char *row_text(itest_ctx *t, const char *name)
{
	PGresult *r = itest_sql(t->admin, "SELECT l::text FROM skiplock.leases l WHERE name = '%s'",
	                        name);
	char *s = strdup(PQntuples(r) ? PQgetvalue(r, 0, 0) : "(none)");
	PQclear(r);
	return s;
}

static void sql_false(itest_ctx *t, const char *call)
{
	PGresult *r = itest_sql(t->admin, "SELECT %s", call);
	CHECK_STR(PQgetvalue(r, 0, 0), "f");
	PQclear(r);
}

static void wrong_owner_or_old_token_changes_nothing(itest_ctx *t)
{
	install(t);
	skl_client *c = open_client(t->url, "itest-wrong");
	skl_error err;
	int64_t old = acquire_ok(c, "sync", "alice", 30000);
	CHECK_EQ(skl_lease_release(c, "sync", "alice", old, &err), SKL_OK);
	int64_t tok = acquire_ok(c, "sync", "alice", 30000);
	char *before = row_text(t, "sync");

	CHECK_EQ(skl_lease_renew(c, "sync", "mallory", tok, 60000, &err), SKL_FENCED);
	printf("  wrong owner: %s\n", err.message);
	CHECK_EQ(skl_lease_renew(c, "sync", "alice", old, 60000, &err), SKL_FENCED);
	CHECK_EQ(skl_lease_renew(c, "sync", "alice", tok + 1, 60000, &err), SKL_FENCED);
	CHECK_EQ(skl_lease_release(c, "sync", "mallory", tok, &err), SKL_FENCED);
	CHECK_EQ(skl_lease_release(c, "sync", "alice", old, &err), SKL_FENCED);
	CHECK_EQ(skl_lease_renew(c, "nosuch", "alice", tok, 60000, &err), SKL_FENCED);
	sql_false(t, "skiplock.lease_renew('sync', 'mallory', 2, '1 minute')");
	sql_false(t, "skiplock.lease_renew('sync', 'alice', 1, '1 minute')");
	sql_false(t, "skiplock.lease_release('sync', 'mallory', 2)");
	sql_false(t, "skiplock.lease_release('sync', 'alice', 1)");

	char *after = row_text(t, "sync");
	CHECK_STR(after, before);
	/* the right owner and token still work */
	CHECK_EQ(skl_lease_renew(c, "sync", "alice", tok, 60000, &err), SKL_OK);
	CHECK_INT(>, itest_int(t->admin, "SELECT extract(epoch FROM expires_at - now()) FROM "
	                                 "skiplock.leases WHERE name = 'sync'"), 40);
	free(before);
	free(after);
	skl_client_close(c);
	itest_no_leftovers(t);
}

/* ---- lease_fence ---- */

static const char *sqlstate_of(PGresult *r)
{
	const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	return s ? s : "";
}

/* A writer with a stale token: its transaction aborts, its rows vanish. */
static void stale_fence_aborts_transaction(itest_ctx *t)
{
	install(t);
	PQclear(itest_sql(t->admin, "CREATE TABLE ledger (fencing bigint, note text)"));
	skl_client *c = open_client(t->url, "itest-fence");
	skl_error err;
	int64_t stale = acquire_ok(c, "billing", "old", 500);
	wait_expired(t, "billing", 5000);
	/* expired, not yet taken: already refused */
	CHECK_EQ(skl_lease_fence(c, "billing", stale, &err), SKL_FENCED);
	CHECK_STR(err.sqlstate, "SK001");
	printf("  expired: %s\n", err.message);
	int64_t cur = acquire_ok(c, "billing", "new", 30000);

	PGconn *w = itest_connect(t->url, "itest-stale-writer");
	PQclear(itest_sql(w, "BEGIN"));
	PQclear(itest_sql(w, "INSERT INTO ledger VALUES (%lld, 'before the fence')",
	                  (long long)stale));
	char sql[200];
	snprintf(sql, sizeof(sql), "SELECT skiplock.lease_fence('billing', %lld)", (long long)stale);
	PGresult *r = PQexec(w, sql);
	CHECK_STR(sqlstate_of(r), "SK001");
	printf("  stale writer: %s", PQresultErrorMessage(r));
	CHECK(strstr(PQresultErrorMessage(r), "stale fencing token") != NULL);
	PQclear(r);
	r = PQexec(w, "INSERT INTO ledger VALUES (0, 'after the fence')");
	CHECK_STR(sqlstate_of(r), "25P02"); /* in failed transaction */
	PQclear(r);
	PQclear(itest_sql(w, "COMMIT")); /* turns into a rollback */
	PQfinish(w);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM ledger"), 0);

	/* the same through the C API */
	const char *ins = "INSERT INTO ledger VALUES ($1, 'fenced write')";
	char tok[24];
	snprintf(tok, sizeof(tok), "%lld", (long long)stale);
	const char *vals[] = {tok};
	int64_t rows = -1;
	CHECK_EQ(skl_lease_fenced_exec(c, "billing", stale, ins, 1, vals, &rows, &err), SKL_FENCED);
	CHECK_STR(err.sqlstate, "SK001");
	CHECK_EQ(rows, 0);
	snprintf(tok, sizeof(tok), "%lld", (long long)cur);
	CHECK_EQ(skl_lease_fenced_exec(c, "billing", cur, ins, 1, vals, &rows, &err), SKL_OK);
	CHECK_EQ(rows, 1);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM ledger"), 1);
	CHECK_EQ(itest_int(t->admin, "SELECT fencing FROM ledger"), cur);
	skl_client_close(c);
	itest_no_leftovers(t);
}

typedef struct taker {
	const char *url;
	int64_t token;
	int64_t done_at;
	skl_rc rc;
} taker;

static void *take_over(void *arg)
{
	taker *k = arg;
	skl_client *c = open_client(k->url, "itest-taker");
	skl_error err;
	k->rc = skl_lease_acquire(c, "orders", "taker", 30000, &k->token, &err);
	k->done_at = itest_now_ms();
	skl_client_close(c);
	return NULL;
}

/* A fenced transaction that passed the fence holds the row FOR SHARE: a
 * takeover after expiry waits until it ends, so the old holder's write is
 * ordered before the new token exists. */
static void fence_orders_write_before_takeover(itest_ctx *t)
{
	install(t);
	PQclear(itest_sql(t->admin, "CREATE TABLE ledger (fencing bigint, at timestamptz)"));
	skl_client *c = open_client(t->url, "itest-holder");
	int64_t tok = acquire_ok(c, "orders", "holder", 1000);
	PGconn *w = itest_connect(t->direct_url, "itest-fenced-writer");
	PQclear(itest_sql(w, "BEGIN; SELECT skiplock.lease_fence('orders', %lld)", (long long)tok));
	wait_expired(t, "orders", 5000);

	taker k = {.url = t->url};
	pthread_t th;
	pthread_create(&th, NULL, take_over, &k);
	int64_t end = itest_now_ms() + 10000;
	while (itest_int(t->admin, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
	                           "current_database() AND cardinality(pg_blocking_pids(pid)) > 0") == 0)
		if (itest_now_ms() > end)
			itest_fail(__FILE__, __LINE__, "the takeover never blocked on the fence");
		else
			usleep(10000);
	PQclear(itest_sql(w, "INSERT INTO ledger VALUES (%lld, clock_timestamp())", (long long)tok));
	int64_t committed_at = itest_now_ms();
	PQclear(itest_sql(w, "COMMIT"));
	PQfinish(w);
	pthread_join(th, NULL);
	CHECK_EQ(k.rc, SKL_OK);
	CHECK_EQ(k.token, tok + 1);
	CHECK_INT(>=, k.done_at, committed_at);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM ledger l, skiplock.leases s WHERE "
	                             "s.name = 'orders' AND l.at >= s.acquired_at"), 0);
	skl_client_close(c);
	itest_no_leftovers(t);
}

/* The resource-side pattern: remember the last token, refuse older ones. */
static void fenced_write_pattern(itest_ctx *t)
{
	install(t);
	PQclear(itest_sql(t->admin, "CREATE TABLE refunds (id int PRIMARY KEY, done bool, "
	                            "last_fencing bigint NOT NULL DEFAULT 0); "
	                            "INSERT INTO refunds VALUES (1, false, 0)"));
	skl_client *c = open_client(t->url, "itest-pattern");
	skl_error err;
	int64_t t1 = acquire_ok(c, "refunds", "w1", 30000);
	CHECK_EQ(skl_lease_release(c, "refunds", "w1", t1, &err), SKL_OK);
	int64_t t2 = acquire_ok(c, "refunds", "w2", 30000);
	const char *upd = "UPDATE refunds SET done = true, last_fencing = $1::bigint "
	                  "WHERE id = 1 AND $1::bigint > last_fencing";
	char tok[24];
	snprintf(tok, sizeof(tok), "%lld", (long long)t2);
	PGresult *r = PQexecParams(t->admin, upd, 1, NULL, (const char *[]){tok}, NULL, NULL, 0);
	CHECK_STR(PQcmdTuples(r), "1");
	PQclear(r);
	snprintf(tok, sizeof(tok), "%lld", (long long)t1);
	r = PQexecParams(t->admin, upd, 1, NULL, (const char *[]){tok}, NULL, NULL, 0);
	CHECK_STR(PQcmdTuples(r), "0"); /* the stale writer changes nothing */
	PQclear(r);
	CHECK_EQ(itest_int(t->admin, "SELECT last_fencing FROM refunds WHERE id = 1"), t2);
	skl_client_close(c);
	itest_no_leftovers(t);
}

/* ---- bad arguments ---- */

static void expect_sqlstate(itest_ctx *t, const char *sql, const char *state)
{
	PGresult *r = PQexec(t->admin, sql);
	if (strcmp(sqlstate_of(r), state) != 0)
		itest_fail(__FILE__, __LINE__, "%s: SQLSTATE \"%s\" vs \"%s\" (%s)", sql,
		           sqlstate_of(r), state, PQresultErrorMessage(r));
	PQclear(r);
}

static void bad_arguments_are_refused(itest_ctx *t)
{
	install(t);
	skl_client *c = open_client(t->url, "itest-bad");
	skl_error err;
	int64_t tok = 99;
	CHECK_EQ(skl_lease_acquire(c, "", "o", 1000, &tok, &err), SKL_INVALID);
	CHECK_EQ(tok, 0);
	CHECK_EQ(skl_lease_acquire(c, NULL, "o", 1000, &tok, &err), SKL_INVALID);
	CHECK_EQ(skl_lease_acquire(c, "n", "", 1000, &tok, &err), SKL_INVALID);
	CHECK_EQ(skl_lease_acquire(c, "n", "o", 0, &tok, &err), SKL_INVALID);
	CHECK_STR(err.message, "lease ttl must be positive, got 0 ms");
	CHECK_EQ(skl_lease_renew(c, "n", "o", 0, 1000, &err), SKL_INVALID);
	CHECK_EQ(skl_lease_fence(c, "n", -1, &err), SKL_INVALID);
	CHECK_EQ(skl_lease_fenced_exec(c, "n", 1, NULL, 0, NULL, NULL, &err), SKL_MISUSE);
	expect_sqlstate(t, "SELECT skiplock.lease_acquire('', 'o', '1 second')", "22023");
	expect_sqlstate(t, "SELECT skiplock.lease_acquire(NULL, 'o', '1 second')", "22023");
	expect_sqlstate(t, "SELECT skiplock.lease_acquire('n', 'o', '0')", "22023");
	expect_sqlstate(t, "SELECT skiplock.lease_acquire('n', 'o', '-1 second')", "22023");
	expect_sqlstate(t, "SELECT skiplock.lease_acquire(repeat('x', 257), 'o', '1 second')", "22023");
	expect_sqlstate(t, "SELECT skiplock.lease_renew('n', 'o', 1, NULL)", "22023");
	expect_sqlstate(t, "SELECT skiplock.lease_fence('n', 1)", "SK001");
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.leases"), 0);
	skl_client_close(c);
	itest_no_leftovers(t);
}

static void list_shows_leases(itest_ctx *t)
{
	install(t);
	skl_client *c = open_client(t->url, "itest-list");
	skl_error err;
	skl_lease_info *l = NULL;
	size_t n = 99;
	CHECK_EQ(skl_lease_list(c, &l, &n, &err), SKL_OK);
	CHECK_EQ(n, 0);
	CHECK(l == NULL);
	int64_t a = acquire_ok(c, "b-live", "owner-1", 60000);
	int64_t b = acquire_ok(c, "a-done", "owner-2", 60000);
	CHECK_EQ(skl_lease_release(c, "a-done", "owner-2", b, &err), SKL_OK);
	CHECK_EQ(skl_lease_list(c, &l, &n, &err), SKL_OK);
	CHECK_EQ(n, 2);
	CHECK_STR(l[0].name, "a-done");
	CHECK(!l[0].live);
	CHECK_INT(<=, l[0].expires_in_ms, 0);
	CHECK_STR(l[1].name, "b-live");
	CHECK_STR(l[1].owner, "owner-1");
	CHECK_EQ(l[1].fencing, a);
	CHECK(l[1].live);
	CHECK_INT(>, l[1].expires_in_ms, 50000);
	CHECK(strlen(l[1].expires_at) == 24 && l[1].expires_at[23] == 'Z');
	skl_lease_list_free(l, n);
	skl_client_close(c);
	itest_no_leftovers(t);
}

/* ---- renewals across a terminated backend ---- */

static void renew_survives_terminated_backend(itest_ctx *t)
{
	install(t);
	skl_client *c = open_client(t->url, "itest-renewer");
	skl_error err;
	int64_t tok = acquire_ok(c, "etl", "renewer", 5000);
	for (int round = 0; round < 3; round++) {
		/* between renewals: every backend of the database but ours goes */
		long long killed = itest_int(
			t->admin, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
			          "datname = current_database() AND pid <> pg_backend_pid() AND "
			          "backend_type = 'client backend'");
		CHECK_INT(>=, killed, 1);
		usleep(100000);
		skl_rc rc = skl_lease_renew(c, "etl", "renewer", tok, 5000, &err);
		if (rc != SKL_OK)
			itest_fail(__FILE__, __LINE__, "renew after termination: %s: %s",
			           skl_strerror(rc), err.message);
	}
	/* the lease is a row: still held, same token */
	CHECK_EQ(itest_int(t->admin, "SELECT fencing FROM skiplock.leases WHERE name = 'etl' AND "
	                             "owner = 'renewer' AND expires_at > now()"), tok);
	if (!t->pooled)
		CHECK_INT(>=, skl_client_connects(c), 4);
	printf("  3 terminations: renewed each time, %llu connections made\n",
	       (unsigned long long)skl_client_connects(c));
	CHECK_EQ(skl_lease_release(c, "etl", "renewer", tok, &err), SKL_OK);
	skl_client_close(c);
	itest_no_leftovers(t);
}

/* ---- plans ---- */

static void expect_pkey_plan(itest_ctx *t, const char *sql)
{
	PGresult *r = itest_sql(t->admin, "EXPLAIN (COSTS OFF) %s", sql);
	bool found = false;
	for (int i = 0; i < PQntuples(r); i++)
		found |= strstr(PQgetvalue(r, i, 0), "Index Scan using leases_pkey") != NULL;
	if (!found)
		itest_fail(__FILE__, __LINE__, "%s: no index scan on leases_pkey; plan: %s…", sql,
		           PQgetvalue(r, 0, 0));
	PQclear(r);
}

/* The statements inside the lease functions, on 20000 leases. */
static void lookups_use_the_primary_key(itest_ctx *t)
{
	install(t);
	PQclear(itest_sql(t->admin, "SELECT count(skiplock.lease_acquire('lease-' || i, 'o', "
	                            "'1 minute')) FROM generate_series(1, 20000) i; "
	                            "ANALYZE skiplock.leases"));
	expect_pkey_plan(t, "SELECT fencing, owner, expires_at FROM skiplock.leases "
	                    "WHERE name = 'lease-777' FOR SHARE");
	expect_pkey_plan(t, "UPDATE skiplock.leases SET expires_at = clock_timestamp() + "
	                    "interval '1 minute', renewed_at = clock_timestamp() WHERE name = "
	                    "'lease-777' AND owner = 'o' AND fencing = 1 AND expires_at > "
	                    "clock_timestamp()");
	expect_pkey_plan(t, "UPDATE skiplock.leases SET expires_at = least(expires_at, "
	                    "clock_timestamp()) WHERE name = 'lease-777' AND owner = 'o' "
	                    "AND fencing = 1");
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.leases WHERE fencing = 1"),
	         20000);
}

/* ---- nothing left on the backends ---- */

/* Holds every server backend the pooler gives this database (two) in an
 * open transaction and checks that none carries session state. */
static void check_backends_clean(itest_ctx *t)
{
	const char *probe =
		"SELECT current_setting('statement_timeout') || ' ' || current_setting('lock_timeout')"
		" || ' ' || current_setting('idle_in_transaction_session_timeout')"
		" || ' prepared=' || (SELECT count(*) FROM pg_prepared_statements)"
		" || ' listening=' || (SELECT count(*) FROM pg_listening_channels())"
		" || ' advisory=' || (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
		"                      AND pid = pg_backend_pid())";
	PGconn *base = itest_connect(t->direct_url, "itest-baseline");
	PGresult *r = itest_sql(base, "%s", probe);
	char *want = strdup(PQgetvalue(r, 0, 0));
	PQclear(r);
	PQfinish(base);
	PGconn *conn[2];
	for (int i = 0; i < 2; i++) {
		conn[i] = itest_connect(t->url, "itest-probe");
		PQclear(itest_sql(conn[i], "BEGIN"));
		r = itest_sql(conn[i], "%s", probe);
		CHECK_STR(PQgetvalue(r, 0, 0), want);
		PQclear(r);
	}
	for (int i = 0; i < 2; i++) {
		PQclear(itest_sql(conn[i], "COMMIT"));
		PQfinish(conn[i]);
	}
	free(want);
}

/* The library and `skiplock lease run`, then a look at the backends. */
static void no_session_state_left(itest_ctx *t)
{
	install(t);
	skl_client *c = open_client(t->url, "itest-state");
	skl_error err;
	int64_t tok = acquire_ok(c, "state", "me", 30000);
	CHECK_EQ(skl_lease_renew(c, "state", "me", tok, 30000, &err), SKL_OK);
	CHECK_EQ(skl_lease_fence(c, "state", tok, &err), SKL_OK);
	CHECK_EQ(skl_lease_release(c, "state", "me", tok, &err), SKL_OK);
	skl_client_close(c);
	int rc = itest_sh("%s lease run cli-state --ttl 1s --url '%s' -- sleep 1.2", itest_bin(),
	                  t->url);
	CHECK_EQ(rc, 0);
	rc = itest_sh("%s lease list --url '%s' >/dev/null", itest_bin(), t->url);
	CHECK_EQ(rc, 0);
	CHECK_EQ(itest_int(t->admin, "SELECT fencing FROM skiplock.leases WHERE name = 'cli-state' "
	                             "AND expires_at <= now()"), 1);
	itest_no_leftovers(t);
	check_backends_clean(t);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"concurrent_acquire_one_token", concurrent_acquire_one_token, 60},
		{"tokens_grow_after_release", tokens_grow_after_release, 30},
		{"wrong_owner_or_old_token_changes_nothing", wrong_owner_or_old_token_changes_nothing, 30},
		{"stale_fence_aborts_transaction", stale_fence_aborts_transaction, 30},
		{"fence_orders_write_before_takeover", fence_orders_write_before_takeover, 30},
		{"fenced_write_pattern", fenced_write_pattern, 30},
		{"bad_arguments_are_refused", bad_arguments_are_refused, 30},
		{"list_shows_leases", list_shows_leases, 30},
		{"renew_survives_terminated_backend", renew_survives_terminated_backend, 30},
		{"lookups_use_the_primary_key", lookups_use_the_primary_key, 60},
		{"no_session_state_left", no_session_state_left, 60},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
