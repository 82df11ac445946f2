/*
 * sqlscan.c — splitting SQL text into statements: quotes, quoted
 * identifiers, dollar quotes, "--" and nested block comments are skipped.
 * Used by the migrations (skl_migrate_next_statement) and by the schema
 * repair, which picks the function definitions out of a step.
 */
#include <ctype.h>
#include <stdbool.h>
#include <string.h>

#include "core/internal.h"

/* Length of a dollar-quote tag "$tag$" at text[i], or 0 when none. */
static size_t dollar_tag(const char *t, size_t len, size_t i)
{
	size_t j = i + 1;
	if (j < len && isdigit((unsigned char)t[j]))
		return 0; /* $1: a parameter */
	while (j < len && (isalnum((unsigned char)t[j]) || t[j] == '_' ||
	                   (unsigned char)t[j] >= 0x80))
		j++;
	return j < len && t[j] == '$' ? j - i + 1 : 0;
}

/* Index just past the quoted or commented span starting at i, or i when
 * none starts there. */
static size_t skip_span(const char *t, size_t len, size_t i)
{
	char ch = t[i];
	if (ch == '-' && i + 1 < len && t[i + 1] == '-') {
		while (i < len && t[i] != '\n')
			i++;
		return i;
	}
	if (ch == '/' && i + 1 < len && t[i + 1] == '*') {
		int depth = 0;
		for (; i < len; i++) {
			if (t[i] == '/' && i + 1 < len && t[i + 1] == '*')
				depth++, i++;
			else if (t[i] == '*' && i + 1 < len && t[i + 1] == '/' && --depth == 0)
				return i + 2;
		}
		return len;
	}
	if (ch == '\'' || ch == '"') {
		bool esc = ch == '\'' && i > 0 && (t[i - 1] == 'E' || t[i - 1] == 'e');
		for (i++; i < len; i++) {
			if (esc && t[i] == '\\')
				i++;
			else if (t[i] == ch && i + 1 < len && t[i + 1] == ch)
				i++;
			else if (t[i] == ch)
				return i + 1;
		}
		return len;
	}
	size_t tag = ch == '$' ? dollar_tag(t, len, i) : 0;
	if (tag == 0)
		return i;
	for (size_t j = i + tag; j + tag <= len; j++)
		if (memcmp(t + j, t + i, tag) == 0)
			return j + tag;
	return len;
}

static int count_lines(const char *t, size_t from, size_t to)
{
	int n = 0;
	for (size_t i = from; i < to; i++)
		n += t[i] == '\n';
	return n;
}

bool skl__next_statement(const char *text, size_t len, size_t *pos, size_t *start,
                          size_t *stmt_len, int *line)
{
	size_t i = *pos;
	int base = 1 + count_lines(text, 0, i);
	for (;;) { /* skip whitespace and comments before the statement */
		while (i < len && (isspace((unsigned char)text[i]) || text[i] == ';'))
			i++;
		size_t j = i < len && (text[i] == '-' || text[i] == '/') ? skip_span(text, len, i) : i;
		if (j == i)
			break;
		i = j;
	}
	if (i >= len) {
		*pos = len;
		return false;
	}
	*start = i;
	*line = base + count_lines(text, *pos, i);
	while (i < len && text[i] != ';') {
		size_t j = skip_span(text, len, i);
		i = j > i ? j : i + 1;
	}
	*stmt_len = i - *start;
	*pos = i < len ? i + 1 : len;
	return true;
}
