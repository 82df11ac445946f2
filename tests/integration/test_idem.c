/*
 * Integration tests of the idempotency-key C API (skiplock/idem.h), direct
 * and through PgBouncer: the outcomes with a replay byte for byte, input
 * refused before any database call, a side effect committed with the
 * completion (and rolled back when the key was completed by another
 * attempt), the recovery window option, prune in batches, and the holder
 * token: only the attempt that acquired a key completes or releases it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"
#include "skiplock.h"

static skl_client *open_client(itest_ctx *t)
{
	return itest_client(t, "itest-idem", true);
}

static skl_idem_outcome claim(skl_client *c, const char *key, const char *hash,
                              skl_idem_result *r)
{
	skl_error err;
	if (skl_idem_claim(c, key, hash, NULL, r, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "claim %s: %s", key, err.message);
	return r->outcome;
}

/* The holder of an acquired claim, copied (holder: 65 bytes); r freed. */
static void take_holder(skl_idem_result *r, char *holder)
{
	CHECK_EQ(r->outcome, SKL_IDEM_ACQUIRED);
	CHECK(r->holder != NULL);
	CHECK_EQ(strlen(r->holder), 64);
	snprintf(holder, 65, "%s", r->holder);
	skl_idem_result_free(r);
	CHECK(r->holder == NULL);
}

static void outcomes_and_replay(itest_ctx *t)
{
	skl_client *c = open_client(t);
	skl_idem_result r;
	skl_error err;
	char h1[SKL_IDEM_HASH_LEN], h2[SKL_IDEM_HASH_LEN], holder[65];
	CHECK_EQ(skl_idem_fingerprint("POST", "/charges", "{\"a\":1}", 7, h1, &err), SKL_OK);
	CHECK_EQ(skl_idem_fingerprint("POST", "/charges", "{\"a\":2}", 7, h2, &err), SKL_OK);
	CHECK_EQ(claim(c, "key-1", h1, &r), SKL_IDEM_ACQUIRED);
	CHECK(r.response_body == NULL);
	take_holder(&r, holder);
	CHECK_EQ(claim(c, "key-1", h1, &r), SKL_IDEM_IN_PROGRESS);
	CHECK(r.holder == NULL);
	CHECK_EQ(claim(c, "key-1", h2, &r), SKL_IDEM_CONFLICT);
	CHECK_EQ(skl_idem_complete(c, "key-1", holder, 201,
	                           "{\"id\":\"ch_1\",  \"amount\": 100}", &err),
	         SKL_OK);
	CHECK_EQ(claim(c, "key-1", h1, &r), SKL_IDEM_REPLAY);
	CHECK_EQ(r.response_code, 201);
	char first[256];
	snprintf(first, sizeof(first), "%s", r.response_body);
	skl_idem_result_free(&r);
	CHECK(r.response_body == NULL);
	for (int i = 0; i < 5; i++) {
		CHECK_EQ(claim(c, "key-1", h1, &r), SKL_IDEM_REPLAY);
		CHECK_STR(r.response_body, first);
		skl_idem_result_free(&r);
	}
	/* Completing again: the same response is a no-op, another is fenced. */
	CHECK_EQ(skl_idem_complete(c, "key-1", holder, 201,
	                           "{\"id\":\"ch_1\",  \"amount\": 100}", &err),
	         SKL_OK);
	CHECK_EQ(skl_idem_complete(c, "key-1", holder, 500, "{}", &err), SKL_FENCED);
	CHECK_STR(err.sqlstate, "SK002");
	CHECK_EQ(skl_idem_complete(c, "key-2", holder, 201, "{}", NULL), SKL_FENCED);
	/* Release, then the key is free again. */
	CHECK_EQ(claim(c, "key-3", h1, &r), SKL_IDEM_ACQUIRED);
	take_holder(&r, holder);
	CHECK_EQ(skl_idem_release(c, "key-3", holder, &err), SKL_OK);
	CHECK_EQ(skl_idem_release(c, "key-3", holder, &err), SKL_OK); /* gone: a no-op */
	CHECK_EQ(claim(c, "key-3", h2, &r), SKL_IDEM_ACQUIRED);
	skl_idem_result_free(&r);
	skl_client_close(c);
	itest_no_leftovers(t);
}

