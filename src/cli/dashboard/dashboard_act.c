/*
 * dashboard_act.c — the operator's fleet-wide actions (skiplock/control.h)
 * and what the page shows of them.  Every POST here is an operator's (the
 * HTTP layer refused viewers and checked the CSRF token) and is written to
 * the action log by the library, with the actor the HTTP layer names.
 *
 *   GET  /api/jobs/count?<filters>      {count, mark, all, why}: what a bulk
 *                                       action would match, the highest id
 *                                       among them, and whether the filter
 *                                       matches every job (and why)
 *   GET  /api/pauses                    paused queues and kinds
 *   GET  /api/actions?limit=            the action log, newest first
 *   POST /api/bulk/retry|cancel|discard?<filters>[&mark=M&expect=N][&all=1]
 *        or ?ids=1,2,3                  {action, action_id, matched, changed,
 *                                        skipped, batches, mark, newer}
 *   POST /api/pause?queue=Q | ?kind=K, /api/resume?...   {changed}
 *   POST /api/breakers/open?kind=K, /api/breakers/close?kind=K
 *   POST /api/schedules/pause?name=N, /resume?name=N, /run?name=N
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dashboard/dashboard.h"
#include "print/control_print.h"
#include "print/output.h"

enum { BULK_BATCH = 500, MAX_IDS = 1000 };

static dash_reply get_count(dash_server *s, dash_role role, dash_arg_fn arg, void *ctx)
{
	skl_list_opts o;
	dash_reply bad = dash_filter(s, role, arg, ctx, &o);
	if (bad.body)
		return bad;
	int64_t n, mark;
	skl_error err;
	skl_rc rc = skl_jobs_count_mark(s->client, &o, &n, &mark, &err);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	const char *why = NULL;
	bool all = !skl_list_opts_narrows(&o, &why);
	return dash_ok(200, json_pack("{s:I, s:I, s:b, s:o}", "count", (json_int_t)n, "mark",
	                              (json_int_t)mark, "all", all, "why", cli_json_str(why)));
}

static dash_reply get_pauses(dash_server *s)
{
	skl_pause_info *rows;
	size_t n;
	skl_error err;
	skl_rc rc = skl_pauses_list(s->client, &rows, &n, &err);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	json_t *arr = control_pauses_json(rows, n);
	skl_pauses_free(rows, n);
	return dash_ok(200, arr);
}

static dash_reply get_actions(dash_server *s, dash_arg_fn arg, void *ctx)
{
	const char *lim = dash_arg(arg, ctx, "limit");
	char *end = NULL;
	long limit = lim ? strtol(lim, &end, 10) : 20;
	if (lim && (*end || limit < 1 || limit > 1000))
		return dash_fail(400, "limit must be an integer from 1 to 1000");
	skl_action_info *rows;
	size_t n;
	skl_error err;
	skl_rc rc = skl_actions_list(s->client, (int)limit, 0, &rows, &n, &err);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	json_t *arr = control_actions_json(rows, n);
	skl_actions_free(rows, n);
	return dash_ok(200, arr);
}

dash_reply dash_act_get(dash_server *s, dash_role role, const char *path, dash_arg_fn arg,
                        void *ctx)
{
	if (strcmp(path, "/api/jobs/count") == 0)
		return get_count(s, role, arg, ctx);
	if (strcmp(path, "/api/pauses") == 0)
		return get_pauses(s);
	if (strcmp(path, "/api/actions") == 0)
		return get_actions(s, arg, ctx);
	return (dash_reply){0, NULL};
}

/* "12,13,20": at most MAX_IDS positive ids into ids; false when malformed. */
static bool parse_ids(const char *text, int64_t *ids, size_t *n)
{
	*n = 0;
	for (const char *p = text; *n < MAX_IDS; p++) {
		char *end;
		errno = 0;
		long long v = strtoll(p, &end, 10);
		if (errno || end == p || v <= 0 || *p < '0' || *p > '9')
			return false;
		ids[(*n)++] = v;
		if (*end == '\0')
			return true;
		if (*end != ',')
			return false;
		p = end;
	}
	return false;
}

static json_t *bulk_json(skl_bulk_action a, const skl_bulk_result *r)
{
	return json_pack("{s:s, s:I, s:I, s:I, s:I, s:i, s:I, s:I}", "action",
	                 skl_bulk_action_name(a), "action_id", (json_int_t)r->action_id, "matched",
	                 (json_int_t)r->matched, "changed", (json_int_t)r->changed, "skipped",
	                 (json_int_t)r->skipped, "batches", r->batches, "mark", (json_int_t)r->mark,
	                 "newer", (json_int_t)r->newer);
}

/* A positive integer argument into *v (absent: 0); false when malformed. */
static bool positive_arg(dash_arg_fn arg, void *ctx, const char *name, int64_t *v)
{
	const char *t = dash_arg(arg, ctx, name);
	char *end = NULL;
	errno = 0;
	*v = t ? strtoll(t, &end, 10) : 0;
	return t == NULL || (*t >= '0' && *t <= '9' && *end == '\0' && errno == 0 && *v > 0);
}

/* all=1, and the count's mark=M&expect=N, into o: a 400 reply when bad.
 * A filter that matches every job needs all=1 (the page names what it acts
 * on); mark and expect go together, with a filter. */
