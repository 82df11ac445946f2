/*
 * dashboard_api.c — the dashboard's JSON endpoints.  Every one is one
 * library call on the shared client, made under the server's mutex (an
 * skl_client serves one thread at a time), then turned into JSON.
 *
 *   GET  /api/queues             counts by state per queue and kind, the
 *                                oldest due age, the next lease expiry and
 *                                the failure rate over 5 and 60 minutes
 *   GET  /api/jobs?state=&queue=&kind=&payload=&error=&time=&from=&to=&limit=
 *                                newest jobs first (skl_list_opts)
 *   GET  /api/jobs/ID[?payload=show]  one job: payload (unless hidden),
 *                                attempts, errors, lease, and for an
 *                                available job what it waits for
 *   GET  /api/schedules          cron schedules with their next fire time
 *   GET  /api/leases             leases with their fencing token
 *   GET  /api/throughput         jobs finished per minute, last hour, per
 *                                queue and kind
 *   GET  /api/chart?queue=&kind=&range=  one queue and kind over time
 *                                (dashboard_chart.c)
 *   GET  /api/breakers           circuit breakers and their state
 *   GET  /api/workers?seen=&idle=  the workers that claimed and found
 *                                nothing, and the due jobs each left behind
 *                                (dashboard_workers.c)
 *   GET  /api/waits, /api/limits what holds the jobs that wait, per queue
 *                                and reason, and each limit's use now
 *                                (dashboard_flow.c)
 *   GET  /api/doctor/locks       `doctor locks` findings (report only)
 *   GET  /api/doctor/maintenance `doctor maintenance`: last run, lease, the
 *                                finding when it has not run while jobs did
 *   POST /api/jobs/ID/retry, /api/jobs/ID/cancel
 * and the operator's fleet-wide actions of dashboard_act.c.  The replies
 * and the job filter every endpoint shares are dashboard_reply.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "print/breakers_print.h"
#include "dashboard/dashboard.h"
#include "print/doctor_locks_print.h"
#include "print/maintenance_print.h"
#include "print/jobs_print.h"
#include "print/output.h"

/* A failure rate as JSON: null when nothing ran in its window (-1). */
static json_t *rate_json(double rate)
{
	return rate < 0 ? json_null() : json_real(rate);
}

/* The failure numbers of one window into o, the names ending in sfx. */
static void put_window(json_t *o, const char *sfx, const skl_queue_status *q)
{
	char name[40];
	snprintf(name, sizeof(name), "recent_errors_%s", sfx);
	json_object_set_new(o, name, json_integer(q ? q->recent_errors : 0));
	snprintf(name, sizeof(name), "recent_completed_%s", sfx);
	json_object_set_new(o, name, json_integer(q ? q->recent_completed : 0));
	snprintf(name, sizeof(name), "failure_rate_%s", sfx);
	json_object_set_new(o, name, rate_json(q ? q->failure_rate : -1));
}

/* q with the 5-minute window; h, the same pair read with the 60-minute
 * window (NULL when it had gone by then). */
static json_t *queue_json(const skl_queue_status *q, const skl_queue_status *h)
{
	json_t *o = json_pack(
		"{s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:I}",
		"queue", cli_json_str(q->queue), "kind", cli_json_str(q->kind),
		"due", (json_int_t)q->due, "scheduled", (json_int_t)q->scheduled,
		"available", (json_int_t)(q->due + q->scheduled), "running", (json_int_t)q->running,
		"lease_expired", (json_int_t)q->lease_expired, "completed", (json_int_t)q->completed,
		"discarded", (json_int_t)q->discarded, "cancelled", (json_int_t)q->cancelled,
		"oldest_due_age_ms",
		q->oldest_due_age_ms < 0 ? json_null() : json_integer(q->oldest_due_age_ms),
		"next_lease_expiry", cli_json_str(q->next_lease_expiry),
		"next_lease_expiry_in_ms", (json_int_t)q->next_lease_expiry_in_ms);
	if (o) {
		put_window(o, "5m", q);
		put_window(o, "60m", h);
	}
	return o;
}

static const skl_queue_status *find_pair(const skl_queue_status *rows, size_t n,
                                         const skl_queue_status *q)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(rows[i].queue, q->queue) == 0 && strcmp(rows[i].kind, q->kind) == 0)
			return &rows[i];
	return NULL;
}

enum { WINDOW_5M = 5 * 60000, WINDOW_60M = 60 * 60000 };