static void bad_input_before_the_database(itest_ctx *t)
{
	skl_client *c = open_client(t);
	skl_idem_result r;
	skl_error err;
	char long_key[300];
	memset(long_key, 'k', 256);
	long_key[256] = '\0';
	CHECK_EQ(skl_idem_claim(c, "", "h", NULL, &r, &err), SKL_INVALID);
	CHECK(strstr(err.message, "idempotency key") != NULL);
	CHECK_EQ(skl_idem_claim(c, long_key, "h", NULL, &r, &err), SKL_INVALID);
	CHECK_EQ(skl_idem_claim(c, "k", NULL, NULL, &r, &err), SKL_INVALID);
	skl_idem_claim_opts o = {.ttl_ms = -1};
	CHECK_EQ(skl_idem_claim(c, "k", "h", &o, &r, &err), SKL_INVALID);
	long_key[255] = '\0';
	char holder[65];
	CHECK_EQ(claim(c, long_key, "h", &r), SKL_IDEM_ACQUIRED);
	take_holder(&r, holder);
	CHECK_EQ(skl_idem_complete(c, long_key, holder, 201, "{not json", &err), SKL_INVALID);
	CHECK_EQ(skl_idem_complete(c, long_key, holder, 42, "{}", &err), SKL_INVALID);
	CHECK_EQ(skl_idem_complete(c, long_key, "", 201, "{}", &err), SKL_INVALID);
	CHECK(strstr(err.message, "holder") != NULL);
	char long_holder[300];
	memset(long_holder, 'h', 256);
	long_holder[256] = '\0';
	CHECK_EQ(skl_idem_complete(c, long_key, long_holder, 201, "{}", &err), SKL_INVALID);
	CHECK_EQ(skl_idem_release(c, long_key, "", &err), SKL_INVALID);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.idempotency_keys"
	                             " WHERE state = 'in_progress'"), 1);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM skiplock.idempotency_keys"), 1);
	skl_client_close(c);
}

static const char *const charge_sql =
	"WITH c AS (INSERT INTO charges (amount) VALUES ($1::int) RETURNING id, amount)"
	" SELECT jsonb_build_object('id', id, 'amount', amount)::text FROM c";

static void effect_commits_with_completion(itest_ctx *t)
{
	skl_client *c = open_client(t);
	PQclear(itest_sql(t->admin, "CREATE TABLE charges (id serial PRIMARY KEY, amount int)"));
	skl_idem_result r;
	skl_error err;
	const char *params[] = {"100"};
	skl_idem_effect e = {.sql = charge_sql, .nparams = 1, .params = params};
	char *body = NULL, holder[65];
	CHECK_EQ(claim(c, "pay", "h", &r), SKL_IDEM_ACQUIRED);
	take_holder(&r, holder);
	CHECK_EQ(skl_idem_complete_with(c, "pay", holder, 201, &e, &body, &err), SKL_OK);
	CHECK_STR(body, "{\"id\": 1, \"amount\": 100}");
	CHECK_EQ(claim(c, "pay", "h", &r), SKL_IDEM_REPLAY);
	CHECK_STR(r.response_body, body);
	skl_idem_result_free(&r);
	skl_free(body);
	/* A second holder (or a retry after a lost COMMIT answer) cannot add a
	 * charge: its completion fails and takes the insert with it. */
	CHECK_EQ(skl_idem_complete_with(c, "pay", holder, 201, &e, &body, &err), SKL_FENCED);
	CHECK(body == NULL);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM charges"), 1);
	/* A statement that returns no row is refused and rolled back. */
	CHECK_EQ(claim(c, "pay-2", "h", &r), SKL_IDEM_ACQUIRED);
	take_holder(&r, holder);
	skl_idem_effect none = {.sql = "INSERT INTO charges (amount) VALUES (5)"};
	CHECK_EQ(skl_idem_complete_with(c, "pay-2", holder, 201, &none, NULL, &err), SKL_INVALID);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM charges"), 1);
	CHECK_STR(itest_text(t->admin, "SELECT state FROM skiplock.idempotency_keys"
	                               " WHERE key = 'pay-2'"), "in_progress");
	skl_client_close(c);
	itest_no_leftovers(t);
}

static void recovery_window_option(itest_ctx *t)
{
	skl_client *c = open_client(t);
	skl_idem_result r;
	skl_error err;
	skl_idem_claim_opts o = {.ttl_ms = 3600000, .recovery_ms = 300000};
	CHECK_EQ(skl_idem_claim(c, "k", "h", &o, &r, &err), SKL_OK);
	CHECK_EQ(r.outcome, SKL_IDEM_ACQUIRED);
	skl_idem_result_free(&r);
	CHECK_EQ(itest_int(t->admin, "SELECT round(extract(epoch FROM locked_until - created_at))"
	                             " FROM skiplock.idempotency_keys"), 300);
	CHECK_EQ(itest_int(t->admin, "SELECT round(extract(epoch FROM expires_at - created_at))"
	                             " FROM skiplock.idempotency_keys"), 3600);
	CHECK_EQ(claim(c, "k", "h", &r), SKL_IDEM_IN_PROGRESS);
	PQclear(itest_sql(t->admin, "UPDATE skiplock.idempotency_keys"
	                            " SET locked_until = clock_timestamp() - interval '1 second'"));
	CHECK_EQ(claim(c, "k", "h", &r), SKL_IDEM_ACQUIRED);
	skl_idem_result_free(&r);
	CHECK_EQ(itest_int(t->admin, "SELECT claims FROM skiplock.idempotency_keys"), 2);
	skl_client_close(c);
}