static dash_reply whole_args(dash_arg_fn arg, void *ctx, const skl_list_opts *f, bool ids,
                             skl_bulk_opts *o)
{
	char msg[200];
	const char *all = dash_arg(arg, ctx, "all"), *why = NULL;
	if (all && strcmp(all, "1") != 0)
		return dash_fail(400, "all must be 1");
	o->all = all != NULL;
	if (!positive_arg(arg, ctx, "mark", &o->up_to) || !positive_arg(arg, ctx, "expect", &o->expect) ||
	    (o->up_to > 0) != (o->expect > 0))
		return dash_fail(400, "mark and expect go together: the count's mark and count, each "
		                      "a positive integer");
	if (ids && (o->all || o->up_to))
		return dash_fail(400, "all, mark and expect go with a filter, not with ids");
	if (!ids && !o->all && !skl_list_opts_narrows(f, &why)) {
		snprintf(msg, sizeof(msg), "the filter matches every job (%s): add all=1 to act on "
		         "every job", why);
		return dash_fail(400, msg);
	}
	return (dash_reply){0, NULL};
}

/* A bulk action on the jobs the filter matches, or on ?ids=. */
static dash_reply post_bulk(dash_server *s, const char *name, dash_arg_fn arg, void *ctx,
                            const skl_actor *who)
{
	skl_bulk_opts o = {.batch = BULK_BATCH};
	skl_error err;
	if (skl_bulk_action_parse(name, &o.action, &err) != SKL_OK)
		return dash_fail(404, "no such page");
	skl_list_opts f;
	dash_reply bad = dash_filter(s, DASH_OPERATOR, arg, ctx, &f);
	if (bad.body)
		return bad;
	int64_t ids[MAX_IDS];
	const char *idtext = dash_arg(arg, ctx, "ids");
	if (idtext && !parse_ids(idtext, ids, &o.nids))
		return dash_fail(400, "ids must be 1 to 1000 job ids separated by commas");
	bad = whole_args(arg, ctx, &f, idtext != NULL, &o);
	if (bad.body)
		return bad;
	o.filter = &f;
	o.ids = idtext ? ids : NULL;
	skl_bulk_result r = {0};
	pthread_mutex_lock(&s->lock);
	skl_rc rc = skl_jobs_bulk(s->client, &o, who, &r, &err);
	pthread_mutex_unlock(&s->lock);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	return dash_ok(200, bulk_json(o.action, &r));
}

static dash_reply post_pause(dash_server *s, bool pause, dash_arg_fn arg, void *ctx,
                             const skl_actor *who)
{
	const char *queue = dash_arg(arg, ctx, "queue"), *kind = dash_arg(arg, ctx, "kind");
	if ((queue == NULL) == (kind == NULL))
		return dash_fail(400, "name a queue or a kind, not both");
	bool changed = false;
	skl_error err;
	pthread_mutex_lock(&s->lock);
	skl_rc rc = pause ? skl_pause(s->client, queue, kind, who, &changed, &err)
	                  : skl_resume(s->client, queue, kind, who, &changed, &err);
	pthread_mutex_unlock(&s->lock);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	return dash_ok(200, json_pack("{s:o, s:o, s:b}", "queue", cli_json_str(queue), "kind",
	                              cli_json_str(kind), "changed", changed));
}

static dash_reply post_breaker(dash_server *s, bool open, dash_arg_fn arg, void *ctx,
                               const skl_actor *who)
{
	const char *kind = dash_arg(arg, ctx, "kind");
	if (kind == NULL)
		return dash_fail(400, "kind is required");
	skl_error err;
	pthread_mutex_lock(&s->lock);
	skl_rc rc = skl_breaker_set(s->client, kind, open, who, &err);
	pthread_mutex_unlock(&s->lock);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	return dash_ok(200, json_pack("{s:s, s:s}", "kind", kind, "state", open ? "open" : "closed"));
}

/* pause, resume or run: the schedule named by ?name=. */
static dash_reply post_schedule(dash_server *s, const char *what, dash_arg_fn arg, void *ctx,
                                const skl_actor *who)
{
	const char *name = dash_arg(arg, ctx, "name");
	bool run = strcmp(what, "run") == 0, pause = strcmp(what, "pause") == 0;
	if (!run && !pause && strcmp(what, "resume") != 0)
		return dash_fail(404, "no such page");
	if (name == NULL)
		return dash_fail(400, "name is required");
	skl_error err;
	int64_t id = 0;
	bool changed = false;
	pthread_mutex_lock(&s->lock);
	skl_rc rc = run ? skl_schedule_run_now(s->client, name, who, &id, &err)
	                : skl_schedule_set_paused(s->client, name, pause, who, &changed, &err);
	pthread_mutex_unlock(&s->lock);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	if (run)
		return dash_ok(200, json_pack("{s:s, s:I}", "name", name, "job_id", (json_int_t)id));
	return dash_ok(200, json_pack("{s:s, s:b}", "name", name, "changed", changed));
}

dash_reply dash_act_post(dash_server *s, const char *path, dash_arg_fn arg, void *ctx,
                         const skl_actor *who)
{
	if (strncmp(path, "/api/bulk/", 10) == 0)
		return post_bulk(s, path + 10, arg, ctx, who);
	if (strcmp(path, "/api/pause") == 0 || strcmp(path, "/api/resume") == 0)
		return post_pause(s, path[5] == 'p', arg, ctx, who);
	if (strcmp(path, "/api/breakers/open") == 0 || strcmp(path, "/api/breakers/close") == 0)
		return post_breaker(s, path[14] == 'o', arg, ctx, who);
	if (strncmp(path, "/api/schedules/", 15) == 0)
		return post_schedule(s, path + 15, arg, ctx, who);
	return (dash_reply){0, NULL};
}
