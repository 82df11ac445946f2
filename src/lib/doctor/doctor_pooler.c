/*
 * doctor_pooler.c — `doctor pooler`: learn from behaviour what sits between
 * the client and PostgreSQL, and which session features survive it.
 *
 * This is the one place in the library that creates session state on
 * purpose — a session advisory lock, a session setting, a LISTEN and a
 * named prepared statement — because the point is to watch whether they
 * survive.  The invariant it keeps instead: all of that state is created
 * in one transaction on one backend (P1), and before returning it is
 * removed on that same backend, in a transaction that first checks
 * pg_backend_pid() = P1.
 *
 * The probe, with connection A and short-lived "holder" connections:
 *  1. setup: A, in one transaction on P1, creates the state;
 *  2. moving: a holder begins a transaction and holds it.  A transaction
 *     pooler hands it an idle server, usually P1 (PgBouncer reuses the most
 *     recently released); A's next transaction then runs elsewhere.  Either
 *     a holder on P1 while A is still connected, or A on another backend
 *     without reconnecting, proves transaction pooling.  A direct or
 *     session-pooled A keeps P1 and every holder has its own backend.
 *     Holders that miss P1 are closed at once (a session pooler may have
 *     no server to spare), up to three rounds;
 *  3. check: A's next transaction looks for the state and NOTIFYs its own
 *     channel; the notification comes back only on the listening backend;
 *  4. reuse: unless transaction pooling was seen, a new connection asks
 *     whether its backend started before the connection was opened — only
 *     a pooler hands out a backend that already existed;
 *  5. undo, on P1 (the holder that sits on it, else whichever transaction
 *     lands there), then every connection is rolled back and closed.
 * Every call is bounded by min(call timeout, 5s), so a pooler with no free
 * server cannot hang the probe.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "skiplock/diagnose.h"

#define PROBE_CLASS "1936419952"   /* 0x736b6c70, "sklp": the advisory key's first half */
#define HOLDERS 4

typedef struct probe {
	skl_client_options o;
	skl_client *a;
	skl_client *h[HOLDERS];
	int hpid[HOLDERS];            /* a holder's backend while it holds a transaction */
	int p1;                       /* A's backend during setup: where the state lives */
	char key[16], tok[24], chan[48], stmt[48];
	skl_pooler_report *r;
	bool moved;                   /* transaction pooling was seen */
	int cleaner;                  /* holder index sitting on P1, or -1 */
} probe;

static const char *const does[SKL_PROBE_COUNT] = {
	"each claim, renewal and outcome is one short transaction; nothing relies on the backend",
	"settings are SET LOCAL inside each transaction, never a session SET",
	"leases are rows with an expiry and a fencing token; only pg_advisory_xact_lock is used",
	"LISTEN only on a direct connection (the worker's own, or a second one to --direct-url); "
	"through a pooler workers poll, and polling alone finds every job",
	"named prepared statements only on a direct connection (the worker's claims, outcomes and "
	"heartbeats); through a pooler only unnamed statements"};
static const char *const names[SKL_PROBE_COUNT] = {"backend", "session SET", "advisory lock",
                                                   "LISTEN/NOTIFY", "prepared statement"};

/* ---- small helpers on one client ---- */

/* One statement on c's current connection: never reconnects, since a new
 * connection would be a new backend and spoil the evidence. */
static skl_rc q(skl_client *c, const char *sql, int n, const char *const *v, PGresult **r,
                skl_error *err)
{
	PGresult *tmp = NULL;
	skl_rc rc = c->conn ? skl__exec(c, sql, n, v, &tmp, err)
	                    : skl__seterr(err, SKL_UNREACHABLE, "the probe's connection was lost");
	if (r)
		*r = tmp;
	else
		PQclear(tmp);
	return rc;
}

static int q_pid(skl_client *c, const char *sql, skl_error *err)
{
	PGresult *r;
	int pid = q(c, sql, 0, NULL, &r, err) == SKL_OK ? atoi(PQgetvalue(r, 0, 0)) : 0;
	PQclear(r);
	return pid;
}

static skl_rc begin(skl_client *c, skl_error *err)
{
	skl_rc rc = q(c, "BEGIN", 0, NULL, NULL, err);
	if (rc == SKL_OK)
		c->tx = SKL_TX_OPEN;
	return rc;
}

