/*
 * checker.c — the end-state checks, each one SQL query over skiplock's
 * tables and the campaign's (chaos_history, chaos_enq, chaos_ledger,
 * chaos_lease_writes) that returns one row per violation.  Run after the
 * nemesis stopped, everything healed and the fleet drained and stopped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chaos.h"

typedef struct check {
	const char *name;
	const char *what;   /* the invariant, as printed on a violation */
	const char *sql;    /* one row (one text column) per violation */
} check;

static const check checks[] = {
	{"acked-enqueue-lost", "an enqueue whose COMMIT was acknowledged has no row",
	 "SELECT h.tag FROM chaos_history h WHERE h.outcome IN ('ok', 'recovered')"
	  " AND NOT EXISTS (SELECT 1 FROM chaos_enq e WHERE e.tag = h.tag)"},
	{"not-terminal", "a committed enqueue's job did not reach a terminal state",
	 "SELECT e.tag || ' job ' || e.job_id || ' ' || coalesce(j.state, 'missing')"
	  " FROM chaos_enq e LEFT JOIN skiplock.all_jobs j ON j.id = e.job_id"
	  " WHERE j.state IS NULL OR j.state NOT IN ('completed', 'discarded')"},
	{"wrong-end", "a job ended in the wrong state (poison: discarded; others: completed)",
	 "SELECT id || ' ' || kind || ' ' || state FROM skiplock.all_jobs"
	  " WHERE queue = '" CHAOS_QUEUE "' AND state IN ('completed', 'discarded')"
	  " AND (kind = 'poison') <> (state = 'discarded')"},
	{"still-running", "a job is still running",
	 "SELECT id || ' ' || kind || ' owner ' || coalesce(lease_owner, '?')"
	  " FROM skiplock.all_jobs WHERE state = 'running'"},
	{"rolled-back-visible", "an enqueue rolled back on purpose left a job or an effect",
	 "SELECT h.tag FROM chaos_history h WHERE h.intent = 'rollback' AND ("
	  " EXISTS (SELECT 1 FROM chaos_enq e WHERE e.tag = h.tag)"
	  " OR EXISTS (SELECT 1 FROM skiplock.all_jobs j WHERE j.payload->>'tag' = h.tag)"
	  " OR (h.kind <> 'dup' AND h.job_id IS NOT NULL AND ("
	  "   EXISTS (SELECT 1 FROM skiplock.all_jobs j WHERE j.id = h.job_id)"
	  "   OR EXISTS (SELECT 1 FROM chaos_ledger l WHERE l.job_id = h.job_id))))"},
	{"enqueue-not-one-job",
	 "an enqueue (retried after a lost COMMIT answer or not) made other than one job",
	 "SELECT tag || ' (' || outcome || ', ' || infos || ' lost answers): ' || n || ' jobs'"
	  " FROM (SELECT h.*, (SELECT count(*) FROM skiplock.all_jobs j"
	  "                     WHERE j.payload->>'tag' = h.tag) n,"
	  "              EXISTS (SELECT 1 FROM chaos_enq e WHERE e.tag = h.tag) enq"
	  "         FROM chaos_history h WHERE h.intent = 'commit') h"
	  " WHERE n > 1 OR (n = 1 AND NOT enq)"
	  "    OR (kind <> 'dup' AND n <> enq::int)"
	  "    OR (kind <> 'dup' AND outcome IN ('ok', 'recovered') AND n <> 1)"},
	{"unexpected-job", "a job exists that no committed enqueue returned",
	 "SELECT j.id || ' ' || j.kind FROM skiplock.all_jobs j WHERE j.kind <> 'cron'"
	  " AND NOT EXISTS (SELECT 1 FROM chaos_enq e WHERE e.job_id = j.id)"},
	{"wrong-job-returned", "an enqueue returned a job of another kind",
	 "SELECT e.tag || ' -> ' || e.job_id FROM chaos_enq e JOIN skiplock.all_jobs j"
	  " ON j.id = e.job_id WHERE j.kind <> e.kind"
	  " OR (e.kind = 'dup' AND j.unique_key NOT LIKE 'dup:%')"},
	{"effect-not-once", "a job's handler effect is not in the ledger exactly once",
	 "SELECT j.id || ' ' || j.kind || ' ' || j.state || ': ' || count(l.job_id) || ' effects'"
	  " FROM skiplock.all_jobs j LEFT JOIN chaos_ledger l ON l.job_id = j.id"
	  " GROUP BY j.id, j.kind, j.state HAVING count(l.job_id) > 1"
	  " OR (j.kind = 'poison' AND count(l.job_id) > 0)"
	  " OR (j.kind <> 'poison' AND j.state = 'completed' AND count(l.job_id) <> 1)"},
	{"effect-unfenced", "a ledger row carries a token its job never issued",
	 "SELECT l.job_id || ' fencing ' || l.fencing FROM chaos_ledger l"
	  " LEFT JOIN skiplock.all_jobs j ON j.id = l.job_id"
	  " WHERE j.id IS NULL OR l.fencing < 1 OR l.fencing > j.fencing"},
	{"poison-history", "a poison job is not discarded with its error in the history",
	 "SELECT id || ' ' || state FROM skiplock.all_jobs WHERE kind = 'poison'"
	  " AND (state <> 'discarded' OR errors::text NOT LIKE '%can never succeed%')"},
	{"attempts-exceeded", "a job was attempted more than max_attempts times",
	 "SELECT id || ': ' || attempt || ' > ' || max_attempts FROM skiplock.all_jobs"
	  " WHERE attempt > max_attempts"},
	{"lease-overlap", "two holders of the lease had overlapping accepted writes",
	 "SELECT 'token ' || fencing || ' wrote from ' || lo || ' while token ' || prev_f"
	  " || ' wrote until ' || prev_hi FROM ("
	  "  SELECT fencing, lo, lag(hi) OVER w prev_hi, lag(fencing) OVER w prev_f FROM ("
	  "   SELECT fencing, min(at) lo, max(at) hi FROM chaos_lease_writes GROUP BY fencing) s"
	  "  WINDOW w AS (ORDER BY fencing)) s WHERE lo <= prev_hi"
	  " UNION ALL SELECT 'token ' || fencing || ' used by ' || count(DISTINCT writer)"
	  " || ' writers' FROM chaos_lease_writes GROUP BY fencing HAVING count(DISTINCT writer) > 1"
	  " UNION ALL SELECT 'token ' || w.fencing || ' was never issued' FROM chaos_lease_writes w"
	  " WHERE w.fencing > (SELECT fencing FROM skiplock.leases WHERE name = '" CHAOS_LEASE "')"},
	{"cron-fire-not-once", "a fire time of the minutely schedule made other than one job",
	 "WITH s AS (SELECT created_at, last_fire FROM skiplock.schedules"
	  "             WHERE name = '" CHAOS_SCHEDULE "'),"
	  " want AS (SELECT 'cron:" CHAOS_SCHEDULE ":' || to_char(f AT TIME ZONE 'UTC',"
	  "            'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS key FROM s,"
	  "            generate_series(s.created_at + interval '1 minute', s.last_fire,"
	  "                            interval '1 minute') f),"
	  " got AS (SELECT unique_key AS key, count(*) n FROM skiplock.all_jobs WHERE kind = 'cron'"
	  "          GROUP BY unique_key)"
	  " SELECT coalesce(w.key, g.key) || ': ' || coalesce(g.n, 0) || ' jobs'"
	  "   FROM want w FULL JOIN got g ON g.key = w.key"
	  "  WHERE w.key IS NULL OR coalesce(g.n, 0) <> 1"
	  " UNION ALL SELECT 'the schedule never fired' FROM s WHERE last_fire IS NULL"},
	{"workload-missing", "a part of the workload never happened (the run proves nothing)",
	 "SELECT k FROM unnest(ARRAY['fast', 'slow', 'flaky', 'dup', 'cron']) k"
	  " WHERE NOT EXISTS (SELECT 1 FROM skiplock.all_jobs WHERE kind = k AND state = 'completed')"
	  " UNION ALL SELECT 'poison' WHERE NOT EXISTS (SELECT 1 FROM skiplock.all_jobs"
	  "   WHERE kind = 'poison' AND state = 'discarded')"
	  " UNION ALL SELECT 'lease writes' WHERE NOT EXISTS (SELECT 1 FROM chaos_lease_writes)"
	  " UNION ALL SELECT 'rollbacks' WHERE NOT EXISTS (SELECT 1 FROM chaos_history"
	  "   WHERE intent = 'rollback' AND job_id IS NOT NULL)"},
	{"advisory-lock", "an advisory lock is held",
	 "SELECT l.pid || ' ' || l.objid FROM pg_locks l JOIN pg_database d ON d.oid = l.database"
	  " WHERE l.locktype = 'advisory' AND d.datname = current_database()"},
	{"idle-in-transaction", "a session is idle in a transaction",
	 "SELECT pid || ' ' || application_name || ' ' || state FROM pg_stat_activity"
	  " WHERE datname = current_database() AND state LIKE 'idle in transaction%'"
	  " AND pid <> pg_backend_pid()"},
};

