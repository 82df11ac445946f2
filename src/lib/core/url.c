/*
 * url.c — connection strings: pooler detection, the direct endpoint, and
 * redaction.  Pure functions (no network); parsing is libpq's own
 * (PQconninfoParse), so URLs and key=value strings are handled alike.
 *
 * Invariant: a derived direct URL differs from its input only in the host
 * text; user, password, port, database and parameters stay as written.
 * Redaction is in redact.c; libpq's parse errors are scrubbed of secrets
 * before they reach a message (some echo part of the string).
 */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"

static const char *opt_value(PQconninfoOption *opts, const char *key)
{
	for (PQconninfoOption *o = opts; o && o->keyword; o++)
		if (strcmp(o->keyword, key) == 0)
			return o->val;
	return NULL;
}

static skl_rc parse(const char *url, PQconninfoOption **out, skl_error *err)
{
	char *msg = NULL;
	*out = PQconninfoParse(url ? url : "", &msg);
	if (*out == NULL) {
		skl__scrub(msg, url);
		skl__seterr(err, SKL_INVALID, "invalid connection string: %s",
		            msg ? msg : "out of memory");
		PQfreemem(msg);
		return SKL_INVALID;
	}
	return SKL_OK;
}

skl_rc skl__url_host_port(const char *url, char **host, char **port, skl_error *err)
{
	PQconninfoOption *opts;
	*host = *port = NULL;
	if (parse(url, &opts, err) != SKL_OK)
		return SKL_INVALID;
	*host = skl__strdup(opt_value(opts, "host"));
	*port = skl__strdup(opt_value(opts, "port"));
	PQconninfoFree(opts);
	return SKL_OK;
}

/* Length of the first DNS label of the host that starts at h and ends at the
 * first ',' or end of string. */
static size_t first_label_len(const char *h)
{
	return strcspn(h, ".,:");
}

static bool label_is_pooler(const char *h)
{
	size_t n = first_label_len(h);
	return n > 7 && strncmp(h + n - 7, "-pooler", 7) == 0;
}

static bool any_host(const char *hosts, bool (*pred)(const char *))
{
	for (const char *h = hosts; h && *h;) {
		if (pred(h))
			return true;
		h = strchr(h, ',');
		h = h ? h + 1 : NULL;
	}
	return false;
}

static bool is_supabase_pooler(const char *h)
{
	size_t n = strcspn(h, ",");
	const char *suffix = ".pooler.supabase.com";
	size_t sl = strlen(suffix);
	return n >= sl && strncmp(h + n - sl, suffix, sl) == 0;
}

static bool port_listed(const char *ports, const char *p)
{
	size_t pl = strlen(p);
	for (const char *s = ports; s && *s;) {
		size_t n = strcspn(s, ",");
		if (n == pl && strncmp(s, p, pl) == 0)
			return true;
		s = s[n] ? s + n + 1 : NULL;
	}
	return false;
}

skl_rc skl_url_detect_pooler(const char *url, skl_pooler *out, skl_error *err)
{
	char *host, *port;
	if (skl__url_host_port(url, &host, &port, err) != SKL_OK)
		return SKL_INVALID;
	skl_pooler p = SKL_POOLER_NONE;
	if (any_host(host, label_is_pooler) || port_listed(port, "6432") ||
	    port_listed(port, "6543"))
		p = SKL_POOLER_TRANSACTION;
	else if (any_host(host, is_supabase_pooler))
		p = port_listed(port, "5432") || port == NULL ? SKL_POOLER_SESSION
		                                               : SKL_POOLER_TRANSACTION;
	free(host);
	free(port);
	*out = p;
	skl_error_clear(err);
	return SKL_OK;
}

/* Host list with "-pooler" removed from each first label that ends in it. */
static char *strip_pooler(const char *hosts)
{
	char *out = malloc(strlen(hosts) + 1), *w = out;
	if (out == NULL)
		return NULL;
	for (const char *h = hosts; *h;) {
		size_t n = first_label_len(h);
		bool strip = label_is_pooler(h);
		memcpy(w, h, strip ? n - 7 : n);
		w += strip ? n - 7 : n;
		h += n;
		size_t rest = strcspn(h, ",");
		memcpy(w, h, rest + (h[rest] == ','));
		w += rest + (h[rest] == ',');
		h += rest + (h[rest] == ',');
	}
	*w = '\0';
	return out;
}

