/*
 * Integration tests of the idempotency-key SQL functions (sql/
 * 0005_idempotency.sql), called as any language would call them, direct
 * and through PgBouncer: the four outcomes, concurrent claims of one key,
 * takeover of an abandoned claim after its recovery window, expiry and
 * prune in bounded batches (with the plan of the prune), and bad input.
 * Time passing is simulated by moving the row's instants back, so no test
 * waits for a window to elapse.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"
#include "skiplock.h"

static void install(itest_ctx *t)
{
	skl_client_options o;
	skl_client_options_init(&o);
	o.url = t->url;
	skl_client *c = NULL;
	skl_error err;
	if (skl_client_open(&o, &c, &err) != SKL_OK || skl_schema_install(c, NULL, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "open/init: %s", err.message);
	skl_client_close(c);
}

/* "outcome|code|body" of one claim ("" for NULL columns). */
static const char *claim(PGconn *db, const char *key, const char *hash)
{
	return itest_text(db,
	                  "SELECT outcome || '|' || coalesce(response_code::text, '') || '|' ||"
	                  " coalesce(response_body::text, '') FROM skiplock.idem_claim('%s', '%s')",
	                  key, hash);
}

static const char *sqlstate_of(PGconn *db, const char *sql)
{
	static char state[8];
	PGresult *r = PQexec(db, sql);
	const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
	snprintf(state, sizeof(state), "%s", s ? s : "");
	PQclear(r);
	return state;
}

/* ---- the four outcomes ---- */

static void outcomes(itest_ctx *t)
{
	install(t);
	PGconn *db = itest_connect(t->url, "itest-idem");
	CHECK_STR(claim(db, "k1", "h1"), "acquired||");
	CHECK_STR(claim(db, "k1", "h1"), "in_progress||");
	CHECK_STR(claim(db, "k1", "h2"), "conflict||");
	PQclear(itest_sql(db, "SELECT skiplock.idem_complete('k1', 201, '{\"id\": 7}')"));
	CHECK_STR(claim(db, "k1", "h1"), "replay|201|{\"id\": 7}");
	CHECK_STR(claim(db, "k1", "h2"), "conflict||");
	/* The same completion again is a retry after a lost answer: a no-op. */
	PQclear(itest_sql(db, "SELECT skiplock.idem_complete('k1', 201, '{\"id\": 7}')"));
	CHECK_STR(sqlstate_of(db, "SELECT skiplock.idem_complete('k1', 500, '{}')"), "SK002");
	CHECK_STR(sqlstate_of(db, "SELECT skiplock.idem_complete('nope', 201, '{}')"), "SK002");
	/* Release: a completed key stays; an in-progress one goes. */
	PQclear(itest_sql(db, "SELECT skiplock.idem_release('k1')"));
	CHECK_STR(claim(db, "k1", "h1"), "replay|201|{\"id\": 7}");
	CHECK_STR(claim(db, "k2", "h1"), "acquired||");
	PQclear(itest_sql(db, "SELECT skiplock.idem_release('k2')"));
	CHECK_STR(sqlstate_of(db, "SELECT skiplock.idem_complete('k2', 201, '{}')"), "SK002");
	CHECK_STR(claim(db, "k2", "h9"), "acquired||");
	/* The DESIGN signature, with and without the optional arguments. */
	CHECK_STR(itest_text(db, "SELECT outcome FROM skiplock.idem_claim('k3', 'h', '1 hour')"),
	          "acquired");
	CHECK_STR(itest_text(db, "SELECT outcome FROM skiplock.idem_claim(key => 'k4',"
	                         " request_hash => 'h', ttl => '1 hour', recovery => '5 minutes')"),
	          "acquired");
	CHECK_EQ(itest_int(t->admin, "SELECT round(extract(epoch FROM locked_until - created_at))"
	                             " FROM skiplock.idempotency_keys WHERE key = 'k4'"), 300);
	CHECK_EQ(itest_int(t->admin, "SELECT round(extract(epoch FROM expires_at - created_at))"
	                             " FROM skiplock.idempotency_keys WHERE key = 'k1'"), 86400);
	PQfinish(db);
	itest_no_leftovers(t);
}

/* ---- concurrent claims ---- */

#define RACERS 16

typedef struct racer {
	const char *url;
	pthread_barrier_t *go;
	char outcome[32];
} racer;

