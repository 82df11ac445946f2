/*
 * lease.c — named leases with fencing tokens (sql/0003_leases.sql).
 *
 * Fencing invariant, as the schema keeps it: for each name, the tokens
 * ever returned by skl_lease_acquire strictly increase (the row is kept
 * forever and each acquisition writes the previous token + 1), at most one
 * token is live at any moment by the database clock, and every call that
 * extends or ends a lease, and every fenced write, is conditional on
 * (name, owner, token) or (name, token).  So a holder that lost its lease —
 * expired while it was paused, cut off or slow — can change nothing: its
 * renewals answer SKL_FENCED and its fenced writes roll back.
 *
 * The library only mirrors the SQL functions; the policy of when to renew
 * and what to do on loss belongs to the caller (`skiplock lease run` is
 * one).  Each call is one short autocommit statement or one short
 * transaction through skl__run; nothing is held between calls.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "queue/queue_int.h"
#include "skiplock/lease.h"

/* Bytes: the server checks 1..SKL_LEASE_NAME_MAX characters. */
#define LEASE_BYTES_MAX (4 * SKL_LEASE_NAME_MAX)

static const char *const acquire_sql =
	"SELECT skiplock.lease_acquire($1, $2, $3 * interval '1 millisecond')";

/* The worker and reader roles may not read a lease's token
 * (sql/0017_guards.sql): neither the holder's description nor the list
 * reads it unless the role may. */
static const char *const holder_sql =
	"SELECT owner, (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint"
	"  FROM skiplock.leases WHERE name = $1";

static const char *const renew_sql =
	"SELECT skiplock.lease_renew($1, $2, $3, $4 * interval '1 millisecond')";

static const char *const release_sql = "SELECT skiplock.lease_release($1, $2, $3)";

static const char *const fence_sql = "SELECT skiplock.lease_fence($1, $2)";

#define UTC_TEXT(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

#define LIST_SQL(TOKEN)                                                                    \
	"SELECT name, owner, " TOKEN ", expires_at > clock_timestamp(),"                     \
	"       (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint, "        \
	UTC_TEXT("acquired_at") ", " UTC_TEXT("renewed_at") ", " UTC_TEXT("expires_at")      \
	"  FROM skiplock.leases ORDER BY name"
/* [1]: for a role that may read the tokens */
static const char *const list_sql[2] = {LIST_SQL("NULL::bigint"), LIST_SQL("fencing")};

/* ---- argument checks: bad input is refused before anything is sent ---- */

static skl_rc check_text(const char *what, const char *s, skl_error *err)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > LEASE_BYTES_MAX)
		return skl__seterr(err, SKL_INVALID, "lease %s must be 1 to %d characters", what,
		                   SKL_LEASE_NAME_MAX);
	return SKL_OK;
}

static skl_rc check_ttl(int64_t ttl_ms, skl_error *err)
{
	if (ttl_ms <= 0)
		return skl__seterr(err, SKL_INVALID, "lease ttl must be positive, got %" PRId64 " ms",
		                   ttl_ms);
	return SKL_OK;
}

static skl_rc check_token(int64_t fencing, skl_error *err)
{
	if (fencing <= 0)
		return skl__seterr(err, SKL_INVALID, "fencing token must be positive, got %" PRId64,
		                   fencing);
	return SKL_OK;
}

/* name and owner (when owner_too) must be valid. */
static bool bad_names(const char *name, const char *owner, bool owner_too, skl_error *err)
{
	return check_text("name", name, err) != SKL_OK ||
	       (owner_too && check_text("owner", owner, err) != SKL_OK);
}

/* "4.2s", "3m12s", "2h5m": how long until a lease expires. */
static void format_ms(char *out, size_t cap, int64_t ms)
{
	if (ms < 60000)
		snprintf(out, cap, "%" PRId64 ".%" PRId64 "s", ms / 1000, (ms % 1000) / 100);
	else if (ms < 3600000)
		snprintf(out, cap, "%" PRId64 "m%" PRId64 "s", ms / 60000, (ms % 60000) / 1000);
	else
		snprintf(out, cap, "%" PRId64 "h%" PRId64 "m", ms / 3600000, (ms % 3600000) / 60000);
}

/* ---- one statement, one value ---- */

typedef struct lease_call {
	const char *sql;
	int nparams;
	const char *params[4];
	char value[32];       /* first column of the first row */
	bool null;            /* … was NULL (or there was no row) */
} lease_call;

static skl_rc value_fn(skl_client *c, void *ctx, skl_error *err)
{
	lease_call *lc = ctx;
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, lc->sql, lc->nparams, lc->params, &res, err);
	if (rc != SKL_OK)
		return rc;
	lc->null = PQntuples(res) < 1 || PQgetisnull(res, 0, 0);
	snprintf(lc->value, sizeof(lc->value), "%s", lc->null ? "" : PQgetvalue(res, 0, 0));
	PQclear(res);
	return SKL_OK;
}

