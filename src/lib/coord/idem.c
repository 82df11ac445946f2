/*
 * idem.c — idempotency keys (sql/0005_idempotency.sql) from C, and the
 * request fingerprint.
 *
 * Every decision is the database's: the claim is skiplock.idem_claim (one
 * insert on the key's primary key, then a read of the row it collided
 * with), the completion skiplock.idem_complete (an update that only an
 * in-progress key accepts, from the holder whose token it is).  This file
 * checks input before any database call and runs each call as one short
 * transaction through skl__run; SQLSTATE SK002 (the key is not in progress
 * under that holder) is SKL_FENCED (error.c).
 *
 * Holder tokens (schema step 0020): the claim's answer has a `holder`
 * column, read by name.  A schema before that step answers without it;
 * the claim then has no holder, and complete and release with a NULL
 * holder call the functions without one.  So this library works on both
 * sides of the upgrade, and an application can be deployed before
 * `skiplock init` applies the step (docs/idempotency.md, "Upgrading").
 *
 * Retries: a claim repeated after a lost answer finds its own claim in
 * progress (the caller answers "in progress"; after the recovery window
 * the same request takes it over).  A completion repeated after a lost
 * answer is a no-op when the first one committed; with a side effect in
 * the same transaction the repeat fails at idem_complete and rolls back,
 * so the effect is never applied twice.
 */
#include <inttypes.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "skiplock/idem.h"

static const skl_txn_opts idem_opts = {.idempotent = 1};
static const skl_txn_opts idem_txn_opts = {.txn = 1, .idempotent = 1};

const char *skl_idem_outcome_name(skl_idem_outcome o)
{
	static const char *const names[] = {"acquired", "replay", "in_progress", "conflict"};
	return (unsigned)o < SKL_ARRAY_LEN(names) ? names[o] : "unknown";
}

/* ---- input ---- */

static skl_rc check_text(const char *what, const char *s, skl_error *err)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > SKL_IDEM_KEY_MAX)
		return skl__seterr(err, SKL_INVALID, "%s must be 1 to %d bytes (got %zu)", what,
		                   SKL_IDEM_KEY_MAX, n);
	return SKL_OK;
}

/* NULL passes: a claim that came without a holder (a schema before 0020). */
static skl_rc check_holder(const char *holder, skl_error *err)
{
	size_t n = holder ? strlen(holder) : 0;
	if (holder && (n == 0 || n > SKL_IDEM_HOLDER_MAX))
		return skl__seterr(err, SKL_INVALID, "holder token must be 1 to %d bytes (got %zu)",
		                   SKL_IDEM_HOLDER_MAX, n);
	return SKL_OK;
}

static skl_rc check_json(const char *json, skl_error *err)
{
	json_error_t e;
	json_t *v = json ? json_loads(json, JSON_DECODE_ANY, &e) : NULL;
	if (v == NULL)
		return json ? skl__seterr(err, SKL_INVALID, "response body is not JSON: line %d, "
		                          "column %d: %s", e.line, e.column, e.text)
		            : skl__seterr(err, SKL_INVALID, "response body is NULL");
	json_decref(v);
	return SKL_OK;
}

/* ---- one statement, retried ---- */

static skl_rc run_stmt(skl_client *c, skl_stmt *s, skl_error *err)
{
	return skl__run_stmt(c, &idem_opts, s, err);
}

/* ---- claim ---- */

/* Every column, so that a schema before step 0020 (no holder) answers too. */
static const char *const claim_sql =
	"SELECT *"
	"  FROM skiplock.idem_claim($1, $2, $3::bigint * interval '1 millisecond',"
	"                           $4::bigint * interval '1 millisecond')";
static const char *const claim_cols[] = {"outcome", "response_code", "response_body"};

/* A copy of row 0's column col, or NULL when absent (-1) or NULL; false
 * when out of memory. */
static bool dup_col(const PGresult *r, int col, char **out)
{
	*out = NULL;
	if (col < 0 || PQgetisnull(r, 0, col))
		return true;
	*out = skl__strdup(PQgetvalue(r, 0, col));
	return *out != NULL;
}

