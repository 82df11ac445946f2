/*
 * dashboard_api.c — the dashboard's JSON endpoints.  Every one is one
 * library call on the shared client, made under the server's mutex (an
 * skl_client serves one thread at a time), then turned into JSON.
 *
 *   GET  /api/queues             counts by state per queue and kind
 *   GET  /api/jobs?state=&queue=&kind=&limit=   newest jobs first
 *   GET  /api/jobs/ID            one job: payload, attempts, errors, lease
 *   GET  /api/schedules          cron schedules with their next fire time
 *   GET  /api/leases             leases with their fencing token
 *   GET  /api/throughput         jobs finished per minute, last hour, per
 *                                queue and kind
 *   GET  /api/breakers           circuit breakers and their state
 *   GET  /api/doctor/locks       `doctor locks` findings (report only)
 *   POST /api/jobs/ID/retry, /api/jobs/ID/cancel
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "print/breakers_print.h"
#include "dashboard/dashboard.h"
#include "print/doctor_locks_print.h"
#include "print/jobs_print.h"
#include "print/output.h"

static dash_reply reply(unsigned status, json_t *body)
{
	return (dash_reply){status, body ? body : json_pack("{s:s}", "error", "out of memory")};
}

static dash_reply fail(unsigned status, const char *msg)
{
	return reply(status, json_pack("{s:s}", "error", msg));
}

/* A library failure: 404 for no such row, 409 for a state that does not
 * allow the action, 400 for bad input, else 503 (database trouble). */
static dash_reply lib_fail(skl_rc rc, const skl_error *err)
{
	unsigned st = rc == SKL_EMPTY ? 404 : rc == SKL_CONFLICT ? 409 : rc == SKL_INVALID ? 400 : 503;
	return fail(st, err->message[0] ? err->message : skl_strerror(rc));
}

static json_t *queue_json(const skl_queue_status *q)
{
	return json_pack("{s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
	                 "queue", cli_json_str(q->queue), "kind", cli_json_str(q->kind),
	                 "due", (json_int_t)q->due, "scheduled", (json_int_t)q->scheduled,
	                 "available", (json_int_t)(q->due + q->scheduled),
	                 "running", (json_int_t)q->running,
	                 "lease_expired", (json_int_t)q->lease_expired,
	                 "completed", (json_int_t)q->completed,
	                 "discarded", (json_int_t)q->discarded,
	                 "cancelled", (json_int_t)q->cancelled);
}

static dash_reply get_queues(dash_server *s)
{
	skl_queue_status *rows;
	size_t n;
	skl_error err;
	skl_rc rc = skl_queue_status_get(s->client, 0, &rows, &n, &err);
	if (rc != SKL_OK)
		return lib_fail(rc, &err);
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		json_array_append_new(arr, queue_json(&rows[i]));
	skl_queue_status_free(rows, n);
	return reply(200, arr);
}

static dash_reply get_jobs(dash_server *s, dash_arg_fn arg, void *ctx)
{
	skl_list_opts o = {.queue = arg(ctx, "queue"), .kind = arg(ctx, "kind"),
	                   .state = arg(ctx, "state"), .limit = 100};
	if (o.queue && !*o.queue) o.queue = NULL;
	if (o.kind && !*o.kind) o.kind = NULL;
	if (o.state && !*o.state) o.state = NULL;
	if (o.state && !skl_job_state_valid(o.state))
		return fail(400, "unknown job state");
	const char *limit = arg(ctx, "limit");
	if (limit) {
		char *end;
		long v = strtol(limit, &end, 10);
		if (*end || v < 1 || v > 1000)
			return fail(400, "limit must be an integer from 1 to 1000");
		o.limit = (int)v;
	}
	skl_job_info *jobs;
	size_t n;
	skl_error err;
	skl_rc rc = skl_jobs_list(s->client, &o, &jobs, &n, &err);
	if (rc != SKL_OK)
		return lib_fail(rc, &err);
	json_t *arr = jobs_json_list(jobs, n);
	skl_job_info_free(jobs, n);
	return reply(200, arr);
}

/* "123" or "123/retry": the id, and *rest the text after it. */
static bool parse_id(const char *p, int64_t *id, const char **rest)
{
	char *end;
	errno = 0;
	long long v = strtoll(p, &end, 10);
	if (errno || end == p || v <= 0 || (*p < '0' || *p > '9'))
		return false;
	*id = v;
	*rest = end;
	return true;
}

static dash_reply get_job(dash_server *s, const char *idtext)
{
	int64_t id;
	const char *rest;
	if (!parse_id(idtext, &id, &rest) || *rest)
		return fail(404, "no such page");
	skl_job_info *job;
	skl_error err;
	skl_rc rc = skl_job_get(s->client, id, &job, &err);
	if (rc != SKL_OK)
		return lib_fail(rc, &err);
	json_t *o = jobs_json_one(job);
	skl_job_info_free(job, 1);
	return reply(200, o);
}

static json_t *schedule_json(const skl_schedule_info *c)
{
	char next[SKL_CRON_TIME_LEN], last[SKL_CRON_TIME_LEN];
	skl_cron_format_utc(c->next_fire, next);
	skl_cron_format_utc(c->last_fire, last);
	return json_pack("{s:o, s:o, s:o, s:o, s:o, s:b, s:o, s:o}",
	                 "name", cli_json_str(c->name), "expression", cli_json_str(c->expression),
	                 "zone", cli_json_str(c->zone), "kind", cli_json_str(c->kind),
	                 "queue", cli_json_str(c->queue), "enabled", c->enabled,
	                 "last_fire", c->has_last_fire ? json_string(last) : json_null(),
	                 "next_fire", c->has_next_fire ? json_string(next) : json_null());
}

