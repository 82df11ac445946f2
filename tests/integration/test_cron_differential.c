/*
 * The differential test of fire times: the database's skiplock.cron_next
 * (sql/0024_cron.sql) against the C library's skl_cron_next, on random
 * expressions × zones × start instants around DST transitions, and the
 * error messages of random bad expressions against the C parser's.
 *
 * Each case is an expression, a zone and a start; it is checked at the
 * start and along its next two fire times, so a chain of three answers
 * must agree.  The random stream is seeded (SKL_CRON_DIFF_SEED, default
 * fixed); a mismatch prints the expression, the zone, the instant and
 * both answers, so it can be replayed by hand in psql.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord/cron_int.h"
#include "coord/tz.h"
#include "core/buf.h"
#include "itest.h"
#include "skiplock.h"

#define NCASES 12000   /* expression × zone × start (SKL_CRON_DIFF_CASES) */
#define NBAD 1500      /* bad expressions whose messages are compared */
#define BATCH 400

static const char *const zones[] = {
	"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu",
	"Pacific/Chatham", "UTC", "Europe/London", "Europe/Dublin", "America/Sao_Paulo",
	"America/St_Johns", "Asia/Kolkata", "Pacific/Apia", "Africa/Casablanca",
	"America/Santiago", "Asia/Tehran", "Australia/Adelaide", "America/Havana",
};
#define NZONES ((int)(sizeof(zones) / sizeof(zones[0])))

static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
	rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (uint32_t)((rng_state >> 33) % n);
}

/* ---- random expressions ---- */

