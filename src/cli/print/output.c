/*
 * output.c — aligned tables, short durations and JSON documents for the
 * inspecting commands (jobs, status).  Widths count characters, not bytes,
 * so UTF-8 queue and kind names stay aligned.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "print/output.h"

void cli_table_init(cli_table *t, size_t ncols, const char *align)
{
	memset(t, 0, sizeof(*t));
	t->ncols = ncols;
	t->align = align;
}

void cli_table_add(cli_table *t, const char *fmt, ...)
{
	if (t->failed)
		return;
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		char **cells = realloc(t->cells, cap * sizeof(*cells));
		if (cells == NULL) {
			t->failed = true;
			return;
		}
		t->cells = cells;
		t->cap = cap;
	}
	va_list ap;
	va_start(ap, fmt);
	int r = vasprintf(&t->cells[t->n], fmt, ap);
	va_end(ap);
	if (r < 0)
		t->failed = true;
	else
		t->n++;
}

/* Characters in a UTF-8 string: bytes that do not continue a sequence. */
static size_t width(const char *s)
{
	size_t w = 0;
	for (; *s; s++)
		w += ((unsigned char)*s & 0xC0) != 0x80;
	return w;
}

bool cli_table_print(const cli_table *t)
{
	if (t->failed)
		return false;
	size_t *w = calloc(t->ncols, sizeof(*w));
	if (w == NULL)
		return false;
	for (size_t i = 0; i < t->n; i++) {
		size_t cw = width(t->cells[i]);
		if (cw > w[i % t->ncols])
			w[i % t->ncols] = cw;
	}
	for (size_t i = 0; i < t->n; i++) {
		size_t col = i % t->ncols, pad = w[col] - width(t->cells[i]);
		bool last = col == t->ncols - 1, right = t->align[col] == 'r';
		printf("%*s%s%*s%s", right ? (int)pad : 0, "", t->cells[i],
		       right || last ? 0 : (int)pad, "", last ? "\n" : "  ");
	}
	free(w);
	return true;
}

void cli_table_free(cli_table *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->cells[i]);
	free(t->cells);
	memset(t, 0, sizeof(*t));
}

const char *cli_fmt_duration(int64_t ms, char *buf, size_t cap)
{
	long long v = ms < 0 ? -(long long)ms : (long long)ms, s = v / 1000;
	if (v < 1000)
		snprintf(buf, cap, "%lldms", v);
	else if (v < 10000)
		snprintf(buf, cap, "%lld.%llds", s, v % 1000 / 100);
	else if (s < 60)
		snprintf(buf, cap, "%llds", s);
	else if (s < 3600)
		snprintf(buf, cap, "%lldm%02llds", s / 60, s % 60);
	else if (s < 86400)
		snprintf(buf, cap, "%lldh%02lldm", s / 3600, s % 3600 / 60);
	else
		snprintf(buf, cap, "%lldd%02lldh", s / 86400, s % 86400 / 3600);
	return buf;
}

const char *cli_fmt_expiry(int64_t in_ms, char *buf, size_t cap)
{
	char d[32];
	cli_fmt_duration(in_ms, d, sizeof(d));
	snprintf(buf, cap, in_ms > 0 ? "in %s" : "expired %s ago", d);
	return buf;
}

const char *cli_fmt_time(const char *iso, char *buf, size_t cap)
{
	if (iso == NULL)
		snprintf(buf, cap, "-");
	else
		snprintf(buf, cap, "%.10s %.8s", iso, strlen(iso) > 11 ? iso + 11 : "");
	return buf;
}

const char *cli_fmt_oneline(const char *s, size_t max, char *buf, size_t cap)
{
	size_t o = 0, chars = 0;
	bool space = false;
	for (const char *p = s; *p; p++) {
		unsigned char ch = (unsigned char)*p;
		if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
			space = o > 0;
			continue;
		}
		bool starts = (ch & 0xC0) != 0x80;
		/* room for a space, a 4-byte character, "..." and the NUL */
		if (starts && (chars + space >= max || o + 9 > cap)) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (space)
			buf[o++] = ' ', chars++;
		space = false;
		if (o + 4 < cap)
			buf[o++] = (char)ch;
		chars += starts;
	}
	buf[o] = '\0';
	return buf;
}

json_t *cli_json_str(const char *s)
{
	if (s == NULL)
		return json_null();
	json_t *v = json_string(s);
	if (v != NULL)
		return v;
	/* not UTF-8 (a database in SQL_ASCII): keep the ASCII, mark the rest */
	char *copy = strdup(s);
	for (char *p = copy; p && *p; p++)
		if ((unsigned char)*p >= 0x80)
			*p = '?';
	v = copy ? json_string(copy) : NULL;
	free(copy);
	return v ? v : json_null();
}

json_t *cli_json_raw(const char *text)
{
	if (text == NULL)
		return json_null();
	json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
	return v ? v : json_string(text);
}

bool cli_json_print(json_t *doc)
{
	char *s = doc ? json_dumps(doc, JSON_INDENT(2)) : NULL;
	json_decref(doc);
	if (s == NULL)
		return false;
	bool ok = printf("%s\n", s) >= 0 && fflush(stdout) == 0;
	free(s);
	return ok;
}
