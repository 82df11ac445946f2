/*
 * doctor_locks.c — `doctor locks`: advisory locks held or awaited in the
 * current database, and the findings that need action (skiplock/doctor.h).
 *
 * Two read-only statements, each one transaction (so each sees one
 * backend, also through a transaction pooler):
 *   locks_sql     every advisory lock row of pg_locks with its session, its
 *                 waiters and, for a waiter, pg_blocking_pids — asked only
 *                 of sessions that wait, as it is expensive
 *   sessions_sql  sessions idle in transaction holding locks, and sessions
 *                 others have waited on, both for at least idle_for; a
 *                 blocker that itself waits is left out: the one at the
 *                 head of the chain is the finding
 * A session-level lock cannot be told from a transaction-level one in
 * pg_locks, but a session that is idle — outside any transaction — can only
 * hold session-level locks: that is what makes an orphan suspect.  An
 * advisory lock on the backend our own statement runs on cannot be ours
 * (the doctor takes none): a pooler handed us a backend someone left it on.
 * Acting on orphans is doctor_locks_act.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "doctor/doctor_int.h"

/* Shared by both statements: who may signal the session's backend, as
 * pg_signal_backend() decides (superuser targets need a superuser; else
 * the privileges of the target's role or of pg_signal_backend). */
#define CAN_SIGNAL                                                                 \
	"CASE WHEN r.oid IS NULL THEN false WHEN r.rolsuper THEN me.sup "               \
	"ELSE me.sup OR pg_has_role(r.oid, 'USAGE') "                                   \
	"OR pg_has_role('pg_signal_backend', 'USAGE') END"
#define MS_SINCE(x) "(extract(epoch FROM clk.t - " x ") * 1000)::bigint"
#define SESSION_COLS                                                              \
	"s.state, " MS_SINCE("s.state_change") ", " MS_SINCE("s.xact_start") ", "    \
	"s.application_name, host(s.client_addr), s.usename, left(s.query, 200), "   \
	CAN_SIGNAL ", (extract(epoch FROM s.backend_start) * 1000000)::bigint"
/* pg_locks.waitstart is PostgreSQL 14's; before, a waiter's statement start
 * stands in for it (an upper bound of the wait). */
#define WAITSTART(l, s)                                                           \
	"coalesce((to_jsonb(" l ") ->> 'waitstart')::timestamptz, " s ".query_start)"
#define PRELUDE                                                                   \
	"WITH clk AS (SELECT clock_timestamp() AS t), "                               \
	"me AS (SELECT rolsuper AS sup FROM pg_roles WHERE rolname = current_user), "

/* Columns: db, role, schemas, then per lock: pid, classid, objid, objsubid, mode,
 * granted, wait_ms, blockers, waiters, own, then SESSION_COLS. */
static const char *const locks_sql =
	PRELUDE
	"adv AS (SELECT l.pid, l.classid, l.objid, l.objsubid, l.mode, l.granted, "
	WAITSTART("l", "a") " AS waitstart"
	"  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
	"  WHERE l.locktype = 'advisory'"
	"  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())), "
	"waiting AS (SELECT w.pid, pg_blocking_pids(w.pid) AS blockers"
	"  FROM (SELECT DISTINCT pid FROM adv WHERE NOT granted) w), "
	"rows AS (SELECT a.pid, a.classid, a.objid, a.objsubid, a.mode, a.granted, "
	MS_SINCE("a.waitstart") " AS wait_ms, w.blockers, "
	"  CASE WHEN a.granted THEN ARRAY(SELECT o.pid FROM adv o JOIN waiting ow ON ow.pid = o.pid"
	"    WHERE NOT o.granted AND o.classid = a.classid AND o.objid = a.objid"
	"    AND o.objsubid = a.objsubid AND a.pid = ANY (ow.blockers) ORDER BY o.pid) END"
	"  AS waiters, a.pid = pg_backend_pid() AS own, " SESSION_COLS
	"  FROM adv a CROSS JOIN clk CROSS JOIN me"
	"  LEFT JOIN waiting w ON w.pid = a.pid AND NOT a.granted"
	"  LEFT JOIN pg_stat_activity s ON s.pid = a.pid"
	"  LEFT JOIN pg_roles r ON r.oid = s.usesysid) "
	"SELECT current_database(), current_user::text, ARRAY(SELECT nspname::text FROM pg_namespace"
	"  WHERE nspname !~ '^pg_' AND nspname <> 'information_schema' ORDER BY 1), rows.*"
	" FROM (SELECT 1) one LEFT JOIN rows ON true"
	" ORDER BY rows.granted DESC, rows.classid, rows.objid, rows.objsubid, rows.pid";

