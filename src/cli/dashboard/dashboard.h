/*
 * dashboard.h — the pieces of `skiplock dashboard`: the embedded assets,
 * the server's shared state, the HTTP layer (dashboard_http.c: routing,
 * Host rule, bearer token, CSRF token; dashboard_conns.c: slow clients)
 * and the JSON endpoints (dashboard_api.c).
 */
#ifndef SKL_CLI_DASHBOARD_H
#define SKL_CLI_DASHBOARD_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "skiplock.h"

/* One static file, embedded at build time by cmake/embed_assets.cmake. */
typedef struct dash_asset {
	const char *path;          /* "/index.html" */
	const char *content_type;
	const char *data;
	size_t len;
} dash_asset;
extern const dash_asset dash_assets[];
extern const int dash_nassets;

/* Who a request comes from: an operator may act, a viewer only reads
 * (and, with --hide-payloads, never sees a payload). */
typedef enum dash_role { DASH_OPERATOR, DASH_VIEWER, DASH_NROLES } dash_role;

/* The connections that have not delivered a whole request yet, bounded
 * (dashboard_conns.c): a request must be whole within DASH_REQUEST_S
 * seconds, and when more than DASH_MAX_WAITING connections wait, the one
 * waiting longest is closed as another opens. */
enum { DASH_REQUEST_S = 10, DASH_MAX_WAITING = 64 };
typedef struct dash_conn dash_conn;
typedef struct dash_conns {
	pthread_mutex_t lock;
	dash_conn *head;           /* every open connection */
	int waiting;               /* those waiting and not being closed */
} dash_conns;

void dash_conns_init(dash_conns *cs);
void dash_conns_destroy(dash_conns *cs);
/* A connection opened on descriptor fd: it waits; the waiting ones are
 * bounded.  NULL when out of memory (the socket is shut down then). */
dash_conn *dash_conn_opened(dash_conns *cs, int fd);
/* Its close (before the descriptor is closed); frees c.  Accepts NULL. */
void dash_conn_closed(dash_conns *cs, dash_conn *c);
/* Its request is whole (it waits no longer); its answer is done (it waits
 * for the next request).  Accept NULL. */
void dash_conn_whole(dash_conns *cs, dash_conn *c);
void dash_conn_answered(dash_conns *cs, dash_conn *c);
/* Closes the waiting connections past DASH_REQUEST_S; called every
 * second by the command's loop. */
void dash_conns_sweep(dash_conns *cs);

/* The server's state, shared by every server thread.  The client is
 * used under `lock` only: an skl_client serves one thread at a time. */
typedef struct dash_server {
	skl_client *client;
	pthread_mutex_t lock;
	bool read_only;            /* every request is a viewer's */
	bool hide_payloads;        /* payloads only on an operator's request */
	int64_t idle_for_ms;       /* doctor locks: the age that makes a finding */
	int64_t stuck_after_ms;    /* a running attempt this old is stuck */
	const char *token;         /* the operator's bearer token; NULL: none */
	const char *viewer_token;  /* the viewer's bearer token; NULL: none */
	const char *const *allow_hosts; /* --allow-host names, besides localhost
	                            * and address literals */
	size_t nallow_hosts;
	dash_conns conns;          /* the connections, for the slow ones */
	char csrf[65];             /* per-process random, hex */
	char *page[DASH_NROLES];   /* the page for each role, tokens filled in */
	size_t page_len[DASH_NROLES];
} dash_server;

/* True when a and b are equal, compared in constant time (over SHA-256
 * digests, so the length of the secret does not leak either). */
bool dash_secret_equal(const char *a, const char *b);

/* Fills s->csrf with 32 random bytes in hex and builds s->page (free
 * with dash_page_free); false when out of randomness or memory. */
bool dash_page_init(dash_server *s);
void dash_page_free(dash_server *s);

/* Whether name (a Host header's host, without the port) is served:
 * "localhost", an IPv4 or [IPv6] address literal, or one of s's
 * --allow-host names, any case.  A page whose name was rebound to this
 * host (DNS rebinding) sends its own name, never a literal. */
bool dash_host_allowed(const dash_server *s, const char *name);
/* A --allow-host value: 1 to 253 letters, digits, dots and hyphens. */
bool dash_host_name_valid(const char *name);

/* Starts the HTTP daemon, a few event-loop threads, on addr (a struct
 * sockaddr_in, or a sockaddr_in6 when v6); returns it (a struct
 * MHD_Daemon *) or NULL.  *port gets the bound port.  s->conns must be
 * initialised. */
void *dash_http_start(dash_server *s, const void *addr, bool v6, unsigned *port);
void dash_http_stop(void *daemon);

/* A JSON endpoint's answer: an HTTP status and a document (owned). */
typedef struct dash_reply {
	unsigned status;
	json_t *body;
} dash_reply;

/* GET endpoints; `arg` reads one query argument (NULL when absent). */
typedef const char *(*dash_arg_fn)(void *ctx, const char *name);
dash_reply dash_api_get(dash_server *s, dash_role role, const char *path, dash_arg_fn arg,
                        void *ctx);
/* POST /api/jobs/ID/retry and /api/jobs/ID/cancel, and dash_act_post's;
 * who is on whose behalf (the role and the peer's address), for the
 * action log. */
dash_reply dash_api_post(dash_server *s, const char *path, dash_arg_fn arg, void *ctx,
                         const skl_actor *who);

/* Replies shared by the endpoints' files (dashboard_api.c): a document
 * (out of memory: an error), {"error": msg}, and a library failure (404 no
 * such row, 409 a state that forbids it, 400 bad input, else 503). */
dash_reply dash_ok(unsigned status, json_t *body);
dash_reply dash_fail(unsigned status, const char *msg);
dash_reply dash_lib_fail(skl_rc rc, const skl_error *err);
/* A query argument, NULL when absent or empty. */
const char *dash_arg(dash_arg_fn arg, void *ctx, const char *name);

/* GET /api/chart?queue=&kind=&range= (dashboard_chart.c); called under
 * the server's lock. */
dash_reply dash_get_chart(dash_server *s, dash_arg_fn arg, void *ctx);

/* GET /api/workers?seen=&idle= (dashboard_workers.c); called under the
 * server's lock. */
dash_reply dash_get_workers(dash_server *s, dash_arg_fn arg, void *ctx);

/* GET /api/waits and /api/limits (dashboard_flow.c); called under the
 * server's lock. */
dash_reply dash_get_waits(dash_server *s);
dash_reply dash_get_limits(dash_server *s);

/* The job list's filters from the query (state, queue, kind, payload,
 * error, time, from, to) into *o: a reply with a body (400, or 403 for a
 * viewer's payload filter under --hide-payloads) when refused. */
dash_reply dash_filter(const dash_server *s, dash_role role, dash_arg_fn arg, void *ctx,
                       skl_list_opts *o);

/* dashboard_act.c: GET /api/jobs/count, /api/pauses, /api/actions (under
 * the server's lock), and the operator's POSTs: bulk retry, cancel and
 * discard, pause and resume, breakers, schedules (each takes the lock).
 * A reply without a body: not one of theirs. */
dash_reply dash_act_get(dash_server *s, dash_role role, const char *path, dash_arg_fn arg,
                        void *ctx);
dash_reply dash_act_post(dash_server *s, const char *path, dash_arg_fn arg, void *ctx,
                         const skl_actor *who);

#endif
