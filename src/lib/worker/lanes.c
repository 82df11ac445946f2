/*
 * lanes.c — the worker's connections for claims, outcomes and heartbeats
 * (skl_worker_options.connections): one lane per connection, each driven
 * by its own thread in worker_loop.c.
 *
 * One connection's backend runs one statement at a time on one core: a
 * busy worker's drain rate is bounded by it however many handler threads
 * it has.  With N lanes, N claims and records run at once on N backends.
 * Each lane takes an equal share of concurrency and prefetch (the first
 * lanes one more when they do not divide), and records and heartbeats
 * the jobs it claimed, with their fencing tokens, on its own connection:
 * a job's whole life is on one connection and one thread, with no
 * hand-over between lanes.  No lane holds a transaction or session state
 * between its statements, so behind a transaction pooler N lanes need no
 * more than one server connection among them at a time.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "worker/worker_int.h"

static size_t share(int total, int n, int i)
{
	return (size_t)(total / n + (i < total % n ? 1 : 0));
}

static skl_rc lane_open(skl_worker *w, lane *l, int i, skl_error *err)
{
	int pf = w->wo.prefetch > 0 ? w->wo.prefetch : 0;
	l->w = w;
	l->index = i;
	l->capacity = share(w->wo.concurrency, w->nlanes, i) + share(pf, w->nlanes, i);
	l->running = calloc(l->capacity ? l->capacity : 1, sizeof(slot *));
	if (l->running == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	if (i == 0) { /* the worker's own connection and pipe */
		l->db = w->db;
		l->wake[0] = w->wake[0];
		l->wake[1] = w->wake[1];
		return SKL_OK;
	}
	if (pipe2(l->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
		l->wake[0] = l->wake[1] = -1;
		return skl__seterr(err, SKL_IO, "cannot create a lane's wake-up pipe");
	}
	return skl_client_open(&w->co, &l->db, err);
}

skl_rc skl__lanes_open(skl_worker *w, skl_error *err)
{
	int n = w->wo.connections > 0 ? w->wo.connections : 1;
	w->lanes = calloc((size_t)n, sizeof(lane));
	if (w->lanes == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	for (int i = 0; i < n; i++)
		w->lanes[i].wake[0] = w->lanes[i].wake[1] = -1;
	w->nlanes = n;
	for (int i = 0; i < n; i++) {
		skl_rc rc = lane_open(w, &w->lanes[i], i, err);
		if (rc != SKL_OK)
			return rc;
	}
	return SKL_OK;
}

void skl__lanes_free(skl_worker *w)
{
	for (int i = 0; w->lanes && i < w->nlanes; i++) {
		lane *l = &w->lanes[i];
		free(l->running);
		if (i == 0)
			continue; /* w->db and w->wake are the worker's */
		skl_client_close(l->db);
		for (int k = 0; k < 2; k++)
			if (l->wake[k] >= 0)
				close(l->wake[k]);
	}
	free(w->lanes);
	w->lanes = NULL;
	w->nlanes = 0;
}

void skl__lanes_wake(skl_worker *w, const lane *except)
{
	for (int i = 0; i < w->nlanes; i++) {
		lane *l = &w->lanes[i];
		if (l == except || l->wake[1] < 0)
			continue;
		atomic_store(&l->poked, true);
		ssize_t ignored = write(l->wake[1], "p", 1);
		(void)ignored;
	}
}
