/*
 * SPDX-License-Identifier: MIT
 * skiplock/schema.h — installing and upgrading skiplock's own schema.
 */
#ifndef SKIPLOCK_SCHEMA_H
#define SKIPLOCK_SCHEMA_H

#include <stdbool.h>

#include "skiplock/client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Installs or upgrades the schema "skiplock" from the versioned SQL built
 * into the library.  Each missing step runs in its own short transaction
 * under a transaction-scoped advisory lock, so many replicas may call it at
 * once, through a transaction pooler too; none holds session state.
 * *applied (may be NULL) receives how many steps this call applied.
 * Before applying anything, the checksum recorded for each installed step
 * is compared with the built-in text's: SKL_CONFLICT naming the first step
 * that differs, and nothing is applied (skl_schema_repair, or
 * sql/SCHEMA.md "Checksums and repair").  Idempotent.  Blocks up to the
 * client's retry bound. */
SKL_API skl_rc skl_schema_install(skl_client *c, int *applied, skl_error *err);

/* The roles skl_schema_grant_roles sets up; each may be NULL. */
typedef struct skl_roles {
	const char *owner;         /* owns the schema and everything in it */
	const char *worker;        /* the protocol, enqueue, leases, idempotency keys
	                            * and the cron tick, through functions only */
	const char *operator_role; /* a worker that may also retry, cancel and prune
	                            * jobs, edit schedules and force breakers */
	const char *reader;        /* reads jobs, breakers, schedules and leases */
} skl_roles;

/* Sets up least-privilege roles on an installed schema (the table of role
 * x object x privilege is in docs/security.md).  Every role granted before
 * is granted again, so an upgrade's new functions reach it.  Roles that
 * do not exist: SKL_INVALID naming the first (nothing is changed).  Runs
 * in one transaction under the schema lock; needs a superuser or a member
 * of the role that owns the schema now.  Idempotent.  Blocks up to the
 * client's retry bound. */
SKL_API skl_rc skl_schema_grant_roles(skl_client *c, const skl_roles *roles, skl_error *err);

/* Spreads skiplock's tables over a Citus cluster (docs/scaling.md):
 * skiplock.distribute() in one transaction under the schema lock, after
 * skl_schema_install.  Needs the schema's owner and the citus extension
 * (else an error, SQLSTATE 0A000, nothing changed).  Idempotent:
 * *changed (may be NULL) is false when the tables were distributed
 * already. */
SKL_API skl_rc skl_schema_distribute(skl_client *c, bool *changed, skl_error *err);

/* Checks, changing nothing, that the roles named in roles exist:
 * SKL_INVALID naming the first that does not. */
SKL_API skl_rc skl_schema_roles_exist(skl_client *c, const skl_roles *roles, skl_error *err);

/* Repairs installed steps whose recorded checksum is an earlier text that
 * sql/CHECKSUMS lists as superseded (it differs from the built-in step only
 * in functions and comments): re-creates that step's functions with CREATE
 * OR REPLACE FUNCTION (owner, grants and triggers are kept) and comments,
 * then records the built-in checksum, in one transaction per step under the
 * schema lock.  SKL_CONFLICT, changing nothing, when an installed step has
 * a checksum no repair is known for.  *repaired (may be NULL) receives how
 * many steps this call repaired; 0 when none needed it.  Does not apply
 * missing steps: call skl_schema_install next.  Idempotent; safe when many
 * replicas call it at once.  Blocks up to the client's retry bound. */
SKL_API skl_rc skl_schema_repair(skl_client *c, int *repaired, skl_error *err);

/* skl_schema_grant_roles with an owner and a worker only (either may be
 * NULL). */
SKL_API skl_rc skl_schema_grant(skl_client *c, const char *owner, const char *worker,
                                skl_error *err);

/* skl_schema_roles_exist with an owner and a worker only. */
SKL_API skl_rc skl_schema_check_roles(skl_client *c, const char *owner, const char *worker,
                                      skl_error *err);

/* The newest schema version built into this library. */
SKL_API int skl_schema_latest(void);

/* The schema version installed in the database (0 when none), in *out. */
SKL_API skl_rc skl_schema_installed(skl_client *c, int *out, skl_error *err);

#ifdef __cplusplus
}
#endif
#endif