static long long run_check(chaos *c, const check *k)
{
	PGresult *r = obs_query(c, k->sql);
	if (!pq_ok(r)) {
		logf_("VIOLATION %s: the check itself failed", k->name);
		PQclear(r);
		return 1;
	}
	long long n = PQntuples(r);
	if (n > 0) {
		logf_("VIOLATION %s: %s (%lld)", k->name, k->what, n);
		for (int i = 0; i < PQntuples(r) && i < 8; i++)
			logf_("  %s", PQgetvalue(r, i, 0));
	}
	PQclear(r);
	return n;
}

long long checker_run(chaos *c)
{
	/* sessions of killed handlers may still be closing: wait, bounded */
	for (int i = 0; i < 100 && obs_int(c, "SELECT count(*) FROM pg_stat_activity WHERE datname "
	                                      "= current_database() AND state LIKE 'idle in "
	                                      "transaction%' AND pid <> pg_backend_pid()") > 0; i++)
		sleep_ms(100);
	long long total = c->drained ? 0 : 1;
	if (!c->drained)
		logf_("VIOLATION drain: the fleet did not finish the work after the faults");
	for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++)
		total += run_check(c, &checks[i]);
	return total;
}

static const char *const summary_sql =
	"SELECT (SELECT count(*) FROM skiplock.all_jobs),"
	" (SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed'),"
	" (SELECT count(*) FROM skiplock.all_jobs WHERE state = 'discarded'),"
	" (SELECT count(*) FROM skiplock.all_jobs j, jsonb_array_elements(j.errors) e"
	"   WHERE e->>'error' LIKE 'lease expired%'),"
	" (SELECT count(*) FROM chaos_fenced WHERE what = 'job'),"
	" (SELECT count(*) FROM chaos_fenced WHERE what = 'lease'),"
	" (SELECT count(*) FROM chaos_ledger WHERE abs(extract(epoch FROM client_at - db_at)) > 60),"
	" (SELECT coalesce(max(abs(extract(epoch FROM client_at - db_at))), 0)::int FROM chaos_ledger),"
	" (SELECT fencing FROM skiplock.leases WHERE name = '" CHAOS_LEASE "'),"
	" (SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'cron'),"
	" (SELECT count(*) FROM skiplock.all_jobs WHERE attempt > 1)";

