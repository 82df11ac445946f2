/*
 * dashboard_conns.c — slow clients cannot lock the dashboard out.
 *
 * Every connection is tracked from its opening to its close (through
 * libmicrohttpd's connection notifications, dashboard_http.c).  While a
 * connection has not delivered a whole request — since it opened, or since
 * its last answer — it is waiting, and a waiting connection holds a slot
 * that a token cannot free: the token is read only once the request is
 * whole.  So the waiting ones are bounded twice:
 *
 *   - a request must be whole within DASH_REQUEST_S seconds of the wait's
 *     start, however often bytes trickle in (libmicrohttpd's own timeout
 *     counts silence only); checked every second and at every opening;
 *   - at most DASH_MAX_WAITING connections wait: when one more opens, the
 *     one waiting longest is closed.
 *
 * A client that sends its request at once (a browser, curl) waits for
 * milliseconds, so a slow client (slowloris) can hold at most
 * DASH_MAX_WAITING slots, each for at most DASH_REQUEST_S seconds, and
 * never the slot of a connection newer than its own.  Closing is
 * shutdown(2) of the socket: libmicrohttpd sees the end and closes the
 * connection itself.  The record is freed only at the close notification,
 * which libmicrohttpd gives before it closes the descriptor, and shutdown
 * is called under the same mutex, so it never reaches a reused descriptor.
 */
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "dashboard/dashboard.h"

struct dash_conn {
	dash_conn *prev, *next;
	int fd;
	int64_t waiting_since;       /* ms, monotonic; 0: a request is answered */
	bool closing;                /* shut down: no longer counted */
};

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void dash_conns_init(dash_conns *cs)
{
	pthread_mutex_init(&cs->lock, NULL);
	cs->head = NULL;
	cs->waiting = 0;
}

void dash_conns_destroy(dash_conns *cs)
{
	pthread_mutex_destroy(&cs->lock);
}

/* Closes c (under the lock). */
static void shut(dash_conns *cs, dash_conn *c)
{
	if (c->closing)
		return;
	if (c->waiting_since > 0)
		cs->waiting--;
	c->closing = true;
	shutdown(c->fd, SHUT_RDWR);
}

/* Closes the waiting connections past their deadline, then the longest
 * waiting ones while more than max wait (under the lock). */
static void bound(dash_conns *cs, int max)
{
	int64_t deadline = now_ms() - (int64_t)DASH_REQUEST_S * 1000;
	for (dash_conn *c = cs->head; c; c = c->next)
		if (!c->closing && c->waiting_since > 0 && c->waiting_since <= deadline)
			shut(cs, c);
	while (cs->waiting > max) {
		dash_conn *oldest = NULL;
		for (dash_conn *c = cs->head; c; c = c->next)
			if (!c->closing && c->waiting_since > 0 &&
			    (oldest == NULL || c->waiting_since < oldest->waiting_since))
				oldest = c;
		if (oldest == NULL)
			break;
		shut(cs, oldest);
	}
}

dash_conn *dash_conn_opened(dash_conns *cs, int fd)
{
	dash_conn *c = calloc(1, sizeof(*c));
	pthread_mutex_lock(&cs->lock);
	if (c) {
		c->fd = fd;
		c->waiting_since = now_ms();
		c->next = cs->head;
		if (cs->head)
			cs->head->prev = c;
		cs->head = c;
		cs->waiting++;
	}
	bound(cs, DASH_MAX_WAITING);
	pthread_mutex_unlock(&cs->lock);
	if (c == NULL)
		shutdown(fd, SHUT_RDWR); /* out of memory: not served untracked */
	return c;
}

void dash_conn_closed(dash_conns *cs, dash_conn *c)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&cs->lock);
	if (!c->closing && c->waiting_since > 0)
		cs->waiting--;
	if (c->prev)
		c->prev->next = c->next;
	else
		cs->head = c->next;
	if (c->next)
		c->next->prev = c->prev;
	pthread_mutex_unlock(&cs->lock);
	free(c);
}

void dash_conn_whole(dash_conns *cs, dash_conn *c)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&cs->lock);
	if (!c->closing && c->waiting_since > 0)
		cs->waiting--;
	c->waiting_since = 0;
	pthread_mutex_unlock(&cs->lock);
}

void dash_conn_answered(dash_conns *cs, dash_conn *c)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&cs->lock);
	if (!c->closing && c->waiting_since == 0)
		cs->waiting++;
	c->waiting_since = now_ms();
	bound(cs, DASH_MAX_WAITING);
	pthread_mutex_unlock(&cs->lock);
}

void dash_conns_sweep(dash_conns *cs)
{
	pthread_mutex_lock(&cs->lock);
	bound(cs, DASH_MAX_WAITING);
	pthread_mutex_unlock(&cs->lock);
}
