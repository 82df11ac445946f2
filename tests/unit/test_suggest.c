/* Unit tests: "did you mean" (src/cli/suggest.c) — the edit distance, and
 * which name of a table is suggested for a mistyped one, if any. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "suggest.h"

static void distance(void **state)
{
	(void)state;
	static const struct {
		const char *a, *b;
		size_t want;
	} cases[] = {
		{"", "", 0}, {"list", "list", 0}, {"", "abc", 3}, {"abc", "", 3},
		{"lsit", "list", 1},        /* a swap of neighbours is one edit */
		{"lst", "list", 1},         /* insertion */
		{"lists", "list", 1},       /* deletion */
		{"lust", "list", 1},        /* substitution */
		{"LIST", "list", 0},        /* ASCII case is ignored */
		{"kitten", "sitting", 3}, {"stauts", "status", 1}, {"ca", "abc", 3},
		{"frob", "prune", 4}, {"json", "jsno", 1},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t got = cli_edit_distance(cases[i].a, cases[i].b);
		if (got != cases[i].want)
			fail_msg("distance(\"%s\", \"%s\") = %zu, want %zu", cases[i].a, cases[i].b, got,
			         cases[i].want);
		if (cli_edit_distance(cases[i].b, cases[i].a) != got)
			fail_msg("distance(\"%s\", \"%s\") is not symmetric", cases[i].a, cases[i].b);
	}
	/* long names are compared up to the cap, without overflow */
	char a[200], b[200];
	memset(a, 'x', sizeof(a) - 1);
	memset(b, 'y', sizeof(b) - 1);
	a[199] = b[199] = '\0';
	assert_int_equal(cli_edit_distance(a, b), SUGGEST_MAX_LEN);
}

static const char *suggest(const char *typed, const char *const *names)
{
	cli_suggest s;
	cli_suggest_init(&s, typed);
	for (size_t i = 0; names[i]; i++)
		cli_suggest_add(&s, names[i]);
	return s.best;
}

static void check(const char *typed, const char *const *names, const char *want)
{
	const char *got = suggest(typed, names);
	if (want == NULL ? got != NULL : got == NULL || strcmp(got, want) != 0)
		fail_msg("suggestion for \"%s\": \"%s\", want \"%s\"", typed, got ? got : "(none)",
		         want ? want : "(none)");
}

static void choice(void **state)
{
	(void)state;
	static const char *const jobs[] = {"list", "show", "retry", "cancel", "prune", NULL};
	static const char *const migrate[] = {"up", "status", "verify", NULL};
	static const char *const opts[] = {"url", "direct-url", "json", "state", "queue", NULL};
	static const char *const tie[] = {"cat", "car", NULL};
	check("lsit", jobs, "list");
	check("prnue", jobs, "prune");
	check("cancle", jobs, "cancel");
	check("Show", jobs, "show");
	check("frob", jobs, NULL);          /* nothing close */
	check("stauts", migrate, "status");
	check("down", migrate, NULL);
	check("u", migrate, NULL);          /* as many edits as letters typed: no guess */
	check("x", migrate, NULL);
	check("jsno", opts, "json");
	check("queu", opts, "queue");
	check("stat", opts, "state");
	check("direct-ulr", opts, "direct-url");
	check("ul", opts, "url");
	check("colour", opts, NULL);
	check("lsi", jobs, NULL);           /* two edits from a four-letter name: too far */
	check("ca", tie, "cat");            /* a tie goes to the first in table order */
	check("car", tie, "car");           /* an exact name is its own suggestion */
	check("cra", tie, "car");           /* one swap from car, two edits from cat */
	check(NULL, jobs, NULL);            /* no name (a short option): nothing */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(distance),
		cmocka_unit_test(choice),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
