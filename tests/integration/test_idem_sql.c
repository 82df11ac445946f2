/*
 * Integration tests of the idempotency-key SQL functions (sql/
 * 0005_idempotency.sql, holder tokens since 0020_heartbeat_idem.sql),
 * called as any language would call them, direct and through PgBouncer:
 * the four outcomes, concurrent claims of one key, takeover of an
 * abandoned claim after its recovery window, expiry and prune in bounded
 * batches (with the plan of the prune), bad input, and the holder token
 * (a completion or release without the acquiring claim's token is refused
 * and changes nothing).
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

/* The holder token of a claim that must be acquired (a static buffer). */
static const char *holder_of(PGconn *db, const char *key, const char *hash)
{
	static char holder[80];
	PGresult *r = itest_sql(db, "SELECT outcome, holder FROM skiplock.idem_claim('%s', '%s')",
	                        key, hash);
	CHECK_STR(PQgetvalue(r, 0, 0), "acquired");
	CHECK_EQ(PQgetlength(r, 0, 1), 64);
	snprintf(holder, sizeof(holder), "%s", PQgetvalue(r, 0, 1));
	PQclear(r);
	return holder;
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
	char h[80], sql[256];
	snprintf(h, sizeof(h), "%s", holder_of(db, "k1", "h1"));
	CHECK_STR(claim(db, "k1", "h1"), "in_progress||");
	CHECK_STR(claim(db, "k1", "h2"), "conflict||");
	PQclear(itest_sql(db, "SELECT skiplock.idem_complete('k1', 201, '{\"id\": 7}', '%s')", h));
	CHECK_STR(claim(db, "k1", "h1"), "replay|201|{\"id\": 7}");
	CHECK_STR(claim(db, "k1", "h2"), "conflict||");
	/* The same completion again is a retry after a lost answer: a no-op. */
	PQclear(itest_sql(db, "SELECT skiplock.idem_complete('k1', 201, '{\"id\": 7}', '%s')", h));
	snprintf(sql, sizeof(sql), "SELECT skiplock.idem_complete('k1', 500, '{}', '%s')", h);
	CHECK_STR(sqlstate_of(db, sql), "SK002");
	snprintf(sql, sizeof(sql), "SELECT skiplock.idem_complete('nope', 201, '{}', '%s')", h);
	CHECK_STR(sqlstate_of(db, sql), "SK002");
	/* Release: a completed key stays; an in-progress one goes. */
	PQclear(itest_sql(db, "SELECT skiplock.idem_release('k1', '%s')", h));
	CHECK_STR(claim(db, "k1", "h1"), "replay|201|{\"id\": 7}");
	snprintf(h, sizeof(h), "%s", holder_of(db, "k2", "h1"));
	PQclear(itest_sql(db, "SELECT skiplock.idem_release('k2', '%s')", h));
	snprintf(sql, sizeof(sql), "SELECT skiplock.idem_complete('k2', 201, '{}', '%s')", h);
	CHECK_STR(sqlstate_of(db, sql), "SK002");
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
	char first[80], second[80], sql[320];
	snprintf(first, sizeof(first), "%s", holder_of(db, "k", "h"));
	/* Within the window: still protected. */
	CHECK_STR(claim(db, "k", "h"), "in_progress||");
	/* The window passes (simulated): the same request takes it over, and
	 * another request with the key is still refused. */
	PQclear(itest_sql(t->admin, "UPDATE skiplock.idempotency_keys"
	                            " SET locked_until = clock_timestamp() - interval '1 second'"));
	CHECK_STR(claim(db, "k", "other"), "conflict||");
	snprintf(second, sizeof(second), "%s", holder_of(db, "k", "h"));
	CHECK(strcmp(first, second) != 0);
	CHECK_STR(claim(db, "k", "h"), "in_progress||");
	CHECK_EQ(itest_int(t->admin, "SELECT claims FROM skiplock.idempotency_keys"), 2);
	/* Two attempts now believe they hold it: the one taken over fails,
	 * even when it completes first, so a side effect in its transaction
	 * rolls back; the one that took over completes. */
	PQclear(itest_sql(db, "CREATE TABLE charges (id int)"));
	snprintf(sql, sizeof(sql), "BEGIN; INSERT INTO charges VALUES (1);"
	         " SELECT skiplock.idem_complete('k', 201, '{\"n\": 1}', '%s'); COMMIT", first);
	CHECK_STR(sqlstate_of(db, sql), "SK002");
	PQclear(itest_sql(db, "ROLLBACK"));
	PQclear(itest_sql(db, "BEGIN; INSERT INTO charges VALUES (2);"
	                      " SELECT skiplock.idem_complete('k', 201, '{\"n\": 2}', '%s'); COMMIT",
	                  second));
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM charges"), 1);
	CHECK_EQ(itest_int(t->admin, "SELECT id FROM charges"), 2);
	CHECK_STR(claim(db, "k", "h"), "replay|201|{\"n\": 2}");
	PQfinish(db);
	itest_no_leftovers(t);
}

/* ---- expiry and prune ---- */

