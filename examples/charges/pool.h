/*
 * pool.h — a fixed set of skiplock clients shared by the request threads.
 *
 * An skl_client serves one thread at a time; a request borrows one for its
 * claim and completion and gives it back.  Waits are bounded.
 */
#ifndef CHARGES_POOL_H
#define CHARGES_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "skiplock.h"

typedef struct pool {
	pthread_mutex_t mu;
	pthread_cond_t freed;
	skl_client **clients;
	bool *busy;
	int n;
} pool;

/* Opens n clients on url, installs skiplock's schema and the charges
 * table.  0 on success; otherwise -1 with a message in why. */
int pool_open(pool *p, const char *url, int n, char *why, size_t whylen);
/* A free client, waiting up to timeout_ms; NULL when none came free. */
skl_client *pool_get(pool *p, int timeout_ms);
void pool_put(pool *p, skl_client *c);
void pool_close(pool *p);

#endif