/* $1: idle_for in ms.  Columns: pid, idle_in_txn, victims, longest_ms,
 * holds, then SESSION_COLS. */
static const char *const sessions_sql =
	PRELUDE
	"ours AS (SELECT s.* FROM pg_stat_activity s"
	"  WHERE s.datname = current_database() AND s.pid <> pg_backend_pid()), "
	"waits AS (SELECT w.pid, w.since, pg_blocking_pids(w.pid) AS blockers"
	"  FROM (SELECT l.pid, min(" WAITSTART("l", "o") ") AS since"
	"        FROM pg_locks l JOIN ours o ON o.pid = l.pid"
	"        WHERE NOT l.granted GROUP BY l.pid) w, clk"
	"  WHERE w.since <= clk.t - $1::bigint * interval '1 millisecond'), "
	"blocking AS (SELECT b.pid, array_agg(DISTINCT w.pid) AS victims, "
	MS_SINCE("min(w.since)") " AS longest_ms"
	"  FROM waits w CROSS JOIN LATERAL unnest(w.blockers) AS b(pid) CROSS JOIN clk"
	"  WHERE NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = b.pid AND NOT l.granted)"
	"  GROUP BY b.pid, clk.t), "
	"iit AS (SELECT o.pid FROM ours o, clk WHERE o.state LIKE 'idle in transaction%'"
	"  AND o.state_change <= clk.t - $1::bigint * interval '1 millisecond'"
	"  AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = o.pid AND l.granted"
	"              AND l.locktype <> 'virtualxid')) "
	"SELECT s.pid, s.pid IN (SELECT pid FROM iit), b.victims, b.longest_ms,"
	"  (SELECT string_agg(DISTINCT CASE l.locktype"
	"     WHEN 'relation' THEN l.relation::regclass::text || ' (' || l.mode || ')'"
	"     WHEN 'transactionid' THEN 'its transaction id'"
	"     WHEN 'advisory' THEN 'advisory lock' ELSE l.locktype END, ', ')"
	"   FROM pg_locks l WHERE l.pid = s.pid AND l.granted AND l.locktype <> 'virtualxid'), "
	SESSION_COLS
	" FROM ours s CROSS JOIN clk CROSS JOIN me"
	" LEFT JOIN blocking b ON b.pid = s.pid"
	" LEFT JOIN pg_roles r ON r.oid = s.usesysid"
	" WHERE s.pid IN (SELECT pid FROM iit) OR b.pid IS NOT NULL"
	" ORDER BY s.pid";

enum { L_DB, L_ROLE, L_SCHEMAS, L_PID, L_CLASSID, L_OBJID, L_SUBID, L_MODE, L_GRANTED, L_WAIT,
       L_BLOCKERS, L_WAITERS, L_OWN, L_SESSION };

