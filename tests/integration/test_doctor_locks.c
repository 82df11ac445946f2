/*
 * Integration tests of the lock doctor's library calls (skiplock/doctor.h)
 * against real pg_locks, direct and through PgBouncer: keys as PostgreSQL
 * stores them (negative bigints, two int4s, shared locks) come back as
 * they were taken and known ones are named; a session waiting on a held
 * key is listed with its blocker; an orphan that became busy between the
 * report and the action is left alone.  The locks are taken on direct
 * observer connections, so only the doctor's own calls go through the
 * pooler.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"
#include "skiplock.h"

static skl_client *open_client(const char *url)
{
	skl_client_options o;
	skl_client_options_init(&o);
	o.url = url;
	o.application_name = "itest-doctor";
	skl_client *c = NULL;
	skl_error err;
	if (skl_client_open(&o, &c, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "open: %s", err.message);
	return c;
}

static skl_lock_report *report(skl_client *c, int64_t idle_for_ms)
{
	skl_lock_report *r = NULL;
	skl_error err;
	if (skl_doctor_locks(c, idle_for_ms, &r, &err) != SKL_OK)
		itest_fail(__FILE__, __LINE__, "doctor locks: %s", err.message);
	return r;
}

static const skl_advisory_lock *find_key(const skl_lock_report *r, int64_t key, bool granted)
{
	for (size_t i = 0; i < r->nlocks; i++)
		if (!r->locks[i].key.two && r->locks[i].key.key == key &&
		    r->locks[i].granted == granted)
			return &r->locks[i];
	return NULL;
}

static void keys_round_trip(itest_ctx *t)
{
	PGconn *h = itest_connect(t->direct_url, "key-holder");
	int hpid = PQbackendPID(h);
	int64_t sqlx = skl_key_sqlx(t->dbname);
	PQclear(itest_sql(h, "SELECT pg_advisory_lock(-1), pg_advisory_lock(-2, 7),"
	                     " pg_advisory_lock_shared(%lld), pg_advisory_lock(72707369)",
	                  (long long)sqlx));
	skl_client *c = open_client(t->url);
	skl_lock_report *r = report(c, 60000);
	CHECK_STR(r->database, t->dbname);
	CHECK_EQ(r->nlocks, 4);
	const skl_advisory_lock *neg = find_key(r, -1, true);
	CHECK(neg != NULL);
	CHECK_EQ(neg->session.pid, hpid);
	CHECK_STR(neg->session.application_name, "key-holder");
	CHECK_STR(neg->session.state, "idle");
	CHECK(neg->session.xact_age_ms < 0);
	const skl_advisory_lock *shared = find_key(r, sqlx, true);
	CHECK(shared != NULL);
	CHECK_STR(shared->name, "sqlx migrations");
	CHECK_STR(shared->mode, "ShareLock");
	CHECK_STR(find_key(r, 72707369, true)->name, "Prisma migrations");
	bool two = false;
	for (size_t i = 0; i < r->nlocks; i++)
		two = two || (r->locks[i].key.two && r->locks[i].key.k1 == -2 && r->locks[i].key.k2 == 7);
	CHECK(two);
	CHECK_EQ(r->nfindings, 0);   /* idle for less than a minute */
	skl_lock_report_free(r);
	skl_client_close(c);
	PQfinish(h);
}

static bool waiter_queued(PGconn *obs)
{
	return itest_int(obs, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
	                      " AND NOT granted AND database = (SELECT oid FROM pg_database"
	                      " WHERE datname = current_database())") == 1;
}

static void waiter_and_blocker(itest_ctx *t)
{
	keys_round_trip(t);   /* one database for both: creating one costs more than the case */
	PGconn *h = itest_connect(t->direct_url, "holder");
	PGconn *w = itest_connect(t->direct_url, "waiter");
	PQclear(itest_sql(h, "SELECT pg_advisory_lock(42)"));
	CHECK_EQ(PQsendQuery(w, "SELECT pg_advisory_lock(42)"), 1);
	int64_t end = itest_now_ms() + 10000;
	while (!waiter_queued(t->admin) && itest_now_ms() < end)
		itest_sh("sleep 0.05");
	CHECK(waiter_queued(t->admin));
	skl_client *c = open_client(t->url);
	skl_lock_report *r = report(c, 60000);
	const skl_advisory_lock *held = find_key(r, 42, true), *waits = find_key(r, 42, false);
	CHECK(held && waits);
	CHECK_EQ(held->nwaiters, 1);
	CHECK_EQ(held->waiters[0], PQbackendPID(w));
	CHECK_EQ(waits->nblocked_by, 1);
	CHECK_EQ(waits->blocked_by[0], PQbackendPID(h));
	CHECK(waits->wait_ms >= 0);
	skl_lock_report_free(r);
	skl_client_close(c);
	PQclear(itest_sql(h, "SELECT pg_advisory_unlock(42)"));
	PGresult *res;
	while ((res = PQgetResult(w)) != NULL)
		PQclear(res);
	PQclear(itest_sql(w, "SELECT pg_advisory_unlock(42)"));
	PQfinish(w);
	PQfinish(h);
	itest_no_leftovers(t);
}

static void busy_orphan_is_left_alone(itest_ctx *t)
{
	PGconn *h = itest_connect(t->direct_url, "maybe-orphan");
	PQclear(itest_sql(h, "SELECT pg_advisory_lock(7)"));
	skl_client *c = open_client(t->url);
	skl_lock_report *r = NULL;
	int64_t end = itest_now_ms() + 10000;
	do {
		skl_lock_report_free(r);
		itest_sh("sleep 0.1");
		r = report(c, 300);
	} while (r->nfindings == 0 && itest_now_ms() < end);
	CHECK_EQ(r->nfindings, 1);
	CHECK_EQ(r->findings[0].kind, SKL_FINDING_ORPHAN);
	CHECK_EQ(r->findings[0].session.pid, PQbackendPID(h));
	/* It wakes up before the action: a transaction is open again. */
	PQclear(itest_sql(h, "BEGIN; SELECT 1"));
	skl_lock_action *act = NULL;
	size_t n = 0;
	skl_error err;
	CHECK_EQ(skl_doctor_locks_terminate(c, r, &act, &n, &err), SKL_OK);
	CHECK_EQ(n, 1);
	CHECK_EQ(act[0].result, SKL_ACTION_NOT_IDLE);
	CHECK_EQ(PQstatus(h), CONNECTION_OK);
	PQclear(itest_sql(h, "COMMIT; SELECT pg_advisory_unlock(7)"));
	skl_free(act);
	skl_lock_report_free(r);
	skl_client_close(c);
	PQfinish(h);
	itest_no_leftovers(t);
}

int main(int argc, char **argv)
{
	static const itest_case cases[] = {
		{"keys_round_trip_waiter_and_blocker", waiter_and_blocker, 30},
		{"busy_orphan_is_left_alone", busy_orphan_is_left_alone, 30},
	};
	return itest_main(argc, argv, cases, (int)(sizeof(cases) / sizeof(cases[0])));
}
