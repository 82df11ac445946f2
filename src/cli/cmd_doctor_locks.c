/*
 * cmd_doctor_locks.c — `skiplock doctor locks`: options, help, and the
 * report as a table or JSON.  The queries and findings are the library's
 * (src/lib/doctor/doctor_locks.c); this file decides the exit status: 1 while any
 * finding is left that no action of this run resolved, else 4 when some
 * session's state was hidden from the role (an orphan may hide there: a
 * clean report it could not vouch for must not exit 0).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "print/doctor_locks_print.h"

static const char locks_usage[] =
	"NAME\n"
	"    skiplock doctor locks - advisory locks, orphaned session locks, idle\n"
	"    transactions and blockers in the current database\n"
	"\n"
	"SYNOPSIS\n"
	"    skiplock doctor locks [--json] [--idle-for DUR] [--terminate-idle-orphans]\n"
	"                          [OPTIONS]\n"
	"\n"
	"DESCRIPTION\n"
	"    Lists every advisory lock held or awaited in the database: its key\n"
	"    (one bigint, or two int4 keys), the tool it belongs to when the key is\n"
	"    a known one (skiplock, sqlx, golang-migrate, Prisma, sqitch), the\n"
	"    holding or waiting session (pid, state and its age, transaction age,\n"
	"    application_name, client address) and who waits on it. Then the\n"
	"    findings that need action:\n"
	"\n"
	"    orphan suspect       a session-level advisory lock held by a session\n"
	"                         idle outside any transaction for DUR or more, or\n"
	"                         left on the pooled backend this check ran on. A\n"
	"                         session lock taken through a transaction pooler\n"
	"                         stays on the server backend after the client is\n"
	"                         gone, and every later taker waits for ever.\n"
	"    idle in transaction  a session idle in a transaction for DUR or more\n"
	"                         that holds locks (DDL queues behind it, and all\n"
	"                         traffic behind the DDL)\n"
	"    blocker              a session others have waited on for DUR or more\n"
	"\n"
	"    Nothing is changed unless --terminate-idle-orphans is given. Then each\n"
	"    orphan suspect is re-checked in the statement that acts on it and\n"
	"    terminated (pg_terminate_backend) only if it is still idle and still\n"
	"    holds an advisory lock; on the pooled backend this check runs on, its\n"
	"    advisory locks are released (pg_advisory_unlock_all) instead. Idle\n"
	"    transactions and blockers are reported, never terminated.\n"
	"\n"
	"    Terminating needs a superuser, a role with the privileges of\n"
	"    pg_signal_backend, or of the holder's role; seeing other roles'\n"
	"    session state needs pg_read_all_stats. When either is missing it says\n"
	"    so on stderr, with the GRANT to run. Sessions whose state is hidden\n"
	"    cannot be judged: with nothing else to act on, the exit status is then\n"
	"    4, not 0.\n"
	"\n"
	"OPTIONS\n"
	"    --json                    one JSON document: database, role, idle_for_ms,\n"
	"                              locks, findings, actions, needs_action\n"
	"    --idle-for DUR            the age that makes a finding (default 60s)\n"
	"    --terminate-idle-orphans  terminate (or release) the orphan suspects and\n"
	"                              print what was done\n"
	"\n";

static const char locks_tail[] =
	"\n"
	"EXIT STATUS\n"
	"    0 nothing needs action (or every finding was an orphan this run freed);\n"
	"    1 a finding needs action; 2 bad usage; 3 database unreachable; 4 no\n"
	"    visible finding needs action, but some sessions holding advisory locks\n"
	"    are hidden from the role (it lacks pg_read_all_stats), so an orphan\n"
	"    may be among them: the check is incomplete.\n"
	"\n"
	"EXAMPLES\n"
	"    skiplock doctor locks\n"
	"    skiplock doctor locks --idle-for 5m --terminate-idle-orphans\n"
	"    skiplock doctor locks --json | jq '.findings'\n";

enum { O_JSON = OPT_COMMON_LAST + 1, O_IDLE_FOR, O_TERMINATE };

typedef struct locks_args {
	cli_common *cc;
	bool json;
	bool terminate;
	const char *idle_for;
} locks_args;

static int own_option(int code, const char *arg, void *ctx)
{
	locks_args *a = ctx;
	switch (code) {
	case O_JSON: a->json = true; break;
	case O_IDLE_FOR: a->idle_for = arg; break;
	case O_TERMINATE: a->terminate = true; break;
	default: return CLI_USAGE;
	}
	return CLI_OK;
}

static bool resolved(const skl_lock_action *act, size_t nact, int pid)
{
	for (size_t i = 0; i < nact; i++)
		if (act[i].pid == pid && (act[i].result == SKL_ACTION_TERMINATED ||
		                          act[i].result == SKL_ACTION_RELEASED))
			return true;
	return false;
}

/* A finding needs action unless this run freed its session. */
static bool needs_action(const skl_lock_report *r, const skl_lock_action *act, size_t nact)
{
	for (size_t i = 0; i < r->nfindings; i++)
		if (!resolved(act, nact, r->findings[i].session.pid))
			return true;
	return false;
}

