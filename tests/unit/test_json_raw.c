/* Unit tests: JSON kept as its text (src/lib/core/json_raw.c) — the
 * number grammar, masking that keeps every column, the text of a
 * top-level member, and which numbers PostgreSQL's jsonb takes (the
 * bounds below were checked against PostgreSQL: '…'::jsonb). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "core/json_raw.h"

static void number_grammar(void **state)
{
	(void)state;
	static const char *const good[] = {"0", "-0", "0.1", "1E+2", "1e-2", "-12.50e0001",
	                                   "123456789012345678901234567890123456789"};
	static const char *const bad[] = {"", "-", "01", "+1", "1.", ".5", "1e", "1.e2", "1e2e3"};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		if (!skl__json_is_number(good[i], strlen(good[i])))
			fail_msg("\"%s\" refused, want a number", good[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (skl__json_is_number(bad[i], strlen(bad[i])))
			fail_msg("\"%s\" accepted, want refused", bad[i]);
}

/* The masked text keeps every column and parses where the original is JSON. */
static void masking(void **state)
{
	(void)state;
	static const struct { const char *in, *want; } cases[] = {
		{"[0.1,1e2,-5]", "[0  ,0  ,0 ]"},
		{"{\"a1\": \"-2 3\", \"b\": 18446744073709551616}",
		 "{\"a1\": \"-2 3\", \"b\": 0                   }"},
		{"\"es\\\"c 1\" 2", "\"es\\\"c 1\" 0"},
		{"[01, 1-2, 1.]", "[01, 1-2, 1.]"},
		{"\"open 1", "\"open 1"}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char buf[128];
		size_t n = strlen(cases[i].in);
		memcpy(buf, cases[i].in, n + 1);
		skl__json_mask_numbers(buf, n);
		if (strcmp(buf, cases[i].want) != 0)
			fail_msg("mask(%s) = [%s], want [%s]", cases[i].in, buf, cases[i].want);
	}
	char line[] = "{\"id\": 1, \"result\": {\"big\": 123456789012345678901234567890}}";
	skl__json_mask_numbers(line, strlen(line));
	json_t *v = json_loads(line, 0, NULL);
	assert_non_null(v);
	json_decref(v);
}

static void check_member(const char *t, const char *key, const char *want)
{
	size_t off = 99, len = 99;
	bool found = skl__json_member(t, strlen(t), key, &off, &len);
	if (want == NULL && found)
		fail_msg("%s: found [%.*s], want none", t, (int)len, t + off);
	if (want && !found)
		fail_msg("%s: not found, want [%s]", t, want);
	if (want && (len != strlen(want) || memcmp(t + off, want, len) != 0))
		fail_msg("%s: found [%.*s], want [%s]", t, (int)len, t + off, want);
}

static void members(void **state)
{
	(void)state;
	check_member("{\"id\":7,\"outcome\":\"ok\",\"result\":{\"n\":0.1}}", "result", "{\"n\":0.1}");
	check_member(" { \"result\" :\t1e2 , \"id\": 7 } ", "result", "1e2");
	check_member("{\"result\": [1, {\"}\": \"]\"}], \"x\": 1}", "result",
	             "[1, {\"}\": \"]\"}]");
	check_member("{\"result\": null}", "result", "null");
	check_member("{\"result\": 1, \"result\": 2.50}", "result", "2.50"); /* jansson: the last */
	check_member("{\"res\\u0075lt\": 7}", "result", "7");
	check_member("{\"result\\u0000\": 7}", "result", NULL);
	check_member("{\"a\": {\"result\": 1}}", "result", NULL);
	check_member("[{\"result\": 1}]", "result", NULL);
	check_member("{\"result\": [1, 2", "result", NULL);
	check_member("{\"result\": \"x", "result", NULL);
	check_member("{\"res\\u00", "result", NULL);
	check_member("{\"result\": 1", "result", NULL);
	check_member("", "result", NULL);
}

static void numbers_fit(void **state)
{
	(void)state;
	static const char *const fit[] = {
		"1e131071", "9e131071", "0.5e131072", "1e-16383", "0.1e-16382", "1e-400",
		"123456789012345678901234567890", "0.1000000000000000055511151231257827", "-0",
		"{\"a\": [1e400, \"1e999999\"], \"b\": -2.5E+3}", "0e150000", "true"};
	static const char *const misfit[] = {
		"10e131071", "1e131072", "1e1000000", "1e-16384", "1.5e-16383", "0.00e-16382",
		"0e-20000", "0.0001e-16380", "[1, 1e999999]", "{\"n\": -1e2000000000}",
		"0e2000000000"};
	for (size_t i = 0; i < sizeof(fit) / sizeof(fit[0]); i++)
		if (!skl__json_numbers_fit(fit[i], strlen(fit[i])))
			fail_msg("%s: refused, PostgreSQL takes it", fit[i]);
	for (size_t i = 0; i < sizeof(misfit) / sizeof(misfit[0]); i++)
		if (skl__json_numbers_fit(misfit[i], strlen(misfit[i])))
			fail_msg("%s: accepted, PostgreSQL refuses it", misfit[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(number_grammar), cmocka_unit_test(masking),
		cmocka_unit_test(members), cmocka_unit_test(numbers_fit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