static skl_rc run_value(skl_client *c, lease_call *lc, skl_error *err)
{
	/* Every statement here is idempotent or read-only (see lease.h). */
	static const skl_txn_opts o = {.idempotent = 1};
	return skl__run(c, &o, value_fn, lc, err);
}

/* ---- acquire ---- */

/* After a NULL from lease_acquire: names the holder in err.  Best effort:
 * the answer stays SKL_CONFLICT whether or not this read succeeds. */
static void describe_holder(skl_client *c, const char *name, skl_error *err)
{
	PGresult *res = NULL;
	skl_error ignored;
	const char *params[1] = {name};
	char left[32] = "";
	if (skl__exec(c, holder_sql, 1, params, &res, &ignored) == SKL_OK && PQntuples(res) == 1) {
		int64_t ms = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
		format_ms(left, sizeof(left), ms > 0 ? ms : 0);
		skl__seterr(err, SKL_CONFLICT, "lease \"%s\" is held by %s for another %s", name,
		            PQgetvalue(res, 0, 0), left);
	} else {
		skl__seterr(err, SKL_CONFLICT, "lease \"%s\" is held by another owner", name);
	}
	PQclear(res);
}

skl_rc skl_lease_acquire(skl_client *c, const char *name, const char *owner, int64_t ttl_ms,
                         int64_t *fencing, skl_error *err)
{
	*fencing = 0;
	if (bad_names(name, owner, true, err) || check_ttl(ttl_ms, err) != SKL_OK)
		return SKL_INVALID;
	char ttl[24];
	snprintf(ttl, sizeof(ttl), "%" PRId64, ttl_ms);
	lease_call lc = {.sql = acquire_sql, .nparams = 3, .params = {name, owner, ttl}};
	skl_rc rc = run_value(c, &lc, err);
	if (rc != SKL_OK)
		return rc;
	if (lc.null) {
		describe_holder(c, name, err);
		return SKL_CONFLICT;
	}
	*fencing = strtoll(lc.value, NULL, 10);
	skl__log(c, SKL_LOG_DEBUG, "acquired lease \"%s\" for %s: token %" PRId64, name, owner,
	         *fencing);
	return SKL_OK;
}

/* ---- renew, release, fence ---- */

/* Maps a boolean answer: true is SKL_OK, false SKL_FENCED with `why`. */
static skl_rc fenced_answer(const lease_call *lc, const char *name, const char *owner,
                            int64_t fencing, const char *why, skl_error *err)
{
	if (strcmp(lc->value, "t") == 0) {
		skl_error_clear(err);
		return SKL_OK;
	}
	return skl__seterr(err, SKL_FENCED, "lease \"%s\" is not held by %s under token %" PRId64
	                   ": %s", name, owner, fencing, why);
}

skl_rc skl_lease_renew(skl_client *c, const char *name, const char *owner, int64_t fencing,
                       int64_t ttl_ms, skl_error *err)
{
	if (bad_names(name, owner, true, err) || check_ttl(ttl_ms, err) != SKL_OK ||
	    check_token(fencing, err) != SKL_OK)
		return SKL_INVALID;
	char ttl[24], tok[24];
	snprintf(ttl, sizeof(ttl), "%" PRId64, ttl_ms);
	snprintf(tok, sizeof(tok), "%" PRId64, fencing);
	lease_call lc = {.sql = renew_sql, .nparams = 4, .params = {name, owner, tok, ttl}};
	skl_rc rc = run_value(c, &lc, err);
	if (rc != SKL_OK)
		return rc;
	return fenced_answer(&lc, name, owner, fencing,
	                     "it expired, was released, or another owner took it", err);
}

skl_rc skl_lease_release(skl_client *c, const char *name, const char *owner, int64_t fencing,
                         skl_error *err)
{
	if (bad_names(name, owner, true, err) || check_token(fencing, err) != SKL_OK)
		return SKL_INVALID;
	char tok[24];
	snprintf(tok, sizeof(tok), "%" PRId64, fencing);
	lease_call lc = {.sql = release_sql, .nparams = 3, .params = {name, owner, tok}};
	skl_rc rc = run_value(c, &lc, err);
	if (rc != SKL_OK)
		return rc;
	return fenced_answer(&lc, name, owner, fencing, "another owner took it since", err);
}

skl_rc skl_lease_fence(skl_client *c, const char *name, int64_t fencing, skl_error *err)
{
	if (bad_names(name, NULL, false, err) || check_token(fencing, err) != SKL_OK)
		return SKL_INVALID;
	char tok[24];
	snprintf(tok, sizeof(tok), "%" PRId64, fencing);
	lease_call lc = {.sql = fence_sql, .nparams = 2, .params = {name, tok}};
	return run_value(c, &lc, err); /* SK001 is SKL_FENCED (error.c) */
}

