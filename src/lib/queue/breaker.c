/*
 * breaker.c — the fleet-wide circuit breakers in skiplock.breakers
 * (sql/0007_retry.sql): settings, the list, and the operator's force open
 * and close.  Counting and the open → half-open → closed transitions
 * happen inside the record and claim statements (queue.c).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "queue/queue_int.h"
#include "skiplock/control.h"
#include "skiplock/retry.h"

void skl_breaker_config_init(skl_breaker_config *c)
{
	*c = (skl_breaker_config){.failure_pct = 50, .min_calls = 10, .window_calls = 100,
	                          .window_ms = 60000, .open_ms = 60000, .probes = 3};
}

static bool parse_count(const char *v, size_t n, long lo, long hi, int *out)
{
	char buf[24];
	if (n == 0 || n >= sizeof(buf))
		return false;
	memcpy(buf, v, n);
	buf[n] = '\0';
	if (buf[n - 1] == '%')
		buf[n - 1] = '\0';
	char *end;
	long x = strtol(buf, &end, 10);
	if (*end != '\0' || end == buf || x < lo || x > hi)
		return false;
	*out = (int)x;
	return true;
}

static bool parse_dur(const char *v, size_t n, int64_t *out)
{
	char buf[32];
	if (n == 0 || n >= sizeof(buf))
		return false;
	memcpy(buf, v, n);
	buf[n] = '\0';
	skl_error e;
	return skl_duration_parse(buf, out, &e) == SKL_OK && *out > 0;
}

/* One "key:value" item of a breaker spec. */
static bool parse_item(const char *it, size_t n, skl_breaker_config *c)
{
	const char *colon = memchr(it, ':', n);
	if (colon == NULL)
		return false;
	size_t kl = (size_t)(colon - it), vl = n - kl - 1;
	const char *v = colon + 1;
#define KEY(s) (kl == strlen(s) && strncmp(it, s, kl) == 0)
	if (KEY("rate"))
		return parse_count(v, vl, 1, 100, &c->failure_pct);
	if (KEY("min"))
		return parse_count(v, vl, 1, 1000000, &c->min_calls);
	if (KEY("calls"))
		return parse_count(v, vl, 1, 1000000, &c->window_calls);
	if (KEY("probes"))
		return parse_count(v, vl, 1, 10000, &c->probes);
	if (KEY("window"))
		return parse_dur(v, vl, &c->window_ms);
	if (KEY("open"))
		return parse_dur(v, vl, &c->open_ms);
#undef KEY
	return false;
}

skl_rc skl_breaker_config_parse(const char *spec, skl_breaker_config *c, skl_error *err)
{
	if (spec == NULL || *spec == '\0')
		return SKL_OK;
	skl_breaker_config t = *c;
	for (const char *p = spec;;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		if (!parse_item(p, n, &t))
			return skl__seterr(err, SKL_INVALID,
			                   "breaker setting \"%.*s\": expected rate:PCT, min:N, calls:N, "
			                   "window:DUR, open:DUR or probes:N (positive)",
			                   (int)(n > 64 ? 64 : n), p);
		if (comma == NULL)
			break;
		p = comma + 1;
	}
	*c = t;
	return SKL_OK;
}

/* ---- statements ---- */

static const skl_txn_opts write_opts = {.idempotent = 1};
static const skl_txn_opts read_opts = {.txn = 1, .idempotent = 1};

skl_rc skl_breaker_configure(skl_client *c, const char *kind, const skl_breaker_config *cfg,
                             skl_error *err)
{
	if (skl__check_kind(kind, err) != SKL_OK)
		return SKL_INVALID;
	skl_breaker_config d;
	skl_breaker_config_init(&d);
	if (cfg == NULL)
		cfg = &d;
	char v[6][24];
	snprintf(v[0], sizeof(v[0]), "%d", cfg->failure_pct);
	snprintf(v[1], sizeof(v[1]), "%d", cfg->min_calls);
	snprintf(v[2], sizeof(v[2]), "%d", cfg->window_calls);
	snprintf(v[3], sizeof(v[3]), "%" PRId64, cfg->window_ms);
	snprintf(v[4], sizeof(v[4]), "%" PRId64, cfg->open_ms);
	snprintf(v[5], sizeof(v[5]), "%d", cfg->probes);
	skl_stmt s = {
		/* sql/0011_protocol.sql: the worker role writes no table itself */
		.sql = "SELECT skiplock.breaker_configure($1, $2::int, $3::int, $4::int, $5::bigint,"
		       " $6::bigint, $7::int)",
		.nparams = 7, .params = {kind, v[0], v[1], v[2], v[3], v[4], v[5]}};
	skl_rc rc = skl__run_stmt(c, &write_opts, &s, err);
	PQclear(s.res);
	/* sql/0017_guards.sql bounds every setting (22023), before it a CHECK
	 * (23514) only refused values below 1 */
	if (rc == SKL_DB && err && (strcmp(err->sqlstate, "22023") == 0 ||
	                            strcmp(err->sqlstate, "23514") == 0))
		err->rc = rc = SKL_INVALID;
	return rc;
}

