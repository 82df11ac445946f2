/*
 * limits_print.c — the limits on job starts as a table or JSON
 * (limits_print.h).  A rate's window is written in its largest exact unit
 * ("20/1s", "500/90s", "3/250ms"), so what is shown can be set again as
 * it reads.
 */
#include <inttypes.h>
#include <stdio.h>

#include "print/limits_print.h"
#include "print/output.h"

/* v as JSON, or null when absent (the limit does not have it). */
static json_t *int_or_null(int64_t v, bool present)
{
	return present ? json_integer((json_int_t)v) : json_null();
}

json_t *limits_json(const skl_limit_info *l, size_t n)
{
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++) {
		const skl_limit_info *x = &l[i];
		json_t *o = json_pack("{s:s, s:o, s:o, s:I, s:o, s:o, s:o, s:I, s:o, s:o, s:o}",
		                      "kind", x->kind, "key_field", cli_json_str(x->key_field),
		                      "max_running", int_or_null(x->max_running, x->max_running > 0),
		                      "running", (json_int_t)x->running,
		                      "rate", int_or_null(x->rate, x->rate > 0),
		                      "per_ms", int_or_null(x->per_ms, x->rate > 0),
		                      "started", int_or_null(x->started, x->started >= 0),
		                      "waiting", (json_int_t)x->waiting,
		                      "keys", int_or_null(x->keys, x->keys >= 0),
		                      "changed_at", cli_json_str(x->changed_at),
		                      "changed_by", cli_json_str(x->changed_by));
		if (o == NULL || json_array_append_new(arr, o) != 0) {
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

/* A window in its largest exact unit: "1s", "90s", "5m", "250ms". */
static const char *window_text(int64_t ms, char *buf, size_t cap)
{
	static const struct {
		int64_t ms;
		const char *unit;
	} units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (ms > 0 && ms % units[i].ms == 0) {
			snprintf(buf, cap, "%" PRId64 "%s", ms / units[i].ms, units[i].unit);
			return buf;
		}
	snprintf(buf, cap, "%" PRId64 "ms", ms);
	return buf;
}

/* v, or "-" when absent. */
static void add_count(cli_table *t, int64_t v, bool present)
{
	if (present)
		cli_table_add(t, "%" PRId64, v);
	else
		cli_table_add(t, "-");
}

static void add_row(cli_table *t, const skl_limit_info *x)
{
	char w[32];
	cli_table_add(t, "%s", x->kind);
	cli_table_add(t, "%s", x->key_field ? x->key_field : "-");
	add_count(t, x->max_running, x->max_running > 0);
	add_count(t, x->running, true);
	if (x->rate > 0)
		cli_table_add(t, "%d/%s", x->rate, window_text(x->per_ms, w, sizeof(w)));
	else
		cli_table_add(t, "-");
	add_count(t, x->started, x->started >= 0);
	add_count(t, x->waiting, true);
	add_count(t, x->keys, x->keys >= 0);
}

bool limits_print_table(const skl_limit_info *l, size_t n)
{
	static const char *const head[] = {"KIND", "KEY FIELD", "MAX RUNNING", "RUNNING",
	                                   "RATE", "STARTED", "WAITING", "KEYS"};
	cli_table t;
	cli_table_init(&t, 8, "llrrrrrr");
	for (size_t i = 0; i < 8; i++)
		cli_table_add(&t, "%s", head[i]);
	for (size_t i = 0; i < n; i++)
		add_row(&t, &l[i]);
	bool ok = cli_table_print(&t);
	cli_table_free(&t);
	return ok;
}
