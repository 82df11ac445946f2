/*
 * control.c — an operator's fleet-wide actions of skiplock/control.h that
 * are one statement each: pause and resume a queue or a kind, run a
 * schedule now, pause or resume a schedule, force a breaker, and the
 * reads of the pauses and of the action log.  The bulk actions are in
 * bulk.c.
 *
 * Each action is one call of a SECURITY DEFINER function of
 * sql/0014_control.sql that acts and writes its row of skiplock.actions in
 * the same transaction.  None is re-sent after an indeterminate outcome
 * (the log would get a second row): the caller sees SKL_INDETERMINATE.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "queue/control_int.h"
#include "queue/queue_int.h"
#include "skiplock/control.h"

static const skl_txn_opts act_opts = {.idempotent = 0};
static const skl_txn_opts read_opts = {.txn = 1, .idempotent = 1};

skl_rc skl__check_actor(const skl_actor *who, skl_error *err)
{
	if (who == NULL || who->name == NULL || who->role == NULL)
		return skl__seterr(err, SKL_INVALID, "an action needs an actor and a role");
	size_t n = strlen(who->name), r = strlen(who->role);
	if (n < 1 || n > SKL_ACTOR_MAX || r < 1 || r > SKL_ACTOR_MAX)
		return skl__seterr(err, SKL_INVALID, "actor and role must be 1 to %d bytes",
		                   SKL_ACTOR_MAX);
	return SKL_OK;
}

/* A name of 1 to 128 bytes (queue, kind, schedule). */
static skl_rc check_name(const char *what, const char *s, skl_error *err)
{
	if (s == NULL || s[0] == '\0' || strlen(s) > 128)
		return skl__seterr(err, SKL_INVALID, "%s must be 1 to 128 bytes", what);
	return SKL_OK;
}

/* Runs one action statement; its single value (NULL: none) into out. */
skl_rc skl__act(skl_client *c, skl_stmt *s, bool *isnull, const char **out, skl_error *err)
{
	skl_rc rc = skl__run_stmt(c, &act_opts, s, err);
	if (rc == SKL_OK && (PQntuples(s->res) != 1 || PQnfields(s->res) != 1)) {
		PQclear(s->res);
		s->res = NULL;
		return skl__seterr(err, SKL_DB, "an action answered an unexpected shape");
	}
	if (rc == SKL_OK) {
		*isnull = PQgetisnull(s->res, 0, 0);
		*out = PQgetvalue(s->res, 0, 0);
	}
	return rc;
}

/* ---- pause and resume ---- */

static skl_rc pause_call(skl_client *c, const char *sql, const char *queue, const char *kind,
                         const skl_actor *who, bool *changed, skl_error *err)
{
	if (changed)
		*changed = false;
	if ((queue == NULL) == (kind == NULL))
		return skl__seterr(err, SKL_INVALID, "name a queue or a kind, not both nor neither");
	skl_rc rc = queue ? check_name("a queue", queue, err) : skl__check_kind(kind, err);
	if (rc == SKL_OK && strcmp(queue ? queue : kind, "*") == 0)
		rc = skl__seterr(err, SKL_INVALID, "\"*\" names no queue or kind");
	if (rc == SKL_OK)
		rc = skl__check_actor(who, err);
	if (rc != SKL_OK)
		return rc;
	skl_stmt s = {.sql = sql, .nparams = 4, .params = {queue, kind, who->name, who->role}};
	bool isnull = true;
	const char *v = NULL;
	rc = skl__act(c, &s, &isnull, &v, err);
	if (rc == SKL_OK && changed)
		*changed = !isnull && v[0] == 't';
	PQclear(s.res);
	return rc;
}

skl_rc skl_pause(skl_client *c, const char *queue, const char *kind, const skl_actor *who,
                 bool *changed, skl_error *err)
{
	return pause_call(c, "SELECT skiplock.pause($1, $2, $3, $4)", queue, kind, who, changed,
	                  err);
}

