/* Unit tests: the Retry-After parser, the status-to-outcome map, the
 * request signature and webhook URL checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "skiplock.h"
#include "worker/webhook_int.h"

#define T0 1792567680LL /* Wed, 21 Oct 2026 07:28:00 GMT */
#define YEAR_MS (366LL * 24 * 3600 * 1000)

static const struct ra_case {
	const char *value;
	int64_t now_s;
	bool ok;
	int64_t ms;
} ra_cases[] = {
	{"120", T0, true, 120000},
	{"0", T0, true, 0},
	{"  7\t", T0, true, 7000},
	{"3\r\n", T0, true, 3000},
	{"000042", T0, true, 42000},
	{"Wed, 21 Oct 2026 07:28:00 GMT", T0 - 90, true, 90000},
	{"Wednesday, 21-Oct-26 07:28:00 GMT", T0 - 5, true, 5000},
	{"Wed Oct 21 07:28:00 2026", T0 - 1, true, 1000},
	{"Wed, 21 Oct 2026 07:28:00 GMT", T0 + 3600, true, 0}, /* in the past */
	{"Wed, 21 Oct 2099 07:28:00 GMT", T0, true, YEAR_MS},  /* capped */
	{"99999999999999999999999999999", T0, true, YEAR_MS},  /* no overflow */
	{"31622400", T0, true, YEAR_MS},
	{"31622399", T0, true, 31622399000LL},
	{"", T0, false, 0},
	{"   ", T0, false, 0},
	{"-5", T0, false, 0},
	{"+5", T0, false, 0},
	{"1.5", T0, false, 0},
	{"5s", T0, false, 0},
	{"5 6", T0, false, 0},
	{"soon", T0, false, 0},
	{"GMT", T0, false, 0},
	{"Wed, 32 Foo 2026 99:99:99 GMT", T0, false, 0},
};

static void retry_after_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(ra_cases) / sizeof(ra_cases[0]); i++) {
		const struct ra_case *c = &ra_cases[i];
		int64_t ms = -1;
		bool ok = skl_retry_after_ms(c->value, c->now_s, &ms);
		if (ok != c->ok || (ok && ms != c->ms))
			fail_msg("\"%s\": got ok=%d ms=%lld, want ok=%d ms=%lld", c->value, ok,
			         (long long)ms, c->ok, (long long)c->ms);
		if (!ok)
			assert_int_equal(ms, -1); /* untouched */
	}
	int64_t ms = -1;
	assert_false(skl_retry_after_ms(NULL, T0, &ms));
	char longv[300];
	memset(longv, '1', sizeof(longv) - 1);
	longv[sizeof(longv) - 1] = '\0';
	assert_false(skl_retry_after_ms(longv, T0, &ms));
}

static void outcomes(void **state)
{
	(void)state;
	bool ra;
	const struct { long status; int want; bool ra; } cases[] = {
		{200, SKL_JOB_OK, false}, {201, SKL_JOB_OK, false}, {204, SKL_JOB_OK, false},
		{299, SKL_JOB_OK, false}, {429, SKL_JOB_RETRY, true}, {503, SKL_JOB_RETRY, true},
		{400, SKL_JOB_DISCARD, false}, {404, SKL_JOB_DISCARD, false},
		{410, SKL_JOB_DISCARD, false}, {422, SKL_JOB_DISCARD, false},
		{500, 1, false}, {502, 1, false}, {504, 1, false}, {301, 1, false},
		{100, 1, false}, {0, 1, false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(skl__webhook_outcome(cases[i].status, &ra), cases[i].want);
		assert_int_equal(ra, cases[i].ra);
	}
}

static void signature(void **state)
{
	(void)state;
	char out[72];
	const char *msg = "what do ya want for nothing?"; /* RFC 4231, test case 2 */
	assert_true(skl__webhook_sign("Jefe", msg, strlen(msg), out));
	assert_string_equal(out, "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b9"
	                         "64ec3843");
}

static void urls(void **state)
{
	(void)state;
	const char *good[] = {"http://127.0.0.1:8080/hook", "https://example.com",
	                      "HTTPS://example.com/a?b=c", "http://[::1]:9/x",
	                      "http://user:pw@example.com/x"};
	const char *bad[] = {"", "example.com/hook", "ftp://example.com/x", "http://",
	                     "http:///path", "https://:443/x", "file:///etc/passwd",
	                     "http://exa mple.com/", "mailto:a@b.c", "://x"};
	skl_error err;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		if (skl_webhook_url_check(good[i], &err) != SKL_OK)
			fail_msg("\"%s\" refused: %s", good[i], err.message);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (skl_webhook_url_check(bad[i], &err) != SKL_INVALID)
			fail_msg("\"%s\" accepted", bad[i]);
	assert_int_equal(skl_webhook_url_check(NULL, &err), SKL_INVALID);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(retry_after_table), cmocka_unit_test(outcomes),
		cmocka_unit_test(signature), cmocka_unit_test(urls),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