/* COMMIT or ROLLBACK; a failure drops the connection (the server then
 * rolls back). */
static void end(skl_client *c, const char *how)
{
	if (c == NULL || c->conn == NULL || c->tx == SKL_TX_NONE)
		return;
	skl_error ignored;
	if (q(c, how, 0, NULL, NULL, &ignored) != SKL_OK && c->conn) {
		PQfinish(c->conn);
		c->conn = NULL;
	}
	c->tx = SKL_TX_NONE;
}

static skl_client *open_client(probe *p, skl_error *err)
{
	skl_client *c = NULL;
	if (skl_client_open(&p->o, &c, err) != SKL_OK)
		return NULL;
	if (skl__connect(c, err) != SKL_OK) {
		skl_client_close(c);
		return NULL;
	}
	return c;
}

static void close_holder(probe *p, int i)
{
	end(p->h[i], "ROLLBACK");
	skl_client_close(p->h[i]);
	p->h[i] = NULL;
	p->hpid[i] = 0;
}

/* Opens holder i and begins a transaction on it; its backend, or 0. */
static int hold(probe *p, int i)
{
	skl_error e;
	p->h[i] = open_client(p, &e);
	if (p->h[i] == NULL || begin(p->h[i], &e) != SKL_OK) {
		close_holder(p, i);
		return 0;
	}
	p->hpid[i] = q_pid(p->h[i], "SELECT pg_backend_pid()", &e);
	return p->hpid[i];
}

/* ---- 1. setup: the state, in one transaction on P1 ---- */

/* The probe creates session state on purpose — a session advisory lock, a
 * session setting (set_config(..., false)), a LISTEN and a named PREPARE —
 * to see whether it survives into the next transaction; cleanup() removes
 * every piece on P1 itself.  Nothing else in skiplock does this. */

static skl_rc setup(probe *p, skl_error *err)
{
	char sql[160];
	const char *v[] = {p->key, p->tok};
	PGresult *r = NULL;
	skl_rc rc = begin(p->a, err);
	if (rc == SKL_OK)
		rc = q(p->a, "SELECT pg_backend_pid(), pg_try_advisory_lock(" PROBE_CLASS ", $1::int),"
		             "       set_config('skiplock.probe', $2, false)", 2, v, &r, err);
	if (rc == SKL_OK)
		p->p1 = atoi(PQgetvalue(r, 0, 0));
	PQclear(r);
	snprintf(sql, sizeof(sql), "LISTEN %s", p->chan);
	if (rc == SKL_OK)
		rc = q(p->a, sql, 0, NULL, NULL, err);
	snprintf(sql, sizeof(sql), "PREPARE %s AS SELECT 1", p->stmt);
	if (rc == SKL_OK)
		rc = q(p->a, sql, 0, NULL, NULL, err);
	end(p->a, rc == SKL_OK ? "COMMIT" : "ROLLBACK");
	return rc;
}

/* ---- 2. moving A off P1 ---- */

static void move(probe *p, char *ev, size_t cap)
{
	skl_error e;
	for (int i = 0; i < 3 && !p->moved; i++) {
		int hp = hold(p, i);
		if (hp == p->p1) {
			p->moved = true;
			p->cleaner = i;
			snprintf(ev, cap, "another connection's transaction ran on backend %d while this"
			         " connection, idle, was still using it", p->p1);
			return;
		}
		int pa = q_pid(p->a, "SELECT pg_backend_pid()", &e);
		if (pa != 0 && pa != p->p1) {
			p->moved = true;
			snprintf(ev, cap, "consecutive transactions of one connection ran on backends %d"
			         " and %d", p->p1, pa);
		}
		if (p->h[i] && !p->moved)
			close_holder(p, i);
	}
}

/* ---- 3. does the state survive into A's next transaction? ---- */

static const char *const check_sql =
	"SELECT pg_backend_pid(),"
	"       current_setting('skiplock.probe', true) IS NOT DISTINCT FROM $2,"
	"       EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'"
	"                  AND pid = pg_backend_pid() AND classid = " PROBE_CLASS
	"                  AND objid = $1::int AND objsubid = 2),"
	"       EXISTS (SELECT 1 FROM pg_prepared_statements WHERE name = $3)";

