/*
 * doctor_findings.c — the findings of `doctor locks` built from what the
 * two statements of doctor_locks.c read (doctor_report.c holds the
 * report's memory and row readers).
 *
 * Findings, in this order:
 *   orphan        a granted advisory lock whose session is idle (outside
 *                 any transaction, so the lock is session-level) for at
 *                 least idle_for, or whose backend is the one the locks
 *                 statement itself ran on; one finding per session
 *   idle in txn   from sessions_sql: idle in transaction >= idle_for and
 *                 holding a lock besides its own virtual transaction id
 *   blocker       from sessions_sql: a session others waited on >= idle_for
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "doctor/doctor_int.h"

static bool is_orphan(const skl_advisory_lock *l, int64_t idle_for_ms)
{
	const skl_db_session *s = &l->session;
	if (!l->granted || s->pid == 0)
		return false;
	return s->own_backend ||
	       (s->state && strcmp(s->state, "idle") == 0 && s->state_age_ms >= idle_for_ms);
}

/* "sqlx migrations (key 123), key 7": every advisory key pid holds. */
static const char *keys_of(dl_report *d, int pid)
{
	skl_buf b;
	skl_buf_init(&b, 0);
	for (size_t i = 0; i < d->pub.nlocks; i++) {
		const skl_advisory_lock *l = &d->pub.locks[i];
		if (!l->granted || l->session.pid != pid)
			continue;
		if (b.len)
			skl_buf_adds(&b, ", ");
		if (l->name)
			skl_buf_printf(&b, "%s (", l->name);
		if (l->key.two)
			skl_buf_printf(&b, "key %d,%d", l->key.k1, l->key.k2);
		else
			skl_buf_printf(&b, "key %lld", (long long)l->key.key);
		if (l->name)
			skl_buf_adds(&b, ")");
	}
	char *s = dl_strdup(d, skl_buf_str(&b));
	bool ok = !skl_buf_failed(&b);
	skl_buf_free(&b);
	return ok ? s : NULL;
}

static bool add_orphans(dl_report *d)
{
	skl_lock_report *r = &d->pub;
	for (size_t i = 0; i < r->nlocks; i++) {
		const skl_advisory_lock *l = &r->locks[i];
		bool seen = false;
		for (size_t j = 0; j < r->nfindings && !seen; j++)
			seen = r->findings[j].session.pid == l->session.pid;
		if (seen || !is_orphan(l, r->idle_for_ms))
			continue;
		skl_lock_finding *f = &r->findings[r->nfindings++];
		*f = (skl_lock_finding){.kind = SKL_FINDING_ORPHAN, .session = l->session,
		                        .holds = keys_of(d, l->session.pid), .longest_wait_ms = -1};
		if (f->holds == NULL)
			return false;
	}
	return true;
}

static bool add_sessions(dl_report *d, const PGresult *res, skl_lock_finding_kind kind)
{
	skl_lock_report *r = &d->pub;
	for (int i = 0; i < PQntuples(res); i++) {
		bool iit = PQgetvalue(res, i, S_IIT)[0] == 't';
		bool blocks = !PQgetisnull(res, i, S_VICTIMS);
		if (kind == SKL_FINDING_IDLE_IN_TXN ? !iit : !blocks)
			continue;
		skl_lock_finding *f = &r->findings[r->nfindings++];
		*f = (skl_lock_finding){.kind = kind, .longest_wait_ms = -1};
		dl_fill_session(&f->session, res, i, S_PID, S_SESSION);
		f->holds = PQgetisnull(res, i, S_HOLDS) ? "" : PQgetvalue(res, i, S_HOLDS);
		if (kind == SKL_FINDING_BLOCKER) {
			f->longest_wait_ms = strtoll(PQgetvalue(res, i, S_LONGEST), NULL, 10);
			if (!dl_int_array(d, PQgetvalue(res, i, S_VICTIMS), &f->blocked, &f->nblocked))
				return false;
		}
		if (f->session.state == NULL)
			r->hidden_sessions = true;
	}
	return true;
}

skl_rc dl_findings(dl_report *d, const PGresult *sessions)
{
	skl_lock_report *r = &d->pub;
	size_t max = r->nlocks + 2 * (size_t)PQntuples(sessions);
	r->findings = dl_alloc(d, (max ? max : 1) * sizeof(skl_lock_finding));
	if (r->findings == NULL || !add_orphans(d) ||
	    !add_sessions(d, sessions, SKL_FINDING_IDLE_IN_TXN) ||
	    !add_sessions(d, sessions, SKL_FINDING_BLOCKER))
		return SKL_NOMEM;
	return SKL_OK;
}