/* ---- fenced writes ---- */

typedef struct fenced_write {
	const char *fence[2];
	const char *sql;
	int nparams;
	const char *const *values;
	int64_t rows;
} fenced_write;

static skl_rc fenced_write_fn(skl_client *c, void *ctx, skl_error *err)
{
	fenced_write *fw = ctx;
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, fence_sql, 2, fw->fence, &res, err);
	PQclear(res);
	if (rc != SKL_OK)
		return rc;
	rc = skl__exec(c, fw->sql, fw->nparams, fw->values, &res, err);
	if (rc != SKL_OK)
		return rc;
	fw->rows = PQresultStatus(res) == PGRES_TUPLES_OK ? PQntuples(res)
	                                                  : strtoll(PQcmdTuples(res), NULL, 10);
	PQclear(res);
	return SKL_OK;
}

skl_rc skl_lease_fenced_exec(skl_client *c, const char *name, int64_t fencing, const char *sql,
                             int nparams, const char *const *values, int64_t *rows,
                             skl_error *err)
{
	if (rows)
		*rows = 0;
	if (bad_names(name, NULL, false, err) || check_token(fencing, err) != SKL_OK)
		return SKL_INVALID;
	if (sql == NULL || nparams < 0 || (nparams > 0 && values == NULL))
		return skl__seterr(err, SKL_MISUSE, "a fenced write needs a statement");
	char tok[24];
	snprintf(tok, sizeof(tok), "%" PRId64, fencing);
	fenced_write fw = {.fence = {name, tok}, .sql = sql, .nparams = nparams, .values = values};
	/* Not idempotent: the caller's statement may not be. */
	static const skl_txn_opts o = {.txn = 1};
	skl_rc rc = skl__run(c, &o, fenced_write_fn, &fw, err);
	if (rc == SKL_OK && rows)
		*rows = fw.rows;
	return rc;
}

/* ---- list ---- */

/* One allocation per lease holds its strings: internal points at it. */
static bool fill_info(skl_lease_info *li, const PGresult *r, int row)
{
	static const int text_cols[] = {0, 1, 5, 6, 7};
	size_t len[5], total = 0;
	for (int i = 0; i < 5; i++)
		total += len[i] = strlen(PQgetvalue(r, row, text_cols[i])) + 1;
	char *mem = malloc(total), *p = mem;
	if (mem == NULL)
		return false;
	const char *s[5];
	for (int i = 0; i < 5; i++) {
		memcpy(p, PQgetvalue(r, row, text_cols[i]), len[i]);
		s[i] = p;
		p += len[i];
	}
	*li = (skl_lease_info){
		.name = s[0], .owner = s[1],
		.fencing = PQgetisnull(r, row, 2) ? -1 : strtoll(PQgetvalue(r, row, 2), NULL, 10),
		.live = PQgetvalue(r, row, 3)[0] == 't',
		.expires_in_ms = strtoll(PQgetvalue(r, row, 4), NULL, 10),
		.acquired_at = s[2], .renewed_at = s[3], .expires_at = s[4],
		.internal = mem,
	};
	return true;
}

typedef struct list_call {
	const char *sql;
	skl_lease_info *items;
	size_t n;
} list_call;

static skl_rc list_fn(skl_client *c, void *ctx, skl_error *err)
{
	list_call *lc = ctx;
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, lc->sql, 0, NULL, &res, err);
	if (rc != SKL_OK)
		return rc;
	int n = PQntuples(res);
	lc->items = n ? calloc((size_t)n, sizeof(skl_lease_info)) : NULL;
	rc = n && lc->items == NULL ? SKL_NOMEM : SKL_OK;
	for (int i = 0; rc == SKL_OK && i < n; i++, lc->n++)
		if (!fill_info(&lc->items[i], res, i))
			rc = SKL_NOMEM;
	PQclear(res);
	return rc == SKL_OK ? rc : skl__seterr(err, rc, "out of memory");
}

skl_rc skl_lease_list(skl_client *c, skl_lease_info **leases, size_t *n, skl_error *err)
{
	*leases = NULL;
	*n = 0;
	bool tokens = false;
	skl_rc rc = skl__tokens_readable(c, &tokens, err);
	if (rc != SKL_OK)
		return rc;
	list_call lc = {.sql = list_sql[tokens]};
	static const skl_txn_opts o = {.idempotent = 1};
	rc = skl__run(c, &o, list_fn, &lc, err);
	if (rc != SKL_OK) {
		skl_lease_list_free(lc.items, lc.n);
		return rc;
	}
	*leases = lc.items;
	*n = lc.n;
	return SKL_OK;
}

void skl_lease_list_free(skl_lease_info *leases, size_t n)
{
	for (size_t i = 0; leases && i < n; i++)
		free(leases[i].internal);
	free(leases);
}