skl_rc skl_resume(skl_client *c, const char *queue, const char *kind, const skl_actor *who,
                  bool *changed, skl_error *err)
{
	/* and wakes idle workers on direct connections (a hint) */
	return pause_call(c, "SELECT skiplock.resume($1, $2, $3, $4) FROM pg_notify('skiplock_jobs', '')",
	                  queue, kind, who, changed, err);
}

/* ---- schedules and breakers ---- */

skl_rc skl_schedule_run_now(skl_client *c, const char *name, const skl_actor *who,
                            int64_t *job_id, skl_error *err)
{
	if (job_id)
		*job_id = 0;
	skl_rc rc = check_name("a schedule name", name, err);
	if (rc == SKL_OK)
		rc = skl__check_actor(who, err);
	if (rc != SKL_OK)
		return rc;
	skl_stmt s = {.sql = "SELECT skiplock.schedule_run_now($1, $2, $3)", .nparams = 3,
	              .params = {name, who->name, who->role}};
	bool isnull = true;
	const char *v = NULL;
	rc = skl__act(c, &s, &isnull, &v, err);
	if (rc == SKL_OK && isnull)
		rc = skl__seterr(err, SKL_EMPTY, "no schedule \"%s\"", name);
	else if (rc == SKL_OK && job_id)
		*job_id = strtoll(v, NULL, 10);
	PQclear(s.res);
	return rc;
}

skl_rc skl_schedule_set_paused(skl_client *c, const char *name, bool paused,
                               const skl_actor *who, bool *changed, skl_error *err)
{
	if (changed)
		*changed = false;
	skl_rc rc = check_name("a schedule name", name, err);
	if (rc == SKL_OK)
		rc = skl__check_actor(who, err);
	if (rc != SKL_OK)
		return rc;
	skl_stmt s = {.sql = "SELECT skiplock.schedule_set_paused($1, $2::boolean, $3, $4)",
	              .nparams = 4, .params = {name, paused ? "true" : "false", who->name,
	                                       who->role}};
	bool isnull = true;
	const char *v = NULL;
	rc = skl__act(c, &s, &isnull, &v, err);
	if (rc == SKL_OK && isnull)
		rc = skl__seterr(err, SKL_EMPTY, "no schedule \"%s\"", name);
	else if (rc == SKL_OK && changed)
		*changed = v[0] == 't';
	PQclear(s.res);
	return rc;
}

skl_rc skl_breaker_set(skl_client *c, const char *kind, bool open, const skl_actor *who,
                       skl_error *err)
{
	skl_rc rc = skl__check_kind(kind, err);
	if (rc == SKL_OK)
		rc = skl__check_actor(who, err);
	if (rc != SKL_OK)
		return rc;
	/* and wakes idle workers on direct connections (a hint): a closed
	 * breaker's jobs are claimable at once, not at the next idle poll */
	skl_stmt s = {.sql = "SELECT skiplock.breaker_set($1, $2::boolean, $3, $4)"
	                     "  FROM pg_notify('skiplock_jobs', '')", .nparams = 4,
	              .params = {kind, open ? "true" : "false", who->name, who->role}};
	bool isnull = true;
	const char *v = NULL;
	rc = skl__act(c, &s, &isnull, &v, err);
	if (rc == SKL_OK && isnull)
		rc = skl__seterr(err, SKL_EMPTY, "kind \"%s\" has no breaker", kind);
	PQclear(s.res);
	return rc;
}

/* ---- reading the pauses and the log ---- */

/* One read-only statement; its rows stay in res. */
typedef struct rows_call {
	const char *sql;
	int nparams;
	const char *params[2];
	PGresult *res;
} rows_call;

static skl_rc rows_fn(skl_client *c, void *ctx, skl_error *err)
{
	rows_call *rc = ctx;
	PQclear(rc->res);
	rc->res = NULL;
	return skl__exec(c, rc->sql, rc->nparams, rc->params, &rc->res, err);
}

/* Copies row `row` of res, columns [0, n), into one allocation; strs[i]
 * points at column i's text (NULL for NULL).  Returns the allocation. */
