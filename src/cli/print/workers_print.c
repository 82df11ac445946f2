/*
 * workers_print.c — the worker registry as a table or JSON
 * (workers_print.h).
 */
#include <stdio.h>
#include <string.h>

#include "print/output.h"
#include "print/workers_print.h"

/* An array of strings as JSON; NULL strings (an absent array) as null. */
static json_t *strings_json(const char *const *v, size_t n)
{
	if (v == NULL)
		return json_null();
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++)
		json_array_append_new(a, json_string(v[i]));
	return a;
}

json_t *workers_json(const skl_worker_info *w, size_t n)
{
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++) {
		json_t *o = json_pack("{s:o, s:o, s:o, s:o, s:I, s:o, s:I, s:o, s:b}",
		                      "owner", cli_json_str(w[i].owner),
		                      "kinds", strings_json(w[i].kinds, w[i].nkinds),
		                      "queues", strings_json(w[i].queues, w[i].nqueues),
		                      "empty_at", cli_json_str(w[i].empty_at),
		                      "empty_age_ms", (json_int_t)w[i].empty_age_ms,
		                      "first_seen_at", cli_json_str(w[i].first_seen_at),
		                      "waiting", (json_int_t)w[i].waiting,
		                      "waiting_kinds",
		                      strings_json(w[i].waiting_kinds, w[i].nwaiting_kinds),
		                      "idle", w[i].waiting > 0);
		if (o == NULL || json_array_append_new(arr, o) != 0) {
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

/* v joined by ",", "*" for an absent array, into buf (cut to fit). */
static const char *joined(const char *const *v, size_t n, char *buf, size_t cap)
{
	if (v == NULL)
		return "*";
	size_t used = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < n && used + 1 < cap; i++) {
		int w = snprintf(buf + used, cap - used, "%s%s", i ? "," : "", v[i]);
		used += w > 0 ? (size_t)w : 0;
	}
	return buf;
}

static void add_row(cli_table *t, const skl_worker_info *w)
{
	char q[256], k[256], wk[256], ago[32];
	cli_table_add(t, "%s", w->owner);
	cli_table_add(t, "%s", joined(w->queues, w->nqueues, q, sizeof(q)));
	cli_table_add(t, "%s", joined(w->kinds, w->nkinds, k, sizeof(k)));
	cli_table_add(t, "%s ago", cli_fmt_duration(w->empty_age_ms, ago, sizeof(ago)));
	if (w->waiting == 0)
		cli_table_add(t, "0");
	else
		cli_table_add(t, "%lld%s (%s)", (long long)w->waiting, w->waiting >= 1000 ? "+" : "",
		              joined(w->waiting_kinds, w->nwaiting_kinds, wk, sizeof(wk)));
}

bool workers_print_table(const skl_worker_info *w, size_t n)
{
	cli_table t;
	cli_table_init(&t, 5, "lllrl");
	const char *const head[] = {"OWNER", "QUEUES", "KINDS", "EMPTY CLAIM", "WAITING"};
	for (size_t i = 0; i < 5; i++)
		cli_table_add(&t, "%s", head[i]);
	for (size_t i = 0; i < n; i++)
		add_row(&t, &w[i]);
	bool ok = cli_table_print(&t);
	cli_table_free(&t);
	return ok;
}