static skl_rc read_claim(const PGresult *r, skl_idem_result *out, skl_error *err)
{
	static const char *const names[] = {"acquired", "replay", "in_progress", "conflict"};
	skl_rc rc = skl__check_columns(r, claim_cols, (int)SKL_ARRAY_LEN(claim_cols), err);
	if (rc != SKL_OK)
		return rc;
	const char *o = PQntuples(r) == 1 ? PQgetvalue(r, 0, 0) : "";
	for (int i = 0; i < (int)SKL_ARRAY_LEN(names); i++) {
		if (strcmp(o, names[i]) != 0)
			continue;
		char *body = NULL, *holder = NULL;
		if (!dup_col(r, 2, &body) || !dup_col(r, PQfnumber(r, "holder"), &holder)) {
			free(body);
			return skl__seterr(err, SKL_NOMEM, "out of memory");
		}
		out->outcome = (skl_idem_outcome)i;
		out->response_code = PQgetisnull(r, 0, 1) ? 0 : atoi(PQgetvalue(r, 0, 1));
		out->response_body = body;
		out->holder = holder;
		return SKL_OK;
	}
	return skl__seterr(err, SKL_DB, "idem_claim returned an unknown outcome \"%s\"", o);
}

skl_rc skl_idem_claim(skl_client *c, const char *key, const char *request_hash,
                      const skl_idem_claim_opts *o, skl_idem_result *out, skl_error *err)
{
	if (out)
		*out = (skl_idem_result){0};
	if (c == NULL || out == NULL)
		return skl__seterr(err, SKL_MISUSE, "client and result must not be NULL");
	skl_rc rc = check_text("idempotency key", key, err);
	if (rc == SKL_OK)
		rc = check_text("request fingerprint", request_hash, err);
	int64_t ttl = o && o->ttl_ms ? o->ttl_ms : SKL_IDEM_TTL_DEFAULT_MS;
	int64_t rec = o && o->recovery_ms ? o->recovery_ms : SKL_IDEM_RECOVERY_DEFAULT_MS;
	if (rc == SKL_OK && (ttl < 0 || rec < 0))
		rc = skl__seterr(err, SKL_INVALID, "ttl and recovery window must not be negative");
	if (rc != SKL_OK)
		return rc;
	char ttl_s[24], rec_s[24];
	snprintf(ttl_s, sizeof(ttl_s), "%" PRId64, ttl);
	snprintf(rec_s, sizeof(rec_s), "%" PRId64, rec);
	skl_stmt s = {.sql = claim_sql, .nparams = 4, .params = {key, request_hash, ttl_s, rec_s}};
	rc = run_stmt(c, &s, err);
	if (rc == SKL_OK)
		rc = read_claim(s.res, out, err);
	PQclear(s.res);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}

void skl_idem_result_free(skl_idem_result *r)
{
	if (r == NULL)
		return;
	free(r->response_body);
	if (r->holder) /* a secret: not left behind in freed memory */
		memset(r->holder, 0, strlen(r->holder));
	free(r->holder);
	*r = (skl_idem_result){0};
}

/* ---- complete, release, prune ---- */

/* With the holder (step 0020), and without it for a claim that had none. */
static const char *const complete_sql =
	"SELECT skiplock.idem_complete($1, $2::int, $3::jsonb, $4::text)";
static const char *const complete_sql_v0 =
	"SELECT skiplock.idem_complete($1, $2::int, $3::jsonb)";

static skl_rc check_complete(const char *key, const char *holder, int code, skl_error *err)
{
	skl_rc rc = check_text("idempotency key", key, err);
	if (rc == SKL_OK)
		rc = check_holder(holder, err);
	if (rc == SKL_OK && (code < 100 || code > 999))
		rc = skl__seterr(err, SKL_INVALID, "response code must be 100 to 999 (got %d)", code);
	return rc;
}

skl_rc skl_idem_complete(skl_client *c, const char *key, const char *holder, int response_code,
                         const char *response_body, skl_error *err)
{
	skl_rc rc = c ? check_complete(key, holder, response_code, err)
	              : skl__seterr(err, SKL_MISUSE, "client must not be NULL");
	if (rc == SKL_OK)
		rc = check_json(response_body, err);
	if (rc != SKL_OK)
		return rc;
	char code[16];
	snprintf(code, sizeof(code), "%d", response_code);
	skl_stmt s = {.sql = holder ? complete_sql : complete_sql_v0, .nparams = holder ? 4 : 3,
	              .params = {key, code, response_body, holder}};
	rc = run_stmt(c, &s, err); /* SK002 is SKL_FENCED (error.c) */
	PQclear(s.res);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}

typedef struct effect_call {
	const char *key;
	const char *holder;
	const char *code;
	const skl_idem_effect *effect;
	char *body;               /* on success */
} effect_call;

/* In one transaction: the effect's statement, then idem_complete with the
 * body it returned. */
