/* Unit tests: the shape checks of explain --compare (no database). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "skiplock.h"

static const char *const query = "SELECT id FROM events WHERE status = 'pending'";

static const struct good_index {
	const char *sql;
	const char *table;
} good[] = {
	{"CREATE INDEX ON events (status)", "events"},
	{"create unique index if not exists e_idx on only public.events using btree (a, (lower(b)))"
	 " include (c) where status = 'x;y' ;", "public.events"},
	{"CREATE INDEX \"Odd name\" ON \"My Schema\".\"T\" (a) -- comment ; here", "\"My Schema\".\"T\""},
	{"/* lead */ CREATE INDEX i ON t (a) WHERE b = $$it's; fine$$", "t"},
};

static void good_indexes(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		char table[160];
		skl_error err;
		skl_rc rc = skl_explain_check(good[i].sql, query, table, sizeof(table), &err);
		if (rc != SKL_OK)
			fail_msg("%s: %s", good[i].sql, err.message);
		assert_string_equal(table, good[i].table);
	}
}

static const struct bad {
	const char *index, *query, *message;
} bad[] = {
	{"DROP TABLE events", NULL, "must be CREATE [UNIQUE] INDEX"},
	{"CREATE INDEX CONCURRENTLY ON events (a)", NULL, "CONCURRENTLY cannot run"},
	{"CREATE INDEX ON events (a", NULL, "unbalanced parentheses"},
	{"CREATE INDEX ON events a)", NULL, "unbalanced parentheses"},
	{"CREATE INDEX ON events", NULL, "no column list"},
	{"CREATE INDEX ON (a)", NULL, "no table name after ON"},
	{"CREATE INDEX ON events (a); DROP TABLE events", NULL, "more than one statement"},
	{"CREATE INDEX ON events (a) WHERE b = 'open", NULL, "unterminated quote"},
	{"CREATE TABLE x (a int)", NULL, "must be CREATE [UNIQUE] INDEX"},
	{NULL, "DELETE FROM events", "must be one SELECT, not \"DELETE\""},
	{NULL, "", "must be one SELECT, not \"(empty)\""},
	{NULL, "SELECT 1; DELETE FROM events", "more than one statement"},
	{NULL, "SELECT (1", "unbalanced parentheses"},
	{NULL, "SELECT 1 /* open", "unterminated quote or comment"},
};

static void bad_inputs(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		skl_error err;
		const char *ix = bad[i].index ? bad[i].index : "CREATE INDEX ON t (a)";
		skl_rc rc = skl_explain_check(ix, bad[i].query ? bad[i].query : query, NULL, 0, &err);
		assert_int_equal(rc, SKL_INVALID);
		if (strstr(err.message, bad[i].message) == NULL)
			fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err.message, bad[i].message);
	}
}

static void good_queries(void **state)
{
	(void)state;
	const char *const q[] = {"WITH x AS (SELECT 1) SELECT * FROM x", "(SELECT 1) UNION SELECT 2",
	                         "TABLE events", "VALUES (1)", "  -- note\n select ';' ;  "};
	for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); i++) {
		skl_error err;
		if (skl_explain_check("CREATE INDEX ON t (a)", q[i], NULL, 0, &err) != SKL_OK)
			fail_msg("%s: %s", q[i], err.message);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(good_indexes),
		cmocka_unit_test(bad_inputs),
		cmocka_unit_test(good_queries),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
