/* Unit tests: skl_limit_spec_check, the bounds of a limit on job starts
 * checked before any statement (sql/0029_limits.sql keeps the same ones):
 * each edge accepted, each value past it refused with a message naming it,
 * and the rules between the fields (one of max_running and rate; per only
 * with a rate). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "skiplock.h"

/* skl_limit_spec_check's result; on SKL_INVALID the message must contain
 * want (NULL: the check must pass). */
static void expect(const skl_limit_spec *s, const char *want)
{
	skl_error err;
	memset(&err, 0, sizeof(err));
	skl_rc rc = skl_limit_spec_check(s, &err);
	if (want == NULL) {
		assert_int_equal(rc, SKL_OK);
		return;
	}
	assert_int_equal(rc, SKL_INVALID);
	assert_int_equal(err.rc, SKL_INVALID);
	assert_non_null(strstr(err.message, want));
}

static void accepted(void **state)
{
	(void)state;
	expect(&(skl_limit_spec){.kind = "k", .max_running = 1}, NULL);
	expect(&(skl_limit_spec){.kind = "k", .rate = 1}, NULL);
	expect(&(skl_limit_spec){.kind = "k", .max_running = SKL_LIMIT_MAX, .rate = SKL_LIMIT_MAX,
	                         .per_ms = SKL_LIMIT_PER_MAX_MS, .key_field = "customer"}, NULL);
	expect(&(skl_limit_spec){.kind = "k", .rate = 20, .per_ms = 1}, NULL);
	char kind[SKL_KIND_MAX + 1], field[SKL_LIMIT_FIELD_MAX + 1];
	memset(kind, 'k', SKL_KIND_MAX);
	kind[SKL_KIND_MAX] = '\0';
	memset(field, 'f', SKL_LIMIT_FIELD_MAX);
	field[SKL_LIMIT_FIELD_MAX] = '\0';
	expect(&(skl_limit_spec){.kind = kind, .max_running = 2, .key_field = field}, NULL);
}

static void refused(void **state)
{
	(void)state;
	expect(NULL, "needs a spec");
	expect(&(skl_limit_spec){.kind = NULL, .max_running = 1}, "job kind must be 1 to 128");
	expect(&(skl_limit_spec){.kind = "", .max_running = 1}, "job kind must be 1 to 128");
	expect(&(skl_limit_spec){.kind = "k"}, "max_running, a rate, or both");
	expect(&(skl_limit_spec){.kind = "k", .max_running = -1}, "max_running must be 1 to");
	expect(&(skl_limit_spec){.kind = "k", .max_running = SKL_LIMIT_MAX + 1},
	       "max_running must be 1 to 1000000, got 1000001");
	expect(&(skl_limit_spec){.kind = "k", .rate = SKL_LIMIT_MAX + 1}, "rate must be 1 to");
	expect(&(skl_limit_spec){.kind = "k", .rate = 1, .per_ms = -1}, "per must be 1 ms to 1 day");
	expect(&(skl_limit_spec){.kind = "k", .rate = 1, .per_ms = SKL_LIMIT_PER_MAX_MS + 1},
	       "per must be 1 ms to 1 day");
	expect(&(skl_limit_spec){.kind = "k", .max_running = 1, .per_ms = 1000}, "give a rate too");
	expect(&(skl_limit_spec){.kind = "k", .max_running = 1, .key_field = ""},
	       "key_field must be 1 to 128 bytes");
	char kind[SKL_KIND_MAX + 2], field[SKL_LIMIT_FIELD_MAX + 2];
	memset(kind, 'k', SKL_KIND_MAX + 1);
	kind[SKL_KIND_MAX + 1] = '\0';
	memset(field, 'f', SKL_LIMIT_FIELD_MAX + 1);
	field[SKL_LIMIT_FIELD_MAX + 1] = '\0';
	expect(&(skl_limit_spec){.kind = kind, .max_running = 1}, "job kind must be 1 to 128");
	expect(&(skl_limit_spec){.kind = "k", .max_running = 1, .key_field = field},
	       "key_field must be 1 to 128 bytes");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(accepted),
		cmocka_unit_test(refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
