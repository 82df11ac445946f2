/* Unit tests: migration file names, the first-line directive, line-ending
 * normalisation and checksums, statement splitting, the migrate endpoint
 * (Neon rewrite, pooled refusal), table names, loading a directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "skiplock.h"

static const struct name_case {
	const char *file;
	skl_rc rc;
	long long version;
	const char *name;
} name_cases[] = {
	{"0001_init.sql", SKL_OK, 1, "init"},
	{"20260101120000_add-users_Table2.sql", SKL_OK, 20260101120000LL, "add-users_Table2"},
	{"7_x.sql", SKL_OK, 7, "x"},
	{"999999999999999999_max.sql", SKL_OK, 999999999999999999LL, "max"},
	{"1234567890123456789_too_long.sql", SKL_INVALID, 0, ""},
	{"0000_zero.sql", SKL_INVALID, 0, ""},
	{"0001-init.sql", SKL_INVALID, 0, ""},
	{"init.sql", SKL_INVALID, 0, ""},
	{"0001_.sql", SKL_INVALID, 0, ""},
	{"0001_init.SQL", SKL_INVALID, 0, ""},
	{"0001_init", SKL_INVALID, 0, ""},
	{"0001_in it.sql", SKL_INVALID, 0, ""},
	{"0001_a.b.sql", SKL_INVALID, 0, ""},
	{"_0001_a.sql", SKL_INVALID, 0, ""},
	{"0001_", SKL_INVALID, 0, ""},
	{"", SKL_INVALID, 0, ""},
};

static void names(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(name_cases) / sizeof(name_cases[0]); i++) {
		const struct name_case *c = &name_cases[i];
		int64_t v = -1;
		char name[SKL_MIGRATE_NAME_MAX + 1];
		skl_error err;
		skl_rc rc = skl_migrate_parse_name(c->file, &v, name, sizeof(name), &err);
		if (rc != c->rc)
			fail_msg("%s: rc %d, want %d (%s)", c->file, rc, c->rc, err.message);
		assert_int_equal(v, c->version);
		assert_string_equal(name, c->name);
		if (rc != SKL_OK)
			assert_non_null(strstr(err.message, c->file));
	}
	int64_t v;
	char small[4];
	skl_error err;
	assert_int_equal(skl_migrate_parse_name("1_abcd.sql", &v, small, sizeof(small), &err),
	                 SKL_INVALID);
}

static void headers(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		skl_rc rc;
		bool no_txn;
	} cases[] = {
		{"-- skiplock:no-transaction\nCREATE INDEX CONCURRENTLY i ON t (c);", SKL_OK, true},
		{"-- skiplock:no-transaction\r\nSELECT 1;", SKL_OK, true},
		{"-- skiplock:no-transaction  \nSELECT 1;", SKL_OK, true},
		{"-- skiplock:no-transaction", SKL_OK, true},
		{"CREATE TABLE t (id int);\n-- skiplock:no-transaction\n", SKL_OK, false},
		{"-- a comment\n", SKL_OK, false},
		{"", SKL_OK, false},
		{" -- skiplock:no-transaction\n", SKL_OK, false},
		{"-- skiplock:no-transactions\n", SKL_INVALID, false},
		{"-- skiplock:notransaction\n", SKL_INVALID, false},
		{"-- skiplock:\n", SKL_INVALID, false},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		bool no_txn = !cases[i].no_txn;
		skl_error err;
		skl_rc rc = skl_migrate_parse_header(cases[i].text, strlen(cases[i].text), &no_txn,
		                                     &err);
		if (rc != cases[i].rc || no_txn != cases[i].no_txn)
			fail_msg("case %zu: rc %d no_txn %d", i, rc, no_txn);
		if (rc != SKL_OK)
			assert_non_null(strstr(err.message, "unknown directive"));
	}
}

static void normalise_and_checksum(void **state)
{
	(void)state;
	char text[] = "a\r\nb\rc\n\r\nd";
	size_t n = skl_migrate_normalise(text, strlen(text));
	assert_int_equal(n, 8);
	assert_memory_equal(text, "a\nb\nc\n\nd", 8);

	char lf[65], crlf[65], cr[65], other[65];
	skl_error err;
	assert_int_equal(skl_migrate_checksum("abc", 3, lf, &err), SKL_OK);
	assert_string_equal(lf, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	const char *l = "CREATE TABLE t (id int);\nINSERT INTO t VALUES (1);\n";
	const char *w = "CREATE TABLE t (id int);\r\nINSERT INTO t VALUES (1);\r\n";
	const char *m = "CREATE TABLE t (id int);\rINSERT INTO t VALUES (1);\r";
	assert_int_equal(skl_migrate_checksum(l, strlen(l), lf, &err), SKL_OK);
	assert_int_equal(skl_migrate_checksum(w, strlen(w), crlf, &err), SKL_OK);
	assert_int_equal(skl_migrate_checksum(m, strlen(m), cr, &err), SKL_OK);
	assert_string_equal(lf, crlf);
	assert_string_equal(lf, cr);
	assert_int_equal(skl_migrate_checksum(l, strlen(l) - 1, other, &err), SKL_OK);
	assert_string_not_equal(lf, other);
	assert_int_equal(skl_migrate_checksum("", 0, other, &err), SKL_OK);
	assert_string_equal(other, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

/* Splits text; writes "LINE:STATEMENT|" per statement into out. */
static void split(const char *text, char *out, size_t cap)
{
	size_t pos = 0, start, len, used = 0;
	int line;
	out[0] = '\0';
	while (skl_migrate_next_statement(text, strlen(text), &pos, &start, &len, &line))
		used += (size_t)snprintf(out + used, cap - used, "%d:%.*s|", line, (int)len,
		                         text + start);
}

