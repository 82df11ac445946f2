/*
 * handler.c — the two commands the fleet runs: the job handler (one fenced
 * ledger row per job, at most once) and the lease-protected writer.
 *
 * Job kinds: fast; slow (sleeps past a heartbeat, writing its effect
 * half-way); flaky (exit 75 on attempts 1 and 2); poison (exit 65); dup
 * (enqueued with a shared unique key); cron (the minutely schedule's).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "chaos.h"

/* The job row must be this claim's and running, locked FOR SHARE until the
 * insert commits, so a rescue or a new claim waits for it or fences it out;
 * and no earlier claim of the job may have written already. */
static const char *const effect_sql =
	"WITH j AS (SELECT id, fencing FROM skiplock.jobs WHERE id = $1 AND fencing = $2"
	"             AND state = 'running' FOR SHARE),"
	" ins AS (INSERT INTO chaos_ledger (job_id, fencing, kind, worker, client_at)"
	"         SELECT id, fencing, $3, $4, to_timestamp($5::double precision) FROM j"
	"          WHERE NOT EXISTS (SELECT 1 FROM chaos_ledger WHERE job_id = $1)"
	"         RETURNING 1)"
	" SELECT (SELECT count(*) FROM j), (SELECT count(*) FROM ins)";

static const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

static void note_fenced(PGconn **conn, const char *what, const char *id, const char *fencing)
{
	const char *vals[] = {what, id, fencing};
	bool sent;
	PQclear(pq_exec(conn, "INSERT INTO chaos_fenced (what, id, fencing) VALUES ($1, $2, $3)",
	                3, vals, now_ms() + 4000, &sent));
}

/* 0 written (now or by an earlier claim), 1 fenced out or unreachable. */
static int effect(const char *url, const char *kind)
{
	const char *id = env_or("SKIPLOCK_JOB_ID", "0"), *fencing = env_or("SKIPLOCK_FENCING", "0");
	struct timeval tv;
	gettimeofday(&tv, NULL); /* this process's clock: skewed under faketime */
	char client_at[48];
	snprintf(client_at, sizeof(client_at), "%lld.%06ld", (long long)tv.tv_sec,
	         (long)tv.tv_usec);
	const char *vals[] = {id, fencing, kind, env_or("CHAOS_WORKER", "?"), client_at};
	for (int attempt = 0; attempt < 8; attempt++) {
		PGconn *conn = pq_connect(url, "chaos handler");
		bool sent;
		PGresult *r = pq_exec(&conn, effect_sql, 5, vals, now_ms() + 4000, &sent);
		if (pq_ok(r)) {
			bool fenced = atoll(PQgetvalue(r, 0, 0)) == 0;
			PQclear(r);
			if (fenced) {
				note_fenced(&conn, "job", id, fencing);
				fprintf(stderr, "fenced out: job %s is no longer claim %s's\n", id, fencing);
			}
			PQfinish(conn);
			return fenced ? 1 : 0;
		}
		if (r != NULL)
			fprintf(stderr, "ledger write: %s", PQresultErrorMessage(r));
		PQclear(r);
		PQfinish(conn);
		sleep_ms(300 + 200 * attempt);
	}
	fprintf(stderr, "ledger write: database unreachable\n");
	return 1;
}

static int payload_ms(void)
{
	char buf[4096];
	size_t n = fread(buf, 1, sizeof(buf) - 1, stdin);
	buf[n] = '\0';
	const char *p = strstr(buf, "\"ms\":");
	return p ? atoi(p + 5) : 0;
}

int handler_main(void)
{
	alarm(60); /* an orphan of a killed worker never outlives the run */
	const char *url = getenv("CHAOS_URL"), *kind = env_or("SKIPLOCK_JOB_KIND", "?");
	int attempt = atoi(env_or("SKIPLOCK_ATTEMPT", "1"));
	int ms = payload_ms();
	if (url == NULL) {
		fprintf(stderr, "chaos handler: CHAOS_URL is not set\n");
		return 2;
	}
	if (strcmp(kind, "poison") == 0) {
		fprintf(stderr, "poison: this payload can never succeed\n");
		return 65;
	}
	if (strcmp(kind, "flaky") == 0 && attempt < 3) {
		fprintf(stderr, "flaky: not yet (attempt %d)\n", attempt);
		return 75;
	}
	sleep_ms(ms / 2);
	int rc = effect(url, kind);
	sleep_ms(ms - ms / 2);
	return rc;
}

/* ---- the lease-protected command ---- */

static const char *const lease_write_sql =
	"INSERT INTO chaos_lease_writes (fencing, writer, at)"
	" SELECT $1, $2, clock_timestamp() FROM (SELECT skiplock.lease_fence($3, $1::bigint)) f";

int lease_writer_main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: chaos lease-writer URL WRITER MS\n");
		return 2;
	}
	const char *url = argv[1], *writer = argv[2];
	const char *fencing = env_or("SKIPLOCK_FENCING", "0");
	int64_t ms = atoll(argv[3]), end = now_ms() + ms;
	alarm((unsigned)(ms / 1000 + 30));
	PGconn *conn = NULL;
	const char *vals[] = {fencing, writer, CHAOS_LEASE};
	while (now_ms() < end) {
		if (conn == NULL)
			conn = pq_connect(url, "chaos lease-writer");
		bool sent;
		PGresult *r = pq_exec(&conn, lease_write_sql, 3, vals, now_ms() + 3000, &sent);
		const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
		if (state && strcmp(state, "SK001") == 0) {
			PQclear(r);
			note_fenced(&conn, "lease", NULL, fencing);
			fprintf(stderr, "lease-writer %s: token %s fenced out; stopping\n", writer, fencing);
			PQfinish(conn);
			return 1;
		}
		PQclear(r);
		sleep_ms(conn ? 100 : 300);
	}
	PQfinish(conn);
	return 0;
}
