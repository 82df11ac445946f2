/*
 * doctor_locks_act.c — `doctor locks --terminate-idle-orphans`: act on the
 * orphans of a report, and on nothing else.
 *
 * One statement re-checks every orphan and acts on it in the same breath,
 * so a session that became busy since the report is left alone:
 *   - the backend must be the same (pid and backend_start) and still hold
 *     an advisory lock;
 *   - if it is the backend this statement runs on (a pooler handed it to
 *     us), its session locks are freed with pg_advisory_unlock_all(): the
 *     backend survives and nothing else of it is touched;
 *   - otherwise it must still be idle, outside any transaction, for at
 *     least its threshold (idle_for; 0 for an orphan found on our own
 *     pooled backend, which is certainly leaked), and the role must be
 *     allowed to signal it — then pg_terminate_backend().
 * Retrying the statement after a lost answer is harmless: a terminated
 * backend no longer matches, a released one no longer holds a lock.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "doctor/doctor_int.h"

/* $1 int[] pids, $2 bigint[] backend_start (us), $3 bigint[] idle ms. */
static const char *const act_sql =
	"WITH c AS (SELECT * FROM unnest($1::int[], $2::bigint[], $3::bigint[])"
	"  AS c(pid, started, idle)), "
	"me AS (SELECT rolsuper AS sup FROM pg_roles WHERE rolname = current_user), "
	"t AS (SELECT c.pid, s.pid IS NOT NULL AS alive, s.pid = pg_backend_pid() AS own,"
	"  s.state = 'idle' AND s.state_change <= clock_timestamp() - c.idle * interval '1 millisecond'"
	"    AS still_idle,"
	"  EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = c.pid AND l.locktype = 'advisory'"
	"          AND l.granted) AS holds,"
	"  CASE WHEN r.oid IS NULL THEN false WHEN r.rolsuper THEN me.sup"
	"       ELSE me.sup OR pg_has_role(r.oid, 'USAGE')"
	"         OR pg_has_role('pg_signal_backend', 'USAGE') END AS can_signal"
	"  FROM c CROSS JOIN me"
	"  LEFT JOIN pg_stat_activity s ON s.pid = c.pid"
	"    AND (extract(epoch FROM s.backend_start) * 1000000)::bigint = c.started"
	"  LEFT JOIN pg_roles r ON r.oid = s.usesysid) "
	"SELECT t.pid, CASE WHEN NOT t.alive THEN 'gone' WHEN NOT t.holds THEN 'not_idle'"
	"  WHEN t.own THEN (SELECT 'released' FROM (SELECT pg_advisory_unlock_all()) x WHERE t.own)"
	"  WHEN NOT t.still_idle THEN 'not_idle'"
	"  WHEN NOT t.can_signal THEN 'no_privilege'"
	"  WHEN pg_terminate_backend(t.pid) THEN 'terminated' ELSE 'gone' END"
	" FROM t ORDER BY t.pid";

static const struct {
	const char *sql_name;
	skl_action_result result;
	const char *text;
} results[] = {
	{"terminated", SKL_ACTION_TERMINATED, "terminated"},
	{"released", SKL_ACTION_RELEASED,
	 "released its advisory locks (pg_advisory_unlock_all on the pooled backend)"},
	{"not_idle", SKL_ACTION_NOT_IDLE, "left alone: no longer idle with an advisory lock"},
	{"gone", SKL_ACTION_GONE, "left alone: the session had already ended"},
	{"no_privilege", SKL_ACTION_NO_PRIVILEGE,
	 "not terminated: this role may not signal it (needs pg_signal_backend, "
	 "membership in its role, or superuser)"},
};

const char *skl_action_result_str(skl_action_result r)
{
	for (size_t i = 0; i < SKL_ARRAY_LEN(results); i++)
		if (results[i].result == r)
			return results[i].text;
	return "unknown action result";
}

/* The three array parameters over the report's orphans; false on NOMEM. */
static bool build_params(const skl_lock_report *r, skl_buf p[3], size_t *n)
{
	*n = 0;
	for (int i = 0; i < 3; i++)
		skl_buf_adds(&p[i], "{");
	for (size_t i = 0; i < r->nfindings; i++) {
		const skl_lock_finding *f = &r->findings[i];
		if (f->kind != SKL_FINDING_ORPHAN)
			continue;
		const char *sep = (*n)++ ? "," : "";
		skl_buf_printf(&p[0], "%s%d", sep, f->session.pid);
		skl_buf_printf(&p[1], "%s%lld", sep, (long long)f->session.backend_start_us);
		skl_buf_printf(&p[2], "%s%lld", sep,
		               f->session.own_backend ? 0LL : (long long)r->idle_for_ms);
	}
	bool ok = true;
	for (int i = 0; i < 3; i++)
		ok = skl_buf_adds(&p[i], "}") && ok;
	return ok;
}

static skl_rc read_actions(PGresult *res, skl_lock_action **out, size_t *n, skl_error *err)
{
	int rows = PQntuples(res);
	skl_lock_action *a = calloc(rows ? (size_t)rows : 1, sizeof(*a));
	if (a == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	for (int i = 0; i < rows; i++) {
		a[i].pid = atoi(PQgetvalue(res, i, 0));
		a[i].result = SKL_ACTION_GONE;
		for (size_t k = 0; k < SKL_ARRAY_LEN(results); k++)
			if (strcmp(PQgetvalue(res, i, 1), results[k].sql_name) == 0)
				a[i].result = results[k].result;
	}
	*out = a;
	*n = (size_t)rows;
	return SKL_OK;
}

skl_rc skl_doctor_locks_terminate(skl_client *c, const skl_lock_report *r,
                                  skl_lock_action **actions, size_t *n, skl_error *err)
{
	*actions = NULL;
	*n = 0;
	if (c == NULL || r == NULL)
		return skl__seterr(err, SKL_MISUSE, "doctor locks terminate needs a client and a report");
	skl_buf p[3];
	size_t norphans;
	for (int i = 0; i < 3; i++)
		skl_buf_init(&p[i], 0);
	skl_rc rc = SKL_OK;
	if (!build_params(r, p, &norphans))
		rc = skl__seterr(err, SKL_NOMEM, "out of memory");
	skl_stmt s = {.sql = act_sql, .nparams = 3,
	              .params = {skl_buf_str(&p[0]), skl_buf_str(&p[1]), skl_buf_str(&p[2])}};
	static const skl_txn_opts o = {.txn = 1, .idempotent = 1};
	if (rc == SKL_OK && norphans > 0 && (rc = skl__run_stmt(c, &o, &s, err)) == SKL_OK)
		rc = read_actions(s.res, actions, n, err);
	PQclear(s.res);
	for (int i = 0; i < 3; i++)
		skl_buf_free(&p[i]);
	return rc;
}
