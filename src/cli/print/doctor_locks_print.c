/*
 * doctor_locks_print.c — `doctor locks` as a table with findings for people,
 * or as one JSON document (keys documented in cmd_doctor_locks.c's help and
 * docs/doctor.md).
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "print/doctor_locks_print.h"
#include "print/output.h"

static const char *key_text(const skl_advisory_key *k, char *buf, size_t cap)
{
	if (k->two)
		snprintf(buf, cap, "%d,%d", k->k1, k->k2);
	else
		snprintf(buf, cap, "%lld", (long long)k->key);
	return buf;
}

static const char *age(int64_t ms, char *buf, size_t cap)
{
	return ms < 0 ? "-" : cli_fmt_duration(ms, buf, cap);
}

static const char *or_dash(const char *s)
{
	return s && *s ? s : "-";
}

static const char *pid_list(const int *pids, size_t n, char *buf, size_t cap)
{
	size_t len = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < n && len + 16 < cap; i++)
		len += (size_t)snprintf(buf + len, cap - len, "%s%d", i ? "," : "", pids[i]);
	return n ? buf : "-";
}

static void lock_row(cli_table *t, const skl_advisory_lock *l)
{
	char key[48], a1[32], a2[32], a3[32], pids[256], lk[48];
	const skl_db_session *s = &l->session;
	snprintf(lk, sizeof(lk), "%s%s", l->granted ? "held" : "waits ",
	         l->granted ? "" : age(l->wait_ms, a3, sizeof(a3)));
	cli_table_add(t, "%s", key_text(&l->key, key, sizeof(key)));
	cli_table_add(t, "%s", or_dash(l->name));
	cli_table_add(t, "%s %s", lk, strcmp(l->mode, "ShareLock") == 0 ? "(shared)" : "");
	cli_table_add(t, "%d", s->pid);
	cli_table_add(t, "%s", s->own_backend ? "this check's backend" : or_dash(s->state));
	cli_table_add(t, "%s", s->own_backend ? "-" : age(s->state_age_ms, a1, sizeof(a1)));
	cli_table_add(t, "%s", s->own_backend ? "-" : age(s->xact_age_ms, a2, sizeof(a2)));
	cli_table_add(t, "%s", s->own_backend ? "-" : or_dash(s->application_name));
	cli_table_add(t, "%s", s->own_backend ? "-" : or_dash(s->client_addr));
	if (l->granted)
		cli_table_add(t, "%s", pid_list(l->waiters, l->nwaiters, pids, sizeof(pids)));
	else
		cli_table_add(t, "waits for %s",
		              pid_list(l->blocked_by, l->nblocked_by, pids, sizeof(pids)));
}

static bool print_locks(const skl_lock_report *r)
{
	if (r->nlocks == 0)
		return printf("No advisory lock is held or awaited in database \"%s\".\n",
		              r->database) >= 0;
	printf("Advisory locks in database \"%s\":\n", r->database);
	cli_table t;
	cli_table_init(&t, 10, "lllrlrrlll");
	static const char *const head[] = {"KEY", "KNOWN AS", "LOCK", "PID", "STATE", "STATE AGE",
	                                   "XACT AGE", "APPLICATION", "CLIENT", "WAITERS"};
	for (size_t i = 0; i < 10; i++)
		cli_table_add(&t, "%s", head[i]);
	for (size_t i = 0; i < r->nlocks; i++)
		lock_row(&t, &r->locks[i]);
	bool ok = cli_table_print(&t);
	cli_table_free(&t);
	return ok;
}

static const char *kind_label(skl_lock_finding_kind k)
{
	switch (k) {
	case SKL_FINDING_ORPHAN: return "orphan suspect";
	case SKL_FINDING_IDLE_IN_TXN: return "idle in transaction";
	case SKL_FINDING_BLOCKER: return "blocker";
	}
	return "finding";
}

static const char *kind_json(skl_lock_finding_kind k)
{
	switch (k) {
	case SKL_FINDING_ORPHAN: return "orphan_suspect";
	case SKL_FINDING_IDLE_IN_TXN: return "idle_in_transaction";
	case SKL_FINDING_BLOCKER: return "blocker";
	}
	return "finding";
}

/* "pid 12 (application "psql", client 10.0.0.1, user app)" */
static void print_who(const skl_db_session *s)
{
	if (s->own_backend) {
		printf("pid %d (a pooled backend: this check's own statement ran on it)", s->pid);
		return;
	}
	printf("pid %d (application \"%s\", client %s, user %s)", s->pid,
	       s->application_name ? s->application_name : "", or_dash(s->client_addr),
	       or_dash(s->user));
}

static void print_finding(const skl_lock_finding *f)
{
	char a1[32], a2[32], pids[256];
	const skl_db_session *s = &f->session;
	printf("  %-20s ", kind_label(f->kind));
	print_who(s);
	if (f->kind == SKL_FINDING_ORPHAN && s->own_backend)
		printf(": holds %s in session scope, left by an earlier client of the pool\n",
		       f->holds);
	else if (f->kind == SKL_FINDING_ORPHAN)
		printf(": idle %s outside any transaction, holding %s in session scope\n",
		       age(s->state_age_ms, a1, sizeof(a1)), f->holds);
	else if (f->kind == SKL_FINDING_IDLE_IN_TXN)
		printf(": idle in transaction for %s (transaction open %s), holding %s\n",
		       age(s->state_age_ms, a1, sizeof(a1)), age(s->xact_age_ms, a2, sizeof(a2)),
		       or_dash(f->holds));
	else
		printf(": %zu session%s waiting on it (%s) for up to %s; state %s\n", f->nblocked,
		       f->nblocked == 1 ? "" : "s", pid_list(f->blocked, f->nblocked, pids, sizeof(pids)),
		       age(f->longest_wait_ms, a1, sizeof(a1)), or_dash(s->state));
}

