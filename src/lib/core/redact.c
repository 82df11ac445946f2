/*
 * redact.c — keeping passwords out of everything skiplock shows: the
 * connection string in messages and logs, and libpq's own error messages
 * (some echo part of the string, e.g. "invalid percent-encoded token").
 *
 * The secrets are found by reading the string the way libpq does: the
 * password of a URI's user info and every "password" or "sslpassword"
 * value, in URI query parameters (keys percent-decoded, as libpq does) and
 * in key = value strings (quoted values and backslash escapes included).
 * A redacted string is parsed again; if libpq would still find a password
 * in it that is not "***", the whole string is replaced by "***".
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

#define MAX_SPANS 32

/* Where secrets are in a connection string: byte offset and length. */
typedef struct spans {
	size_t off[MAX_SPANS], len[MAX_SPANS];
	int n;
	bool overflow;
} spans;

static void add_span(spans *s, const char *base, const char *from, const char *to)
{
	if (to <= from)
		return;
	if (s->n == MAX_SPANS) {
		s->overflow = true;
		return;
	}
	s->off[s->n] = (size_t)(from - base);
	s->len[s->n++] = (size_t)(to - from);
}

static bool secret_key(const char *k, size_t n)
{
	return (n == 8 && strncmp(k, "password", 8) == 0) ||
	       (n == 11 && strncmp(k, "sslpassword", 11) == 0);
}

static int hexval(int c)
{
	return isdigit(c) ? c - '0' : isxdigit(c) ? (tolower(c) - 'a' + 10) : -1;
}

/* Percent-decodes s[0..n) into out (at least n + 1 bytes); bad escapes are
 * copied as they are. */
static size_t pct_decode(const char *s, size_t n, char *out)
{
	size_t w = 0;
	for (size_t i = 0; i < n; i++) {
		int hi = i + 2 < n + 0 && s[i] == '%' ? hexval((unsigned char)s[i + 1]) : -1;
		int lo = hi >= 0 ? hexval((unsigned char)s[i + 2]) : -1;
		if (lo >= 0) {
			out[w++] = (char)(hi * 16 + lo);
			i += 2;
		} else {
			out[w++] = s[i];
		}
	}
	out[w] = '\0';
	return w;
}

static bool is_uri(const char *s)
{
	return strncmp(s, "postgresql://", 13) == 0 || strncmp(s, "postgres://", 11) == 0;
}

static void uri_query_spans(const char *url, const char *q, spans *s)
{
	while (*q) {
		size_t plen = strcspn(q, "&"), klen = strcspn(q, "=&");
		char key[16];
		if (klen < plen && klen < 3 * sizeof(key)) {
			char dec[3 * sizeof(key) + 1];
			size_t dn = pct_decode(q, klen, dec);
			if (dn < sizeof(key) && secret_key(dec, dn))
				add_span(s, url, q + klen + 1, q + plen);
		}
		q += plen + (q[plen] == '&');
	}
}

static void uri_spans(const char *url, spans *s)
{
	const char *auth = strstr(url, "://") + 3;
	const char *end = auth + strcspn(auth, "/");
	const char *at = NULL;
	for (const char *p = auth; p < end; p++)
		if (*p == '@')
			at = p;
	const char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
	if (colon)
		add_span(s, url, colon + 1, at);
	const char *q = strchr(at ? at + 1 : auth, '?');
	if (q)
		uri_query_spans(url, q + 1, s);
}

/* The end of a key = value string's value that starts at p. */
static const char *kv_value_end(const char *p)
{
	bool quoted = *p == '\'';
	for (p += quoted; *p; p++) {
		if (quoted ? *p == '\'' : isspace((unsigned char)*p))
			return p + quoted;
		if (*p == '\\' && p[1])
			p++;
	}
	return p;
}

static void kv_spans(const char *str, spans *s)
{
	const char *p = str;
	for (;;) {
		while (isspace((unsigned char)*p))
			p++;
		if (*p == '\0')
			return;
		const char *key = p;
		while (*p && !isspace((unsigned char)*p) && *p != '=')
			p++;
		size_t klen = (size_t)(p - key);
		while (isspace((unsigned char)*p))
			p++;
		if (*p != '=')
			return; /* libpq rejects the rest */
		p++;
		while (isspace((unsigned char)*p))
			p++;
		const char *v = p;
		p = kv_value_end(v);
		if (secret_key(key, klen))
			add_span(s, str, v, p);
	}
}

static void find_spans(const char *url, spans *s)
{
	memset(s, 0, sizeof(*s));
	if (is_uri(url))
		uri_spans(url, s);
	else
		kv_spans(url, s);
}

/* url with every span replaced by "***" (spans are in order, disjoint). */
static char *mask_spans(const char *url, const spans *s)
{
	size_t n = strlen(url);
	char *out = malloc(n + 3 * (size_t)s->n + 1), *w = out;
	if (out == NULL)
		return NULL;
	size_t at = 0;
	for (int i = 0; i < s->n; i++) {
		memcpy(w, url + at, s->off[i] - at);
		w += s->off[i] - at;
		memcpy(w, "***", 3);
		w += 3;
		at = s->off[i] + s->len[i];
	}
	strcpy(w, url + at);
	return out;
}

/* True when libpq would find no password in r other than "***". */
static bool still_secret(const char *r)
{
	char *msg = NULL;
	PQconninfoOption *opts = PQconninfoParse(r, &msg);
	PQfreemem(msg);
	if (opts == NULL)
		return false;
	bool leak = false;
	for (PQconninfoOption *o = opts; o->keyword; o++)
		if (secret_key(o->keyword, strlen(o->keyword)) && o->val && *o->val &&
		    strcmp(o->val, "***") != 0)
			leak = true;
	PQconninfoFree(opts);
	return leak;
}

char *skl_url_redact(const char *url)
{
	if (url == NULL)
		return NULL;
	spans s;
	find_spans(url, &s);
	char *out = mask_spans(url, &s);
	if (out && (s.overflow || still_secret(out))) {
		free(out);
		out = strdup("***");
	}
	return out;
}

/* Replaces every occurrence of secret (n bytes) in msg by "***", in place. */
static void scrub_one(char *msg, const char *secret, size_t n)
{
	if (n < 3)
		return; /* "***" must not be longer than what it replaces */
	for (char *p = msg; (p = memmem(p, strlen(p), secret, n)) != NULL;) {
		memcpy(p, "***", 3);
		memmove(p + 3, p + n, strlen(p + n) + 1);
		p += 3;
	}
}

void skl__scrub(char *msg, const char *url)
{
	if (msg == NULL || url == NULL)
		return;
	spans s;
	find_spans(url, &s);
	for (int i = 0; i < s.n; i++) {
		const char *v = url + s.off[i];
		size_t n = s.len[i];
		char *dec = malloc(n + 1);
		if (dec == NULL)
			continue;
		size_t dn = pct_decode(v, n, dec);
		scrub_one(msg, v, n);
		scrub_one(msg, dec, dn);
		if (n >= 2 && v[0] == '\'' && v[n - 1] == '\'')
			scrub_one(msg, v + 1, n - 2);
		free(dec);
	}
}
