/*
 * curl_lazy.c — opens libcurl.so.4 on first use (see curl_lazy.h).  It is
 * never closed: handles and thread-specific data may refer to it until the
 * process ends.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "worker/curl_lazy.h"

skl_curl_fns skl__curl;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *load_error = "libcurl not loaded";

static const struct {
	const char *name;
	size_t offset;
} symbols[] = {
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

static void load(void)
{
	void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		load_error = "cannot load libcurl.so.4";
		return;
	}
	skl_curl_fns f;
	for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
		void *sym = dlsym(h, symbols[i].name);
		if (sym == NULL) {
			load_error = "libcurl.so.4 lacks a function skiplock needs";
			dlclose(h);
			return;
		}
		/* POSIX guarantees a function pointer survives the round trip
		 * through void *; copy the bytes to say so without a cast. */
		memcpy((char *)&f + symbols[i].offset, &sym, sizeof(sym));
	}
	skl__curl = f;
	load_error = NULL;
}

bool skl__curl_load(const char **why)
{
	pthread_once(&once, load);
	if (why)
		*why = load_error;
	return load_error == NULL;
}