/* Where the host text starts in url: after the last '@' of a URL's
 * authority, or after "host=" in a key=value string or URL parameter. */
static const char *host_search_start(const char *url)
{
	const char *kv = strstr(url, "host=");
	const char *scheme = strstr(url, "://");
	if (scheme == NULL)
		return kv ? kv + 5 : url;
	const char *auth = scheme + 3;
	const char *auth_end = auth + strcspn(auth, "/?");
	const char *at = NULL;
	for (const char *p = auth; p < auth_end; p++)
		if (*p == '@')
			at = p;
	if (kv && (at ? at + 1 : auth) == auth_end)
		return kv + 5; /* no host in the authority: it is a parameter */
	return at ? at + 1 : auth;
}

static char *splice(const char *url, const char *at, size_t oldlen, const char *repl)
{
	size_t pre = (size_t)(at - url), rl = strlen(repl);
	char *out = malloc(strlen(url) - oldlen + rl + 1);
	if (out == NULL)
		return NULL;
	memcpy(out, url, pre);
	memcpy(out + pre, repl, rl);
	strcpy(out + pre + rl, at + oldlen);
	return out;
}

static skl_rc rewrite_host(const char *url, const char *host, char **out, skl_error *err)
{
	char *direct_host = strip_pooler(host);
	if (direct_host == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	const char *at = strstr(host_search_start(url), host);
	char *res = at ? splice(url, at, strlen(host), direct_host) : NULL;
	char *check_host = NULL, *check_port = NULL;
	bool ok = res && skl__url_host_port(res, &check_host, &check_port, NULL) == SKL_OK &&
	          check_host && strcmp(check_host, direct_host) == 0;
	free(check_host);
	free(check_port);
	free(direct_host);
	if (!ok) {
		free(res);
		return skl__seterr(err, SKL_INVALID,
		                   "cannot rewrite the pooler host \"%s\" to its direct endpoint; "
		                   "pass --direct-url", host);
	}
	*out = res;
	return SKL_OK;
}

skl_rc skl_url_direct(const char *url, char **out, skl_error *err)
{
	char *host, *port;
	*out = NULL;
	if (skl__url_host_port(url, &host, &port, err) != SKL_OK)
		return SKL_INVALID;
	skl_pooler p = SKL_POOLER_NONE;
	skl_url_detect_pooler(url, &p, NULL);
	skl_rc rc = SKL_OK;
	if (host && any_host(host, label_is_pooler))
		rc = rewrite_host(url, host, out, err);
	else if (p != SKL_POOLER_NONE)
		rc = skl__seterr(err, SKL_INVALID,
		                 "the URL points at a connection pooler (host %s, port %s) and no "
		                 "direct endpoint can be derived from it; pass --direct-url or set "
		                 "DIRECT_DATABASE_URL", host ? host : "(default)",
		                 port ? port : "(default)");
	else if ((*out = skl__strdup(url ? url : "")) == NULL)
		rc = skl__seterr(err, SKL_NOMEM, "out of memory");
	free(host);
	free(port);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}

static const char *const pooler_names[] = {
	[SKL_POOLER_AUTO] = "auto",
	[SKL_POOLER_NONE] = "none",
	[SKL_POOLER_SESSION] = "session",
	[SKL_POOLER_TRANSACTION] = "transaction",
};

const char *skl_pooler_name(skl_pooler p)
{
	if ((int)p < 0 || (size_t)p >= SKL_ARRAY_LEN(pooler_names))
		return "unknown";
	return pooler_names[p];
}

skl_rc skl_pooler_parse(const char *s, skl_pooler *out, skl_error *err)
{
	for (size_t i = 0; s && i < SKL_ARRAY_LEN(pooler_names); i++)
		if (strcmp(s, pooler_names[i]) == 0) {
			*out = (skl_pooler)i;
			skl_error_clear(err);
			return SKL_OK;
		}
	return skl__seterr(err, SKL_INVALID,
	                   "unknown pooler mode \"%s\" (expected auto, none, session or transaction)",
	                   s ? s : "");
}