/* Only the holder of an acquired claim completes or releases it: a wrong
 * holder or none is refused and the row is unchanged, the right one
 * works, and a takeover after the recovery window fences the first
 * holder out while the new one completes (with a side effect: one row). */
static void holder_is_required(itest_ctx *t)
{
	skl_client *c = open_client(t);
	PQclear(itest_sql(t->admin, "CREATE TABLE charges (id serial PRIMARY KEY, amount int)"));
	skl_idem_result r;
	skl_error err;
	char holder[65], first[65], second[65];
	CHECK_EQ(claim(c, "k", "h", &r), SKL_IDEM_ACQUIRED);
	take_holder(&r, holder);
	const char *row = "SELECT state || ' ' || coalesce(response_code::text, '-') || ' ' ||"
	                  " coalesce(response_body::text, '-') FROM skiplock.idempotency_keys";
	char wrong[65];
	snprintf(wrong, sizeof(wrong), "%s", holder);
	wrong[0] = wrong[0] == '0' ? '1' : '0';
	CHECK_EQ(skl_idem_complete(c, "k", wrong, 200, "{\"forged\": true}", &err), SKL_FENCED);
	CHECK_STR(err.sqlstate, "SK002");
	CHECK_EQ(skl_idem_complete(c, "k", NULL, 200, "{\"forged\": true}", &err), SKL_DB);
	CHECK_STR(err.sqlstate, "42501");
	CHECK_EQ(skl_idem_release(c, "k", wrong, &err), SKL_FENCED);
	CHECK_EQ(skl_idem_release(c, "k", NULL, &err), SKL_DB);
	CHECK_STR(itest_text(t->admin, "%s", row), "in_progress - -");
	CHECK_EQ(skl_idem_complete(c, "k", holder, 201, "{\"n\": 1}", &err), SKL_OK);
	CHECK_EQ(skl_idem_complete(c, "k", wrong, 201, "{\"n\": 1}", &err), SKL_FENCED);
	CHECK_STR(itest_text(t->admin, "%s", row), "completed 201 {\"n\": 1}");
	/* Recovery of an abandoned claim: a new holder; the first is fenced out. */
	CHECK_EQ(claim(c, "t", "h", &r), SKL_IDEM_ACQUIRED);
	take_holder(&r, first);
	PQclear(itest_sql(t->admin, "UPDATE skiplock.idempotency_keys"
	                            " SET locked_until = clock_timestamp() - interval '1 second'"
	                            " WHERE key = 't'"));
	CHECK_EQ(claim(c, "t", "h", &r), SKL_IDEM_ACQUIRED);
	take_holder(&r, second);
	CHECK(strcmp(first, second) != 0);
	const char *params[] = {"100"};
	skl_idem_effect e = {.sql = charge_sql, .nparams = 1, .params = params};
	CHECK_EQ(skl_idem_complete_with(c, "t", first, 201, &e, NULL, &err), SKL_FENCED);
	CHECK_EQ(skl_idem_release(c, "t", first, &err), SKL_FENCED);
	CHECK_EQ(skl_idem_complete_with(c, "t", second, 201, &e, NULL, &err), SKL_OK);
	CHECK_EQ(itest_int(t->admin, "SELECT count(*) FROM charges"), 1);
	CHECK_EQ(claim(c, "t", "h", &r), SKL_IDEM_REPLAY);
	CHECK_EQ(r.response_code, 201);
	skl_idem_result_free(&r);
	skl_client_close(c);
	itest_no_leftovers(t);
}

static void prune_in_batches(itest_ctx *t)
{
	skl_client *c = open_client(t);
	skl_idem_result r;
	skl_error err;
	CHECK_EQ(claim(c, "live", "h", &r), SKL_IDEM_ACQUIRED);
	skl_idem_result_free(&r);
	PQclear(itest_sql(t->admin, "INSERT INTO skiplock.idempotency_keys (key, request_hash,"
	                            " locked_until, expires_at) SELECT 'e' || g, 'h', now(),"
	                            " now() - g * interval '1 second' FROM generate_series(1, 2345) g"));
	int64_t n = -1;
	CHECK_EQ(skl_idem_prune(c, 500, &n, &err), SKL_OK);
	CHECK_EQ(n, 2345);
	CHECK_EQ(skl_idem_prune(c, 0, &n, &err), SKL_OK);
	CHECK_EQ(n, 0);
	CHECK_STR(itest_text(t->admin, "SELECT string_agg(key, ',') FROM skiplock.idempotency_keys"),
	          "live");
	skl_client_close(c);
	itest_no_leftovers(t);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"outcomes_and_replay", outcomes_and_replay, 30},
		{"bad_input_before_the_database", bad_input_before_the_database, 30},
		{"effect_commits_with_completion", effect_commits_with_completion, 30},
		{"recovery_window_option", recovery_window_option, 30},
		{"prune_in_batches", prune_in_batches, 60},
		{"holder_is_required", holder_is_required, 30},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
