/*
 * test_protocol_sql.c — the C worker sends only calls of the protocol
 * functions that sql/ defines: no claim or outcome statement exists only
 * as a C string (CONTRIBUTING.md, rule 8).  For each statement the worker sends,
 * the function it calls must be created by a built-in schema step, and
 * every column the C code reads by name must be a column of that
 * function's result type: in the step that creates the type, or added to
 * it by a later one (ALTER TYPE … ADD ATTRIBUTE).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/schema_steps.h"
#include "queue/queue_int.h"

/* The text of the newest built-in step that creates `what` (e.g. "FUNCTION
 * skiplock.claim("), from that point on; NULL when none does. */
static const char *definition(const char *what)
{
	const char *found = NULL;
	char pat[128];
	snprintf(pat, sizeof(pat), "CREATE %s", what);
	for (int i = 0; i < skl_schema_nsteps; i++) {
		const char *p = strstr(skl_schema_steps[i].sql, pat);
		if (p)
			found = p;
	}
	return found;
}

/* The function a statement calls: "skiplock.NAME(" after FROM. */
static void called(const char *sql, char *name, size_t cap)
{
	const char *p = strstr(sql, "FROM skiplock.");
	assert_non_null(p);
	p += strlen("FROM ");
	size_t n = strcspn(p, "(");
	assert_true(n < cap);
	memcpy(name, p, n);
	name[n] = '\0';
}

/* Whether the type body [t, end) (its "name type, …" list, with comments)
 * has a column named col. */
static bool has_column(const char *t, const char *end, const char *col, size_t n)
{
	for (const char *p = t; p < end; p++) {
		if (p > t && (p[-1] == '(' || p[-1] == ',' || p[-1] == '\n' || p[-1] == ' ') &&
		    strncmp(p, col, n) == 0 && p[n] == ' ') {
			const char *q = p - 1;
			while (q > t && *q == ' ')
				q--;
			if (*q == '(' || *q == ',' || *q == '\n')
				return true;
		}
	}
	return false;
}

/* Whether a built-in step adds column col (n bytes) to type. */
static bool added_column(const char *type, const char *col, size_t n)
{
	char pat[160];
	snprintf(pat, sizeof(pat), "ALTER TYPE %s ADD ATTRIBUTE %.*s ", type, (int)n, col);
	for (int i = 0; i < skl_schema_nsteps; i++)
		if (strstr(skl_schema_steps[i].sql, pat))
			return true;
	return false;
}

/* Every name in the statement's select list is a column of the type
 * (CREATE TYPE … AS ( … );) that the function returns. */
static void check_call(const char *sql, const char *type)
{
	char fn[64], what[96];
	called(sql, fn, sizeof(fn));
	snprintf(what, sizeof(what), "FUNCTION %s(", fn);
	assert_non_null(definition(what));
	snprintf(what, sizeof(what), "TYPE %s AS (", type);
	const char *t = definition(what);
	assert_non_null(t);
	const char *end = strstr(t, ");");
	assert_non_null(end);
	const char *list = sql + strlen("SELECT ");
	const char *stop = strstr(sql, " FROM skiplock.");
	for (const char *p = list; p < stop;) {
		size_t n = strcspn(p, ", ");
		bool literal = p[0] == '\'';
		if (!literal && !has_column(t, end, p, n) && !added_column(type, p, n))
			fail_msg("%s reads column \"%.*s\", which %s does not have", fn, (int)n, p, type);
		p += n;
		while (p < stop && (*p == ',' || *p == ' '))
			p++;
		if (literal) /* 'claimed'::text AS row_type: the rest is the alias */
			break;
	}
}

static void claim_calls_the_function(void **state)
{
	(void)state;
	check_call(skl__claim_sql(false), "skiplock.claimed_job");
}

static void record_claim_calls_the_function(void **state)
{
	(void)state;
	check_call(skl__claim_sql(true), "skiplock.exchange_row");
}

static void record_calls_the_function(void **state)
{
	(void)state;
	check_call(skl__record_sql(), "skiplock.recorded_outcome");
}

static void heartbeat_calls_the_function(void **state)
{
	(void)state;
	check_call(skl__heartbeat_sql(), "skiplock.heartbeat_result");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(claim_calls_the_function),
		cmocka_unit_test(record_claim_calls_the_function),
		cmocka_unit_test(record_calls_the_function),
		cmocka_unit_test(heartbeat_calls_the_function),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