static void *race(void *arg)
{
	racer *r = arg;
	PGconn *db = PQconnectdb(r->url);
	pthread_barrier_wait(r->go);
	PGresult *res = PQexec(db, "SELECT outcome FROM skiplock.idem_claim('race', 'h')");
	snprintf(r->outcome, sizeof(r->outcome), "%s",
	         PQresultStatus(res) == PGRES_TUPLES_OK ? PQgetvalue(res, 0, 0)
	                                                : PQerrorMessage(db));
	PQclear(res);
	PQfinish(db);
	return NULL;
}

/* RACERS connections claim 'race' at once: exactly one acquires. */
static void race_once(itest_ctx *t)
{
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, RACERS);
	racer rs[RACERS];
	pthread_t th[RACERS];
	for (int i = 0; i < RACERS; i++) {
		rs[i] = (racer){.url = t->url, .go = &go};
		pthread_create(&th[i], NULL, race, &rs[i]);
	}
	int acquired = 0, in_progress = 0;
	for (int i = 0; i < RACERS; i++) {
		pthread_join(th[i], NULL);
		if (strcmp(rs[i].outcome, "acquired") == 0)
			acquired++;
		else if (strcmp(rs[i].outcome, "in_progress") == 0)
			in_progress++;
		else
			itest_fail(__FILE__, __LINE__, "racer %d: %s", i, rs[i].outcome);
	}
	pthread_barrier_destroy(&go);
	CHECK_EQ(acquired, 1);
	CHECK_EQ(in_progress, RACERS - 1);
}

static void concurrent_claims_one_winner(itest_ctx *t)
{
	install(t);
	race_once(t);
	CHECK_EQ(itest_int(t->admin, "SELECT claims FROM skiplock.idempotency_keys"), 1);
	itest_no_leftovers(t);
}

/* Many retries find the same abandoned claim, or the same expired key, at
 * once: one takes it over. */
static void concurrent_takeover_one_winner(itest_ctx *t)
{
	install(t);
	PQclear(itest_sql(t->admin, "INSERT INTO skiplock.idempotency_keys (key, request_hash,"
	                            " locked_until, expires_at) VALUES ('race', 'h',"
	                            " now() - interval '1 second', now() + interval '1 hour')"));
	race_once(t);
	CHECK_EQ(itest_int(t->admin, "SELECT claims FROM skiplock.idempotency_keys"), 2);
	PQclear(itest_sql(t->admin, "UPDATE skiplock.idempotency_keys SET state = 'completed',"
	                            " response_code = 201, expires_at = now() - interval '1 second'"));
	race_once(t);
	CHECK_EQ(itest_int(t->admin, "SELECT claims FROM skiplock.idempotency_keys"), 1);
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.idempotency_keys"), "in_progress");
	itest_no_leftovers(t);
}

/* ---- abandoned claims ---- */

static void abandoned_claim_is_taken_over(itest_ctx *t)
{
	install(t);
	PGconn *db = itest_connect(t->url, "itest-idem");
	CHECK_STR(claim(db, "k", "h"), "acquired||");
	/* Within the window: still protected. */
	CHECK_STR(claim(db, "k", "h"), "in_progress||");
	/* The window passes (simulated): the same request takes it over, and
	 * another request with the key is still refused. */
	PQclear(itest_sql(t->admin, "UPDATE skiplock.idempotency_keys"
	                            " SET locked_until = clock_timestamp() - interval '1 second'"));
	CHECK_STR(claim(db, "k", "other"), "conflict||");
	CHECK_STR(claim(db, "k", "h"), "acquired||");
	CHECK_STR(claim(db, "k", "h"), "in_progress||");
	CHECK_EQ(itest_int(t->admin, "SELECT claims FROM skiplock.idempotency_keys"), 2);
	/* Two holders now believe they hold it; the first completion wins and
	 * the second fails, so a side effect in its transaction rolls back. */
	PQclear(itest_sql(db, "CREATE TABLE charges (id int)"));
	PQclear(itest_sql(db, "BEGIN; INSERT INTO charges VALUES (1);"
	                      " SELECT skiplock.idem_complete('k', 201, '{\"n\": 1}'); COMMIT"));
	CHECK_STR(sqlstate_of(db, "BEGIN; INSERT INTO charges VALUES (2);"
	                          " SELECT skiplock.idem_complete('k', 201, '{\"n\": 2}'); COMMIT"),
	          "SK002");
	PQclear(itest_sql(db, "ROLLBACK"));
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM charges"), 1);
	CHECK_STR(claim(db, "k", "h"), "replay|201|{\"n\": 1}");
	PQfinish(db);
	itest_no_leftovers(t);
}

/* ---- expiry and prune ---- */

