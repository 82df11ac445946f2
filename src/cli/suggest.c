/*
 * suggest.c — edit distance and the choice of a suggestion (see suggest.h).
 */
#include <ctype.h>
#include <string.h>

#include "suggest.h"

static size_t min3(size_t a, size_t b, size_t c)
{
	size_t m = a < b ? a : b;
	return m < c ? m : c;
}

static int same(char x, char y)
{
	return tolower((unsigned char)x) == tolower((unsigned char)y);
}

/* Optimal string alignment: Levenshtein plus adjacent transpositions, over
 * three rows of the matrix. */
size_t cli_edit_distance(const char *a, const char *b)
{
	size_t n = strnlen(a, SUGGEST_MAX_LEN), m = strnlen(b, SUGGEST_MAX_LEN);
	size_t rows[3][SUGGEST_MAX_LEN + 1];
	size_t *two = rows[0], *prev = rows[1], *cur = rows[2];
	for (size_t j = 0; j <= m; j++)
		prev[j] = j;
	for (size_t i = 1; i <= n; i++) {
		cur[0] = i;
		for (size_t j = 1; j <= m; j++) {
			size_t cost = same(a[i - 1], b[j - 1]) ? 0 : 1;
			cur[j] = min3(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost);
			if (i > 1 && j > 1 && same(a[i - 1], b[j - 2]) && same(a[i - 2], b[j - 1]) &&
			    two[j - 2] + 1 < cur[j])
				cur[j] = two[j - 2] + 1;
		}
		size_t *t = two;
		two = prev;
		prev = cur;
		cur = t;
	}
	return prev[m];
}

void cli_suggest_init(cli_suggest *s, const char *typed)
{
	*s = (cli_suggest){.typed = typed, .best = NULL, .dist = (size_t)-1};
}

void cli_suggest_add(cli_suggest *s, const char *candidate)
{
	if (candidate == NULL || s->typed == NULL)
		return;
	size_t d = cli_edit_distance(s->typed, candidate);
	size_t limit = strlen(candidate) <= 4 ? 1 : 2;
	if (d <= limit && d < strlen(s->typed) && d < s->dist) {
		s->best = candidate;
		s->dist = d;
	}
}
