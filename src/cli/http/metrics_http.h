/*
 * metrics_http.h — the worker's Prometheus endpoint (libmicrohttpd).
 */
#ifndef SKL_CLI_METRICS_HTTP_H
#define SKL_CLI_METRICS_HTTP_H

#include "cli.h"

typedef struct cli_metrics cli_metrics;

/* Listens on addr (HOST:PORT, [V6]:PORT; port 0 picks one and logs it) and
 * serves GET /metrics for w from a thread of its own.  Returns CLI_OK, or
 * after printing one line CLI_USAGE (bad address) or CLI_PROBLEM (cannot
 * listen). */
int cli_metrics_start(const cli_common *cc, const char *addr, skl_worker *w, cli_metrics **out);

/* Stops serving; NULL is fine. */
void cli_metrics_stop(cli_metrics *m);

#endif
