/*
 * producer.c — enqueues a mix of kinds with the SQL function, each in a
 * transaction of its own through fault proxy 1 that also records the
 * enqueue in chaos_enq (tag primary key): the job exists iff that row does.
 * About one in ten transactions is rolled back on purpose.  A transaction
 * whose COMMIT answer was lost is retried with the same tag: a unique
 * violation on the tag then proves the first one committed ("recovered").
 * The history (intent, outcome, indeterminate answers) is kept in memory
 * and written to chaos_history at the end, for the checker.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chaos.h"

typedef struct entry {
	char tag[16];
	const char *kind;
	bool rollback;
	const char *outcome;  /* ok, recovered, rolled_back, failed, unknown */
	int infos, attempts;
	long long job_id;     /* as returned inside the transaction; 0: none */
} entry;

static struct {
	chaos *c;
	pthread_t thread;
	rng r;
	PGconn *conn;
	entry *log;
	size_t n, cap;
} P;

static const char *const enqueue_sql =
	"WITH e AS (SELECT skiplock.enqueue($2, $3::jsonb, queue => '" CHAOS_QUEUE "',"
	"  unique_key => $4, max_attempts => $5::int) AS id)"
	" INSERT INTO chaos_enq (tag, kind, job_id) SELECT $1, $2, id FROM e RETURNING job_id";

enum step { S_DEAD, S_OK, S_ERR };

static enum step run(const char *sql, int n, const char *const *vals, PGresult **out,
                     bool *sent)
{
	if (P.conn == NULL)
		P.conn = pq_connect(P.c->proxy_url[1], "chaos producer");
	PGresult *r = pq_exec(&P.conn, sql, n, vals, now_ms() + 5000, sent);
	if (r == NULL)
		return S_DEAD;
	enum step s = pq_ok(r) ? S_OK : S_ERR;
	if (out)
		*out = r;
	else
		PQclear(r);
	return s;
}

/* One transaction; true when the entry reached its final outcome. */
static bool attempt(entry *e, const char *const *vals)
{
	bool sent;
	PGresult *r = NULL;
	e->attempts++;
	if (run("BEGIN", 0, NULL, NULL, &sent) != S_OK)
		return false;
	enum step s = run(enqueue_sql, 5, vals, &r, &sent);
	const char *f = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
	char state[6] = "";
	snprintf(state, sizeof(state), "%s", f ? f : "");
	if (s == S_OK)
		e->job_id = atoll(PQgetvalue(r, 0, 0));
	PQclear(r);
	if (s != S_OK) {
		if (s == S_ERR)
			run("ROLLBACK", 0, NULL, NULL, &sent);
		if (strcmp(state, "23505") == 0 && !e->rollback) {
			e->outcome = "recovered"; /* an earlier attempt committed */
			return true;
		}
		return false;
	}
	if (e->rollback) {
		run("ROLLBACK", 0, NULL, NULL, &sent);
		e->outcome = "rolled_back";
		return true;
	}
	s = run("COMMIT", 0, NULL, NULL, &sent);
	if (s == S_OK) {
		e->outcome = "ok";
		return true;
	}
	if (s == S_DEAD && sent)
		e->infos++; /* the COMMIT left us; its answer did not come back */
	return false;
}

static void produce(entry *e, int seq)
{
	static const char *const kinds[] = {"fast", "fast", "fast", "slow", "slow", "flaky",
	                                    "flaky", "poison", "dup", "dup"};
	snprintf(e->tag, sizeof(e->tag), "p%d", seq);
	e->kind = kinds[rng_range(&P.r, 0, 9)];
	e->rollback = rng_range(&P.r, 0, 9) == 0;
	e->outcome = "failed";
	char payload[96], key[32], max[8];
	int ms = strcmp(e->kind, "slow") == 0 ? (int)rng_range(&P.r, 1200, 2500) : 0;
	snprintf(payload, sizeof(payload), "{\"tag\": \"%s\", \"ms\":%d}", e->tag, ms);
	snprintf(key, sizeof(key), "dup:%d", (int)rng_range(&P.r, 0, 3));
	snprintf(max, sizeof(max), "%d", strcmp(e->kind, "poison") == 0 ? 5 : 20);
	const char *vals[] = {e->tag, e->kind, payload, strcmp(e->kind, "dup") == 0 ? key : NULL,
	                      max};
	int64_t end = now_ms() + 60000;
	for (int i = 0; i < 30 && now_ms() < end; i++) {
		if (attempt(e, vals))
			return;
		sleep_ms(rng_range(&P.r, 100, 600));
	}
	if (e->infos > 0)
		e->outcome = "unknown";
}

static void *producer(void *arg)
{
	(void)arg;
	for (int seq = 1; !atomic_load(&P.c->stop_load); seq++) {
		if (P.n == P.cap) {
			size_t cap = P.cap ? P.cap * 2 : 1024;
			entry *l = realloc(P.log, cap * sizeof(*l));
			if (l == NULL)
				break;
			P.log = l;
			P.cap = cap;
		}
		entry *e = &P.log[P.n];
		memset(e, 0, sizeof(*e));
		produce(e, seq);
		P.n++;
		sleep_ms(rng_range(&P.r, 300, 900));
	}
	PQfinish(P.conn);
	P.conn = NULL;
	return NULL;
}

int producer_start(chaos *c)
{
	P.c = c;
	P.r.s = c->seed ^ 0x9d0d0c3fULL;
	return pthread_create(&P.thread, NULL, producer, NULL);
}

void producer_join(void)
{
	pthread_join(P.thread, NULL);
}

static void count(chaos *c, const entry *e)
{
	c->enq_ok += strcmp(e->outcome, "ok") == 0;
	c->enq_recovered += strcmp(e->outcome, "recovered") == 0;
	c->enq_rolled_back += strcmp(e->outcome, "rolled_back") == 0;
	c->enq_failed += strcmp(e->outcome, "failed") == 0 || strcmp(e->outcome, "unknown") == 0;
	c->enq_info += e->infos > 0;
}

bool producer_save(chaos *c)
{
	bool ok = true;
	for (size_t i = 0; i < P.n && ok; i++) {
		const entry *e = &P.log[i];
		count(c, e);
		char sql[512], id[24] = "NULL";
		if (e->job_id)
			snprintf(id, sizeof(id), "%lld", e->job_id);
		snprintf(sql, sizeof(sql),
		         "INSERT INTO chaos_history VALUES ('%s', '%s', '%s', '%s', %d, %d, %s)", e->tag,
		         e->kind, e->rollback ? "rollback" : "commit", e->outcome, e->infos,
		         e->attempts, id);
		PGresult *r = obs_query(c, sql);
		ok = pq_ok(r);
		PQclear(r);
	}
	free(P.log);
	P.log = NULL;
	return ok;
}
