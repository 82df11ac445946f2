/*
 * mhd_lazy.c — opens libmicrohttpd.so.12 on first use (see mhd_lazy.h).
 * It is never closed: a daemon's threads run its code until stopped.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "http/mhd_lazy.h"

cli_mhd_fns cli_mhd;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *load_error = "libmicrohttpd not loaded";

static const struct {
	const char *name;
	size_t offset;
} symbols[] = {
	{"MHD_start_daemon", offsetof(cli_mhd_fns, start_daemon)},
	{"MHD_stop_daemon", offsetof(cli_mhd_fns, stop_daemon)},
	{"MHD_get_daemon_info", offsetof(cli_mhd_fns, get_daemon_info)},
	{"MHD_lookup_connection_value", offsetof(cli_mhd_fns, lookup_connection_value)},
	{"MHD_queue_response", offsetof(cli_mhd_fns, queue_response)},
	{"MHD_create_response_from_buffer", offsetof(cli_mhd_fns, create_response_from_buffer)},
	{"MHD_add_response_header", offsetof(cli_mhd_fns, add_response_header)},
	{"MHD_destroy_response", offsetof(cli_mhd_fns, destroy_response)},
};

static void load(void)
{
	void *h = dlopen("libmicrohttpd.so.12", RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		load_error = "cannot load libmicrohttpd.so.12";
		return;
	}
	cli_mhd_fns f;
	for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
		void *sym = dlsym(h, symbols[i].name);
		if (sym == NULL) {
			load_error = "libmicrohttpd.so.12 lacks a function skiplock needs";
			dlclose(h);
			return;
		}
		/* POSIX: a function pointer survives the round trip through void * */
		memcpy((char *)&f + symbols[i].offset, &sym, sizeof(sym));
	}
	cli_mhd = f;
	load_error = NULL;
}

bool cli_mhd_load(const char **why)
{
	pthread_once(&once, load);
	if (why)
		*why = load_error;
	return load_error == NULL;
}