void checker_summary(chaos *c, char *buf, size_t cap)
{
	PGresult *r = obs_query(c, summary_sql);
	if (!pq_ok(r) || PQntuples(r) != 1) {
		snprintf(buf, cap, "(no summary: the observer failed)");
		PQclear(r);
		return;
	}
#define V(i) PQgetvalue(r, 0, i)
	char faults[512] = "";
	int total = 0;
	for (int i = 0; i < F_COUNT; i++) {
		size_t len = strlen(faults);
		snprintf(faults + len, sizeof(faults) - len, "%s%s=%d", i ? " " : "", fault_names[i],
		         c->faults[i]);
		total += c->faults[i];
	}
	snprintf(buf, cap,
	         "jobs=%s (completed %s, discarded %s, cron %s, retried %s); faults=%d (%s); "
	         "rescued=%s; fenced-out writes=%lld (jobs %s, lease %s); lease tokens=%s; "
	         "enqueues: ok %lld, rolled back %lld, lost COMMIT answers %lld (recovered %lld), "
	         "gave up %lld; skewed effects=%s (max %s s)",
	         V(0), V(1), V(2), V(9), V(10), total, faults, V(3),
	         atoll(V(4)) + atoll(V(5)), V(4), V(5), PQgetisnull(r, 0, 8) ? "0" : V(8),
	         c->enq_ok, c->enq_rolled_back, c->enq_info, c->enq_recovered, c->enq_failed,
	         V(6), V(7));
#undef V
	PQclear(r);
}
