/*
 * fuzz_url.c — connection strings: pooler detection, the direct-endpoint
 * rewrite and redaction.
 *
 * Invariants:
 *  - a derived direct URL parses and keeps user, password, port and dbname;
 *  - libpq finds no password but "***" in a redacted string;
 *  - the input put as the password into URI, query and key = value
 *    templates never shows in a redacted string or in an error message.
 */
#include <libpq-fe.h>

#include "fuzz.h"
#include "skiplock.h"

static char *opt(const char *conninfo, const char *key)
{
	char *msg = NULL, *v = NULL;
	PQconninfoOption *o = PQconninfoParse(conninfo, &msg);
	PQfreemem(msg);
	for (PQconninfoOption *p = o; p && p->keyword; p++)
		if (strcmp(p->keyword, key) == 0 && p->val)
			v = strdup(p->val);
	PQconninfoFree(o);
	return v;
}

static int same(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a && b && strcmp(a, b) == 0);
}

static void check_direct(const char *url, const char *direct)
{
	static const char *const keys[] = {"user", "password", "port", "dbname"};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		char *x = opt(url, keys[i]), *y = opt(direct, keys[i]);
		if (!same(x, y))
			fuzz_fail("direct URL of \"%s\" changed %s", url, keys[i]);
		free(x);
		free(y);
	}
}

static void check_redacted(const char *url)
{
	char *r = skl_url_redact(url);
	if (r == NULL)
		fuzz_fail("redact returned NULL");
	char *pw = opt(r, "password");
	if (pw && *pw && strcmp(pw, "***") != 0)
		fuzz_fail("redacted \"%s\" still has a password", url);
	free(pw);
	skl_free(r);
}

static void whole_input(const char *s)
{
	skl_pooler p;
	skl_error err;
	char *direct = NULL;
	skl_url_detect_pooler(s, &p, &err);
	if (skl_url_direct(s, &direct, &err) == SKL_OK)
		check_direct(s, direct);
	skl_free(direct);
	check_redacted(s);
}

/* The input as the password of each template, when it cannot end the
 * password early (so that all of it is the password). */
static void as_password(const char *secret)
{
	static const struct { const char *fmt, *stops; } t[] = {
		{"postgresql://u:%s@h.example/db", "@/"},
		{"postgresql://h.example/db?sslmode=disable&password=%s", "&#"},
		{"host=h.example password=%s dbname=d", " \t\n\r\v\f'\\"},
	};
	if (strlen(secret) < 3 || strchr(secret, '*'))
		return;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		if (secret[strcspn(secret, t[i].stops)] != '\0')
			continue;
		char url[512];
		if ((size_t)snprintf(url, sizeof(url), t[i].fmt, secret) >= sizeof(url))
			continue;
		if (strstr(t[i].fmt, secret))
			continue; /* the template's own text: nothing to find */
		skl_pooler p;
		skl_error err;
		char *r = skl_url_redact(url);
		if (r && strstr(r, secret))
			fuzz_fail("redacted \"%s\" shows the password: %s", url, r);
		skl_free(r);
		if (skl_url_detect_pooler(url, &p, &err) != SKL_OK && strstr(err.message, secret))
			fuzz_fail("error for \"%s\" shows the password: %s", url, err.message);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_cstr(data, size);
	if (s == NULL)
		return 0;
	whole_input(s);
	as_password(s);
	free(s);
	return 0;
}