static bool fill_lock(dl_report *d, skl_advisory_lock *l, const PGresult *r, int row,
                      const char *const *schemas, size_t nschemas)
{
	skl_advisory_key_from_tag((uint32_t)strtoul(PQgetvalue(r, row, L_CLASSID), NULL, 10),
	                          (uint32_t)strtoul(PQgetvalue(r, row, L_OBJID), NULL, 10),
	                          atoi(PQgetvalue(r, row, L_SUBID)), &l->key);
	char name[160];
	const char *n = skl_advisory_key_name(&l->key, d->pub.database, schemas, nschemas, name,
	                                      sizeof(name));
	l->name = n ? dl_strdup(d, n) : NULL;
	l->mode = PQgetvalue(r, row, L_MODE);
	l->granted = PQgetvalue(r, row, L_GRANTED)[0] == 't';
	l->wait_ms = l->granted ? -1 : dl_int_or(r, row, L_WAIT, -1);
	dl_fill_session(&l->session, r, row, L_PID, L_SESSION);
	l->session.own_backend = PQgetvalue(r, row, L_OWN)[0] == 't';
	if (l->session.state == NULL && !PQgetisnull(r, row, L_SESSION + 6))
		d->pub.hidden_sessions = true;
	return (n == NULL || l->name) &&
	       dl_int_array(d, dl_text_or_null(r, row, L_WAITERS), &l->waiters, &l->nwaiters) &&
	       dl_int_array(d, dl_text_or_null(r, row, L_BLOCKERS), &l->blocked_by, &l->nblocked_by);
}

static skl_rc read_locks(dl_report *d, const PGresult *r)
{
	int n = PQntuples(r);
	if (n < 1)
		return SKL_DB;
	d->pub.database = PQgetvalue(r, 0, L_DB);
	d->pub.role = PQgetvalue(r, 0, L_ROLE);
	char **schemas = NULL;
	size_t nschemas = 0;
	if (!dl_text_array(d, PQgetvalue(r, 0, L_SCHEMAS), &schemas, &nschemas))
		return SKL_NOMEM;
	if (PQgetisnull(r, 0, L_PID) && PQgetisnull(r, 0, L_CLASSID))
		return SKL_OK;   /* the one row of "no advisory lock" */
	d->pub.locks = dl_alloc(d, (size_t)n * sizeof(skl_advisory_lock));
	if (d->pub.locks == NULL)
		return SKL_NOMEM;
	for (int i = 0; i < n; i++, d->pub.nlocks++)
		if (!fill_lock(d, &d->pub.locks[i], r, i, (const char *const *)schemas, nschemas))
			return SKL_NOMEM;
	return SKL_OK;
}

static skl_rc query_fn(skl_client *c, void *ctx, skl_error *err)
{
	dl_report *d = ctx;
	char idle[32];
	snprintf(idle, sizeof(idle), "%lld", (long long)d->pub.idle_for_ms);
	const char *params[1] = {idle};
	PQclear(d->locks_res);
	PQclear(d->sessions_res);
	d->locks_res = d->sessions_res = NULL;
	skl_rc rc = skl__exec(c, locks_sql, 0, NULL, &d->locks_res, err);
	if (rc == SKL_OK)
		rc = skl__exec(c, sessions_sql, 1, params, &d->sessions_res, err);
	return rc;
}

skl_rc skl_doctor_locks(skl_client *c, int64_t idle_for_ms, skl_lock_report **out,
                        skl_error *err)
{
	*out = NULL;
	if (c == NULL || idle_for_ms <= 0)
		return skl__seterr(err, SKL_MISUSE, "doctor locks needs a client and a positive idle_for");
	dl_report *d = calloc(1, sizeof(*d));
	if (d == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	d->pub.idle_for_ms = idle_for_ms;
	d->pub.internal = d;
	/* Two statements, each its own transaction: each reads one backend's view. */
	static const skl_txn_opts o = {.idempotent = 1};
	skl_rc rc = skl__run(c, &o, query_fn, d, err);
	if (rc == SKL_OK && (rc = read_locks(d, d->locks_res)) != SKL_OK)
		skl__seterr(err, rc, rc == SKL_NOMEM ? "out of memory" : "pg_locks: no rows");
	if (rc == SKL_OK && (rc = dl_findings(d, d->sessions_res)) != SKL_OK)
		skl__seterr(err, rc, "out of memory");
	if (rc != SKL_OK) {
		skl_lock_report_free(&d->pub);
		return rc;
	}
	*out = &d->pub;
	return SKL_OK;
}

void skl_lock_report_free(skl_lock_report *r)
{
	if (r == NULL)
		return;
	dl_report *d = r->internal;
	PQclear(d->locks_res);
	PQclear(d->sessions_res);
	for (size_t i = 0; i < d->nblocks; i++)
		free(d->blocks[i]);
	free(d->blocks);
	free(d);
}
