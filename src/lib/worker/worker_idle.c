/*
 * worker_idle.c — what an idle worker costs the database, and how it wakes.
 *
 * Wake-ups: on a direct connection (pooler mode "none") the worker LISTENs
 * on channel skiplock_jobs on its own connection, so it still holds one
 * connection; the run loop polls that socket with its wake pipe.  Every
 * reconnect loses the LISTEN, so it is sent again on each new connection
 * (db->connects tells them apart), and the loop claims at once after it:
 * what was enqueued meanwhile sent no notification we could see.  Through
 * a pooler the worker's own connection never LISTENs: a LISTEN there would
 * land on whichever server connection the pooler picked (CONTRIBUTING.md, rule
 * 1).  When a direct endpoint is known as well (--direct-url or
 * $DIRECT_DATABASE_URL), a second connection to it carries the LISTEN and
 * nothing else, so a pooled worker wakes as fast as a direct one; it is
 * (re)opened at most every LISTEN_RETRY_MS, one attempt each, and while it
 * is down the worker polls.
 *
 * The idle poll: one read-only statement that says how long until the
 * earliest available job of the worker's kinds and queues is due, the
 * earliest enabled schedule fires, and the earliest lease expires.  The
 * loop sleeps until the first of them (capped by poll_idle_ms) instead of
 * claiming, ticking cron and rescuing on fixed periods.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "worker/worker_int.h"

#define CHANNEL "skiplock_jobs"
/* Milliseconds from now until x (negative when past); NULL and
 * 'infinity' (a breaker opened by an operator) are NULL.  A time before
 * 1970 counts as 1970, so that no stored time (say a schedule's
 * '-infinity' planted around its checks) can make the poll fail: the
 * worst it does is wake the worker at once. */
#define MS_UNTIL(x)                                                                              \
	"(extract(epoch FROM CASE WHEN " x " < timestamptz '1970-01-01 00:00+00'"                   \
	" THEN timestamptz '1970-01-01 00:00+00' ELSE nullif(" x ", 'infinity') END - now())"      \
	" * 1000)::bigint"

/* A kind whose breaker is open is not claimable before open_until: its
 * jobs count from then on. */
static const char *const idle_sql =
	"SELECT"
	" (SELECT " MS_UNTIL("min(greatest(j.run_at, b.open_until))") " FROM skiplock.jobs j"
	"    LEFT JOIN skiplock.breakers b ON b.kind = j.kind AND b.state = 'open'"
	"   WHERE j.state = 'available' AND j.kind = ANY ($2::text[])"
	"     AND ($1::text[] IS NULL OR j.queue = ANY ($1::text[]))),"
	" (SELECT " MS_UNTIL("min(next_fire)") " FROM skiplock.schedules WHERE enabled),"
	" (SELECT " MS_UNTIL("min(lease_expires_at)") " FROM skiplock.jobs"
	"   WHERE state = 'running')";

#define LISTEN_RETRY_MS 30000

bool skl__idle_listens(const skl_worker *w)
{
	return skl_client_pooler(w->db) == SKL_POOLER_NONE;
}

/* The connection that LISTENs: the side one through a pooler, else the
 * worker's own. */
static skl_client *listener(const skl_worker *w)
{
	return w->listen_db ? w->listen_db : w->db;
}

static bool live(const skl_client *c)
{
	return c->conn != NULL && PQstatus(c->conn) == CONNECTION_OK;
}

/* With --pooler auto, a URL that does not look like a pooler may still
 * be one (PgBouncer on an unusual port): the server's port differs from
 * the one we dialled.  So may a port mapping; then we only poll, which is
 * safe.  A Unix socket on the server side (NULL) counts as direct.  A
 * direct connection also gets its hot statements prepared (client.c). */
static bool looks_direct(skl_worker *w)
{
	skl_client *c = w->db;
	if (w->co.pooler != SKL_POOLER_AUTO) {
		skl__set_direct(c); /* --pooler none: the user said so */
		return true;
	}
	PGresult *res = NULL;
	skl_error err;
	if (skl__exec(c, "SELECT inet_server_port()", 0, NULL, &res, &err) != SKL_OK)
		return false;
	const char *port = PQport(c->conn);
	bool direct = PQgetisnull(res, 0, 0) ||
	              (port && *port && strcmp(PQgetvalue(res, 0, 0), port) == 0);
	PQclear(res);
	if (direct)
		skl__set_direct(c);
	if (!direct && c->direct_url != NULL)
		w->pooler_seen = true; /* from now on, LISTEN through the direct URL */
	else if (!direct && w->listen_gen == 0)
		skl__wlog(w, SKL_LOG_INFO, "the server's port is not the URL's (a pooler or a port "
		          "mapping): polling without LISTEN; --pooler none to listen anyway");
	return direct;
}

