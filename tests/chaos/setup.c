/*
 * setup.c — the campaign's database: skiplock's schema, the ledger and
 * history tables the checker reads, the minutely schedule; the observer's
 * connection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chaos.h"
#include "skiplock.h"

static const char *const tables_sql =
	/* a committed enqueue: the producer's row, in the enqueue's transaction */
	"CREATE TABLE chaos_enq (tag text PRIMARY KEY, kind text NOT NULL, job_id bigint NOT NULL,"
	"  at timestamptz NOT NULL DEFAULT clock_timestamp());"
	/* the handlers' effects, fenced by the claim's token */
	"CREATE TABLE chaos_ledger (job_id bigint NOT NULL, fencing bigint NOT NULL, kind text,"
	"  worker text, db_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
	"  client_at timestamptz);"
	"CREATE INDEX ON chaos_ledger (job_id);"
	/* writes refused because their token was stale */
	"CREATE TABLE chaos_fenced (what text NOT NULL, id bigint, fencing bigint,"
	"  at timestamptz NOT NULL DEFAULT clock_timestamp());"
	/* the lease-protected command's accepted writes */
	"CREATE TABLE chaos_lease_writes (fencing bigint NOT NULL, writer text NOT NULL,"
	"  at timestamptz NOT NULL);"
	/* the producer's history, written at the end */
	"CREATE TABLE chaos_history (tag text PRIMARY KEY, kind text NOT NULL,"
	"  intent text NOT NULL, outcome text NOT NULL, infos int NOT NULL,"
	"  attempts int NOT NULL, job_id bigint);";

static bool admin_exec(chaos *c, const char *verb, const char *rest)
{
	char url[512], sql[512];
	snprintf(url, sizeof(url), "postgresql://%s@%s:%s/postgres", getenv("SKL_TEST_DBUSER"),
	         getenv("SKL_TEST_PGHOST"), getenv("SKL_TEST_PGPORT"));
	snprintf(sql, sizeof(sql), "%s \"%s\"%s", verb, c->db, rest);
	PGconn *a = pq_connect(url, "chaos admin");
	PGresult *r = a ? PQexec(a, sql) : NULL;
	bool ok = pq_ok(r);
	if (!ok)
		logf_("setup: %s: %s", sql, a ? PQerrorMessage(a) : "cannot connect");
	PQclear(r);
	PQfinish(a);
	return ok;
}

static bool add_schedule(chaos *c)
{
	skl_client_options o;
	skl_client_options_init(&o);
	o.url = c->obs_url;
	skl_client *cl = NULL;
	skl_error err;
	char when[96];
	/* the schedule is created at the simulated start, a whole minute */
	PGresult *r = obs_query(c, "SELECT to_char(to_timestamp(extract(epoch FROM "
	                           "date_trunc('minute', now() - interval '30 days'))) AT TIME ZONE "
	                           "'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), extract(epoch FROM "
	                           "date_trunc('minute', now() - interval '30 days'))::bigint");
	if (!pq_ok(r))
		return false;
	snprintf(when, sizeof(when), "%s", PQgetvalue(r, 0, 0));
	c->t0_sim = atoll(PQgetvalue(r, 0, 1));
	PQclear(r);
	skl_schedule_spec s = {.name = CHAOS_SCHEDULE, .expression = "* * * * *", .kind = "cron",
	                       .queue = CHAOS_QUEUE, .max_attempts = 20,
	                       .catch_up = SKL_CATCH_UP_ALL};
	bool ok = skl_client_open(&o, &cl, &err) == SKL_OK &&
	          skl_schema_install(cl, NULL, &err) == SKL_OK &&
	          skl_cron_add(cl, &s, when, NULL, &err) == SKL_OK;
	if (!ok)
		logf_("setup: schema or schedule: %s", err.message);
	skl_client_close(cl);
	return ok;
}

bool setup_database(chaos *c)
{
	const char *user = getenv("SKL_TEST_DBUSER"), *host = getenv("SKL_TEST_PGHOST");
	snprintf(c->db, sizeof(c->db), "chaos_%d", (int)getpid());
	snprintf(c->obs_url, sizeof(c->obs_url), "postgresql://%s@%s:%s/%s?sslmode=disable", user,
	         host, getenv("SKL_TEST_PGPORT"), c->db);
	snprintf(c->bouncer_url, sizeof(c->bouncer_url), "postgresql://%s@%s:%s/%s?sslmode=disable",
	         user, host, getenv("SKL_TEST_BOUNCER_PORT"), c->db);
	if (!admin_exec(c, "CREATE DATABASE", "") ||
	    /* every commit durable: a crash-restart loses nothing acknowledged */
	    !admin_exec(c, "ALTER DATABASE", " SET synchronous_commit = on"))
		return false;
	c->obs = pq_connect(c->obs_url, "chaos observer");
	if (c->obs == NULL)
		return false;
	PGresult *r = obs_query(c, tables_sql);
	bool ok = pq_ok(r);
	PQclear(r);
	return ok && add_schedule(c);
}

void drop_database(chaos *c)
{
	PQfinish(c->obs);
	c->obs = NULL;
	admin_exec(c, "DROP DATABASE IF EXISTS", " WITH (FORCE)");
}

PGresult *obs_query(chaos *c, const char *sql)
{
	for (int i = 0; i < 60; i++) {
		if (c->obs == NULL || PQstatus(c->obs) != CONNECTION_OK) {
			PQfinish(c->obs);
			c->obs = pq_connect(c->obs_url, "chaos observer");
		}
		PGresult *r = c->obs ? PQexec(c->obs, sql) : NULL;
		if (pq_ok(r))
			return r;
		bool conn_lost = c->obs == NULL || PQstatus(c->obs) != CONNECTION_OK;
		if (!conn_lost) {
			logf_("observer: %s\n  %s", PQerrorMessage(c->obs), sql);
			return r;
		}
		PQclear(r);
		sleep_ms(500);
	}
	logf_("observer: no connection for 30 s");
	return NULL;
}

long long obs_int(chaos *c, const char *sql)
{
	PGresult *r = obs_query(c, sql);
	long long v = pq_ok(r) && PQntuples(r) > 0 ? atoll(PQgetvalue(r, 0, 0)) : -1;
	PQclear(r);
	return v;
}
