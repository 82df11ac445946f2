/*
 * SPDX-License-Identifier: MIT
 * skiplock/doctor.h — diagnosing lock trouble in anyone's database:
 * advisory locks held or awaited, the tools that took them, orphaned
 * session locks, idle transactions that hold locks and sessions that
 * block others.
 *
 * Advisory keys.  pg_locks shows an advisory lock as (classid, objid,
 * objsubid): objsubid 1 is one bigint key, (classid << 32) | objid;
 * objsubid 2 is two int4 keys, classid and objid.  skl_advisory_key_from_tag
 * rebuilds the key; skl_advisory_key_name names the keys of known tools
 * (skiplock itself, sqlx, golang-migrate, Prisma, sqitch), whose formulas
 * docs/doctor.md traces to each tool's source.
 *
 * Findings.  skl_doctor_locks reads pg_locks and pg_stat_activity of the
 * current database in two statements and reports:
 *   SKL_FINDING_ORPHAN       a session-level advisory lock held by a session
 *                            idle (outside any transaction) for at least
 *                            idle_for, or left on the pooled backend the
 *                            doctor's own statement ran on (a pooler handed
 *                            it over, so whoever took it is gone)
 *   SKL_FINDING_IDLE_IN_TXN  a session idle in transaction for at least
 *                            idle_for that holds a lock besides its own
 *                            transaction id
 *   SKL_FINDING_BLOCKER      a session others have waited on for at least
 *                            idle_for (pg_blocking_pids, asked only about
 *                            sessions that are waiting)
 * skl_doctor_locks_terminate acts on the orphans only: in one statement it
 * re-checks each and terminates it only if it is still idle and still
 * holds an advisory lock; an orphan on the statement's own pooled backend
 * is freed with pg_advisory_unlock_all() instead.  Terminating needs the
 * role to be a superuser, to have the privileges of pg_signal_backend, or
 * those of the holder's role; a holder it may not signal is reported
 * (SKL_ACTION_NO_PRIVILEGE), never an error.
 *
 * Memory: a report and its strings belong to the library until
 * skl_lock_report_free; the action array is freed with skl_free.
 * Blocking: each call is one or two short statements through the client.
 * Thread-safety: as skl_client; the key functions are pure and thread-safe.
 */
#ifndef SKIPLOCK_DOCTOR_H
#define SKIPLOCK_DOCTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "skiplock/client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An advisory lock key: one bigint, or two int4s. */
typedef struct skl_advisory_key {
	bool two;          /* objsubid 2: (k1, k2); else objsubid 1: key */
	int64_t key;
	int32_t k1, k2;
} skl_advisory_key;

/* Rebuilds the key of a pg_locks row (classid and objid are oids, that is
 * unsigned 32-bit).  SKL_INVALID for an objsubid other than 1 or 2. */
SKL_API skl_rc skl_advisory_key_from_tag(uint32_t classid, uint32_t objid, int objsubid,
                                         skl_advisory_key *out);

/* The known keys.  CRC-32 is the IEEE/zlib one. */
#define SKL_KEY_SKIPLOCK_INIT INT64_C(8316001898373562369) /* src/lib/core/schema.c */
#define SKL_KEY_PRISMA INT64_C(72707369)
#define SKL_KEY_SQITCH INT64_C(75474063)
/* sqlx: 0x3d32ad9e * CRC32(database) as i64 (it cannot overflow). */
SKL_API int64_t skl_key_sqlx(const char *database);
/* golang-migrate's GenerateAdvisoryLockId: CRC32 of the names joined with
 * NUL bytes, times 1486364155 modulo 2^32.  names[0] is the database name
 * as the driver knows it ("/db" when opened by URL), then schema, table. */
SKL_API int64_t skl_key_golang_migrate(const char *const *names, size_t n);

/* Names key k for a database with the given schemas (for golang-migrate's
 * per-schema keys; may be NULL/0) into buf, e.g. "sqlx migrations";
 * returns buf, or NULL when the key is not one it knows. */
SKL_API const char *skl_advisory_key_name(const skl_advisory_key *k, const char *database,
                                          const char *const *schemas, size_t nschemas,
                                          char *buf, size_t cap);