static void print_actions(const skl_lock_action *act, size_t nact)
{
	printf("\nActions:\n");
	for (size_t i = 0; i < nact; i++)
		printf("  pid %d: %s\n", act[i].pid, skl_action_result_str(act[i].result));
}

bool doctor_locks_table(const skl_lock_report *r, const skl_lock_action *act, size_t nact,
                        bool terminate)
{
	bool ok = print_locks(r);
	char d[32];
	if (r->nfindings == 0)
		printf("\nNo findings (idle-for %s).\n", cli_fmt_duration(r->idle_for_ms, d, sizeof(d)));
	else
		printf("\nFindings (idle-for %s):\n", cli_fmt_duration(r->idle_for_ms, d, sizeof(d)));
	bool orphans = false;
	for (size_t i = 0; i < r->nfindings; i++) {
		print_finding(&r->findings[i]);
		orphans = orphans || r->findings[i].kind == SKL_FINDING_ORPHAN;
	}
	if (terminate && orphans)
		print_actions(act, nact);
	else if (orphans)
		printf("\nTo free the orphan suspects: skiplock doctor locks --terminate-idle-orphans\n");
	return ok && fflush(stdout) == 0 && !ferror(stdout);
}

/* ---- JSON ---- */

static json_t *json_pids(const int *pids, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < n; i++)
		json_array_append_new(a, json_integer(pids[i]));
	return a;
}

static json_t *json_age(int64_t ms)
{
	return ms < 0 ? json_null() : json_integer(ms);
}

static json_t *json_session(const skl_db_session *s)
{
	return json_pack("{s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b, s:b}", "pid", s->pid,
	                 "state", cli_json_str(s->state), "state_age_ms", json_age(s->state_age_ms),
	                 "xact_age_ms", json_age(s->xact_age_ms), "application_name",
	                 cli_json_str(s->application_name), "client_addr",
	                 cli_json_str(s->client_addr), "user", cli_json_str(s->user), "query",
	                 cli_json_str(s->query), "own_backend", s->own_backend, "can_terminate",
	                 s->can_terminate);
}

static json_t *json_lock(const skl_advisory_lock *l)
{
	json_t *o = json_pack("{s:o, s:s, s:b, s:o, s:o, s:o, s:o}", "name", cli_json_str(l->name),
	                      "mode", l->mode, "granted", l->granted, "wait_ms",
	                      json_age(l->wait_ms), "session", json_session(&l->session),
	                      "waiters", json_pids(l->waiters, l->nwaiters), "blocked_by",
	                      json_pids(l->blocked_by, l->nblocked_by));
	if (o && l->key.two) {
		json_object_set_new(o, "key1", json_integer(l->key.k1));
		json_object_set_new(o, "key2", json_integer(l->key.k2));
	} else if (o) {
		json_object_set_new(o, "key", json_integer(l->key.key));
	}
	return o;
}

static json_t *json_finding(const skl_lock_finding *f)
{
	return json_pack("{s:s, s:o, s:o, s:o, s:o}", "kind", kind_json(f->kind), "session",
	                 json_session(&f->session), "holds", cli_json_str(f->holds), "blocked",
	                 json_pids(f->blocked, f->nblocked), "longest_wait_ms",
	                 json_age(f->longest_wait_ms));
}

static const char *action_json(skl_action_result r)
{
	switch (r) {
	case SKL_ACTION_TERMINATED: return "terminated";
	case SKL_ACTION_RELEASED: return "released";
	case SKL_ACTION_NOT_IDLE: return "not_idle";
	case SKL_ACTION_GONE: return "gone";
	case SKL_ACTION_NO_PRIVILEGE: return "no_privilege";
	}
	return "unknown";
}

json_t *doctor_locks_doc(const skl_lock_report *r, const skl_lock_action *act, size_t nact,
                         bool needs_action)
{
	json_t *locks = json_array(), *findings = json_array(), *actions = json_array();
	for (size_t i = 0; i < r->nlocks; i++)
		json_array_append_new(locks, json_lock(&r->locks[i]));
	for (size_t i = 0; i < r->nfindings; i++)
		json_array_append_new(findings, json_finding(&r->findings[i]));
	for (size_t i = 0; i < nact; i++)
		json_array_append_new(actions, json_pack("{s:i, s:s, s:s}", "pid", act[i].pid, "result",
		                                         action_json(act[i].result), "message",
		                                         skl_action_result_str(act[i].result)));
	json_t *doc = json_pack("{s:s, s:s, s:I, s:o, s:o, s:o, s:b, s:b}", "database", r->database,
	                        "role", r->role, "idle_for_ms", (json_int_t)r->idle_for_ms, "locks",
	                        locks, "findings", findings, "actions", actions, "needs_action",
	                        needs_action, "hidden_sessions", r->hidden_sessions);
	return doc;
}

bool doctor_locks_json(const skl_lock_report *r, const skl_lock_action *act, size_t nact,
                       bool needs_action)
{
	return cli_json_print(doctor_locks_doc(r, act, nact, needs_action));
}