static void set_probe(skl_pooler_report *r, int f, bool works, const char *fmt, ...)
	SKL_PRINTF(4, 5);
static void set_probe(skl_pooler_report *r, int f, bool works, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	r->probes[f].works = works;
	vsnprintf(r->probes[f].observed, sizeof(r->probes[f].observed), fmt, ap);
	va_end(ap);
}

static skl_rc check(probe *p, skl_error *err)
{
	const char *v[] = {p->key, p->tok, p->stmt};
	PGresult *r;
	skl_rc rc = q(p->a, check_sql, 3, v, &r, err);
	if (rc != SKL_OK)
		return rc;
	int pid = atoi(PQgetvalue(r, 0, 0));
	bool set = PQgetvalue(r, 0, 1)[0] == 't', lock = PQgetvalue(r, 0, 2)[0] == 't',
	     prep = PQgetvalue(r, 0, 3)[0] == 't';
	PQclear(r);
	skl_pooler_report *rep = p->r;
	set_probe(rep, SKL_PROBE_SET, set, set ? "the setting was still there (backend %d)"
	          : "the next transaction (backend %d) did not have the setting", pid);
	set_probe(rep, SKL_PROBE_LOCK, lock, lock ? "still held by this connection (backend %d)"
	          : "the next transaction (backend %d) does not hold it; it stays held elsewhere",
	          pid);
	set_probe(rep, SKL_PROBE_PREPARED, prep, prep ? "still prepared (backend %d)"
	          : "the next transaction (backend %d) does not know it", pid);
	return SKL_OK;
}

static skl_rc notify(probe *p, skl_error *err)
{
	char sql[160];
	snprintf(sql, sizeof(sql), "NOTIFY %s, '%s'", p->chan, p->tok);
	skl_rc rc = q(p->a, sql, 0, NULL, NULL, err);
	if (rc == SKL_OK)   /* one more round trip: anything pending has arrived */
		rc = q(p->a, "SELECT 1", 0, NULL, NULL, err);
	bool back = false;
	PGnotify *n;
	while (rc == SKL_OK && p->a->conn && (n = PQnotifies(p->a->conn)) != NULL) {
		back = back || (strcmp(n->relname, p->chan) == 0 && strcmp(n->extra, p->tok) == 0);
		PQfreemem(n);
	}
	set_probe(p->r, SKL_PROBE_NOTIFY, back, back ? "the notification came back to backend %d"
	          : "LISTEN on backend %d, NOTIFY from the next transaction: nothing came back",
	          p->p1);
	return rc;
}

/* ---- 4. is a new connection handed a backend that already existed? ---- */

static const char *const reused_sql =
	"SELECT pg_backend_pid(), backend_start < $1::timestamptz"
	"  FROM pg_stat_activity WHERE pid = pg_backend_pid()";

static bool reused(probe *p, char *ev, size_t cap)
{
	skl_error e;
	for (int i = 0; i < 3; i++) {
		PGresult *r;
		if (q(p->a, "SELECT clock_timestamp()::text", 0, NULL, &r, &e) != SKL_OK)
			return false;
		char t0[64];
		snprintf(t0, sizeof(t0), "%s", PQgetvalue(r, 0, 0));
		PQclear(r);
		skl_client *b = open_client(p, &e);
		const char *v[] = {t0};
		bool old = false;
		int pid = 0;
		if (b && q(b, reused_sql, 1, v, &r, &e) == SKL_OK && PQntuples(r) == 1) {
			pid = atoi(PQgetvalue(r, 0, 0));
			old = PQgetvalue(r, 0, 1)[0] == 't';
		}
		if (b)
			PQclear(r);
		skl_client_close(b);
		if (old) {
			snprintf(ev, cap, "a new connection was handed backend %d, which had started"
			         " before the connection was opened", pid);
			return true;
		}
	}
	return false;
}

/* ---- 5. undo, on P1 ---- */

static const char *const undo_sql =
	"SELECT pg_advisory_unlock(" PROBE_CLASS ", $1::int) FROM pg_locks"
	" WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND classid = " PROBE_CLASS
	"   AND objid = $1::int AND objsubid = 2";