/* Privilege trouble, one line each, on stderr. */
static void privilege_notes(const cli_common *cc, const skl_lock_report *r,
                            const skl_lock_action *act, size_t nact)
{
	for (size_t i = 0; i < nact; i++)
		if (act[i].result == SKL_ACTION_NO_PRIVILEGE)
			cli_error(cc, "cannot terminate pid %d: role \"%s\" lacks the privilege "
			          "(run as a superuser, or: GRANT pg_signal_backend TO \"%s\")",
			          act[i].pid, r->role, r->role);
	if (r->hidden_sessions)
		cli_error(cc, "the state of some sessions is hidden from role \"%s\", so they "
		          "cannot be judged (GRANT pg_read_all_stats TO \"%s\")", r->role, r->role);
}

static int run(cli_common *cc, const locks_args *a, int64_t idle_for_ms)
{
	skl_client *c = NULL;
	int rc = cli_open(cc, &c);
	if (rc != CLI_OK)
		return rc;
	skl_lock_report *r = NULL;
	skl_lock_action *act = NULL;
	size_t nact = 0;
	skl_error err;
	if (skl_doctor_locks(c, idle_for_ms, &r, &err) != SKL_OK)
		rc = cli_fail(cc, &err);
	else if (a->terminate && skl_doctor_locks_terminate(c, r, &act, &nact, &err) != SKL_OK)
		rc = cli_fail(cc, &err);
	if (rc == CLI_OK) {
		bool need = needs_action(r, act, nact);
		bool ok = a->json ? doctor_locks_json(r, act, nact, need)
		                  : doctor_locks_table(r, act, nact, a->terminate);
		privilege_notes(cc, r, act, nact);
		if (!ok)
			cli_error(cc, "cannot write the output");
		rc = !ok || need ? CLI_PROBLEM : r->hidden_sessions ? CLI_INCOMPLETE : CLI_OK;
	}
	skl_free(act);
	skl_lock_report_free(r);
	skl_client_close(c);
	return rc;
}

int cmd_doctor_locks(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_LONGOPTS,
		{"json", no_argument, NULL, O_JSON},
		{"idle-for", required_argument, NULL, O_IDLE_FOR},
		{"terminate-idle-orphans", no_argument, NULL, O_TERMINATE},
		{0}};
	cli_common cc;
	cli_common_init(&cc, "doctor locks");
	locks_args a = {.cc = &cc};
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, locks_usage, locks_tail, 0, &done);
	if (done)
		return rc;
	int64_t idle_for_ms = 60000;
	if (a.idle_for && !cli_duration(&cc, "--idle-for", a.idle_for, &idle_for_ms))
		return CLI_USAGE;
	if (idle_for_ms <= 0) {
		cli_error(&cc, "--idle-for must be positive, got \"%s\"", a.idle_for);
		return CLI_USAGE;
	}
	cc.client.application_name = "skiplock doctor";
	return run(&cc, &a, idle_for_ms);
}
