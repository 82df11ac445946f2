/*
 * pool.c — the client pool of the charges example, and its start-up: the
 * application's own table is created with plain libpq, once, before any
 * request is served.
 */
#include <errno.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "pool.h"

static const char *const charges_ddl =
	"CREATE TABLE IF NOT EXISTS charges ("
	"  id bigserial PRIMARY KEY,"
	"  idempotency_key text NOT NULL,"
	"  amount bigint NOT NULL CHECK (amount > 0),"
	"  currency text NOT NULL,"
	"  created_at timestamptz NOT NULL DEFAULT now())";

static int create_table(const char *url, char *why, size_t whylen)
{
	const char *keys[] = {"dbname", "connect_timeout", "application_name", NULL};
	const char *vals[] = {url, "10", "charges-setup", NULL};
	PGconn *db = PQconnectdbParams(keys, vals, 1);
	PGresult *r = PQstatus(db) == CONNECTION_OK ? PQexec(db, charges_ddl) : NULL;
	int ok = r && PQresultStatus(r) == PGRES_COMMAND_OK;
	if (!ok)
		snprintf(why, whylen, "cannot create the charges table: %s", PQerrorMessage(db));
	PQclear(r);
	PQfinish(db);
	return ok ? 0 : -1;
}

int pool_open(pool *p, const char *url, int n, char *why, size_t whylen)
{
	*p = (pool){.n = n};
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->freed, NULL);
	p->clients = calloc((size_t)n, sizeof(*p->clients));
	p->busy = calloc((size_t)n, sizeof(*p->busy));
	if (p->clients == NULL || p->busy == NULL) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	skl_client_options o;
	skl_client_options_init(&o);
	o.url = url;
	o.application_name = "charges";
	skl_error err;
	for (int i = 0; i < n; i++) {
		if (skl_client_open(&o, &p->clients[i], &err) != SKL_OK) {
			snprintf(why, whylen, "cannot open a client: %s", err.message);
			return -1;
		}
	}
	if (skl_schema_install(p->clients[0], NULL, &err) != SKL_OK) {
		snprintf(why, whylen, "cannot install skiplock's schema: %s", err.message);
		return -1;
	}
	return create_table(url, why, whylen);
}

skl_client *pool_get(pool *p, int timeout_ms)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	skl_client *c = NULL;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		for (int i = 0; i < p->n && c == NULL; i++)
			if (!p->busy[i]) {
				p->busy[i] = true;
				c = p->clients[i];
			}
		if (c || pthread_cond_timedwait(&p->freed, &p->mu, &until) == ETIMEDOUT)
			break;
	}
	pthread_mutex_unlock(&p->mu);
	return c;
}

void pool_put(pool *p, skl_client *c)
{
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->n; i++)
		if (p->clients[i] == c)
			p->busy[i] = false;
	pthread_cond_signal(&p->freed);
	pthread_mutex_unlock(&p->mu);
}

void pool_close(pool *p)
{
	for (int i = 0; p->clients && i < p->n; i++)
		skl_client_close(p->clients[i]);
	free(p->clients);
	free(p->busy);
	pthread_cond_destroy(&p->freed);
	pthread_mutex_destroy(&p->mu);
}