static void statements(void **state)
{
	(void)state;
	char out[1024];
	split("CREATE TABLE a (id int);\nINSERT INTO a VALUES (1);", out, sizeof(out));
	assert_string_equal(out, "1:CREATE TABLE a (id int)|2:INSERT INTO a VALUES (1)|");
	split("-- head; comment\n\n/* block; /* nested; */ still; */\nSELECT 1;\n\n;;\n-- tail;\n",
	      out, sizeof(out));
	assert_string_equal(out, "4:SELECT 1|");
	split("SELECT 'a;b', 'it''s;', E'x\\';y', \"we;ird\";SELECT 2", out, sizeof(out));
	assert_string_equal(out, "1:SELECT 'a;b', 'it''s;', E'x\\';y', \"we;ird\"|1:SELECT 2|");
	split("CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;\n"
	      "DO $body$ BEGIN PERFORM 1; END $body$;\nSELECT $1;", out, sizeof(out));
	assert_string_equal(out, "1:CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$|"
	                         "2:DO $body$ BEGIN PERFORM 1; END $body$|3:SELECT $1|");
	split("SELECT 1 -- trailing; comment\n  + 2;\nSELECT 'unterminated;", out, sizeof(out));
	assert_string_equal(out, "1:SELECT 1 -- trailing; comment\n  + 2|3:SELECT 'unterminated;|");
	split("", out, sizeof(out));
	assert_string_equal(out, "");
	split("  \n-- only a comment", out, sizeof(out));
	assert_string_equal(out, "");
}

static void endpoint(void **state)
{
	(void)state;
	char *out = NULL;
	bool pooled = true;
	skl_error err;
	unsetenv("DATABASE_URL");
	unsetenv("DIRECT_DATABASE_URL");
	/* Neon: the "-pooler" host is rewritten, everything else kept. */
	assert_int_equal(skl_migrate_endpoint("postgresql://u:p@ep-cool-pond-1-pooler.us-east-2.aws."
	                                      "neon.tech/db?sslmode=require", NULL, SKL_POOLER_AUTO,
	                                      false, &out, &pooled, &err), SKL_OK);
	assert_string_equal(out, "postgresql://u:p@ep-cool-pond-1.us-east-2.aws.neon.tech/db?"
	                         "sslmode=require");
	assert_false(pooled);
	skl_free(out);
	/* A direct URL wins. */
	assert_int_equal(skl_migrate_endpoint("postgresql://app@pgb:6432/app",
	                                      "postgresql://app@db:5432/app", SKL_POOLER_AUTO,
	                                      false, &out, &pooled, &err), SKL_OK);
	assert_string_equal(out, "postgresql://app@db:5432/app");
	skl_free(out);
	/* A pooled URL with nothing to derive: refused, or allowed. */
	assert_int_equal(skl_migrate_endpoint("postgresql://app@pgb:6432/app", NULL, SKL_POOLER_AUTO,
	                                      false, &out, &pooled, &err), SKL_INVALID);
	assert_null(out);
	assert_non_null(strstr(err.message, "refusing to migrate through a connection pooler"));
	assert_non_null(strstr(err.message, "--direct-url"));
	assert_int_equal(skl_migrate_endpoint("postgresql://app@pgb:6432/app", NULL, SKL_POOLER_AUTO,
	                                      true, &out, &pooled, &err), SKL_OK);
	assert_string_equal(out, "postgresql://app@pgb:6432/app");
	assert_true(pooled);
	skl_free(out);
	/* --pooler transaction on a URL that does not look pooled. */
	assert_int_equal(skl_migrate_endpoint("postgresql://app@db:5555/app", NULL,
	                                      SKL_POOLER_TRANSACTION, false, &out, &pooled, &err),
	                 SKL_INVALID);
	/* A direct URL from the environment. */
	setenv("DIRECT_DATABASE_URL", "postgresql://app@db/app", 1);
	assert_int_equal(skl_migrate_endpoint("postgresql://app@pgb:6432/app", NULL, SKL_POOLER_AUTO,
	                                      false, &out, &pooled, &err), SKL_OK);
	assert_string_equal(out, "postgresql://app@db/app");
	skl_free(out);
	unsetenv("DIRECT_DATABASE_URL");
	assert_int_equal(skl_migrate_endpoint("postgresql://app@db/app", NULL, SKL_POOLER_AUTO,
	                                      false, &out, &pooled, &err), SKL_OK);
	assert_false(pooled);
	skl_free(out);
}