static skl_rc effect_fn(skl_client *c, void *ctx, skl_error *err)
{
	effect_call *e = ctx;
	free(e->body);
	e->body = NULL;
	PGresult *r = NULL;
	skl_rc rc = skl__exec(c, e->effect->sql, e->effect->nparams, e->effect->params, &r, err);
	if (rc == SKL_OK && (PQntuples(r) != 1 || PQnfields(r) < 1 || PQgetisnull(r, 0, 0)))
		rc = skl__seterr(err, SKL_INVALID, "the side effect's statement returned %d rows, "
		                 "not one row with a response body", PQntuples(r));
	if (rc == SKL_OK)
		rc = check_json(PQgetvalue(r, 0, 0), err);
	if (rc == SKL_OK && (e->body = skl__strdup(PQgetvalue(r, 0, 0))) == NULL)
		rc = skl__seterr(err, SKL_NOMEM, "out of memory");
	PQclear(r);
	r = NULL;
	const char *params[4] = {e->key, e->code, e->body, e->holder};
	if (rc == SKL_OK)
		rc = skl__exec(c, e->holder ? complete_sql : complete_sql_v0, e->holder ? 4 : 3,
		               params, &r, err);
	PQclear(r);
	return rc;
}

skl_rc skl_idem_complete_with(skl_client *c, const char *key, const char *holder,
                              int response_code, const skl_idem_effect *effect, char **body,
                              skl_error *err)
{
	skl_error local;
	if (err == NULL)
		err = &local;
	if (body)
		*body = NULL;
	skl_rc rc = c && effect && effect->sql && effect->nparams >= 0
	                ? check_complete(key, holder, response_code, err)
	                : skl__seterr(err, SKL_MISUSE, "client and effect must not be NULL");
	if (rc != SKL_OK)
		return rc;
	char code[16];
	snprintf(code, sizeof(code), "%d", response_code);
	effect_call e = {.key = key, .holder = holder, .code = code, .effect = effect};
	rc = skl__run(c, &idem_txn_opts, effect_fn, &e, err);
	if (rc == SKL_OK && body) {
		*body = e.body;
		e.body = NULL;
	}
	free(e.body);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}

static const char *const release_sql = "SELECT skiplock.idem_release($1, $2::text)";
static const char *const release_sql_v0 = "SELECT skiplock.idem_release($1)";

skl_rc skl_idem_release(skl_client *c, const char *key, const char *holder, skl_error *err)
{
	skl_rc rc = c ? check_text("idempotency key", key, err)
	              : skl__seterr(err, SKL_MISUSE, "client must not be NULL");
	if (rc == SKL_OK)
		rc = check_holder(holder, err);
	if (rc != SKL_OK)
		return rc;
	skl_stmt s = {.sql = holder ? release_sql : release_sql_v0, .nparams = holder ? 2 : 1,
	              .params = {key, holder}};
	rc = run_stmt(c, &s, err);
	PQclear(s.res);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}

static const char *const prune_sql = "SELECT skiplock.idem_prune($1::int)";

skl_rc skl_idem_prune(skl_client *c, int batch, int64_t *deleted, skl_error *err)
{
	if (deleted)
		*deleted = 0;
	if (c == NULL || batch < 0)
		return skl__seterr(err, SKL_MISUSE, "client must not be NULL, batch not negative");
	int lim = batch > 0 ? batch : 1000;
	char lim_s[16];
	snprintf(lim_s, sizeof(lim_s), "%d", lim);
	skl_rc rc;
	long n;
	do {
		skl_stmt s = {.sql = prune_sql, .nparams = 1, .params = {lim_s}};
		rc = run_stmt(c, &s, err);
		n = rc == SKL_OK ? atol(PQgetvalue(s.res, 0, 0)) : 0;
		PQclear(s.res);
		if (deleted)
			*deleted += n;
	} while (rc == SKL_OK && n >= lim);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}

/* ---- fingerprint ---- */

skl_rc skl_idem_fingerprint(const char *method, const char *path, const void *body,
                            size_t body_len, char hex[SKL_IDEM_HASH_LEN], skl_error *err)
{
	if (hex)
		hex[0] = '\0';
	if (method == NULL || path == NULL || hex == NULL || (body == NULL && body_len > 0))
		return skl__seterr(err, SKL_INVALID, "method, path and output must not be NULL");
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
	         EVP_DigestUpdate(ctx, method, strlen(method) + 1) &&
	         EVP_DigestUpdate(ctx, path, strlen(path) + 1) &&
	         (body_len == 0 || EVP_DigestUpdate(ctx, body, body_len)) &&
	         EVP_DigestFinal_ex(ctx, md, &len) && len == 32;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return skl__seterr(err, SKL_NOMEM, "SHA-256 failed in libcrypto");
	static const char digits[] = "0123456789abcdef";
	for (unsigned int i = 0; i < len; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 0xf];
	}
	hex[2 * len] = '\0';
	skl_error_clear(err);
	return SKL_OK;
}