static dash_reply get_queues(dash_server *s)
{
	skl_queue_status *rows, *hour = NULL;
	size_t n, nh = 0;
	skl_error err;
	skl_rc rc = skl_queue_status_get(s->client, WINDOW_5M, &rows, &n, &err);
	if (rc == SKL_OK && (rc = skl_queue_status_get(s->client, WINDOW_60M, &hour, &nh, &err)) != SKL_OK)
		skl_queue_status_free(rows, n);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		json_array_append_new(arr, queue_json(&rows[i], find_pair(hour, nh, &rows[i])));
	skl_queue_status_free(rows, n);
	skl_queue_status_free(hour, nh);
	return dash_ok(200, arr);
}

static dash_reply get_jobs(dash_server *s, dash_role role, dash_arg_fn arg, void *ctx)
{
	skl_list_opts o;
	dash_reply bad = dash_filter(s, role, arg, ctx, &o);
	if (bad.body)
		return bad;
	const char *limit = arg(ctx, "limit");
	if (limit) {
		char *end;
		long v = strtol(limit, &end, 10);
		if (*end || v < 1 || v > 1000)
			return dash_fail(400, "limit must be an integer from 1 to 1000");
		o.limit = (int)v;
	}
	skl_job_info *jobs;
	size_t n;
	skl_error err;
	skl_rc rc = skl_jobs_list(s->client, &o, &jobs, &n, &err);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	json_t *arr = jobs_json_list(jobs, n);
	skl_job_info_free(jobs, n);
	return dash_ok(200, arr);
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

/* With --hide-payloads a payload (and result) is sent only when an
 * operator asks for it with ?payload=show. */
static dash_reply payload_rule(const dash_server *s, dash_role role, const char *ask, bool *show)
{
	*show = !s->hide_payloads;
	if (ask == NULL)
		return (dash_reply){0, NULL};
	if (strcmp(ask, "show") != 0)
		return dash_fail(400, "payload must be show");
	if (role == DASH_VIEWER && s->hide_payloads)
		return dash_fail(403, "payloads are hidden from viewers");
	*show = true;
	return (dash_reply){0, NULL};
}

static dash_reply get_job(dash_server *s, dash_role role, const char *idtext, dash_arg_fn arg,
                          void *ctx)
{
	int64_t id;
	const char *rest;
	if (!parse_id(idtext, &id, &rest) || *rest)
		return dash_fail(404, "no such page");
	bool show;
	dash_reply refused = payload_rule(s, role, dash_arg(arg, ctx, "payload"), &show);
	if (refused.body)
		return refused;
	skl_job_info *job;
	skl_error err;
	skl_rc rc = skl_job_get(s->client, id, &job, &err);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	json_t *o = jobs_json_one(job);
	char *waits = NULL;
	if (o && strcmp(job->state, "available") == 0 &&
	    (rc = skl_job_waits_for(s->client, id, &waits, &err)) == SKL_OK && waits)
		json_object_set_new(o, "waits_for", cli_json_str(waits));
	skl_free(waits);
	skl_job_info_free(job, 1);
	if (rc != SKL_OK) {
		json_decref(o);
		return dash_lib_fail(rc, &err);
	}
	if (o && !show) {
		json_object_set_new(o, "payload", json_null());
		json_object_set_new(o, "result", json_null());
	}
	if (o)
		json_object_set_new(o, "payload_hidden", json_boolean(!show));
	return dash_ok(200, o);
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
		return dash_lib_fail(rc, &err);
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		json_array_append_new(arr, schedule_json(&rows[i]));
	skl_schedule_info_free(rows, n);
	return dash_ok(200, arr);
}

static json_t *lease_json(const skl_lease_info *l)
{
	/* the token is null for a role that may not read it (a reader) */
	return json_pack("{s:o, s:o, s:o, s:b, s:I, s:o, s:o}",
	                 "name", cli_json_str(l->name), "owner", cli_json_str(l->owner),
	                 "fencing", l->fencing < 0 ? json_null() : json_integer(l->fencing),
	                 "live", l->live,
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
		return dash_lib_fail(rc, &err);
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		json_array_append_new(arr, lease_json(&rows[i]));
	skl_lease_list_free(rows, n);
	return dash_ok(200, arr);
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
		return dash_lib_fail(rc, &err);
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		json_array_append_new(arr, json_pack("{s:o, s:o, s:o, s:o}", "queue",
		                                     cli_json_str(rows[i].queue), "kind",
		                                     cli_json_str(rows[i].kind), "completed",
		                                     counts_json(rows[i].completed), "discarded",
		                                     counts_json(rows[i].discarded)));
	skl_queue_rate_free(rows, n);
	return dash_ok(200, json_pack("{s:i, s:o}", "bucket_ms", RATE_BUCKET_MS, "queues", arr));
}

static dash_reply get_breakers(dash_server *s)
{
	skl_breaker_info *rows;
	size_t n;
	skl_error err;
	skl_rc rc = skl_breakers_list(s->client, &rows, &n, &err);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	json_t *arr = breakers_json(rows, n);
	skl_breakers_free(rows, n);
	return dash_ok(200, arr);
}

/* The report only: the dashboard never terminates anything. */
static dash_reply get_doctor_locks(dash_server *s)
{
	skl_lock_report *r;
	skl_error err;
	skl_rc rc = skl_doctor_locks(s->client, s->idle_for_ms, &r, &err);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	json_t *doc = doctor_locks_doc(r, NULL, 0, r->nfindings > 0);
	skl_lock_report_free(r);
	return dash_ok(200, doc);
}

/* The doctor's maintenance finding (read only). */
static dash_reply get_doctor_maintenance(dash_server *s)
{
	skl_maintenance_status st;
	skl_error err;
	skl_rc rc = skl_maintenance_check(s->client, &st, &err);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	json_t *doc = maintenance_json(&st);
	skl_maintenance_status_free(&st);
	return dash_ok(200, doc);
}

static dash_reply route_get(dash_server *s, dash_role role, const char *path, dash_arg_fn arg,
                            void *ctx)
{
	if (strcmp(path, "/api/queues") == 0)
		return get_queues(s);
	if (strcmp(path, "/api/jobs") == 0)
		return get_jobs(s, role, arg, ctx);
	dash_reply act = dash_act_get(s, role, path, arg, ctx);
	if (act.body)
		return act;
	if (strncmp(path, "/api/jobs/", 10) == 0)
		return get_job(s, role, path + 10, arg, ctx);
	if (strcmp(path, "/api/schedules") == 0)
		return get_schedules(s);
	if (strcmp(path, "/api/leases") == 0)
		return get_leases(s);
	if (strcmp(path, "/api/throughput") == 0)
		return get_throughput(s);
	if (strcmp(path, "/api/chart") == 0)
		return dash_get_chart(s, arg, ctx);
	if (strcmp(path, "/api/breakers") == 0)
		return get_breakers(s);
	if (strcmp(path, "/api/workers") == 0)
		return dash_get_workers(s, arg, ctx);
	if (strcmp(path, "/api/waits") == 0)
		return dash_get_waits(s);
	if (strcmp(path, "/api/limits") == 0)
		return dash_get_limits(s);
	if (strcmp(path, "/api/doctor/locks") == 0)
		return get_doctor_locks(s);
	if (strcmp(path, "/api/doctor/maintenance") == 0)
		return get_doctor_maintenance(s);
	return dash_fail(404, "no such page");
}

dash_reply dash_api_get(dash_server *s, dash_role role, const char *path, dash_arg_fn arg,
                        void *ctx)
{
	pthread_mutex_lock(&s->lock);
	dash_reply r = route_get(s, role, path, arg, ctx);
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* One job's retry or cancel: the bulk action on its id, so that it is
 * fenced and logged as every action is; when nothing changed, its state
 * says why (409), or it does not exist (404). */
static dash_reply post_one(dash_server *s, int64_t id, bool retry, const skl_actor *who)
{
	skl_bulk_opts o = {.action = retry ? SKL_BULK_RETRY : SKL_BULK_CANCEL, .ids = &id,
	                   .nids = 1, .batch = 1};
	skl_bulk_result r = {0};
	skl_job_info *job = NULL;
	skl_error err;
	pthread_mutex_lock(&s->lock);
	skl_rc rc = skl_jobs_bulk(s->client, &o, who, &r, &err);
	if (rc == SKL_OK && r.changed == 0)
		rc = skl_job_get(s->client, id, &job, &err);
	pthread_mutex_unlock(&s->lock);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	const char *done = retry ? "retried" : "cancelled";
	if (job == NULL)
		return dash_ok(200, json_pack("{s:I, s:s}", "id", (json_int_t)id, "done", done));
	char msg[160];
	snprintf(msg, sizeof(msg), "job %" PRId64 " is %s: not %s", id, job->state, done);
	skl_job_info_free(job, 1);
	return dash_fail(409, msg);
}

dash_reply dash_api_post(dash_server *s, const char *path, dash_arg_fn arg, void *ctx,
                         const skl_actor *who)
{
	dash_reply act = dash_act_post(s, path, arg, ctx, who);
	if (act.body)
		return act;
	int64_t id;
	const char *action;
	if (strncmp(path, "/api/jobs/", 10) != 0 || !parse_id(path + 10, &id, &action))
		return dash_fail(404, "no such page");
	bool retry = strcmp(action, "/retry") == 0;
	if (!retry && strcmp(action, "/cancel") != 0)
		return dash_fail(404, "no such page");
	return post_one(s, id, retry, who);
}
