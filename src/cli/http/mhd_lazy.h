/*
 * mhd_lazy.h — libmicrohttpd, loaded on first use.
 *
 * libmicrohttpd links GnuTLS (with nettle, gmp, p11-kit, …): well over a
 * MiB of resident pages in every `skiplock` process that merely links it.
 * Only `worker --metrics` and `dashboard` serve HTTP, so the command does
 * not link it: they open libmicrohttpd.so.12 with dlopen before starting a
 * daemon, and any other command never maps it.
 *
 * Include this instead of <microhttpd.h>: the MHD_* functions used by
 * skiplock are then calls through a table, valid once cli_mhd_load()
 * returned true.
 */
#ifndef SKL_CLI_MHD_LAZY_H
#define SKL_CLI_MHD_LAZY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <microhttpd.h>

typedef struct cli_mhd_fns {
	struct MHD_Daemon *(*start_daemon)(unsigned int flags, uint16_t port,
	                                   MHD_AcceptPolicyCallback apc, void *apc_cls,
	                                   MHD_AccessHandlerCallback dh, void *dh_cls, ...);
	void (*stop_daemon)(struct MHD_Daemon *d);
	const union MHD_DaemonInfo *(*get_daemon_info)(struct MHD_Daemon *d,
	                                               enum MHD_DaemonInfoType t, ...);
	const char *(*lookup_connection_value)(struct MHD_Connection *c, enum MHD_ValueKind k,
	                                       const char *key);
	enum MHD_Result (*queue_response)(struct MHD_Connection *c, unsigned int status,
	                                  struct MHD_Response *r);
	struct MHD_Response *(*create_response_from_buffer)(size_t size, void *buffer,
	                                                    enum MHD_ResponseMemoryMode mode);
	enum MHD_Result (*add_response_header)(struct MHD_Response *r, const char *header,
	                                       const char *content);
	void (*destroy_response)(struct MHD_Response *r);
	const union MHD_ConnectionInfo *(*get_connection_info)(struct MHD_Connection *c,
	                                                       enum MHD_ConnectionInfoType t, ...);
} cli_mhd_fns;

extern cli_mhd_fns cli_mhd;

/* Opens libmicrohttpd once (thread-safe); false when it cannot be loaded,
 * with the reason in *why (a static string). */
bool cli_mhd_load(const char **why);

#define MHD_start_daemon cli_mhd.start_daemon
#define MHD_stop_daemon cli_mhd.stop_daemon
#define MHD_get_daemon_info cli_mhd.get_daemon_info
#define MHD_lookup_connection_value cli_mhd.lookup_connection_value
#define MHD_queue_response cli_mhd.queue_response
#define MHD_create_response_from_buffer cli_mhd.create_response_from_buffer
#define MHD_add_response_header cli_mhd.add_response_header
#define MHD_destroy_response cli_mhd.destroy_response
#define MHD_get_connection_info cli_mhd.get_connection_info

#endif