/* A server session, as pg_stat_activity shows it to the current role. */
typedef struct skl_db_session {
	int pid;
	const char *state;         /* "idle", "active", "idle in transaction"…;
	                            * NULL when the role may not see it */
	int64_t state_age_ms;      /* since the state began; -1 unknown */
	int64_t xact_age_ms;       /* since its transaction began; -1 none */
	const char *application_name;
	const char *client_addr;   /* NULL: unix socket or not visible */
	const char *user;
	const char *query;         /* its last statement, cut to 200 characters */
	bool own_backend;          /* the backend the doctor's statement ran on */
	bool can_terminate;        /* the current role may pg_terminate_backend it */
	int64_t backend_start_us;  /* identifies the backend beyond its pid */
} skl_db_session;

/* One row of pg_locks for an advisory lock of the current database. */
typedef struct skl_advisory_lock {
	skl_advisory_key key;
	const char *name;          /* a known tool's key, or NULL */
	const char *mode;          /* "ExclusiveLock" or "ShareLock" */
	bool granted;              /* held (else awaited) */
	int64_t wait_ms;           /* awaited: how long; else -1 */
	skl_db_session session;    /* the holder, or the waiter */
	int *waiters;              /* held: sessions waiting on it because of it */
	size_t nwaiters;
	int *blocked_by;           /* awaited: the sessions it waits for */
	size_t nblocked_by;
} skl_advisory_lock;

typedef enum skl_lock_finding_kind {
	SKL_FINDING_ORPHAN = 1,
	SKL_FINDING_IDLE_IN_TXN = 2,
	SKL_FINDING_BLOCKER = 3
} skl_lock_finding_kind;

typedef struct skl_lock_finding {
	skl_lock_finding_kind kind;
	skl_db_session session;
	const char *holds;         /* orphan: its keys; else the locks it holds */
	int *blocked;              /* blocker: sessions waiting on it */
	size_t nblocked;
	int64_t longest_wait_ms;   /* blocker: the longest of those waits */
} skl_lock_finding;

typedef struct skl_lock_report {
	const char *database;
	const char *role;          /* current_user: who would terminate */
	int64_t idle_for_ms;
	skl_advisory_lock *locks;
	size_t nlocks;
	skl_lock_finding *findings;
	size_t nfindings;
	bool hidden_sessions;      /* some sessions' state was not visible
	                            * (needs pg_read_all_stats) */
	void *internal;
} skl_lock_report;

/* Reads the current database's advisory locks and lock findings with
 * idle_for_ms (> 0) as the threshold, in two read-only statements (each
 * its own transaction, retried).  SKL_MISUSE when c is NULL or
 * idle_for_ms <= 0.  *out is NULL on failure; on SKL_OK free it with
 * skl_lock_report_free.  Reading pg_stat_activity needs no privilege, but
 * without pg_read_all_stats other roles' sessions are hidden
 * (report->hidden_sessions). */
SKL_API skl_rc skl_doctor_locks(skl_client *c, int64_t idle_for_ms, skl_lock_report **out,
                                skl_error *err);
/* Frees a lock report and everything it points to.  Accepts NULL. */
SKL_API void skl_lock_report_free(skl_lock_report *r);

typedef enum skl_action_result {
	SKL_ACTION_TERMINATED = 1,   /* pg_terminate_backend succeeded */
	SKL_ACTION_RELEASED = 2,     /* own pooled backend: pg_advisory_unlock_all() */
	SKL_ACTION_NOT_IDLE = 3,     /* re-checked: busy again or no lock: left alone */
	SKL_ACTION_GONE = 4,         /* the session ended meanwhile */
	SKL_ACTION_NO_PRIVILEGE = 5  /* the role may not signal it */
} skl_action_result;

typedef struct skl_lock_action {
	int pid;
	skl_action_result result;
} skl_lock_action;

/* Acts on the report's orphans (nothing else), re-checking each in the
 * acting statement.  *actions (free with skl_free) has one entry per
 * orphan, *n of them; NULL and 0 when there is none. */
SKL_API skl_rc skl_doctor_locks_terminate(skl_client *c, const skl_lock_report *r,
                                          skl_lock_action **actions, size_t *n,
                                          skl_error *err);

/* "terminated", "released", "left alone: no longer idle"… Never NULL. */
SKL_API const char *skl_action_result_str(skl_action_result r);

#ifdef __cplusplus
}
#endif
#endif