static bool listen_on(skl_worker *w, skl_client *c)
{
	PGresult *res = NULL;
	skl_error err;
	skl_rc rc = skl__exec(c, "LISTEN " CHANNEL, 0, NULL, &res, &err);
	PQclear(res);
	if (rc != SKL_OK) {
		/* Not tried again on this connection: polling still works. */
		w->listen_gen = live(c) ? c->connects : 0;
		skl__wlog(w, SKL_LOG_WARNING, "LISTEN failed, polling only: %s", err.message);
		return false;
	}
	w->listen_gen = c->connects;
	w->listening = true;
	skl__wlog(w, SKL_LOG_DEBUG, "listening on channel " CHANNEL "%s",
	          c == w->db ? "" : " on the direct endpoint");
	return true;
}

/* Through a pooler: (re)opens the side connection to the direct endpoint
 * when it is due, and LISTENs there. */
static bool side_relisten(skl_worker *w)
{
	const char *direct = w->db->direct_url;
	skl_client *c = w->listen_db;
	if (direct == NULL || (c && live(c) && c->connects == w->listen_gen))
		return false;
	int64_t now = skl__now_ms();
	if (now < w->listen_retry_at)
		return false;
	w->listen_retry_at = now + LISTEN_RETRY_MS;
	w->listening = false;
	skl_error err;
	if (c == NULL) {
		skl_client_options o = w->co;
		o.url = direct;
		o.pooler = SKL_POOLER_NONE;
		if (skl_client_open(&o, &w->listen_db, &err) != SKL_OK) {
			skl__wlog(w, SKL_LOG_WARNING, "direct endpoint: %s; polling only", err.message);
			w->listen_retry_at = INT64_MAX; /* a bad URL stays bad */
			return false;
		}
		c = w->listen_db;
	}
	if (skl__connect(c, &err) != SKL_OK) {
		skl__wlog(w, SKL_LOG_WARNING, "cannot LISTEN on the direct endpoint, polling (next "
		          "try in %d s): %s", LISTEN_RETRY_MS / 1000, err.message);
		return false;
	}
	return listen_on(w, c);
}

bool skl__idle_relisten(skl_worker *w)
{
	skl_client *c = w->db;
	if (!skl__idle_listens(w) || w->pooler_seen)
		return side_relisten(w);
	if (!live(c) || c->connects == w->listen_gen)
		return false;
	w->listening = false;
	if (!looks_direct(w)) {
		w->listen_gen = live(c) ? c->connects : 0;
		return w->pooler_seen && side_relisten(w);
	}
	return listen_on(w, c);
}

int skl__idle_fd(const skl_worker *w)
{
	const skl_client *c = listener(w);
	if (!w->listening || !live(c) || c->connects != w->listen_gen)
		return -1;
	return PQsocket(c->conn);
}

int skl__idle_drain(skl_worker *w)
{
	skl_client *c = listener(w);
	if (skl__idle_fd(w) < 0)
		return 0;
	if (!PQconsumeInput(c->conn) || PQstatus(c->conn) != CONNECTION_OK) {
		skl__wlog(w, SKL_LOG_INFO, "connection lost while idle; reconnecting");
		return -1;
	}
	int n = 0;
	for (PGnotify *nt; (nt = PQnotifies(c->conn)) != NULL; n++)
		PQfreemem(nt);
	w->st_notifications += (uint64_t)n;
	return n;
}

static int64_t ms_col(const PGresult *r, int col)
{
	return PQgetisnull(r, 0, col) ? INT64_MAX : strtoll(PQgetvalue(r, 0, col), NULL, 10);
}

skl_rc skl__idle_poll(skl_worker *w, const char *const *kinds, skl_idle_view *v,
                      skl_error *err)
{
	static const skl_txn_opts o = {.idempotent = 1};
	char *queues = w->wo.nqueues ? skl_text_array(w->wo.queues, w->wo.nqueues) : NULL;
	char *ks = skl_text_array(kinds, w->nhandlers);
	skl_stmt s = {.sql = idle_sql, .nparams = 2, .params = {queues, ks}};
	skl_rc rc = ks && (queues || !w->wo.nqueues) ? skl__run_stmt(w->db, &o, &s, err)
	                                             : skl__seterr(err, SKL_NOMEM, "out of memory");
	free(queues);
	free(ks);
	if (rc != SKL_OK)
		return rc;
	*v = (skl_idle_view){.run_in = ms_col(s.res, 0), .fire_in = ms_col(s.res, 1),
	                     .expire_in = ms_col(s.res, 2)};
	PQclear(s.res);
	return SKL_OK;
}