static dash_reply get_schedules(dash_server *s)
{
	skl_schedule_info *rows;
	size_t n;
	skl_error err;
	skl_rc rc = skl_cron_list(s->client, &rows, &n, &err);
	if (rc != SKL_OK)
		return lib_fail(rc, &err);
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		json_array_append_new(arr, schedule_json(&rows[i]));
	skl_schedule_info_free(rows, n);
	return reply(200, arr);
}

static json_t *lease_json(const skl_lease_info *l)
{
	return json_pack("{s:o, s:o, s:I, s:b, s:I, s:o, s:o}",
	                 "name", cli_json_str(l->name), "owner", cli_json_str(l->owner),
	                 "fencing", (json_int_t)l->fencing, "live", l->live,
	                 "expires_in_ms", (json_int_t)l->expires_in_ms,
	                 "acquired_at", cli_json_str(l->acquired_at),
	                 "expires_at", cli_json_str(l->expires_at));
}

static dash_reply get_leases(dash_server *s)
{
	skl_lease_info *rows;
	size_t n;
	skl_error err;
	skl_rc rc = skl_lease_list(s->client, &rows, &n, &err);
	if (rc != SKL_OK)
		return lib_fail(rc, &err);
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		json_array_append_new(arr, lease_json(&rows[i]));
	skl_lease_list_free(rows, n);
	return reply(200, arr);
}

/* The sparklines' data: one bucket a minute over the last hour. */
enum { RATE_BUCKETS = 60, RATE_BUCKET_MS = 60000 };

static json_t *counts_json(const int64_t *v)
{
	json_t *a = json_array();
	for (int i = 0; a && i < RATE_BUCKETS; i++)
		json_array_append_new(a, json_integer(v[i]));
	return a;
}

static dash_reply get_throughput(dash_server *s)
{
	skl_queue_rate *rows;
	size_t n;
	skl_error err;
	skl_rc rc = skl_queue_throughput(s->client, RATE_BUCKETS, RATE_BUCKET_MS, &rows, &n, &err);
	if (rc != SKL_OK)
		return lib_fail(rc, &err);
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		json_array_append_new(arr, json_pack("{s:o, s:o, s:o, s:o}", "queue",
		                                     cli_json_str(rows[i].queue), "kind",
		                                     cli_json_str(rows[i].kind), "completed",
		                                     counts_json(rows[i].completed), "discarded",
		                                     counts_json(rows[i].discarded)));
	skl_queue_rate_free(rows, n);
	return reply(200, json_pack("{s:i, s:o}", "bucket_ms", RATE_BUCKET_MS, "queues", arr));
}

static dash_reply get_breakers(dash_server *s)
{
	skl_breaker_info *rows;
	size_t n;
	skl_error err;
	skl_rc rc = skl_breakers_list(s->client, &rows, &n, &err);
	if (rc != SKL_OK)
		return lib_fail(rc, &err);
	json_t *arr = breakers_json(rows, n);
	skl_breakers_free(rows, n);
	return reply(200, arr);
}

/* The report only: the dashboard never terminates anything. */
static dash_reply get_doctor_locks(dash_server *s)
{
	skl_lock_report *r;
	skl_error err;
	skl_rc rc = skl_doctor_locks(s->client, s->idle_for_ms, &r, &err);
	if (rc != SKL_OK)
		return lib_fail(rc, &err);
	json_t *doc = doctor_locks_doc(r, NULL, 0, r->nfindings > 0);
	skl_lock_report_free(r);
	return reply(200, doc);
}

static dash_reply route_get(dash_server *s, const char *path, dash_arg_fn arg, void *ctx)
{
	if (strcmp(path, "/api/queues") == 0)
		return get_queues(s);
	if (strcmp(path, "/api/jobs") == 0)
		return get_jobs(s, arg, ctx);
	if (strncmp(path, "/api/jobs/", 10) == 0)
		return get_job(s, path + 10);
	if (strcmp(path, "/api/schedules") == 0)
		return get_schedules(s);
	if (strcmp(path, "/api/leases") == 0)
		return get_leases(s);
	if (strcmp(path, "/api/throughput") == 0)
		return get_throughput(s);
	if (strcmp(path, "/api/breakers") == 0)
		return get_breakers(s);
	if (strcmp(path, "/api/doctor/locks") == 0)
		return get_doctor_locks(s);
	return fail(404, "no such page");
}

dash_reply dash_api_get(dash_server *s, const char *path, dash_arg_fn arg, void *ctx)
{
	pthread_mutex_lock(&s->lock);
	dash_reply r = route_get(s, path, arg, ctx);
	pthread_mutex_unlock(&s->lock);
	return r;
}

dash_reply dash_api_post(dash_server *s, const char *path)
{
	int64_t id;
	const char *action;
	if (strncmp(path, "/api/jobs/", 10) != 0 || !parse_id(path + 10, &id, &action))
		return fail(404, "no such page");
	bool retry = strcmp(action, "/retry") == 0;
	if (!retry && strcmp(action, "/cancel") != 0)
		return fail(404, "no such page");
	skl_error err;
	pthread_mutex_lock(&s->lock);
	skl_rc rc = retry ? skl_job_retry(s->client, id, &err) : skl_job_cancel(s->client, id, &err);
	pthread_mutex_unlock(&s->lock);
	if (rc != SKL_OK)
		return lib_fail(rc, &err);
	return reply(200, json_pack("{s:I, s:s}", "id", (json_int_t)id, "done",
	                            retry ? "retried" : "cancelled"));
}
