/*
 * mhd_lazy.c — libmicrohttpd.so.12 opened on first use (see mhd_lazy.h)
 * through the library's core/lazy.h: only the table of functions is here.
 */
#include <stddef.h>

#include "core/lazy.h"
#include "http/mhd_lazy.h"

cli_mhd_fns cli_mhd;

static const skl__lazy_sym symbols[] = {
	{"MHD_start_daemon", offsetof(cli_mhd_fns, start_daemon)},
	{"MHD_stop_daemon", offsetof(cli_mhd_fns, stop_daemon)},
	{"MHD_get_daemon_info", offsetof(cli_mhd_fns, get_daemon_info)},
	{"MHD_lookup_connection_value", offsetof(cli_mhd_fns, lookup_connection_value)},
	{"MHD_queue_response", offsetof(cli_mhd_fns, queue_response)},
	{"MHD_create_response_from_buffer", offsetof(cli_mhd_fns, create_response_from_buffer)},
	{"MHD_add_response_header", offsetof(cli_mhd_fns, add_response_header)},
	{"MHD_destroy_response", offsetof(cli_mhd_fns, destroy_response)},
	{"MHD_get_connection_info", offsetof(cli_mhd_fns, get_connection_info)},
};

static skl__lazy lib = SKL__LAZY_INIT("libmicrohttpd.so.12", symbols, cli_mhd);

bool cli_mhd_load(const char **why)
{
	return skl__lazy_load(&lib, why);
}
