/* Unit tests: result columns checked by name (src/lib/core/columns.c), on
 * results built with libpq's own constructors (no server). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "core/internal.h"

static PGresult *result_with(const char *const *names, int n)
{
	PGresult *r = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
	PGresAttDesc attrs[8];
	assert_true(r != NULL && n <= 8);
	for (int i = 0; i < n; i++)
		attrs[i] = (PGresAttDesc){.name = (char *)names[i], .typid = 25, .typlen = -1,
		                          .atttypmod = -1};
	assert_true(PQsetResultAttrs(r, n, attrs));
	return r;
}

static void match(void **state)
{
	(void)state;
	static const char *const want[] = {"id", "state", "delay_ms"};
	static const char *const same[] = {"id", "state", "delay_ms", "extra"};
	static const char *const swapped[] = {"id", "delay_ms", "state"};
	static const char *const shorter[] = {"id", "state"};
	PGresult *r = result_with(same, 4);
	assert_true(skl__columns_match(r, want, 3));     /* more columns after: fine */
	skl_error err;
	assert_int_equal(skl__check_columns(r, want, 3, &err), SKL_OK);
	PQclear(r);

	r = result_with(swapped, 3);
	assert_false(skl__columns_match(r, want, 3));
	assert_int_equal(skl__check_columns(r, want, 3, &err), SKL_DB);
	if (strstr(err.message, "column 2 of the answer is \"delay_ms\", expected \"state\"") == NULL)
		fail_msg("message: %s", err.message);
	PQclear(r);

	r = result_with(shorter, 2);
	assert_false(skl__columns_match(r, want, 3));
	assert_int_equal(skl__check_columns(r, want, 3, NULL), SKL_DB);
	assert_int_equal(skl__check_columns(r, want, 3, &err), SKL_DB);
	if (strstr(err.message, "column 3 of the answer is \"(none)\"") == NULL)
		fail_msg("message: %s", err.message);
	PQclear(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {cmocka_unit_test(match)};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
