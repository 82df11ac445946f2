/*
 * lease_run.h — `skiplock lease run`: supervise a command while holding a
 * lease (lease_run.c); options are parsed in cmd_lease.c.
 */
#ifndef SKL_LEASE_RUN_H
#define SKL_LEASE_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "cli.h"

typedef struct lease_run_opts {
	const char *name;
	const char *owner;        /* never NULL */
	int64_t ttl_ms;
	int64_t kill_grace_ms;    /* SIGTERM to SIGKILL when the lease is lost */
	bool wait;                /* poll while the lease is held elsewhere */
	int64_t wait_for_ms;      /* bound on that wait; 0: none */
	int64_t retry_for_ms;     /* bound on transient failures to acquire/release */
	int64_t attempt_ms;       /* longest one database call can take (connect
	                           * + call deadline of the client) */
	char **argv;              /* the command and its arguments, NULL-ended */
} lease_run_opts;

/* Acquires the lease (or reports it held elsewhere), runs the command
 * under it with renewals, releases it, and returns the exit status:
 * the command's, 0 when the lease was held elsewhere, 1 when the lease was
 * lost, 126/127 when the command could not be started, 2/3 as usual. */
int lease_run(const cli_common *cc, skl_client *c, const lease_run_opts *o);

#endif
