/*
 * dashboard_reply.c — what every endpoint shares: a JSON reply or a
 * failure with its HTTP status, a query argument, and the job filter of
 * /api/jobs and the bulk actions.  Used by dashboard_api.c and the
 * endpoint files (act, chart, workers); calls none of them.
 */
#include "dashboard/dashboard.h"

dash_reply dash_ok(unsigned status, json_t *body)
{
	return (dash_reply){status, body ? body : json_pack("{s:s}", "error", "out of memory")};
}

dash_reply dash_fail(unsigned status, const char *msg)
{
	return dash_ok(status, json_pack("{s:s}", "error", msg));
}

dash_reply dash_lib_fail(skl_rc rc, const skl_error *err)
{
	unsigned st = rc == SKL_EMPTY ? 404 : rc == SKL_CONFLICT ? 409 : rc == SKL_INVALID ? 400 : 503;
	return dash_fail(st, err->message[0] ? err->message : skl_strerror(rc));
}

const char *dash_arg(dash_arg_fn arg, void *ctx, const char *name)
{
	const char *v = arg(ctx, name);
	return v && *v ? v : NULL;
}

dash_reply dash_filter(const dash_server *s, dash_role role, dash_arg_fn arg, void *ctx,
                       skl_list_opts *o)
{
	*o = (skl_list_opts){
		.queue = dash_arg(arg, ctx, "queue"), .kind = dash_arg(arg, ctx, "kind"),
		.state = dash_arg(arg, ctx, "state"), .limit = 100,
		.payload_contains = dash_arg(arg, ctx, "payload"),
		.error_contains = dash_arg(arg, ctx, "error"), .time_field = dash_arg(arg, ctx, "time"),
		.from = dash_arg(arg, ctx, "from"), .to = dash_arg(arg, ctx, "to")};
	if (o->state && !skl_job_state_valid(o->state))
		return dash_fail(400, "unknown job state");
	/* Matching on what a viewer may not read would reveal it bit by bit. */
	if (o->payload_contains && role == DASH_VIEWER && s->hide_payloads)
		return dash_fail(403, "payloads are hidden from viewers");
	return (dash_reply){0, NULL};
}
