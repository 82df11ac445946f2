/*
 * chart.c — one (queue, kind) over time: jobs completed, failed attempts,
 * jobs discarded and the queue wait's p50/p95 per time bucket (the
 * dashboard's charts).
 *
 * One read-only statement.  Finished jobs are read from
 * skiplock.finished_jobs by a range on finished_at (its index, on every
 * partition): a job's error history and its latest claim were written
 * before it finished, so a job finished before the window holds no event of
 * it.  Live jobs (skiplock.jobs: available, running, and finished jobs an
 * older installation left there) are read whole, as any of them may hold a
 * recent error; that table holds the backlog, not the history.
 *
 * Definitions, by the database clock (bucket i covers
 * [start + i * bucket_ms, start + (i + 1) * bucket_ms), start = now() -
 * nbuckets * bucket_ms; an event stamped after now() counts in the last):
 *   completed, discarded  jobs whose finished_at falls in the bucket
 *   failed                entries of error histories whose "at" falls in it
 *                         (failed attempts, timeouts, expired leases)
 *   claims, wait          the latest claim of running, completed and
 *                         discarded jobs claimed in the bucket: attempted_at
 *                         - run_at.  Earlier attempts are not recorded; a
 *                         job whose run_at moved after its claim (cancelled
 *                         while waiting for a retry) is left out.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "skiplock/inspect.h"

#define SINCE "(now() - $1::int * $2::bigint * interval '1 millisecond')"
/* The pair filter; NULL matches every queue or kind. */
#define PAIR(t) "($3::text IS NULL OR " t ".queue = $3) AND ($4::text IS NULL OR " t ".kind = $4)"
/* The "at" of an error entry as timestamptz, NULL unless it looks like one. */
#define ENTRY_AT                                                                        \
	"CASE WHEN (x.v ->> 'at') ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.]+([+-][0-9:]+|Z)?$'" \
	" THEN (x.v ->> 'at')::timestamptz END"

static const char *const chart_sql =
	"WITH j AS ("
	"  SELECT f.state, f.finished_at, f.attempted_at, f.run_at, f.errors"
	"    FROM skiplock.finished_jobs f WHERE f.finished_at >= " SINCE " AND " PAIR("f")
	"  UNION ALL"
	"  SELECT l.state, l.finished_at, l.attempted_at, l.run_at, l.errors"
	"    FROM skiplock.jobs l"
	"   WHERE (l.state IN ('available', 'running') OR l.finished_at >= " SINCE ")"
	"     AND " PAIR("l") "),"
	" e AS ("
	"  SELECT j.state AS what, j.finished_at AS at, NULL::float8 AS wait_ms FROM j"
	"   WHERE j.state IN ('completed', 'discarded')"
	"  UNION ALL"
	"  SELECT 'failed', " ENTRY_AT ", NULL FROM j,"
	"         jsonb_array_elements(CASE WHEN jsonb_typeof(j.errors) = 'array'"
	"                                   THEN j.errors ELSE '[]' END) x(v)"
	"  UNION ALL"
	"  SELECT 'claimed', j.attempted_at, extract(epoch FROM j.attempted_at - j.run_at) * 1000"
	"    FROM j WHERE j.state IN ('running', 'completed', 'discarded')"
	"     AND j.attempted_at >= j.run_at),"
	" g AS ("
	"  SELECT least(floor(extract(epoch FROM e.at - " SINCE ") * 1000 / $2::bigint)::int,"
	"               $1::int - 1) AS b,"
	"         count(*) FILTER (WHERE e.what = 'completed') AS completed,"
	"         count(*) FILTER (WHERE e.what = 'failed') AS failed,"
	"         count(*) FILTER (WHERE e.what = 'discarded') AS discarded,"
	"         count(*) FILTER (WHERE e.what = 'claimed') AS claims,"
	"         round(percentile_cont(0.5) WITHIN GROUP (ORDER BY e.wait_ms)) AS p50,"
	"         round(percentile_cont(0.95) WITHIN GROUP (ORDER BY e.wait_ms)) AS p95"
	"    FROM e WHERE e.at >= " SINCE " GROUP BY 1)"
	" SELECT s.b, coalesce(g.completed, 0), coalesce(g.failed, 0), coalesce(g.discarded, 0),"
	"        coalesce(g.claims, 0), coalesce(g.p50, -1)::bigint, coalesce(g.p95, -1)::bigint,"
	"        to_char(" SINCE " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
	"   FROM generate_series(0, $1::int - 1) s(b) LEFT JOIN g ON g.b = s.b ORDER BY s.b";

enum { K_BUCKET, K_COMPLETED, K_FAILED, K_DISCARDED, K_CLAIMS, K_P50, K_P95, K_START, K_NCOLS };

static const skl_txn_opts read_opts = {.txn = 1, .idempotent = 1};

static int64_t col(const PGresult *r, int row, int c)
{
	return strtoll(PQgetvalue(r, row, c), NULL, 10);
}

/* The chart and its buckets in one block (freed by skl_chart_free). */
static skl_chart *chart_of(const PGresult *r, int nbuckets, int64_t bucket_ms)
{
	if (PQntuples(r) != nbuckets || PQnfields(r) != K_NCOLS)
		return NULL;
	const char *start = PQgetvalue(r, 0, K_START);
	size_t head = sizeof(skl_chart) + (size_t)nbuckets * sizeof(skl_chart_bucket);
	skl_chart *c = calloc(1, head + strlen(start) + 1);
	if (c == NULL)
		return NULL;
	c->nbuckets = nbuckets;
	c->bucket_ms = bucket_ms;
	c->buckets = (skl_chart_bucket *)(void *)(c + 1);
	c->start = strcpy((char *)c + head, start);
	for (int i = 0; i < nbuckets; i++)
		c->buckets[i] = (skl_chart_bucket){
			.completed = col(r, i, K_COMPLETED), .failed = col(r, i, K_FAILED),
			.discarded = col(r, i, K_DISCARDED), .claims = col(r, i, K_CLAIMS),
			.wait_p50_ms = col(r, i, K_P50), .wait_p95_ms = col(r, i, K_P95)};
	return c;
}

skl_rc skl_queue_chart(skl_client *c, const char *queue, const char *kind, int nbuckets,
                       int64_t bucket_ms, skl_chart **chart, skl_error *err)
{
	*chart = NULL;
	if (nbuckets < 1 || nbuckets > 1440 || bucket_ms < 1000 || bucket_ms > 86400000)
		return skl__seterr(err, SKL_INVALID, "a chart needs 1 to 1440 buckets of 1 s to 1 day each");
	char nb[16], ms[24];
	snprintf(nb, sizeof(nb), "%d", nbuckets);
	snprintf(ms, sizeof(ms), "%" PRId64, bucket_ms);
	skl_stmt s = {.sql = chart_sql, .nparams = 4, .params = {nb, ms, queue, kind}};
	skl_rc rc = skl__run_stmt(c, &read_opts, &s, err);
	if (rc != SKL_OK)
		return rc;
	skl_chart *out = chart_of(s.res, nbuckets, bucket_ms);
	PQclear(s.res);
	if (out == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory reading a chart");
	*chart = out;
	return SKL_OK;
}

void skl_chart_free(skl_chart *chart)
{
	free(chart);
}
