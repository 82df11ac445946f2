/* Unit tests: pooler detection, direct-endpoint derivation, redaction. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "skiplock.h"

static const struct detect_case {
	const char *url;
	skl_pooler want;
} detect_cases[] = {
	{"postgresql://u:p@ep-cool-pond-123456-pooler.us-east-2.aws.neon.tech/db?sslmode=require",
	 SKL_POOLER_TRANSACTION},
	{"postgresql://u:p@ep-cool-pond-123456.us-east-2.aws.neon.tech/db?sslmode=require",
	 SKL_POOLER_NONE},
	{"postgres://u@ep-x-pooler.eu-central-1.aws.neon.tech:5432/db", SKL_POOLER_TRANSACTION},
	{"postgresql://postgres.ref:pw@aws-0-eu-west-1.pooler.supabase.com:6543/postgres",
	 SKL_POOLER_TRANSACTION},
	{"postgresql://postgres.ref:pw@aws-0-eu-west-1.pooler.supabase.com:5432/postgres",
	 SKL_POOLER_SESSION},
	{"postgresql://postgres:pw@db.ref.supabase.co:5432/postgres", SKL_POOLER_NONE},
	{"postgresql://app@10.0.0.5:6432/app", SKL_POOLER_TRANSACTION},
	{"postgresql://app@localhost/app", SKL_POOLER_NONE},
	{"host=127.0.0.1 port=6432 dbname=app user=app", SKL_POOLER_TRANSACTION},
	{"host=127.0.0.1 port=5432 dbname=app", SKL_POOLER_NONE},
	{"host=/var/run/postgresql dbname=app", SKL_POOLER_NONE},
	{"postgresql://a,b-pooler.x.neon.tech/db", SKL_POOLER_TRANSACTION},
	{"postgresql:///app?host=/tmp&port=6543", SKL_POOLER_TRANSACTION},
	{"", SKL_POOLER_NONE},
};

static void detect_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(detect_cases) / sizeof(detect_cases[0]); i++) {
		skl_pooler got = SKL_POOLER_AUTO;
		skl_error err;
		assert_int_equal(skl_url_detect_pooler(detect_cases[i].url, &got, &err), SKL_OK);
		if (got != detect_cases[i].want)
			fail_msg("%s: detected %s, want %s", detect_cases[i].url, skl_pooler_name(got),
			         skl_pooler_name(detect_cases[i].want));
	}
}

static const struct direct_case {
	const char *url;
	const char *want; /* NULL: must be refused */
} direct_cases[] = {
	{"postgresql://u:p@ep-cool-pond-123456-pooler.us-east-2.aws.neon.tech/db?sslmode=require",
	 "postgresql://u:p@ep-cool-pond-123456.us-east-2.aws.neon.tech/db?sslmode=require"},
	{"postgres://u@ep-x-pooler.eu-central-1.aws.neon.tech:5432/db?sslmode=verify-full&"
	 "application_name=x",
	 "postgres://u@ep-x.eu-central-1.aws.neon.tech:5432/db?sslmode=verify-full&"
	 "application_name=x"},
	/* a password that looks like a pooler host is left alone */
	{"postgresql://u:ep-x-pooler.a@ep-x-pooler.a.aws.neon.tech/db",
	 "postgresql://u:ep-x-pooler.a@ep-x.a.aws.neon.tech/db"},
	{"host=ep-x-pooler.us-east-2.aws.neon.tech dbname=db sslmode=require",
	 "host=ep-x.us-east-2.aws.neon.tech dbname=db sslmode=require"},
	{"postgresql://u@ep-cool-pond-123456.us-east-2.aws.neon.tech/db",
	 "postgresql://u@ep-cool-pond-123456.us-east-2.aws.neon.tech/db"},
	{"postgresql://app@localhost:5432/app", "postgresql://app@localhost:5432/app"},
	{"postgresql://postgres.ref:pw@aws-0-eu-west-1.pooler.supabase.com:6543/postgres", NULL},
	{"postgresql://app@10.0.0.5:6432/app", NULL},
	{"host=127.0.0.1 port=6432 dbname=app", NULL},
};

