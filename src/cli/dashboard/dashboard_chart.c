/*
 * dashboard_chart.c — GET /api/chart?queue=&kind=&range=: one queue and
 * kind (either absent: every one) over 1 h, 6 h, 24 h or 7 d, from one
 * skl_queue_chart statement.  Each range has a bucket width that keeps a
 * chart under 120 points.
 *
 *   {range, bucket_ms, start, queue, kind,
 *    completed: [n], failed: [n], discarded: [n], claims: [n],
 *    wait_p50_ms: [n], wait_p95_ms: [n]}   (a wait is null without claims)
 */
#include <string.h>

#include "dashboard/dashboard.h"
#include "print/output.h"

typedef struct chart_range {
	const char *name;
	int nbuckets;
	int64_t bucket_ms;
} chart_range;

static const chart_range ranges[] = {
	{"1h", 60, 60 * 1000},                 /* a minute */
	{"6h", 72, 5 * 60 * 1000},             /* 5 minutes */
	{"24h", 96, 15 * 60 * 1000},           /* 15 minutes */
	{"7d", 84, 2 * 60 * 60 * 1000},        /* 2 hours */
};

static const chart_range *range_of(const char *name)
{
	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++)
		if (strcmp(ranges[i].name, name) == 0)
			return &ranges[i];
	return NULL;
}

/* One series: the field at offset off of every bucket; a negative value
 * (a wait without claims) as null. */
static json_t *series(const skl_chart *c, size_t off)
{
	json_t *a = json_array();
	for (int i = 0; a && i < c->nbuckets; i++) {
		int64_t v = *(const int64_t *)(const void *)((const char *)&c->buckets[i] + off);
		json_array_append_new(a, v < 0 ? json_null() : json_integer(v));
	}
	return a;
}

static json_t *chart_json(const skl_chart *c, const chart_range *r, const char *queue,
                          const char *kind)
{
	json_t *o = json_pack("{s:s, s:I, s:s, s:o, s:o}", "range", r->name, "bucket_ms",
	                      (json_int_t)c->bucket_ms, "start", c->start, "queue",
	                      cli_json_str(queue), "kind", cli_json_str(kind));
	static const struct { const char *name; size_t off; } fields[] = {
		{"completed", offsetof(skl_chart_bucket, completed)},
		{"failed", offsetof(skl_chart_bucket, failed)},
		{"discarded", offsetof(skl_chart_bucket, discarded)},
		{"claims", offsetof(skl_chart_bucket, claims)},
		{"wait_p50_ms", offsetof(skl_chart_bucket, wait_p50_ms)},
		{"wait_p95_ms", offsetof(skl_chart_bucket, wait_p95_ms)},
	};
	for (size_t i = 0; o && i < sizeof(fields) / sizeof(fields[0]); i++)
		json_object_set_new(o, fields[i].name, series(c, fields[i].off));
	return o;
}

/* A queue or a kind: absent, or 1 to 128 bytes (as a job's). */
static bool name_ok(const char *v)
{
	return v == NULL || strlen(v) <= 128;
}

dash_reply dash_get_chart(dash_server *s, dash_arg_fn arg, void *ctx)
{
	const char *queue = dash_arg(arg, ctx, "queue"), *kind = dash_arg(arg, ctx, "kind");
	const char *rname = dash_arg(arg, ctx, "range");
	const chart_range *r = range_of(rname ? rname : "1h");
	if (r == NULL)
		return dash_fail(400, "range must be 1h, 6h, 24h or 7d");
	if (!name_ok(queue) || !name_ok(kind))
		return dash_fail(400, "a queue or kind has at most 128 bytes");
	skl_chart *c;
	skl_error err;
	skl_rc rc = skl_queue_chart(s->client, queue, kind, r->nbuckets, r->bucket_ms, &c, &err);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	json_t *o = chart_json(c, r, queue, kind);
	skl_chart_free(c);
	return dash_ok(200, o);
}
