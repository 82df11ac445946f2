/*
 * curl_lazy.h — libcurl, loaded on first use.
 *
 * libcurl brings about twenty shared libraries with it (GnuTLS through
 * librtmp, nettle, gmp, p11-kit, libssh2, nghttp2, …): 2–3 MiB of resident
 * pages in every process that merely links it.  Only webhook handlers
 * need it, so the library does not link libcurl: it opens libcurl.so.4
 * with dlopen the first time a webhook URL is checked or a webhook handler
 * is added, and a worker without webhooks never maps it.
 *
 * Include this instead of <curl/curl.h>: the curl_* functions used by
 * skiplock are then calls through a table, valid once skl__curl_load()
 * returned true.
 */
#ifndef SKL_CURL_LAZY_H
#define SKL_CURL_LAZY_H

#include <stdbool.h>
#include <time.h>

#include <curl/curl.h>

typedef struct skl_curl_fns {
	CURLcode (*global_init)(long flags);
	CURL *(*easy_init)(void);
	CURLcode (*easy_setopt)(CURL *c, CURLoption o, ...);
	CURLcode (*easy_perform)(CURL *c);
	CURLcode (*easy_getinfo)(CURL *c, CURLINFO i, ...);
	void (*easy_reset)(CURL *c);
	void (*easy_cleanup)(CURL *c);
	const char *(*easy_strerror)(CURLcode rc);
	struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
	void (*slist_free_all)(struct curl_slist *l);
	void (*free)(void *p);
	time_t (*getdate)(const char *s, const time_t *unused);
	CURLU *(*url)(void);
	void (*url_cleanup)(CURLU *u);
	CURLUcode (*url_get)(const CURLU *u, CURLUPart what, char **part, unsigned int flags);
	CURLUcode (*url_set)(CURLU *u, CURLUPart what, const char *part, unsigned int flags);
} skl_curl_fns;

extern skl_curl_fns skl__curl;

/* Opens libcurl once (thread-safe); false when it cannot be loaded, with
 * the reason in *why (a static string). */
bool skl__curl_load(const char **why);

#undef curl_easy_setopt
#undef curl_easy_getinfo
#define curl_global_init skl__curl.global_init
#define curl_easy_init skl__curl.easy_init
#define curl_easy_setopt skl__curl.easy_setopt
#define curl_easy_perform skl__curl.easy_perform
#define curl_easy_getinfo skl__curl.easy_getinfo
#define curl_easy_reset skl__curl.easy_reset
#define curl_easy_cleanup skl__curl.easy_cleanup
#define curl_easy_strerror skl__curl.easy_strerror
#define curl_slist_append skl__curl.slist_append
#define curl_slist_free_all skl__curl.slist_free_all
#define curl_free skl__curl.free
#define curl_getdate skl__curl.getdate
#define curl_url skl__curl.url
#define curl_url_cleanup skl__curl.url_cleanup
#define curl_url_get skl__curl.url_get
#define curl_url_set skl__curl.url_set

#endif