static const int lo_of[5] = {0, 0, 1, 1, 0}, hi_of[5] = {59, 23, 31, 12, 7};
static const char *const mon[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                  "jul", "aug", "sep", "oct", "nov", "dec"};
static const char *const dow[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

static void value(skl_buf *b, int f, int v)
{
	if (f == 3 && rnd(4) == 0)
		skl_buf_adds(b, rnd(2) ? mon[v - 1] : "Mar");
	else if (f == 4 && v < 7 && rnd(4) == 0)
		skl_buf_adds(b, dow[v]);
	else
		skl_buf_printf(b, "%d", v);
}

static void item(skl_buf *b, int f)
{
	int lo = lo_of[f], hi = hi_of[f], span = hi - lo + 1;
	int a = lo + (int)rnd((uint32_t)span), c = a + (int)rnd((uint32_t)(hi - a + 1));
	switch (rnd(7)) {
	case 0: skl_buf_adds(b, "*"); break;
	case 1: skl_buf_printf(b, "*/%d", 1 + (int)rnd((uint32_t)(hi < 7 ? 6 : hi))); break;
	case 2: value(b, f, a); skl_buf_adds(b, "-"); value(b, f, c); break;
	case 3: skl_buf_printf(b, "%d-%d/%d", a, c, 1 + (int)rnd(span > 10 ? 10 : 3)); break;
	case 4: skl_buf_printf(b, "%d/%d", a, 1 + (int)rnd(hi < 7 ? 6 : 15)); break;
	default: value(b, f, a); break;
	}
}

static void expression(skl_buf *b)
{
	static const char *const macros[] = {"@yearly", "@monthly", "@weekly", "@daily",
	                                     "@hourly", "@midnight", "@annually"};
	static const char *const every[] = {"1s", "7s", "90s", "5m", "1h30m", "13m", "2h", "1d",
	                                    "45s", "3h7m"};
	uint32_t kind = rnd(40);
	if (kind == 0) {
		skl_buf_adds(b, macros[rnd(7)]);
		return;
	}
	if (kind == 1) {
		skl_buf_printf(b, "@every %s", every[rnd(10)]);
		return;
	}
	for (int f = 0; f < 5; f++) {
		if (f)
			skl_buf_adds(b, rnd(10) ? " " : "  ");
		/* minutes and hours usually narrow, so fire times fall near the
		 * transitions that the starts are chosen around */
		if ((f == 2 || f == 3 || f == 4) && rnd(3))
			skl_buf_adds(b, "*");
		else
			for (int n = 1 + (int)rnd(rnd(3) ? 1 : 3), i = 0; i < n; i++) {
				skl_buf_adds(b, i ? "," : "");
				item(b, f);
			}
	}
}

/* ---- start instants around transitions ---- */

/* The UTC offset changes (DST and rule changes) of the zones from 1995 to
 * 2040, found with the C library's offsets; starts lie within two days. */
typedef struct starts {
	int64_t *t;
	size_t n, cap;
} starts;

static void transitions(const char *zone, starts *s)
{
	const skl_tz *z;
	skl_error err;
	if (skl__tz_get(zone, &z, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "zone %s: %s", zone, err.message);
	for (int64_t t = 788918400; t < 2208988800; t += 6 * 3600) { /* 1995 to 2040 */
		if (skl__tz_offset(z, t) == skl__tz_offset(z, t + 6 * 3600))
			continue;
		if (s->n == s->cap && (s->t = realloc(s->t, (s->cap = s->cap * 2 + 64) * 8)) == NULL)
			itest_fail(__FILE__, __LINE__, "out of memory");
		s->t[s->n++] = t;
	}
}

static int64_t start_for(int zi, starts *per_zone)
{
	const starts *s = &per_zone[zi];
	if (s->n == 0 || rnd(8) == 0) /* now and then anywhere from 1970 to 2199 */
		return (int64_t)rnd(2000000000) * 3 + (int64_t)rnd(60);
	return s->t[rnd((uint32_t)s->n)] + (int64_t)rnd(4 * 86400) - 86400 - (int64_t)rnd(2) * 30;
}

/* ---- the comparison ---- */

typedef struct batch {
	skl_buf exprs, zones, afters;
	char *expr[BATCH];
	const char *zone[BATCH];
	int64_t after[BATCH], c_next[BATCH];  /* c_next 0: none */
	int n;
} batch;

static void batch_reset(batch *b)
{
	for (int i = 0; i < b->n; i++)
		free(b->expr[i]);
	b->n = 0;
}

/* Runs the batch through skiplock.cron_next and compares; returns the
 * number of mismatches (each printed). */
static int batch_check(PGconn *c, batch *b)
{
	skl_buf e, z, a;
	skl_buf_init(&e, 0);
	skl_buf_init(&z, 0);
	skl_buf_init(&a, 0);
	skl_buf_adds(&e, "{");
	skl_buf_adds(&z, "{");
	skl_buf_adds(&a, "{");
	for (int i = 0; i < b->n; i++) {
		char t[SKL_CRON_TIME_LEN];
		skl_cron_format_utc(b->after[i], t);
		skl_buf_adds(&e, i ? "," : "");
		skl_buf_array_elem(&e, b->expr[i]);
		skl_buf_printf(&z, "%s\"%s\"", i ? "," : "", b->zone[i]);
		skl_buf_printf(&a, "%s%s", i ? "," : "", t);
	}
	skl_buf_adds(&e, "}");
	skl_buf_adds(&z, "}");
	skl_buf_adds(&a, "}");
	const char *params[3] = {skl_buf_str(&e), skl_buf_str(&z), skl_buf_str(&a)};
	PGresult *r = PQexecParams(
		c, "SELECT floor(extract(epoch FROM skiplock_internal.cron_next_of(skiplock_internal.cron_parse(x), y, w)))::bigint"
		   "  FROM unnest($1::text[], $2::text[], $3::timestamptz[]) WITH ORDINALITY u(x, y, w, i)"
		   " ORDER BY i", 3, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != b->n)
		itest_fail(__FILE__, __LINE__, "cron_next batch: %s", PQerrorMessage(c));
	int bad = 0;
	for (int i = 0; i < b->n; i++) {
		int64_t sql = PQgetisnull(r, i, 0) ? 0 : strtoll(PQgetvalue(r, i, 0), NULL, 10);
		if (sql == b->c_next[i])
			continue;
		char t[SKL_CRON_TIME_LEN], cs[SKL_CRON_TIME_LEN], ss[SKL_CRON_TIME_LEN];
		skl_cron_format_utc(b->after[i], t);
		skl_cron_format_utc(b->c_next[i], cs);
		skl_cron_format_utc(sql, ss);
		if (bad++ < 20)
			fprintf(stderr, "MISMATCH cron_next('%s', '%s', '%s'): C %s, SQL %s\n", b->expr[i],
			        b->zone[i], t, b->c_next[i] ? cs : "none", sql ? ss : "none");
	}
	PQclear(r);
	skl_buf_free(&e);
	skl_buf_free(&z);
	skl_buf_free(&a);
	return bad;
}

static void add_case(batch *b, const char *expr, const char *zone, int64_t after,
                     int64_t c_next)
{
	b->expr[b->n] = strdup(expr);
	b->zone[b->n] = zone;
	b->after[b->n] = after;
	b->c_next[b->n] = c_next;
	b->n++;
}

static void seed_rng(void)
{
	const char *s = getenv("SKL_CRON_DIFF_SEED");
	rng_state = s && *s ? strtoull(s, NULL, 10) : 20261202;
	fprintf(stderr, "seed %" PRIu64 " (SKL_CRON_DIFF_SEED)\n", rng_state);
}

static void fire_times_agree(itest_ctx *t)
{
	skl_client *cl = itest_client(t, "cron-diff", true);
	skl_client_close(cl);
	PGconn *c = itest_connect(t->url, "cron-diff");
	seed_rng();
	starts per_zone[NZONES] = {{0}};
	for (int i = 0; i < NZONES; i++)
		transitions(zones[i], &per_zone[i]);
	static batch b;
	const char *env = getenv("SKL_CRON_DIFF_CASES");
	int ncases = env && atoi(env) > 0 ? atoi(env) : NCASES;
	int bad = 0, checked = 0, never = 0;
	int64_t t0 = itest_now_ms();
	for (int k = 0; k < ncases; k++) {
		skl_buf e;
		skl_buf_init(&e, 0);
		expression(&e);
		skl_cron_expr *x;
		skl_error err;
		if (skl_cron_parse(skl_buf_str(&e), &x, &err) != SKL_OK) {
			skl_buf_free(&e); /* "never fires" and the like: drawn again */
			k--;
			continue;
		}
		int zi = (int)rnd(NZONES);
		int64_t after = start_for(zi, per_zone);
		for (int step = 0; step < 3; step++) {
			int64_t next = 0;
			skl_rc rc = skl_cron_next(x, zones[zi], after, &next, &err);
			if (rc != SKL_OK && rc != SKL_EMPTY)
				itest_fail(__FILE__, __LINE__, "C cron_next: %s", err.message);
			add_case(&b, skl_buf_str(&e), zones[zi], after, rc == SKL_OK ? next : 0);
			checked++;
			if (b.n == BATCH) {
				bad += batch_check(c, &b);
				batch_reset(&b);
			}
			never += rc != SKL_OK;
			if (rc != SKL_OK)
				break;
			after = next;
		}
		skl_cron_expr_free(x);
		skl_buf_free(&e);
	}
	if (b.n)
		bad += batch_check(c, &b);
	batch_reset(&b);
	fprintf(stderr, "%d cases, %d answers compared (%d none), %d mismatches, %lld ms\n", ncases,
	        checked, never, bad, (long long)(itest_now_ms() - t0));
	for (int i = 0; i < NZONES; i++)
		free(per_zone[i].t);
	PQfinish(c);
	CHECK_EQ(bad, 0);
}

/* A valid expression with one character replaced, inserted or removed. */
static void mutate(skl_buf *out, const char *s)
{
	static const char alphabet[] = "0123456789*/-, @LWxyzJANmonSUN\t#?";
	size_t n = strlen(s), at = rnd((uint32_t)n + 1);
	char c = alphabet[rnd(sizeof(alphabet) - 1)];
	switch (rnd(3)) {
	case 0: skl_buf_printf(out, "%.*s%c%s", (int)at, s, c, s + at); break;
	case 1: skl_buf_printf(out, "%.*s%s", (int)at, s, at < n ? s + at + 1 : ""); break;
	default: skl_buf_printf(out, "%.*s%c%s", (int)at, s, c, at < n ? s + at + 1 : ""); break;
	}
}

static void errors_agree(itest_ctx *t)
{
	skl_client *cl = itest_client(t, "cron-diff", true);
	skl_client_close(cl);
	PGconn *c = itest_connect(t->url, "cron-diff");
	seed_rng();
	int bad = 0, invalid = 0;
	for (int k = 0; k < NBAD; k++) {
		skl_buf e, m;
		skl_buf_init(&e, 0);
		skl_buf_init(&m, 0);
		expression(&e);
		mutate(&m, skl_buf_str(&e));
		skl_cron_expr *x = NULL;
		skl_error err;
		skl_rc rc = skl_cron_parse(skl_buf_str(&m), &x, &err);
		skl_cron_expr_free(x);
		const char *params[1] = {skl_buf_str(&m)};
		PGresult *r = PQexecParams(c, "SELECT skiplock.cron_next($1, 'UTC', now())", 1, NULL,
		                           params, NULL, NULL, 0);
		bool sql_ok = PQresultStatus(r) == PGRES_TUPLES_OK;
		const char *msg = sql_ok ? "" : PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
		const char *state = sql_ok ? "" : PQresultErrorField(r, PG_DIAG_SQLSTATE);
		invalid += rc != SKL_OK;
		if ((rc == SKL_OK) != sql_ok ||
		    (!sql_ok && (strcmp(msg, err.message) != 0 || strcmp(state, "22023") != 0))) {
			if (bad++ < 20)
				fprintf(stderr, "MISMATCH on \"%s\":\n  C   %s\n  SQL %s %s\n",
				        skl_buf_str(&m), rc == SKL_OK ? "(valid)" : err.message,
				        sql_ok ? "(valid)" : state, msg);
		}
		PQclear(r);
		skl_buf_free(&e);
		skl_buf_free(&m);
	}
	fprintf(stderr, "%d mutated expressions (%d invalid), %d mismatches\n", NBAD, invalid, bad);
	PQfinish(c);
	CHECK_EQ(bad, 0);
	CHECK_INT(>, invalid, NBAD / 3);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"fire_times_agree", fire_times_agree, 600},
		{"errors_agree", errors_agree, 300},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
