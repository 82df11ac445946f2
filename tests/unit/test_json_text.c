/* Unit tests: JSON checked as text (src/cli/json_text.c) — the number
 * grammar, number masking that keeps every column, and the exact text of a
 * top-level member. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "enqueue/json_text.h"

static void number_grammar(void **state)
{
	(void)state;
	static const char *const good[] = {"0", "-0", "1", "0.1", "1e2", "1E+2", "1e-2",
	                                   "1.5e300", "-12.50e0001", "1e400",
	                                   "18446744073709551616",
	                                   "123456789012345678901234567890123456789"};
	static const char *const bad[] = {"", "-", "01", "+1", "1.", ".5", "1e", "1e+",
	                                  "1.e2", "--1", "1-2", "0x10", "1e2e3", "00"};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		if (!cli_json_is_number(good[i], strlen(good[i])))
			fail_msg("\"%s\" refused, want a number", good[i]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (cli_json_is_number(bad[i], strlen(bad[i])))
			fail_msg("\"%s\" accepted, want refused", bad[i]);
}

static void check_mask(const char *in, const char *want)
{
	char buf[256];
	size_t n = strlen(in);
	memcpy(buf, in, n + 1);
	cli_json_mask_numbers(buf, n);
	if (strcmp(buf, want) != 0)
		fail_msg("mask(%s) = [%s], want [%s]", in, buf, want);
}

static void masking(void **state)
{
	(void)state;
	check_mask("[0.1,1e2,-5]", "[0  ,0  ,0 ]");
	check_mask("{\"a1\": \"-2 3\", \"b\": 18446744073709551616}",
	           "{\"a1\": \"-2 3\", \"b\": 0                   }");
	check_mask("\"es\\\"c 1\" 2", "\"es\\\"c 1\" 0");
	/* malformed numbers are left for the parser to report */
	check_mask("[01, 1-2, 1.]", "[01, 1-2, 1.]");
	check_mask("\"open 1", "\"open 1");
	check_mask("true1", "true0");
}

/* Masked text parses exactly when the original is JSON. */
static void masked_parse(void **state)
{
	(void)state;
	static const struct { const char *text; bool ok; } cases[] = {
		{"1e400", true}, {"[-18446744073709551617, 1.5e300]", true},
		{"{\"a\": 1 2}", false}, {"[1-2]", false}, {"[01]", false},
		{"{\"a\" 1}", false}, {"[1,]", false}, {"1e", false}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char buf[64];
		size_t n = strlen(cases[i].text);
		memcpy(buf, cases[i].text, n + 1);
		cli_json_mask_numbers(buf, n);
		json_t *v = json_loadb(buf, n, JSON_DECODE_ANY, NULL);
		if ((v != NULL) != cases[i].ok)
			fail_msg("%s: parsed %d, want %d", cases[i].text, v != NULL, cases[i].ok);
		json_decref(v);
	}
}

static void check_member(const char *t, const char *key, const char *want)
{
	size_t off = 99, len = 99;
	bool found = cli_json_member(t, strlen(t), key, &off, &len);
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
	check_member("{\"kind\":\"k\",\"payload\":{\"n\":0.1}}", "payload", "{\"n\":0.1}");
	check_member(" { \"payload\" :\t1e2 , \"kind\": \"k\" } ", "payload", "1e2");
	check_member("{\"payload\": [1, {\"}\": \"]\"}], \"x\": 1}", "payload",
	             "[1, {\"}\": \"]\"}]");
	check_member("{\"payload\": \"a\\\"b\"}", "payload", "\"a\\\"b\"");
	check_member("{\"payload\": null}", "payload", "null");
	/* the last duplicate wins, as in jansson */
	check_member("{\"payload\": 1, \"payload\": 2.50}", "payload", "2.50");
	/* escaped keys compare decoded */
	check_member("{\"pay\\u006coad\": 7}", "payload", "7");
	check_member("{\"p\\/ayload\": 7}", "payload", NULL);
	check_member("{\"payload\\u0000\": 7}", "payload", NULL);
	check_member("{\"payloa\": 7, \"payloads\": 8}", "payload", NULL);
	check_member("{\"a\": {\"payload\": 1}}", "payload", NULL);
	check_member("{}", "payload", NULL);
	/* not objects, or cut short: nothing, and no read past the end */
	check_member("[{\"payload\": 1}]", "payload", NULL);
	check_member("{\"payload\": [1, 2", "payload", NULL);
	check_member("{\"payload\": \"x", "payload", NULL);
	check_member("{\"payload\"", "payload", NULL);
	check_member("{\"pay\\u00", "payload", NULL);
	check_member("{\"payload\\", "payload", NULL);
	check_member("", "payload", NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(number_grammar), cmocka_unit_test(masking),
		cmocka_unit_test(masked_parse), cmocka_unit_test(members),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
