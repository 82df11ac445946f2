/*
 * dashboard_workers.c — GET /api/workers?seen=DUR&idle=1: the worker
 * registry (skiplock/workers.h) from one skl_workers_list statement, as
 * `skiplock workers --json` prints it.  seen is a duration from 1s to 1d
 * (default 15m); idle=1 keeps the workers idle while due jobs wait.
 */
#include <string.h>

#include "dashboard/dashboard.h"
#include "print/workers_print.h"

dash_reply dash_get_workers(dash_server *s, dash_arg_fn arg, void *ctx)
{
	const char *seen = dash_arg(arg, ctx, "seen"), *idle = dash_arg(arg, ctx, "idle");
	int64_t seen_ms = SKL_WORKERS_SEEN_DEFAULT_MS;
	skl_error err;
	if (seen && (skl_duration_parse(seen, &seen_ms, &err) != SKL_OK ||
	             seen_ms < SKL_WORKERS_SEEN_MIN_MS || seen_ms > SKL_WORKERS_SEEN_MAX_MS))
		return dash_fail(400, "seen must be a duration from 1s to 1d");
	if (idle && strcmp(idle, "1") != 0 && strcmp(idle, "0") != 0)
		return dash_fail(400, "idle must be 1 or 0");
	skl_worker_info *rows;
	size_t n;
	skl_rc rc = skl_workers_list(s->client, seen_ms, idle && idle[0] == '1', &rows, &n, &err);
	if (rc != SKL_OK)
		return dash_lib_fail(rc, &err);
	json_t *arr = workers_json(rows, n);
	skl_workers_free(rows, n);
	return dash_ok(200, arr);
}
