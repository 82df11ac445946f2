/*
 * migrate_run.c — `migrate up`: the lease, the migrations table, and one
 * file at a time.
 *
 * Invariants:
 *  - No session state: no advisory lock, no session SET.  Exclusion is the
 *    lease "skiplock.migrate:TABLE" (lease.c), renewed by the watcher
 *    (migrate_watch.c); a migrator that finds it held polls with jitter
 *    between short autocommit statements, so no waiter ever holds a
 *    snapshot or a lock a CREATE INDEX CONCURRENTLY would wait for.
 *  - Every write to the migrations table runs skiplock.lease_fence first in
 *    the same transaction: a migrator that lost its lease records nothing,
 *    and a transactional file's changes roll back with its record.
 *  - A transactional file is one transaction with SET LOCAL lock_timeout.
 *    A lock wait that times out (55P03) or a deadlock (40P01) rolls it back
 *    first; then the blocker the watcher sampled is reported and the file
 *    retried with jittered backoff until max_wait.
 *  - The applied set is read after the lease is taken; a previous holder's
 *    file transaction either committed before (its fence held the lease row)
 *    or can no longer commit (its fence fails).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "migrate/migrate_int.h"
#include "skiplock/lease.h"
#include "skiplock/schema.h"

typedef struct applied_row {
	int64_t version;
	char checksum[65];
} applied_row;

typedef struct mrun {
	skl_migrate_options o;
	skl_client *c;
	skl_watch w;
	char lease[300];
	char owner[300];
	applied_row *applied;
	size_t napplied;
} mrun;

/* ---- options ---- */

void skl_migrate_options_init(skl_migrate_options *o)
{
	*o = (skl_migrate_options){
		.table = "skiplock.migrations",
		.lock_timeout_ms = 5000,
		.max_wait_ms = 60000,
		.lease_ttl_ms = 30000,
		.idle_for_ms = 60000,
	};
}

static bool ident(const char *s, size_t n)
{
	if (n == 0 || n > 63 || !(s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z')))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!(s[i] == '_' || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9')))
			return false;
	return true;
}

skl_rc skl_migrate_check_table(const char *table, skl_error *err)
{
	const char *dot = table ? strchr(table, '.') : NULL;
	bool ok = table && (dot ? ident(table, (size_t)(dot - table)) && ident(dot + 1, strlen(dot + 1))
	                        : ident(table, strlen(table)));
	if (!ok)
		return skl__seterr(err, SKL_INVALID, "table \"%s\" must be NAME or SCHEMA.NAME, each "
		                   "1 to 63 of a-z, 0-9 and _ (not starting with a digit)",
		                   table ? table : "");
	skl_error_clear(err);
	return SKL_OK;
}

static void progress(const mrun *r, skl_migrate_event ev, const skl_migration *m,
                     const skl_migrate_blocker *b, int64_t ms)
{
	if (r->o.progress)
		r->o.progress(r->o.progress_ctx, ev, m, b, ms);
}

/* ---- the lease ---- */

static void make_owner(mrun *r)
{
	char host[128] = "localhost";
	gethostname(host, sizeof(host) - 1);
	host[sizeof(host) - 1] = '\0';
	uint64_t rng = skl__seed();
	if (r->o.owner)
		snprintf(r->owner, sizeof(r->owner), "%s", r->o.owner);
	else
		snprintf(r->owner, sizeof(r->owner), "%s:%ld:%08" PRIx64, host, (long)getpid(),
		         skl__rand(&rng) & 0xffffffffu);
	snprintf(r->lease, sizeof(r->lease), "skiplock.migrate:%s", r->o.table);
}

