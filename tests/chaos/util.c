/*
 * util.c — clocks, the seeded generator, log lines and libpq calls with a
 * client-side deadline.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "chaos.h"

int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(int64_t ms)
{
	if (ms <= 0)
		return;
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

void logf_(const char *fmt, ...)
{
	static int64_t start;
	if (start == 0)
		start = now_ms();
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	int64_t t = now_ms() - start;
	fprintf(stderr, "chaos %4lld.%01llds %s\n", (long long)(t / 1000),
	        (long long)(t % 1000 / 100), line);
}

uint64_t rng_next(rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

int64_t rng_range(rng *r, int64_t lo, int64_t hi)
{
	return lo + (int64_t)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

static void quiet(void *arg, const char *message)
{
	(void)arg;
	(void)message;
}

PGconn *pq_connect(const char *url, const char *appname)
{
	const char *kw[] = {"dbname", "application_name", "connect_timeout", NULL};
	const char *val[] = {url, appname, "3", NULL};
	PGconn *c = PQconnectdbParams(kw, val, 1);
	if (PQstatus(c) != CONNECTION_OK) {
		PQfinish(c);
		return NULL;
	}
	PQsetNoticeProcessor(c, quiet, NULL);
	return c;
}

bool pq_ok(const PGresult *r)
{
	ExecStatusType st = PQresultStatus(r);
	return r != NULL && (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK);
}

/* Waits for the answer until the deadline; the last result, or NULL. */
static PGresult *collect(PGconn *c, int64_t deadline_ms)
{
	PGresult *last = NULL;
	for (;;) {
		while (!PQisBusy(c)) {
			PGresult *r = PQgetResult(c);
			if (r == NULL)
				return last;
			PQclear(last);
			last = r;
		}
		int64_t left = deadline_ms - now_ms();
		if (left <= 0)
			break;
		struct pollfd p = {.fd = PQsocket(c), .events = POLLIN};
		if (poll(&p, 1, (int)(left > 200 ? 200 : left)) < 0 && errno != EINTR)
			break;
		if (!PQconsumeInput(c))
			break;
	}
	PQclear(last);
	return NULL;
}

PGresult *pq_exec(PGconn **conn, const char *sql, int n, const char *const *vals,
                  int64_t deadline_ms, bool *sent)
{
	*sent = false;
	PGconn *c = *conn;
	if (c == NULL || PQstatus(c) != CONNECTION_OK)
		goto dead;
	if (!PQsendQueryParams(c, sql, n, NULL, vals, NULL, NULL, 0))
		goto dead;
	*sent = true;
	PGresult *r = collect(c, deadline_ms);
	if (r != NULL && PQstatus(c) == CONNECTION_OK) {
		if (!pq_ok(r) && PQresultStatus(r) == PGRES_FATAL_ERROR &&
		    PQresultErrorField(r, PG_DIAG_SQLSTATE) == NULL) {
			PQclear(r); /* a client-side failure: the connection is gone */
			goto dead;
		}
		return r;
	}
	PQclear(r);
dead:
	PQfinish(c);
	*conn = NULL;
	return NULL;
}
