/*
 * throughput.c — jobs finished per time bucket, per queue and kind: the
 * data behind the dashboard's sparklines.
 *
 * One read-only statement over the finished jobs of the window, which the
 * partial index jobs_finished_idx (finished_at, on finished states) serves
 * without touching unfinished rows.  Buckets are counted back from the
 * database's now(): bucket nbuckets-1 holds [now - bucket_ms, now], the
 * one before it the interval before that, and so on.  Jobs pruned by
 * retention are not counted, so a retention shorter than the window
 * shortens the history too.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "skiplock/inspect.h"

static const char *const rate_sql =
	"SELECT queue, kind,"
	"       ($1::int - 1 - floor(extract(epoch FROM now() - finished_at) * 1000"
	"                             / $2::bigint))::int AS bucket,"
	"       count(*) FILTER (WHERE state = 'completed'),"
	"       count(*) FILTER (WHERE state = 'discarded')"
	"  FROM skiplock.all_jobs"
	" WHERE state IN ('completed', 'discarded', 'cancelled')"
	"   AND finished_at > now() - $1::int * $2::bigint * interval '1 millisecond'"
	" GROUP BY 1, 2, 3 ORDER BY 1, 2, 3";

static const skl_txn_opts read_opts = {.txn = 1, .idempotent = 1};

/* One block per row: the two count arrays, then queue and kind. */
static bool row_init(skl_queue_rate *r, const PGresult *res, int i, int nbuckets)
{
	const char *q = PQgetvalue(res, i, 0), *k = PQgetvalue(res, i, 1);
	size_t counts = 2 * (size_t)nbuckets * sizeof(int64_t), lq = strlen(q) + 1;
	char *block = calloc(1, counts + lq + strlen(k) + 1);
	if (block == NULL)
		return false;
	*r = (skl_queue_rate){.completed = (int64_t *)(void *)block,
	                      .discarded = (int64_t *)(void *)block + nbuckets,
	                      .queue = memcpy(block + counts, q, lq),
	                      .kind = strcpy(block + counts + lq, k), .internal = block};
	return true;
}

static bool same_pair(const skl_queue_rate *r, const PGresult *res, int i)
{
	return strcmp(r->queue, PQgetvalue(res, i, 0)) == 0 &&
	       strcmp(r->kind, PQgetvalue(res, i, 1)) == 0;
}

/* Folds the statement's rows (sorted by queue, kind) into out. */
static bool fold(const PGresult *res, int nbuckets, skl_queue_rate *out, size_t *n)
{
	for (int i = 0; i < PQntuples(res); i++) {
		if (*n == 0 || !same_pair(&out[*n - 1], res, i)) {
			if (!row_init(&out[*n], res, i, nbuckets))
				return false;
			(*n)++;
		}
		long b = strtol(PQgetvalue(res, i, 2), NULL, 10);
		b = b < 0 ? 0 : b >= nbuckets ? nbuckets - 1 : b; /* finished "after" now() */
		out[*n - 1].completed[b] += strtoll(PQgetvalue(res, i, 3), NULL, 10);
		out[*n - 1].discarded[b] += strtoll(PQgetvalue(res, i, 4), NULL, 10);
	}
	return true;
}

skl_rc skl_queue_throughput(skl_client *c, int nbuckets, int64_t bucket_ms, skl_queue_rate **rows,
                            size_t *n, skl_error *err)
{
	*rows = NULL;
	*n = 0;
	if (nbuckets < 1 || nbuckets > 1440 || bucket_ms < 1000 || bucket_ms > 86400000)
		return skl__seterr(err, SKL_INVALID,
		                   "throughput needs 1 to 1440 buckets of 1 s to 1 day each");
	char nb[16], ms[24];
	snprintf(nb, sizeof(nb), "%d", nbuckets);
	snprintf(ms, sizeof(ms), "%" PRId64, bucket_ms);
	skl_stmt s = {.sql = rate_sql, .nparams = 2, .params = {nb, ms}};
	skl_rc rc = skl__run_stmt(c, &read_opts, &s, err);
	if (rc != SKL_OK)
		return rc;
	size_t m = (size_t)PQntuples(s.res), got = 0;
	skl_queue_rate *out = m ? calloc(m, sizeof(*out)) : NULL;
	bool ok = m == 0 || (out && fold(s.res, nbuckets, out, &got));
	PQclear(s.res);
	if (!ok) {
		skl_queue_rate_free(out, got);
		return skl__seterr(err, SKL_NOMEM, "out of memory reading the throughput");
	}
	*rows = out;
	*n = got;
	return SKL_OK;
}

void skl_queue_rate_free(skl_queue_rate *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		free(rows[i].internal);
	free(rows);
}