static skl_rc take_lease(mrun *r, skl_error *err)
{
	int64_t start = skl__now_ms();
	for (int attempt = 0;; attempt++) {
		skl_rc rc = skl_lease_acquire(r->c, r->lease, r->owner, r->o.lease_ttl_ms,
		                              &r->w.fencing, err);
		if (rc != SKL_CONFLICT)
			return rc;
		int64_t waited = skl__now_ms() - start;
		if (waited >= r->o.max_wait_ms) {
			char why[sizeof(err->message)];
			snprintf(why, sizeof(why), "%s", err->message);
			return skl__seterr(err, SKL_CONFLICT, "another migrator is still running after "
			                   "%" PRId64 " ms of waiting: %.400s", waited, why);
		}
		if (attempt == 0)
			progress(r, SKL_MIGRATE_WAITING, NULL, NULL, waited);
		int64_t delay = 100 + skl__backoff_full(attempt, 200, 1000, &r->c->rng);
		if (delay > r->o.max_wait_ms - waited)
			delay = r->o.max_wait_ms - waited;
		skl__sleep_ms(delay);
	}
}

static skl_rc check_lease(mrun *r, skl_error *err)
{
	char why[256];
	if (skl__watch_lost(&r->w, why, sizeof(why)))
		return skl__seterr(err, SKL_FENCED, "lost the migration lease \"%s\": %s", r->lease,
		                   why);
	return SKL_OK;
}

/* ---- the migrations table ---- */

static skl_rc create_table(mrun *r, skl_error *err)
{
	char sql[512];
	snprintf(sql, sizeof(sql),
	         "CREATE TABLE IF NOT EXISTS %s (version bigint PRIMARY KEY, name text NOT NULL,"
	         " checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),"
	         " duration_ms bigint NOT NULL, applied_by text NOT NULL)", r->o.table);
	return skl_lease_fenced_exec(r->c, r->lease, r->w.fencing, sql, 0, NULL, NULL, err);
}

static skl_rc read_applied(mrun *r, skl_error *err)
{
	char sql[256];
	snprintf(sql, sizeof(sql), "SELECT version, checksum FROM %s ORDER BY version", r->o.table);
	skl_stmt s = {.sql = sql};
	static const skl_txn_opts o = {.idempotent = 1};
	skl_rc rc = skl__run_stmt(r->c, &o, &s, err);
	if (rc != SKL_OK)
		return rc;
	int n = PQntuples(s.res);
	r->applied = calloc((size_t)n + 1, sizeof(*r->applied));
	if (r->applied == NULL) {
		PQclear(s.res);
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	}
	for (int i = 0; i < n; i++) {
		r->applied[i].version = strtoll(PQgetvalue(s.res, i, 0), NULL, 10);
		snprintf(r->applied[i].checksum, 65, "%s", PQgetvalue(s.res, i, 1));
	}
	r->napplied = (size_t)n;
	PQclear(s.res);
	return SKL_OK;
}

static const applied_row *find_applied(const mrun *r, int64_t version)
{
	for (size_t i = 0; i < r->napplied; i++)
		if (r->applied[i].version == version)
			return &r->applied[i];
	return NULL;
}

static skl_rc check_drift(const mrun *r, const skl_migration_set *set, skl_error *err)
{
	for (size_t i = 0; i < set->n; i++) {
		const applied_row *a = find_applied(r, set->items[i].version);
		if (a && strcmp(a->checksum, set->items[i].checksum) != 0)
			return skl__seterr(err, SKL_CONFLICT, "%s was changed after it was applied "
			                   "(recorded checksum %.12s…, file %.12s…); restore it and put "
			                   "the change in a new migration", set->items[i].file,
			                   a->checksum, set->items[i].checksum);
	}
	return SKL_OK;
}

/* ---- one file ---- */

typedef struct file_run {
	mrun *r;
	const skl_migration *m;
	int64_t started_ms;
	bool blocked;              /* lock_timeout or deadlock: retry after a pause */
	skl_migrate_blocker blocker;
} file_run;

/* Lines before character position pos (1-based) of q. */
static int lines_before(const char *q, int pos)
{
	int n = 0, chars = 0;
	for (const unsigned char *p = (const unsigned char *)q; pos > 0 && *p; p++) {
		if ((*p & 0xC0) != 0x80 && ++chars >= pos)
			break;
		n += *p == '\n';
	}
	return n;
}

/* "FILE line N: message" */
static void annotate(skl_error *err, const skl_migration *m, int line)
{
	char msg[1024];
	snprintf(msg, sizeof(msg), "%s line %d: %s", m->file, line, err->message);
	memcpy(err->message, msg, sizeof(err->message) - 1);
	err->message[sizeof(err->message) - 1] = '\0';
}

