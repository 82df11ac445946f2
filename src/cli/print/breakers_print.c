/*
 * breakers_print.c — the circuit breakers as a table or JSON
 * (breakers_print.h), for `skiplock breakers` and `skiplock status`.
 */
#include <string.h>

#include "print/breakers_print.h"
#include "print/output.h"

static void add_row(cli_table *t, const skl_breaker_info *b)
{
	char d[32], o[32], w[32];
	cli_table_add(t, "%s", b->kind);
	cli_table_add(t, "%s", b->state);
	if (strcmp(b->state, "closed") == 0)
		cli_table_add(t, "%d of %d failed", b->failures, b->calls);
	else if (strcmp(b->state, "half_open") == 0)
		cli_table_add(t, "%d probe(s) left, %d succeeded", b->probes_left, b->probe_successes);
	else if (b->open_for_ms < 0)
		cli_table_add(t, "forced open");
	else
		cli_table_add(t, "half-open in %s", cli_fmt_duration(b->open_for_ms, d, sizeof(d)));
	cli_table_add(t, "rate:%d,min:%d,calls:%d,window:%s,open:%s,probes:%d",
	              b->config.failure_pct, b->config.min_calls, b->config.window_calls,
	              cli_fmt_duration(b->config.window_ms, w, sizeof(w)),
	              cli_fmt_duration(b->config.open_ms, o, sizeof(o)), b->config.probes);
	cli_table_add(t, "%s", cli_fmt_time(b->changed_at, d, sizeof(d)));
}

bool breakers_print_table(const skl_breaker_info *rows, size_t n)
{
	cli_table t;
	cli_table_init(&t, 5, "lllll");
	const char *const head[] = {"KIND", "BREAKER", "NOW", "SETTINGS", "CHANGED"};
	for (size_t i = 0; i < 5; i++)
		cli_table_add(&t, "%s", head[i]);
	for (size_t i = 0; i < n; i++)
		add_row(&t, &rows[i]);
	bool ok = cli_table_print(&t);
	cli_table_free(&t);
	return ok;
}

json_t *breakers_json(const skl_breaker_info *rows, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++) {
		const skl_breaker_info *b = &rows[i];
		const skl_breaker_config *c = &b->config;
		json_t *o = json_pack(
			"{s:s, s:s, s:i, s:i, s:i, s:i, s:o, s:s, s:{s:i, s:i, s:i, s:I, s:I, s:i}}",
			"kind", b->kind, "state", b->state, "calls", b->calls, "failures", b->failures,
			"probes_left", b->probes_left, "probe_successes", b->probe_successes,
			"open_for_ms", strcmp(b->state, "open") == 0 ? json_integer(b->open_for_ms)
			                                             : json_null(),
			"changed_at", b->changed_at, "config", "rate", c->failure_pct, "min", c->min_calls,
			"calls", c->window_calls, "window_ms", (json_int_t)c->window_ms, "open_ms",
			(json_int_t)c->open_ms, "probes", c->probes);
		if (o == NULL || json_array_append_new(a, o) != 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}
