/* Unit tests: the request fingerprint (known SHA-256 vectors, what it
 * separates), outcome names, and input checks made before any database
 * call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/internal.h"
#include "skiplock.h"

static void fingerprint_vectors(void **state)
{
	(void)state;
	char hex[SKL_IDEM_HASH_LEN];
	skl_error err;
	const char *body = "{\"amount\": 100}";
	assert_int_equal(skl_idem_fingerprint("POST", "/charges", body, strlen(body), hex, &err),
	                 SKL_OK);
	/* sha256("POST\0/charges\0{\"amount\": 100}") */
	assert_string_equal(hex, "d3960a3864ad6a0f1f21b007e44b5ec7cea9ea083ce7a61e72c57d66a97dac27");
	assert_int_equal(skl_idem_fingerprint("GET", "/", NULL, 0, hex, &err), SKL_OK);
	assert_string_equal(hex, "19fb856f52074c83ad846d55cca99520ef8e16fc483079093cc491a6ddc3dae2");
}

static void fingerprint_separates_fields(void **state)
{
	(void)state;
	char a[SKL_IDEM_HASH_LEN], b[SKL_IDEM_HASH_LEN];
	/* Moving bytes between path and body changes the fingerprint. */
	assert_int_equal(skl_idem_fingerprint("POST", "/ab", "c", 1, a, NULL), SKL_OK);
	assert_int_equal(skl_idem_fingerprint("POST", "/a", "bc", 2, b, NULL), SKL_OK);
	assert_string_not_equal(a, b);
	assert_int_equal(skl_idem_fingerprint("PUT", "/ab", "c", 1, b, NULL), SKL_OK);
	assert_string_not_equal(a, b);
	assert_int_equal(strlen(a), 64);
	skl_error err;
	assert_int_equal(skl_idem_fingerprint(NULL, "/", NULL, 0, a, &err), SKL_INVALID);
	assert_string_equal(a, "");
	assert_int_equal(skl_idem_fingerprint("GET", "/", NULL, 3, a, &err), SKL_INVALID);
}

static void names_and_checks(void **state)
{
	(void)state;
	assert_string_equal(skl_idem_outcome_name(SKL_IDEM_ACQUIRED), "acquired");
	assert_string_equal(skl_idem_outcome_name(SKL_IDEM_REPLAY), "replay");
	assert_string_equal(skl_idem_outcome_name(SKL_IDEM_IN_PROGRESS), "in_progress");
	assert_string_equal(skl_idem_outcome_name(SKL_IDEM_CONFLICT), "conflict");
	assert_string_equal(skl_idem_outcome_name((skl_idem_outcome)9), "unknown");
	skl_idem_result r = {.outcome = SKL_IDEM_CONFLICT, .response_code = 5};
	skl_error err;
	assert_int_equal(skl_idem_claim(NULL, "k", "h", NULL, &r, &err), SKL_MISUSE);
	assert_int_equal(r.response_code, 0);
	skl_idem_result_free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fingerprint_vectors),
		cmocka_unit_test(fingerprint_separates_fields),
		cmocka_unit_test(names_and_checks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