static bool lock_failure(skl_rc rc, const skl_error *err)
{
	return rc == SKL_RETRY &&
	       (strcmp(err->sqlstate, "55P03") == 0 || strcmp(err->sqlstate, "40P01") == 0);
}

/* Runs the statements of the file, one round trip each. */
static skl_rc run_statements(skl_client *c, file_run *f, skl_error *err)
{
	const skl_migration *m = f->m;
	size_t pos = 0, start, len;
	int line;
	while (skl_migrate_next_statement(m->sql, m->len, &pos, &start, &len, &line)) {
		char *q = strndup(m->sql + start, len);
		if (q == NULL)
			return skl__seterr(err, SKL_NOMEM, "out of memory");
		PGresult *res = NULL;
		c->err_position = 0;
		skl_rc rc = skl__exec_simple(c, q, &res, err);
		PQclear(res);
		if (rc != SKL_OK) {
			if (err->sqlstate[0])
				annotate(err, m, line + lines_before(q, c->err_position));
			free(q);
			return rc;
		}
		free(q);
	}
	return SKL_OK;
}

static skl_rc record(skl_client *c, file_run *f, skl_error *err)
{
	mrun *r = f->r;
	char tok[24], ver[24], ms[24], sql[256];
	snprintf(tok, sizeof(tok), "%" PRId64, r->w.fencing);
	snprintf(ver, sizeof(ver), "%" PRId64, f->m->version);
	snprintf(ms, sizeof(ms), "%" PRId64, skl__now_ms() - f->started_ms);
	const char *fp[2] = {r->lease, tok};
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, "SELECT skiplock.lease_fence($1, $2)", 2, fp, &res, err);
	PQclear(res);
	if (rc != SKL_OK)
		return rc;
	snprintf(sql, sizeof(sql), "INSERT INTO %s (version, name, checksum, duration_ms, "
	         "applied_by) VALUES ($1, $2, $3, $4, $5)", r->o.table);
	const char *ip[5] = {ver, f->m->name, f->m->checksum, ms, r->owner};
	rc = skl__exec(c, sql, 5, ip, &res, err);
	PQclear(res);
	return rc;
}

static skl_rc watch_self(skl_client *c, file_run *f, skl_error *err)
{
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, "SELECT pg_backend_pid()", 0, NULL, &res, err);
	if (rc == SKL_OK)
		skl__watch_pid(&f->r->w, atoi(PQgetvalue(res, 0, 0)));
	PQclear(res);
	return rc;
}

static skl_rc txn_fn(skl_client *c, void *ctx, skl_error *err)
{
	file_run *f = ctx;
	skl_rc rc = watch_self(c, f, err);
	if (rc == SKL_OK)
		rc = run_statements(c, f, err);
	if (rc == SKL_OK)
		rc = record(c, f, err);
	if (lock_failure(rc, err)) {
		f->blocked = true;
		f->blocker = skl__watch_blocker(&f->r->w);
		rc = SKL_CONFLICT; /* not retried by skl__run: apply_file decides */
	}
	skl__watch_pid(&f->r->w, 0);
	return rc;
}

static skl_rc record_fn(skl_client *c, void *ctx, skl_error *err)
{
	return record(c, ctx, err);
}

/* After a failed no-transaction file: names the invalid indexes left. */
static void report_invalid_indexes(skl_client *c, skl_error *err)
{
	PGresult *res = NULL;
	skl_error ignored;
	if (skl__exec(c, "SELECT string_agg(indexrelid::regclass::text, ', ') FROM pg_index "
	              "WHERE NOT indisvalid HAVING count(*) > 0", 0, NULL, &res, &ignored) == SKL_OK &&
	    PQntuples(res) == 1) {
		snprintf(err->hint, sizeof(err->hint), "invalid index left behind: %.120s; drop it "
		         "(DROP INDEX CONCURRENTLY name) and run migrate again",
		         PQgetvalue(res, 0, 0));
	}
	PQclear(res);
}

