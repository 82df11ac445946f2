/*
 * SPDX-License-Identifier: MIT
 * skiplock/schema.h — installing and upgrading skiplock's own schema.
 */
#ifndef SKIPLOCK_SCHEMA_H
#define SKIPLOCK_SCHEMA_H

#include "skiplock/client.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Installs or upgrades the schema "skiplock" from the versioned SQL built
 * into the library.  Each missing step runs in its own short transaction
 * under a transaction-scoped advisory lock, so many replicas may call it at
 * once, through a transaction pooler too; none holds session state.
 * *applied (may be NULL) receives how many steps this call applied.
 * Idempotent.  Blocks up to the client's retry bound. */
SKL_API skl_rc skl_schema_install(skl_client *c, int *applied, skl_error *err);

/* Sets up least-privilege roles on an installed schema (see
 * docs/security.md): owner (may be NULL) becomes the owner of the schema
 * and of everything in it; worker (may be NULL) gets USAGE on the schema,
 * EXECUTE on its functions and SELECT, INSERT, UPDATE, DELETE on its
 * tables, and nothing else.  Both roles must exist: SKL_INVALID naming the
 * missing role otherwise (nothing is changed).  Runs in one transaction
 * under the schema lock; needs a superuser or a member of the owner role
 * that owns the schema now.  Idempotent: run it again after an upgrade.
 * Blocks up to the client's retry bound. */
SKL_API skl_rc skl_schema_grant(skl_client *c, const char *owner, const char *worker,
                                skl_error *err);

/* Checks, changing nothing, that the roles skl_schema_grant would use
 * exist (either may be NULL): SKL_INVALID naming the first that does not. */
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
