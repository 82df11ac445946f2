/* Unit tests: advisory-key reconstruction from pg_locks and the keys known
 * tools take.  Expected values come from the tools' own tests (golang-migrate
 * database/util_test.go) or were computed independently (CRC-32 with
 * Python's zlib). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "skiplock.h"

static void tag_one_bigint(void **state)
{
	(void)state;
	skl_advisory_key k;
	/* pg_advisory_lock(-1): classid = objid = 4294967295 (oids are unsigned). */
	assert_int_equal(skl_advisory_key_from_tag(4294967295u, 4294967295u, 1, &k), SKL_OK);
	assert_false(k.two);
	assert_true(k.key == -1);
	/* skiplock init's key 8316001898373562369 = 0x73685faa_a007c001 */
	assert_int_equal(skl_advisory_key_from_tag(0x73685faau, 0xa007c001u, 1, &k), SKL_OK);
	assert_true(k.key == SKL_KEY_SKIPLOCK_INIT);
	/* the low half alone, with its top bit set: no sign extension */
	assert_int_equal(skl_advisory_key_from_tag(0u, 0x80000000u, 1, &k), SKL_OK);
	assert_true(k.key == INT64_C(2147483648));
	/* the most negative bigint */
	assert_int_equal(skl_advisory_key_from_tag(0x80000000u, 0u, 1, &k), SKL_OK);
	assert_true(k.key == INT64_MIN);
}

static void tag_two_int4(void **state)
{
	(void)state;
	skl_advisory_key k;
	/* pg_advisory_lock(-2, 7) */
	assert_int_equal(skl_advisory_key_from_tag(4294967294u, 7u, 2, &k), SKL_OK);
	assert_true(k.two);
	assert_int_equal(k.k1, -2);
	assert_int_equal(k.k2, 7);
	assert_int_equal(skl_advisory_key_from_tag(1, 2, 3, &k), SKL_INVALID);
	assert_int_equal(skl_advisory_key_from_tag(1, 2, 0, &k), SKL_INVALID);
}

static void sqlx_keys(void **state)
{
	(void)state;
	/* 0x3d32ad9e * CRC32(name); crc32("postgres") = 359303029 */
	assert_true(skl_key_sqlx("postgres") == INT64_C(368907709894077238));
	assert_true(skl_key_sqlx("mydb") == INT64_C(293176876009260204));
	/* a CRC above 2^31: the product is still positive (no wrap-around) */
	assert_true(skl_key_sqlx("skiplock_test") == INT64_C(2839221065551830034));
	assert_true(skl_key_sqlx("") == 0);
}

static void golang_migrate_keys(void **state)
{
	(void)state;
	/* the cases of golang-migrate's database/util_test.go */
	const char *one[] = {"database_name"};
	assert_true(skl_key_golang_migrate(one, 1) == INT64_C(1764327054));
	const char *s1[] = {"database_name", "schema_name_1"};
	assert_true(skl_key_golang_migrate(s1, 2) == INT64_C(3244152297));
	const char *s2[] = {"database_name", "schema_name_2"};
	assert_true(skl_key_golang_migrate(s2, 2) == INT64_C(810103531));
	/* the postgres driver opened by URL: "/db", schema, table */
	const char *url[] = {"/app", "public", "schema_migrations"};
	assert_true(skl_key_golang_migrate(url, 3) == INT64_C(257547563));
}

static const char *name_of(int64_t key, const char *db)
{
	static char buf[128];
	static const char *const schemas[] = {"public", "app"};
	skl_advisory_key k = {.key = key};
	return skl_advisory_key_name(&k, db, schemas, 2, buf, sizeof(buf));
}

static void names(void **state)
{
	(void)state;
	assert_string_equal(name_of(SKL_KEY_SKIPLOCK_INIT, "x"), "skiplock init (schema install)");
	assert_string_equal(name_of(72707369, "x"), "Prisma migrations");
	assert_string_equal(name_of(75474063, "x"), "sqitch deploy");
	assert_string_equal(name_of(INT64_C(368907709894077238), "postgres"), "sqlx migrations");
	/* sqlx's key is per database: another database's is not named */
	assert_null(name_of(INT64_C(368907709894077238), "mydb"));
	assert_string_equal(name_of(INT64_C(257547563), "app"),
	                    "golang-migrate migrations (public.schema_migrations)");
	const char *plain[] = {"app", "app", "schema_migrations"};
	assert_string_equal(name_of(skl_key_golang_migrate(plain, 3), "app"),
	                    "golang-migrate migrations (app.schema_migrations)");
	assert_string_equal(name_of(INT64_C(1764327054), "database_name"),
	                    "golang-migrate migrations (database database_name)");
	assert_null(name_of(42, "app"));
	skl_advisory_key two = {.two = true, .k1 = 0, .k2 = 72707369};
	char buf[64];
	assert_null(skl_advisory_key_name(&two, "app", NULL, 0, buf, sizeof(buf)));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tag_one_bigint), cmocka_unit_test(tag_two_int4),
		cmocka_unit_test(sqlx_keys),      cmocka_unit_test(golang_migrate_keys),
		cmocka_unit_test(names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