static void expired_keys_are_reusable_and_pruned(itest_ctx *t)
{
	install(t);
	PGconn *db = itest_connect(t->url, "itest-idem");
	PQclear(itest_sql(db, "SELECT skiplock.idem_complete('old', 201, '{}', '%s')",
	                  holder_of(db, "old", "h1")));
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
	char sql[256];
	const char *h = holder_of(db, "ok", "h");
	snprintf(sql, sizeof(sql), "SELECT skiplock.idem_complete('ok', NULL, '{}', '%s')", h);
	CHECK_STR(sqlstate_of(db, sql), "22023");
	CHECK_STR(sqlstate_of(db, "SELECT skiplock.idem_complete('ok', NULL, '{}')"), "22023");
	CHECK_STR(sqlstate_of(db, "SELECT skiplock.idem_complete('ok', 201, '{}', NULL)"), "22023");
	CHECK_STR(sqlstate_of(db, "SELECT skiplock.idem_complete('ok', 201, '{}', '')"), "22023");
	CHECK_STR(sqlstate_of(db, "SELECT skiplock.idem_release('ok', NULL)"), "22023");
	CHECK_STR(sqlstate_of(db, "SELECT skiplock.idem_complete('ok', 201, '{}',"
	                          " repeat('x', 256))"), "22023");
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.idempotency_keys"), "in_progress");
	CHECK_STR(itest_text(db, "SELECT outcome FROM skiplock.idem_claim(repeat('x', 255), 'h')"),
	          "acquired");
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.idempotency_keys"), 2);
	PQfinish(db);
}

/* ---- the holder token ---- */

/* "state code body" of key k ("-" for NULL). */
static const char *row_of(itest_ctx *t, const char *k)
{
	return itest_text(t->admin, "SELECT state || ' ' || coalesce(response_code::text, '-') ||"
	                            " ' ' || coalesce(response_body::text, '-')"
	                            " FROM skiplock.idempotency_keys WHERE key = '%s'", k);
}

/* Anyone who knows a key in progress but not its holder token cannot
 * store a response for it nor release it: a wrong token is SK002, none
 * 42501 (the calls without a holder) or 22023 (NULL), and the row is
 * unchanged; the right token works.  The table keeps only the token's
 * SHA-256.  A claim without a holder (made before step 0020) is still
 * completed by the call without one, and refused by the new call. */
static void holder_token_required(itest_ctx *t)
{
	install(t);
	PGconn *db = itest_connect(t->url, "itest-idem");
	PGconn *other = itest_connect(t->url, "itest-idem-forger");
	char h[80], sql[320];
	/* Knowing a key someone else claimed is not enough to complete it. */
	CHECK_STR(claim(db, "f", "h"), "acquired||");
	CHECK_STR(sqlstate_of(other, "SELECT skiplock.idem_complete('f', 200, '{\"forged\": 1}')"),
	          "42501");
	CHECK_STR(row_of(t, "f"), "in_progress - -");
	CHECK_STR(claim(other, "f", "h"), "in_progress||");
	snprintf(h, sizeof(h), "%s", holder_of(db, "k", "h"));
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.idempotency_keys"
	                             " WHERE holder_hash = sha256(convert_to('%s', 'UTF8'))", h), 1);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.idempotency_keys"
	                             " WHERE position('%s' IN row_to_json(idempotency_keys)::text) > 0"
	                             "    OR encode(holder_hash, 'hex') = '%s'", h, h), 0);
	CHECK_STR(sqlstate_of(other, "SELECT skiplock.idem_complete('k', 200, '{\"forged\": 1}')"),
	          "42501");
	CHECK_STR(sqlstate_of(other, "SELECT skiplock.idem_complete('k', 200, '{\"forged\": 1}',"
	                             " NULL)"), "22023");
	CHECK_STR(sqlstate_of(other, "SELECT skiplock.idem_complete('k', 200, '{\"forged\": 1}',"
	                             " 'guess')"), "SK002");
	snprintf(sql, sizeof(sql), "SELECT skiplock.idem_complete('k', 200, '{\"forged\": 1}',"
	         " '%.63s')", h); /* all but the last digit */
	CHECK_STR(sqlstate_of(other, sql), "SK002");
	CHECK_STR(sqlstate_of(other, "SELECT skiplock.idem_release('k')"), "42501");
	CHECK_STR(sqlstate_of(other, "SELECT skiplock.idem_release('k', 'guess')"), "SK002");
	CHECK_STR(row_of(t, "k"), "in_progress - -");
	CHECK_STR(claim(db, "k", "h"), "in_progress||");
	PQclear(itest_sql(db, "SELECT skiplock.idem_complete('k', 201, '{\"n\": 1}', '%s')", h));
	/* Completed: a wrong token with the very response is no oracle. */
	CHECK_STR(sqlstate_of(other, "SELECT skiplock.idem_complete('k', 201, '{\"n\": 1}',"
	                             " 'guess')"), "SK002");
	CHECK_STR(sqlstate_of(other, "SELECT skiplock.idem_complete('k', 201, '{\"n\": 1}')"),
	          "42501");
	CHECK_STR(row_of(t, "k"), "completed 201 {\"n\": 1}");
	CHECK_STR(claim(db, "k", "h"), "replay|201|{\"n\": 1}");
	/* A claim made before the step (no holder): the old calls still work. */
	PQclear(itest_sql(t->admin, "INSERT INTO skiplock.idempotency_keys (key, request_hash,"
	                            " locked_until, expires_at) VALUES ('old', 'h',"
	                            " now() + interval '1 minute', now() + interval '1 hour'),"
	                            " ('old2', 'h', now() + interval '1 minute',"
	                            " now() + interval '1 hour')"));
	CHECK_STR(sqlstate_of(other, "SELECT skiplock.idem_complete('old', 201, '{}', 'guess')"),
	          "SK002");
	PQclear(itest_sql(db, "SELECT skiplock.idem_complete('old', 201, '{}')"));
	CHECK_STR(row_of(t, "old"), "completed 201 {}");
	PQclear(itest_sql(db, "SELECT skiplock.idem_release('old2')"));
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.idempotency_keys"
	                             " WHERE key = 'old2'"), 0);
	PQfinish(other);
	PQfinish(db);
	itest_no_leftovers(t);
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
		{"holder_token_required", holder_token_required, 30},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