static void tables(void **state)
{
	(void)state;
	skl_error err;
	const char *good[] = {"migrations", "skiplock.migrations", "app_1.schema_migrations", "_x"};
	const char *bad[] = {"", "Migrations", "a.b.c", ".x", "x.", "1x", "a-b", "x;drop", "a b",
	                     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_int_equal(skl_migrate_check_table(good[i], &err), SKL_OK);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(skl_migrate_check_table(bad[i], &err), SKL_INVALID);
	assert_int_equal(skl_migrate_check_table(NULL, &err), SKL_INVALID);
}

static void put(const char *dir, const char *file, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static void load_dir(void **state)
{
	(void)state;
	char dir[] = "/tmp/skl-unit-migrate.XXXXXX";
	assert_non_null(mkdtemp(dir));
	skl_migration_set set;
	skl_error err;
	put(dir, "0002_b.sql", "-- skiplock:no-transaction\r\nCREATE INDEX CONCURRENTLY i ON t (c);\r\n");
	put(dir, "0010_c.sql", "SELECT 1;\n");
	put(dir, "1_a.sql", "CREATE TABLE t (c int);\n");
	put(dir, "README.md", "not a migration");
	put(dir, ".0003_hidden.sql", "ignored");
	assert_int_equal(skl_migrate_load_dir(dir, &set, &err), SKL_OK);
	assert_int_equal(set.n, 3);
	assert_int_equal(set.items[0].version, 1);
	assert_int_equal(set.items[1].version, 2);
	assert_int_equal(set.items[2].version, 10);
	assert_true(set.items[1].no_transaction);
	assert_false(set.items[0].no_transaction);
	assert_string_equal(set.items[1].sql,
	                    "-- skiplock:no-transaction\nCREATE INDEX CONCURRENTLY i ON t (c);\n");
	assert_string_equal(set.items[1].file, "0002_b.sql");
	skl_migrate_set_free(&set);

	put(dir, "0001_dup.sql", "SELECT 2;\n");
	assert_int_equal(skl_migrate_load_dir(dir, &set, &err), SKL_INVALID);
	assert_non_null(strstr(err.message, "have the same version 1"));
	assert_int_equal(set.n, 0);
	char path[512];
	snprintf(path, sizeof(path), "%s/0001_dup.sql", dir);
	unlink(path);
	put(dir, "0004 bad.sql", "SELECT 3;\n");
	assert_int_equal(skl_migrate_load_dir(dir, &set, &err), SKL_INVALID);
	assert_non_null(strstr(err.message, "0004 bad.sql"));
	snprintf(path, sizeof(path), "%s/0004 bad.sql", dir);
	unlink(path);

	put(dir, "0005_txn.sql", "CREATE TABLE x (id int);\n  Begin;\n");
	assert_int_equal(skl_migrate_load_dir(dir, &set, &err), SKL_INVALID);
	assert_non_null(strstr(err.message, "0005_txn.sql line 2: Begin is not allowed"));
	put(dir, "0005_txn.sql", "-- skiplock:no-transaction\nBEGIN;\nCOMMIT;\n"
	                         "DO $$ BEGIN PERFORM 1; END $$;\n");
	assert_int_equal(skl_migrate_load_dir(dir, &set, &err), SKL_OK);
	skl_migrate_set_free(&set);
	put(dir, "0005_txn.sql", "DO $$ BEGIN PERFORM 1; END $$;\nSELECT 'commit;';\n"
	                         "CREATE TABLE begin_log (id int);\n");
	assert_int_equal(skl_migrate_load_dir(dir, &set, &err), SKL_OK);
	skl_migrate_set_free(&set);
	snprintf(path, sizeof(path), "%s/0005_txn.sql", dir);
	unlink(path);

	assert_int_equal(skl_migrate_load_dir("/nonexistent/skl", &set, &err), SKL_INVALID);
	assert_non_null(strstr(err.message, "does not exist"));
	const char *files[] = {"0002_b.sql", "0010_c.sql", "1_a.sql", "README.md",
	                       ".0003_hidden.sql"};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		unlink(path);
	}
	rmdir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(names), cmocka_unit_test(headers),
		cmocka_unit_test(normalise_and_checksum), cmocka_unit_test(statements),
		cmocka_unit_test(endpoint), cmocka_unit_test(tables), cmocka_unit_test(load_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
