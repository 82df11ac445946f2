/*
 * curl_lazy.c — libcurl.so.4 opened on first use (see curl_lazy.h) through
 * core/lazy.h: only the table of functions is here.
 */
#include <stddef.h>

#include "core/lazy.h"
#include "worker/curl_lazy.h"

skl_curl_fns skl__curl;

static const skl__lazy_sym symbols[] = {
	{"curl_global_init", offsetof(skl_curl_fns, global_init)},
	{"curl_easy_init", offsetof(skl_curl_fns, easy_init)},
	{"curl_easy_setopt", offsetof(skl_curl_fns, easy_setopt)},
	{"curl_easy_perform", offsetof(skl_curl_fns, easy_perform)},
	{"curl_easy_getinfo", offsetof(skl_curl_fns, easy_getinfo)},
	{"curl_easy_reset", offsetof(skl_curl_fns, easy_reset)},
	{"curl_easy_cleanup", offsetof(skl_curl_fns, easy_cleanup)},
	{"curl_easy_strerror", offsetof(skl_curl_fns, easy_strerror)},
	{"curl_slist_append", offsetof(skl_curl_fns, slist_append)},
	{"curl_slist_free_all", offsetof(skl_curl_fns, slist_free_all)},
	{"curl_free", offsetof(skl_curl_fns, free)},
	{"curl_getdate", offsetof(skl_curl_fns, getdate)},
	{"curl_url", offsetof(skl_curl_fns, url)},
	{"curl_url_cleanup", offsetof(skl_curl_fns, url_cleanup)},
	{"curl_url_get", offsetof(skl_curl_fns, url_get)},
	{"curl_url_set", offsetof(skl_curl_fns, url_set)},
};

static skl__lazy lib = SKL__LAZY_INIT("libcurl.so.4", symbols, skl__curl);

bool skl__curl_load(const char **why)
{
	return skl__lazy_load(&lib, why);
}