static void *copy_row(const PGresult *res, int row, int n, const char **strs)
{
	size_t total = 1;
	for (int i = 0; i < n; i++)
		total += (size_t)PQgetlength(res, row, i) + 1;
	char *mem = malloc(total), *p = mem;
	for (int i = 0; mem && i < n; i++) {
		strs[i] = NULL;
		if (PQgetisnull(res, row, i))
			continue;
		strs[i] = strcpy(p, PQgetvalue(res, row, i));
		p += strlen(p) + 1;
	}
	return mem;
}

#define TS(x) "to_char((" x ") AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

skl_rc skl_pauses_list(skl_client *c, skl_pause_info **rows, size_t *n, skl_error *err)
{
	*rows = NULL;
	*n = 0;
	rows_call q = {.sql = "SELECT queue, kind, " TS("paused_at") ", paused_by, role"
	                      "  FROM skiplock.pauses ORDER BY queue, kind"};
	skl_rc rc = skl__run(c, &read_opts, rows_fn, &q, err);
	size_t m = rc == SKL_OK ? (size_t)PQntuples(q.res) : 0;
	skl_pause_info *out = m ? calloc(m, sizeof(*out)) : NULL;
	if (m && out == NULL)
		rc = skl__seterr(err, SKL_NOMEM, "out of memory reading pauses");
	for (size_t i = 0; rc == SKL_OK && out && i < m; i++) {
		const char *s[5];
		void *mem = copy_row(q.res, (int)i, 5, s);
		if (mem == NULL) {
			skl_pauses_free(out, m);
			out = NULL;
			rc = skl__seterr(err, SKL_NOMEM, "out of memory reading pauses");
		} else {
			out[i] = (skl_pause_info){s[0], s[1], s[2], s[3], s[4], mem};
		}
	}
	PQclear(q.res);
	if (rc == SKL_OK) {
		*rows = out;
		*n = m;
	}
	return rc;
}

void skl_pauses_free(skl_pause_info *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		free(rows[i].internal);
	free(rows);
}

static void fill_action(skl_action_info *a, const PGresult *res, int row)
{
	const char *s[9];
	void *mem = copy_row(res, row, 9, s);
	*a = (skl_action_info){.internal = mem};
	if (mem == NULL)
		return;
	a->id = strtoll(s[0], NULL, 10);
	a->at = s[1];
	a->actor = s[2];
	a->role = s[3];
	a->action = s[4];
	a->target = s[5];
	a->matched = strtoll(s[6], NULL, 10);
	a->changed = strtoll(s[7], NULL, 10);
	a->db_user = s[8];
}

skl_rc skl_actions_list(skl_client *c, int limit, int64_t before_id, skl_action_info **rows,
                        size_t *n, skl_error *err)
{
	*rows = NULL;
	*n = 0;
	if (limit < 0 || limit > 10000 || before_id < 0)
		return skl__seterr(err, SKL_INVALID, "limit must be 0 to 10000 and before_id >= 0");
	char lim[16], before[24];
	snprintf(lim, sizeof(lim), "%d", limit ? limit : 50);
	snprintf(before, sizeof(before), "%" PRId64, before_id);
	rows_call q = {.sql = "SELECT id, " TS("at") ", actor, role, action, target::text,"
	                      "       matched, changed, db_user FROM skiplock.actions"
	                      " WHERE $2::bigint = 0 OR id < $2 ORDER BY id DESC LIMIT $1",
	               .nparams = 2, .params = {lim, before}};
	skl_rc rc = skl__run(c, &read_opts, rows_fn, &q, err);
	size_t m = rc == SKL_OK ? (size_t)PQntuples(q.res) : 0;
	skl_action_info *out = m ? calloc(m, sizeof(*out)) : NULL;
	bool ok = m == 0 || out != NULL;
	for (size_t i = 0; ok && i < m; i++) {
		fill_action(&out[i], q.res, (int)i);
		ok = out[i].internal != NULL;
	}
	PQclear(q.res);
	if (rc == SKL_OK && !ok) {
		skl_actions_free(out, m);
		return skl__seterr(err, SKL_NOMEM, "out of memory reading actions");
	}
	if (rc == SKL_OK) {
		*rows = out;
		*n = m;
	}
	return rc;
}

void skl_actions_free(skl_action_info *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		free(rows[i].internal);
	free(rows);
}