static const char *const undone_sql =
	"SELECT NOT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'"
	"                      AND pid = pg_backend_pid() AND classid = " PROBE_CLASS ")"
	"   AND coalesce(current_setting('skiplock.probe', true), '') = ''"
	"   AND NOT EXISTS (SELECT 1 FROM pg_prepared_statements WHERE name = $1)";

static const char *const prepared_sql =
	"SELECT EXISTS (SELECT 1 FROM pg_prepared_statements WHERE name = $1)";

/* Removes the state on c, which is inside a transaction on P1. */
static skl_rc undo_on(probe *p, skl_client *c, skl_error *err)
{
	char sql[200];
	const char *k[] = {p->key}, *s[] = {p->stmt};
	PGresult *r = NULL;
	skl_rc rc = q(c, undo_sql, 1, k, NULL, err);
	snprintf(sql, sizeof(sql), "RESET skiplock.probe; UNLISTEN %s", p->chan);
	if (rc == SKL_OK) {
		rc = skl__exec_simple(c, sql, &r, err);
		PQclear(r);
		r = NULL;
	}
	if (rc == SKL_OK && (rc = q(c, prepared_sql, 1, s, &r, err)) == SKL_OK &&
	    PQgetvalue(r, 0, 0)[0] == 't') {
		snprintf(sql, sizeof(sql), "DEALLOCATE %s", p->stmt);
		rc = q(c, sql, 0, NULL, NULL, err);
	}
	PQclear(r);
	r = NULL;
	if (rc == SKL_OK && (rc = q(c, undone_sql, 1, s, &r, err)) == SKL_OK &&
	    PQgetvalue(r, 0, 0)[0] != 't')
		rc = skl__seterr(err, SKL_DB, "backend %d still holds the probe's state", p->p1);
	PQclear(r);
	end(c, rc == SKL_OK ? "COMMIT" : "ROLLBACK");
	return rc;
}

/* Finds a transaction on P1: the holder already there, else A or new
 * holders, each kept in its transaction so that the next lands elsewhere. */
static skl_client *reach_p1(probe *p)
{
	if (p->cleaner >= 0)
		return p->h[p->cleaner];
	skl_error e;
	if (p->a->conn && begin(p->a, &e) == SKL_OK &&
	    q_pid(p->a, "SELECT pg_backend_pid()", &e) == p->p1)
		return p->a;
	for (int i = 0; i < HOLDERS; i++)
		if (p->h[i] == NULL && hold(p, i) == p->p1)
			return p->h[i];
	return NULL;
}

static void undo(probe *p)
{
	skl_error e;
	skl_client *c = reach_p1(p);
	skl_pooler_report *r = p->r;
	r->undone = c != NULL && undo_on(p, c, &e) == SKL_OK;
	if (c == NULL)
		snprintf(r->undo_problem, sizeof(r->undo_problem),
		         "could not reach backend %d again; it keeps advisory lock (%s, %s), the"
		         " setting skiplock.probe, LISTEN %s and statement %s until it is reset or"
		         " closed", p->p1, PROBE_CLASS, p->key, p->chan, p->stmt);
	else if (!r->undone)
		snprintf(r->undo_problem, sizeof(r->undo_problem), "undoing on backend %d failed: %.300s",
		         p->p1, e.message);
	end(p->a, "ROLLBACK");
	for (int i = 0; i < HOLDERS; i++)
		if (p->h[i])
			close_holder(p, i);
}

/* ---- --direct-url: the same database? ---- */

static const char *const identity_sql =
	"SELECT format('database %s (oid %s), server started %s%s', current_database(),"
	"              (SELECT oid FROM pg_database WHERE datname = current_database()),"
	"              pg_postmaster_start_time(),"
	"              CASE WHEN has_function_privilege('pg_control_system()', 'EXECUTE')"
	"                THEN ', system ' || (SELECT system_identifier FROM pg_control_system())"
	"              END)";

static bool identity(skl_client *c, char *buf, size_t cap, skl_error *err)
{
	PGresult *r;
	bool ok = c && q(c, identity_sql, 0, NULL, &r, err) == SKL_OK;
	if (ok)
		snprintf(buf, cap, "%s", PQgetvalue(r, 0, 0));
	if (c)
		PQclear(r);
	return ok;
}