static skl_rc run_no_txn(mrun *r, file_run *f, skl_error *err)
{
	skl_rc rc = skl__connect(r->c, err);
	if (rc == SKL_OK)
		rc = check_lease(r, err);
	if (rc == SKL_OK)
		rc = watch_self(r->c, f, err);
	if (rc == SKL_OK)
		rc = run_statements(r->c, f, err);
	skl__watch_pid(&r->w, 0);
	if (rc != SKL_OK) {
		if (err->sqlstate[0] && r->c->conn)
			report_invalid_indexes(r->c, err);
		return rc;
	}
	skl_txn_opts o = {.txn = 1, .lock_timeout_ms = (int)r->o.lock_timeout_ms};
	return skl__run(r->c, &o, record_fn, f, err);
}

static skl_rc run_once(mrun *r, file_run *f, skl_error *err)
{
	f->blocked = false;
	f->started_ms = skl__now_ms();
	skl_rc rc = check_lease(r, err);
	if (rc != SKL_OK)
		return rc;
	if (f->m->no_transaction)
		return run_no_txn(r, f, err);
	skl_txn_opts o = {.txn = 1, .lock_timeout_ms = (int)r->o.lock_timeout_ms};
	return skl__run(r->c, &o, txn_fn, f, err);
}

/* ---- blocked files ---- */

static const char *const terminate_sql =
	"SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
	" WHERE pid = $1 AND state IN ('idle', 'idle in transaction',"
	"                              'idle in transaction (aborted)')"
	"   AND state_change < clock_timestamp() - $2 * interval '1 millisecond'";

/* Terminates b when it is still idle (in transaction) past idle_for,
 * checked in the same statement.  True when it was terminated. */
static bool terminate_idle(mrun *r, const skl_migrate_blocker *b)
{
	char pid[16], idle[24];
	snprintf(pid, sizeof(pid), "%d", b->pid);
	snprintf(idle, sizeof(idle), "%" PRId64, r->o.idle_for_ms);
	skl_stmt s = {.sql = terminate_sql, .nparams = 2, .params = {pid, idle}};
	static const skl_txn_opts o = {.idempotent = 1};
	skl_error ignored;
	if (skl__run_stmt(r->c, &o, &s, &ignored) != SKL_OK)
		return false;
	bool done = PQntuples(s.res) == 1 && PQgetvalue(s.res, 0, 0)[0] == 't';
	PQclear(s.res);
	return done;
}

static skl_rc blocked_error(const file_run *f, int64_t waited, skl_error *err)
{
	const skl_migrate_blocker *b = &f->blocker;
	if (b->pid == 0)
		return skl__seterr(err, SKL_CONFLICT, "%s: still waiting for a lock after %" PRId64
		                   " ms (lock_timeout %" PRId64 " ms each try); the blocking session "
		                   "was not caught in the act", f->m->file, waited,
		                   f->r->o.lock_timeout_ms);
	skl__seterr(err, SKL_CONFLICT, "%s: still blocked after %" PRId64 " ms by pid %d "
	            "(application_name \"%s\", %s for %" PRId64 " ms, transaction open %" PRId64
	            " ms, client %s)", f->m->file, waited, b->pid, b->application_name, b->state,
	            b->state_age_ms, b->xact_age_ms, b->client_addr);
	snprintf(err->detail, sizeof(err->detail), "its query: %.300s", b->query);
	snprintf(err->hint, sizeof(err->hint), "end that session's transaction, or pass "
	         "--terminate-idle-holders to end it when it is idle");
	return SKL_CONFLICT;
}