static void expired_keys_are_reusable_and_pruned(itest_ctx *t)
{
	install(t);
	PGconn *db = itest_connect(t->url, "itest-idem");
	CHECK_STR(claim(db, "old", "h1"), "acquired||");
	PQclear(itest_sql(db, "SELECT skiplock.idem_complete('old', 201, '{}')"));
	CHECK_STR(claim(db, "stuck", "h1"), "acquired||");
	PQclear(itest_sql(t->admin, "UPDATE skiplock.idempotency_keys SET"
	                            " expires_at = clock_timestamp() - interval '1 second'"));
	/* Expired: forgotten, whatever the fingerprint or state. */
	CHECK_STR(claim(db, "old", "h2"), "acquired||");
	CHECK_STR(claim(db, "stuck", "h2"), "acquired||");
	CHECK_EQ(itest_int(t->admin, "SELECT sum(claims) FROM skiplock.idempotency_keys"), 2);
	/* 2500 expired and 10 live keys: bounded batches delete only the
	 * expired, oldest first. */
	PQclear(itest_sql(t->admin, "INSERT INTO skiplock.idempotency_keys (key, request_hash,"
	                            " locked_until, expires_at) SELECT 'e' || g, 'h', now(),"
	                            " now() - g * interval '1 second' FROM generate_series(1, 2500) g"));
	CHECK_EQ(itest_int(db, "SELECT skiplock.idem_prune(1000)"), 1000);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.idempotency_keys"
	                             " WHERE key IN ('e2500', 'e1501', 'e1500')"), 1);
	CHECK_EQ(itest_int(db, "SELECT skiplock.idem_prune(1000)"), 1000);
	CHECK_EQ(itest_int(db, "SELECT skiplock.idem_prune(1000)"), 500);
	CHECK_EQ(itest_int(db, "SELECT skiplock.idem_prune()"), 0);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.idempotency_keys"), 2);
	PQfinish(db);
	itest_no_leftovers(t);
}

static void prune_plan_uses_expiry_index(itest_ctx *t)
{
	install(t);
	PQclear(itest_sql(t->admin, "INSERT INTO skiplock.idempotency_keys (key, request_hash,"
	                            " state, response_code, expires_at)"
	                            " SELECT 'k' || g, 'h', 'completed', 201,"
	                            " now() + g * interval '1 second' FROM generate_series(1, 50000) g;"
	                            " ANALYZE skiplock.idempotency_keys"));
	itest_plan_uses(t->admin, "idempotency_keys_expires_idx",
	                "SELECT key FROM skiplock.idempotency_keys"
	                " WHERE expires_at <= clock_timestamp()"
	                " ORDER BY expires_at LIMIT 1000 FOR UPDATE SKIP LOCKED");
}

/* ---- bad input ---- */

static void bad_input_writes_nothing(itest_ctx *t)
{
	install(t);
	PGconn *db = itest_connect(t->url, "itest-idem");
	CHECK_STR(sqlstate_of(db, "SELECT * FROM skiplock.idem_claim('', 'h')"), "22023");
	CHECK_STR(sqlstate_of(db, "SELECT * FROM skiplock.idem_claim(repeat('x', 256), 'h')"),
	          "22023");
	CHECK_STR(sqlstate_of(db, "SELECT * FROM skiplock.idem_claim(NULL, 'h')"), "22023");
	CHECK_STR(sqlstate_of(db, "SELECT * FROM skiplock.idem_claim('k', '')"), "22023");
	CHECK_STR(sqlstate_of(db, "SELECT * FROM skiplock.idem_claim('k', 'h', '0 seconds')"),
	          "22023");
	CHECK_STR(sqlstate_of(db, "SELECT * FROM skiplock.idem_claim('k', 'h', '1 hour', "
	                          "'-1 second')"),
	          "22023");
	CHECK_STR(claim(db, "ok", "h"), "acquired||");
	CHECK_STR(sqlstate_of(db, "SELECT skiplock.idem_complete('ok', NULL, '{}')"), "22023");
	CHECK_STR(itest_text(db, "SELECT outcome FROM skiplock.idem_claim(repeat('x', 255), 'h')"),
	          "acquired");
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.idempotency_keys"), 2);
	PQfinish(db);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"outcomes", outcomes, 30},
		{"concurrent_claims_one_winner", concurrent_claims_one_winner, 60},
		{"concurrent_takeover_one_winner", concurrent_takeover_one_winner, 60},
		{"abandoned_claim_is_taken_over", abandoned_claim_is_taken_over, 30},
		{"expired_keys_are_reusable_and_pruned", expired_keys_are_reusable_and_pruned, 60},
		{"prune_plan_uses_expiry_index", prune_plan_uses_expiry_index, 60},
		{"bad_input_writes_nothing", bad_input_writes_nothing, 30},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