static void direct_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(direct_cases) / sizeof(direct_cases[0]); i++) {
		const struct direct_case *dc = &direct_cases[i];
		char *out = (char *)1;
		skl_error err;
		skl_rc rc = skl_url_direct(dc->url, &out, &err);
		if (dc->want == NULL) {
			if (rc != SKL_INVALID)
				fail_msg("%s: expected a refusal, got rc %d (%s)", dc->url, rc,
				         out ? out : "");
			assert_null(out);
			assert_non_null(strstr(err.message, "--direct-url"));
			continue;
		}
		if (rc != SKL_OK)
			fail_msg("%s: rc %d: %s", dc->url, rc, err.message);
		if (strcmp(out, dc->want) != 0)
			fail_msg("%s:\n  got  %s\n  want %s", dc->url, out, dc->want);
		skl_free(out);
	}
}

static void invalid_urls(void **state)
{
	(void)state;
	const char *bad[] = {"postgresql://[::1", "host=a port", "not a url = = ="};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		skl_pooler p;
		skl_error err;
		char *out = (char *)1;
		if (skl_url_detect_pooler(bad[i], &p, &err) != SKL_INVALID)
			fail_msg("%s: accepted", bad[i]);
		assert_non_null(strstr(err.message, "invalid connection string"));
		assert_int_equal(skl_url_direct(bad[i], &out, &err), SKL_INVALID);
		assert_null(out);
	}
}

static void redact(void **state)
{
	(void)state;
	const char *cases[][2] = {
		{"postgresql://u:secret@h/db", "postgresql://u:***@h/db"},
		{"postgresql://u@h/db", "postgresql://u@h/db"},
		{"host=h password=secret dbname=d", "host=h password=*** dbname=d"},
		{"postgresql://h/db?password=secret&sslmode=require",
		 "postgresql://h/db?password=***&sslmode=require"},
		/* short passwords are masked too */
		{"postgresql://u:ab@h/db", "postgresql://u:***@h/db"},
		{"host=h password=x", "host=h password=***"},
		/* libpq's key = value syntax: spaces, quotes, escapes */
		{"host=h password = secret", "host=h password = ***"},
		{"host=h password='sec ret' dbname=d", "host=h password=*** dbname=d"},
		{"password='it\\'s secret' host=h", "password=*** host=h"},
		{"host=h sslpassword=secret", "host=h sslpassword=***"},
		/* a '?' or '@' inside the URI password */
		{"postgresql://u:sec?ret@h/db", "postgresql://u:***@h/db"},
		{"postgresql://u:sec@ret@h/db", "postgresql://u:***@h/db"},
		/* a percent-encoded key is still the password */
		{"postgresql://h/db?%70assword=secret", "postgresql://h/db?%70assword=***"},
		{"postgres://h/db?a=1&password=secret&password=secret2",
		 "postgres://h/db?a=1&password=***&password=***"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *r = skl_url_redact(cases[i][0]);
		assert_string_equal(r, cases[i][1]);
		assert_null(strstr(r, "secret"));
		skl_free(r);
	}
}

/* libpq echoes a badly percent-encoded password in its parse error. */
static void parse_errors_hide_passwords(void **state)
{
	(void)state;
	const char *bad[] = {
		"postgresql://u:secret%zz@h/db",
		"postgresql://u:secret%00@h/db",
		"postgresql://h/db?password=secret%zz",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		skl_pooler p;
		skl_error err;
		assert_int_equal(skl_url_detect_pooler(bad[i], &p, &err), SKL_INVALID);
		if (strstr(err.message, "secret"))
			fail_msg("%s: message shows the password: %s", bad[i], err.message);
		char *r = skl_url_redact(bad[i]);
		assert_null(strstr(r, "secret"));
		skl_free(r);
	}
}

static void pooler_names(void **state)
{
	(void)state;
	skl_pooler p;
	skl_error err;
	assert_int_equal(skl_pooler_parse("transaction", &p, &err), SKL_OK);
	assert_int_equal(p, SKL_POOLER_TRANSACTION);
	assert_int_equal(skl_pooler_parse("none", &p, &err), SKL_OK);
	assert_int_equal(p, SKL_POOLER_NONE);
	assert_int_equal(skl_pooler_parse("pgbouncer", &p, &err), SKL_INVALID);
	assert_non_null(strstr(err.message, "pgbouncer"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(detect_table), cmocka_unit_test(direct_table),
		cmocka_unit_test(invalid_urls), cmocka_unit_test(redact),
		cmocka_unit_test(pooler_names), cmocka_unit_test(parse_errors_hide_passwords),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