static skl_rc apply_file(mrun *r, const skl_migration *m, skl_error *err)
{
	file_run f = {.r = r, .m = m};
	int64_t start = skl__now_ms();
	skl_migrate_blocker last = {0};
	progress(r, SKL_MIGRATE_APPLYING, m, NULL, 0);
	for (int attempt = 0;; attempt++) {
		skl_rc rc = run_once(r, &f, err);
		if (rc == SKL_OK)
			progress(r, SKL_MIGRATE_APPLIED, m, NULL, skl__now_ms() - f.started_ms);
		if (!f.blocked)
			return rc;
		/* A wait too short to be sampled: the last blocker seen is the best guess. */
		if (f.blocker.pid == 0)
			f.blocker = last;
		last = f.blocker;
		progress(r, SKL_MIGRATE_BLOCKED, m, &f.blocker, skl__now_ms() - start);
		if (r->o.terminate_idle_holders && f.blocker.pid && terminate_idle(r, &f.blocker)) {
			progress(r, SKL_MIGRATE_TERMINATED, m, &f.blocker, f.blocker.state_age_ms);
			last = (skl_migrate_blocker){0};
			continue;
		}
		int64_t waited = skl__now_ms() - start;
		int64_t delay = 100 + skl__backoff_full(attempt, 250, 2000, &r->c->rng);
		if (waited + delay >= r->o.max_wait_ms)
			return blocked_error(&f, waited, err);
		skl__sleep_ms(delay);
	}
}

/* ---- up ---- */

static skl_rc check_options(const skl_migrate_options *o, skl_error *err)
{
	if (skl_migrate_check_table(o->table, err) != SKL_OK)
		return SKL_INVALID;
	if (o->lock_timeout_ms <= 0 || o->lock_timeout_ms > INT32_MAX || o->max_wait_ms < 0 ||
	    o->lease_ttl_ms < 1000 || o->idle_for_ms < 0)
		return skl__seterr(err, SKL_INVALID, "lock timeout must be positive, lease ttl at "
		                   "least 1s, max wait and idle-for not negative");
	return SKL_OK;
}

static skl_rc run_pending(mrun *r, const skl_migration_set *set, int *applied, skl_error *err)
{
	skl_rc rc = create_table(r, err);
	if (rc == SKL_OK)
		rc = read_applied(r, err);
	if (rc == SKL_OK)
		rc = check_drift(r, set, err);
	for (size_t i = 0; rc == SKL_OK && i < set->n; i++) {
		if (find_applied(r, set->items[i].version))
			continue;
		rc = apply_file(r, &set->items[i], err);
		*applied += rc == SKL_OK;
	}
	return rc;
}

static skl_rc up(mrun *r, const skl_client_options *copts, const skl_migration_set *set,
                 int *applied, skl_error *err)
{
	skl_client_options co = *copts;
	if (co.application_name == NULL)
		co.application_name = "skiplock migrate";
	skl_rc rc = skl_client_open(&co, &r->c, err);
	if (rc == SKL_OK)
		rc = skl_schema_install(r->c, NULL, err);
	if (rc == SKL_OK)
		rc = take_lease(r, err);
	if (rc != SKL_OK)
		return rc;
	r->w.lease = r->lease;
	r->w.owner = r->owner;
	r->w.ttl_ms = r->o.lease_ttl_ms;
	rc = skl__watch_start(&r->w, copts, err);
	if (rc == SKL_OK)
		rc = run_pending(r, set, applied, err);
	skl__watch_stop(&r->w);
	skl_error rerr;
	if (skl_lease_release(r->c, r->lease, r->owner, r->w.fencing, &rerr) != SKL_OK)
		skl__log(r->c, SKL_LOG_WARNING, "releasing lease \"%s\": %s", r->lease, rerr.message);
	return rc;
}

skl_rc skl_migrate_up(const skl_client_options *copts, const skl_migration_set *set,
                      const skl_migrate_options *o, int *applied, skl_error *err)
{
	int count = 0;
	if (applied)
		*applied = 0;
	mrun r = {0};
	if (o)
		r.o = *o;
	else
		skl_migrate_options_init(&r.o);
	if (r.o.table == NULL)
		r.o.table = "skiplock.migrations";
	if (copts == NULL || set == NULL)
		return skl__seterr(err, SKL_MISUSE, "skl_migrate_up needs client options and files");
	if (check_options(&r.o, err) != SKL_OK)
		return SKL_INVALID;
	make_owner(&r);
	skl_rc rc = up(&r, copts, set, &count, err);
	if (applied)
		*applied = count;
	free(r.applied);
	skl_client_close(r.c);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}
