/*
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

/* The newest schema version built into this library. */
SKL_API int skl_schema_latest(void);

/* The schema version installed in the database (0 when none), in *out. */
SKL_API skl_rc skl_schema_installed(skl_client *c, int *out, skl_error *err);

#ifdef __cplusplus
}
#endif
#endif
