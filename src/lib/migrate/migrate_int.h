/*
 * migrate_int.h — pieces of the migration run shared by migrate_run.c and
 * migrate_watch.c: the watcher, a second connection that renews the
 * run's lease and samples who blocks the migrating session.
 */
#ifndef SKL_MIGRATE_INT_H
#define SKL_MIGRATE_INT_H

#include <pthread.h>
#include <stdbool.h>

#include "core/internal.h"
#include "skiplock/migrate.h"

typedef struct skl_watch {
	pthread_t thread;
	pthread_mutex_t mu;
	bool started;
	bool stop;
	skl_client *c;             /* the watcher's own connection */
	/* the lease, renewed every ttl/3 */
	const char *lease;
	const char *owner;
	int64_t fencing;
	int64_t ttl_ms;
	bool lost;                 /* a renewal answered FENCED, or none succeeded in time */
	char lost_why[256];
	/* the migrating session: its blockers are sampled while pid != 0 */
	int pid;
	skl_migrate_blocker seen;  /* the last blocker seen since the pid was set */
} skl_watch;

/* Opens the watcher's connection from copts and starts its thread. */
skl_rc skl__watch_start(skl_watch *w, const skl_client_options *copts, skl_error *err);
/* Stops the thread and closes its connection.  Accepts a watcher never started. */
void skl__watch_stop(skl_watch *w);
/* Starts sampling the blockers of backend pid (0 stops), forgetting the last seen. */
void skl__watch_pid(skl_watch *w, int pid);
/* The last blocker seen (pid 0: none). */
skl_migrate_blocker skl__watch_blocker(skl_watch *w);
/* True, with the reason, once the lease is lost. */
bool skl__watch_lost(skl_watch *w, char *why, size_t cap);

#endif
