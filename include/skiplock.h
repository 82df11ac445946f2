/*
 * SPDX-License-Identifier: MIT
 * skiplock.h — umbrella header of the skiplock library.
 *
 * skiplock coordinates background work through one PostgreSQL database and
 * stays correct behind transaction-mode poolers and on serverless Postgres.
 * Public API: everything named skl_* in the headers below; nothing else.
 */
#ifndef SKIPLOCK_H
#define SKIPLOCK_H

#define SKL_VERSION_MAJOR 0
#define SKL_VERSION_MINOR 2
#define SKL_VERSION_PATCH 0
#define SKL_VERSION "0.2.0"

#include "skiplock/error.h"
#include "skiplock/client.h"
#include "skiplock/schema.h"
#include "skiplock/retry.h"
#include "skiplock/queue.h"
#include "skiplock/deps.h"
#include "skiplock/worker.h"
#include "skiplock/webhook.h"
#include "skiplock/inspect.h"
#include "skiplock/control.h"
#include "skiplock/workers.h"
#include "skiplock/limits.h"
#include "skiplock/retention.h"
#include "skiplock/cron.h"
#include "skiplock/idem.h"
#include "skiplock/lease.h"
#include "skiplock/migrate.h"
#include "skiplock/doctor.h"
#include "skiplock/diagnose.h"

#define SKL_HAS_CLIENT 1
#define SKL_HAS_SCHEMA 1
#define SKL_HAS_QUEUE 1
#define SKL_HAS_CRON 1
#define SKL_HAS_WORKER 1
#define SKL_HAS_WEBHOOK 1
#define SKL_HAS_IDEM 1
/* skl_idem_complete, skl_idem_complete_with and skl_idem_release take the
 * holder token of skl_idem_result (schema step 0020) */
#define SKL_HAS_IDEM_HOLDER 1
#define SKL_HAS_LEASE 1
#define SKL_HAS_DOCTOR_LOCKS 1
#define SKL_HAS_RETRY 1
#define SKL_HAS_DIAGNOSE 1
#define SKL_HAS_WORKERS 1
/* skl_limit_set, skl_limit_remove, skl_limits_list (schema step 0029) */
#define SKL_HAS_LIMITS 1
/* skl_enqueue_opts.depends_on…, skl_enqueue_batch, skl_job_waits_for
 * (schema step 0030) */
#define SKL_HAS_DEPS 1

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version string, e.g. "0.2.0". */
SKL_API const char *skl_version(void);

#ifdef __cplusplus
}
#endif
#endif