static void compare_direct(probe *p)
{
	skl_pooler_report *r = p->r;
	skl_client_options d = p->o;
	d.url = p->o.direct_url;
	d.pooler = SKL_POOLER_NONE;
	skl_error e;
	skl_client *c = NULL;
	char mine[120], theirs[120];
	if (skl_client_open(&d, &c, &e) != SKL_OK || skl__connect(c, &e) != SKL_OK ||
	    !identity(p->a, mine, sizeof(mine), &e) || !identity(c, theirs, sizeof(theirs), &e)) {
		snprintf(r->direct_detail, sizeof(r->direct_detail), "the direct URL: %.300s", e.message);
	} else {
		r->direct_checked = true;
		r->same_database = strcmp(mine, theirs) == 0;
		snprintf(r->direct_detail, sizeof(r->direct_detail), "%s%s%s", mine,
		         r->same_database ? "" : "; the direct URL reaches ",
		         r->same_database ? "" : theirs);
	}
	skl_client_close(c);
}

/* ---- the whole probe ---- */

static void verdict(probe *p, const char *moved_ev)
{
	skl_pooler_report *r = p->r;
	char ev[256] = "";
	if (p->moved) {
		r->verdict = SKL_POOLER_TRANSACTION;
		snprintf(r->evidence, sizeof(r->evidence), "%s", moved_ev);
	} else if (reused(p, ev, sizeof(ev))) {
		r->verdict = SKL_POOLER_SESSION;
		snprintf(r->evidence, sizeof(r->evidence), "%s; each connection kept its backend", ev);
	} else {
		r->verdict = SKL_POOLER_NONE;
		snprintf(r->evidence, sizeof(r->evidence), "each connection kept its own backend, and"
		         " new connections got new backends");
	}
	r->probes[SKL_PROBE_BACKEND].works = !p->moved;
	snprintf(r->probes[SKL_PROBE_BACKEND].observed, sizeof(r->probes[0].observed), "%s",
	         p->moved ? moved_ev : "consecutive transactions stayed on one backend");
}

static void names_for(probe *p)
{
	uint64_t rnd = skl__seed();
	snprintf(p->key, sizeof(p->key), "%d", (int)(rnd & 0x7fffffff));
	snprintf(p->tok, sizeof(p->tok), "%016" PRIx64, rnd);
	snprintf(p->chan, sizeof(p->chan), "skiplock_probe_%s", p->tok);
	snprintf(p->stmt, sizeof(p->stmt), "skiplock_probe_%s", p->tok);
}

static skl_rc run_probe(probe *p, skl_error *err)
{
	char moved_ev[256] = "";
	skl_rc rc = setup(p, err);
	if (rc == SKL_OK)
		move(p, moved_ev, sizeof(moved_ev));
	if (rc == SKL_OK)
		rc = check(p, err);
	if (rc == SKL_OK)
		rc = notify(p, err);
	if (rc == SKL_OK)
		verdict(p, moved_ev);
	if (p->p1)
		undo(p);
	if (rc == SKL_OK && p->o.direct_url)
		compare_direct(p);
	return rc;
}

skl_rc skl_diagnose_pooler(const skl_client_options *opts, skl_pooler_report **out,
                           skl_error *err)
{
	if (out)
		*out = NULL;
	if (opts == NULL || out == NULL)
		return skl__seterr(err, SKL_MISUSE, "skl_diagnose_pooler: NULL argument");
	probe p = {.o = *opts, .cleaner = -1};
	if (p.o.call_timeout_ms <= 0 || p.o.call_timeout_ms > 5000)
		p.o.call_timeout_ms = 5000;
	names_for(&p);
	if ((p.r = calloc(1, sizeof(*p.r))) == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	p.a = open_client(&p, err);
	skl_rc rc = p.a ? run_probe(&p, err) : err ? err->rc : SKL_UNREACHABLE;
	for (int f = 0; f < SKL_PROBE_COUNT; f++) {
		p.r->probes[f].name = names[f];
		p.r->probes[f].skiplock = does[f];
	}
	p.r->configured = p.a ? skl_client_pooler(p.a) : SKL_POOLER_AUTO;
	skl_client_close(p.a);
	if (rc != SKL_OK) {
		free(p.r);
		return rc;
	}
	*out = p.r;
	skl_error_clear(err);
	return SKL_OK;
}

void skl_pooler_report_free(skl_pooler_report *r)
{
	free(r);
}
