/*
 * dashboard_flow.c — what holds the jobs that wait (docs/flow-control.md):
 *
 *   GET /api/waits    the available jobs not running, per queue and reason
 *                     (skl_waits_count: dependency, scheduled, paused,
 *                     breaker, limit, worker), at most 10000 counted per
 *                     queue: [{"queue", "reason", "jobs"}]
 *   GET /api/limits   each limit and its use now, as `skiplock limits show
 *                     --json` prints it (skl_limits_list)
 *
 * One library call each, under the server's lock.
 */
#include "dashboard/dashboard.h"
#include "print/limits_print.h"
#include "print/output.h"

dash_reply dash_get_waits(dash_server *s)
{
	skl_wait_count *rows;
	size_t n;
	skl_error err;
	skl_rc rc = skl_waits_count(s->client, NULL, 0, 0, &rows, &n, &err);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		json_array_append_new(arr, json_pack("{s:o, s:s, s:I}", "queue",
		                                     cli_json_str(rows[i].queue), "reason",
		                                     rows[i].reason, "jobs", (json_int_t)rows[i].jobs));
	skl_wait_counts_free(rows, n);
	return dash_ok(200, arr);
}

dash_reply dash_get_limits(dash_server *s)
{
	skl_limit_info *rows;
	size_t n;
	skl_error err;
	skl_rc rc = skl_limits_list(s->client, &rows, &n, &err);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	json_t *arr = limits_json(rows, n);
	skl_limits_free(rows, n);
	return dash_ok(200, arr);
}
