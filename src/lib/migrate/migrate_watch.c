/*
 * migrate_watch.c — the migration run's watcher: one thread with its own
 * connection that renews the run's lease every ttl/3 and, while the
 * migrating session runs a file, samples who blocks it every 200 ms.
 *
 * The blocker must be captured while the wait lasts: once lock_timeout
 * fires and the file's transaction rolls back, pg_blocking_pids has
 * nothing to say.  pg_blocking_pids is only called for the migrating
 * session and only while pg_stat_activity shows it waiting on a lock.
 * Each call is one short autocommit statement; nothing is held.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "migrate/migrate_int.h"
#include "skiplock/lease.h"

#define WATCH_TICK_MS 100
#define SAMPLE_EVERY_MS 200

static const char *const blocker_sql =
	"SELECT a.pid, coalesce(a.state, ''),"
	"       coalesce((extract(epoch FROM clock_timestamp() - a.state_change) * 1000)::bigint, 0),"
	"       coalesce((extract(epoch FROM clock_timestamp() - a.xact_start) * 1000)::bigint, -1),"
	"       coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'local'),"
	"       coalesce(left(a.query, 190), '')"
	"  FROM pg_stat_activity w"
	"  CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS b(pid)"
	"  JOIN pg_stat_activity a ON a.pid = b.pid"
	" WHERE w.pid = $1 AND w.wait_event_type = 'Lock'"
	" ORDER BY a.xact_start NULLS LAST LIMIT 1";

/* Copies src into dst, cut to cap - 1 bytes. */
static void copy_text(char *dst, size_t cap, const char *src)
{
	size_t n = strnlen(src, cap - 1);
	memcpy(dst, src, n);
	dst[n] = '\0';
}

static void sample(skl_watch *w, int pid)
{
	char p[16];
	snprintf(p, sizeof(p), "%d", pid);
	skl_stmt s = {.sql = blocker_sql, .nparams = 1, .params = {p}};
	static const skl_txn_opts o = {.idempotent = 1};
	skl_error err;
	if (skl__run_stmt(w->c, &o, &s, &err) != SKL_OK)
		return;
	if (PQntuples(s.res) == 1) {
		skl_migrate_blocker b = {.pid = atoi(PQgetvalue(s.res, 0, 0))};
		copy_text(b.state, sizeof(b.state), PQgetvalue(s.res, 0, 1));
		b.state_age_ms = strtoll(PQgetvalue(s.res, 0, 2), NULL, 10);
		b.xact_age_ms = strtoll(PQgetvalue(s.res, 0, 3), NULL, 10);
		copy_text(b.application_name, sizeof(b.application_name), PQgetvalue(s.res, 0, 4));
		copy_text(b.client_addr, sizeof(b.client_addr), PQgetvalue(s.res, 0, 5));
		copy_text(b.query, sizeof(b.query), PQgetvalue(s.res, 0, 6));
		pthread_mutex_lock(&w->mu);
		if (w->pid == pid)
			w->seen = b;
		pthread_mutex_unlock(&w->mu);
	}
	PQclear(s.res);
}

static void mark_lost(skl_watch *w, const char *why)
{
	pthread_mutex_lock(&w->mu);
	if (!w->lost)
		copy_text(w->lost_why, sizeof(w->lost_why), why);
	w->lost = true;
	pthread_mutex_unlock(&w->mu);
}

/* One renewal; returns the time of the last success. */
static int64_t renew(skl_watch *w, int64_t last_ok)
{
	skl_error err;
	skl_rc rc = skl_lease_renew(w->c, w->lease, w->owner, w->fencing, w->ttl_ms, &err);
	int64_t now = skl__now_ms();
	if (rc == SKL_OK)
		return now;
	skl__log(w->c, SKL_LOG_WARNING, "renewing lease \"%s\" failed: %s", w->lease, err.message);
	if (rc == SKL_FENCED || now - last_ok >= w->ttl_ms)
		mark_lost(w, err.message);
	return last_ok;
}

static void *watch_main(void *arg)
{
	skl_watch *w = arg;
	int64_t last_ok = skl__now_ms(), next_renew = last_ok + w->ttl_ms / 3;
	int64_t next_sample = 0;
	for (;;) {
		pthread_mutex_lock(&w->mu);
		bool stop = w->stop, lost = w->lost;
		int pid = w->pid;
		pthread_mutex_unlock(&w->mu);
		if (stop)
			break;
		int64_t now = skl__now_ms();
		if (!lost && now >= next_renew) {
			int64_t before = last_ok;
			last_ok = renew(w, last_ok);
			/* after a failure, try again soon: the lease is still ours for a while */
			next_renew = last_ok != before ? last_ok + w->ttl_ms / 3 : skl__now_ms() + 200;
		}
		if (pid != 0 && now >= next_sample) {
			sample(w, pid);
			next_sample = now + SAMPLE_EVERY_MS;
		}
		skl__sleep_ms(WATCH_TICK_MS);
	}
	return NULL;
}

skl_rc skl__watch_start(skl_watch *w, const skl_client_options *copts, skl_error *err)
{
	skl_client_options o = *copts;
	int bound = (int)(w->ttl_ms / 4 > 1000 ? w->ttl_ms / 4 : 1000);
	o.call_timeout_ms = bound;
	o.retry_max_ms = bound;
	o.application_name = "skiplock migrate (watch)";
	skl_rc rc = skl_client_open(&o, &w->c, err);
	if (rc != SKL_OK)
		return rc;
	pthread_mutex_init(&w->mu, NULL);
	if (pthread_create(&w->thread, NULL, watch_main, w) != 0) {
		pthread_mutex_destroy(&w->mu);
		skl_client_close(w->c);
		w->c = NULL;
		return skl__seterr(err, SKL_NOMEM, "cannot start the lease renewal thread");
	}
	w->started = true;
	return SKL_OK;
}

void skl__watch_stop(skl_watch *w)
{
	if (!w->started)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	pthread_mutex_unlock(&w->mu);
	pthread_join(w->thread, NULL);
	pthread_mutex_destroy(&w->mu);
	skl_client_close(w->c);
	w->c = NULL;
	w->started = false;
}

void skl__watch_pid(skl_watch *w, int pid)
{
	pthread_mutex_lock(&w->mu);
	w->pid = pid;
	memset(&w->seen, 0, sizeof(w->seen));
	pthread_mutex_unlock(&w->mu);
}

skl_migrate_blocker skl__watch_blocker(skl_watch *w)
{
	pthread_mutex_lock(&w->mu);
	skl_migrate_blocker b = w->seen;
	pthread_mutex_unlock(&w->mu);
	return b;
}

bool skl__watch_lost(skl_watch *w, char *why, size_t cap)
{
	pthread_mutex_lock(&w->mu);
	bool lost = w->lost;
	if (lost && why)
		copy_text(why, cap, w->lost_why);
	pthread_mutex_unlock(&w->mu);
	return lost;
}