/* One write path: the operators' function (skl_breaker_set, which logs
 * the action), as the C API with no actor of its own. */
skl_rc skl_breaker_force(skl_client *c, const char *kind, bool open, skl_error *err)
{
	static const skl_actor api = {.name = "skl_breaker_force", .role = "api"};
	return skl_breaker_set(c, kind, open, &api, err);
}

/* ---- the list ---- */

enum { B_KIND, B_STATE, B_PCT, B_MIN, B_WCALLS, B_WMS, B_OPENMS, B_PROBES, B_CALLS, B_FAIL,
       B_LEFT, B_OK, B_OPENFOR, B_CHANGED };

static const char *const list_sql =
	"SELECT kind, state, failure_pct, min_calls, window_calls, window_ms, open_ms, probes,"
	"       calls, failures, probes_left, probe_ok,"
	"       CASE WHEN state <> 'open' THEN 0 WHEN open_until = 'infinity' THEN -1"
	"            WHEN open_until <= now() THEN 0"          /* also '-infinity' */
	"            ELSE ceil(extract(epoch FROM least(open_until, now() + interval '1000 years')"
	"                                         - now()) * 1000)::bigint"
	"       END,"
	"       to_char(changed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
	"  FROM skiplock.breakers ORDER BY kind";

static int64_t num(const PGresult *r, int row, int col)
{
	return strtoll(PQgetvalue(r, row, col), NULL, 10);
}

static bool fill(skl_breaker_info *b, const PGresult *r, int row)
{
	size_t lk = (size_t)PQgetlength(r, row, B_KIND) + 1,
	       ls = (size_t)PQgetlength(r, row, B_STATE) + 1,
	       lc = (size_t)PQgetlength(r, row, B_CHANGED) + 1;
	char *mem = malloc(lk + ls + lc);
	if (mem == NULL)
		return false;
	memcpy(mem, PQgetvalue(r, row, B_KIND), lk);
	memcpy(mem + lk, PQgetvalue(r, row, B_STATE), ls);
	memcpy(mem + lk + ls, PQgetvalue(r, row, B_CHANGED), lc);
	*b = (skl_breaker_info){
		.kind = mem, .state = mem + lk, .changed_at = mem + lk + ls, .internal = mem,
		.config = {.failure_pct = (int)num(r, row, B_PCT), .min_calls = (int)num(r, row, B_MIN),
		           .window_calls = (int)num(r, row, B_WCALLS), .window_ms = num(r, row, B_WMS),
		           .open_ms = num(r, row, B_OPENMS), .probes = (int)num(r, row, B_PROBES)},
		.calls = (int)num(r, row, B_CALLS), .failures = (int)num(r, row, B_FAIL),
		.probes_left = (int)num(r, row, B_LEFT), .probe_successes = (int)num(r, row, B_OK),
		.open_for_ms = num(r, row, B_OPENFOR),
	};
	return true;
}

skl_rc skl_breakers_list(skl_client *c, skl_breaker_info **rows, size_t *n, skl_error *err)
{
	*rows = NULL;
	*n = 0;
	skl_stmt s = {.sql = list_sql};
	skl_rc rc = skl__run_stmt(c, &read_opts, &s, err);
	if (rc != SKL_OK)
		return rc;
	size_t m = (size_t)PQntuples(s.res);
	skl_breaker_info *out = m ? calloc(m, sizeof(*out)) : NULL;
	size_t i = 0;
	while (out && i < m && fill(&out[i], s.res, (int)i))
		i++;
	PQclear(s.res);
	if (i < m) {
		skl_breakers_free(out, i);
		return skl__seterr(err, SKL_NOMEM, "out of memory reading the breakers");
	}
	*rows = out;
	*n = m;
	return SKL_OK;
}

void skl_breakers_free(skl_breaker_info *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		free(rows[i].internal);
	free(rows);
}
