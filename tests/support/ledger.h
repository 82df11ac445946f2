/*
 * ledger.h — worker processes whose handler's effect is a fenced ledger
 * row, and the checks that every job was completed with exactly one
 * accepted effect.  Shared by the queue and fault suites.
 */
#ifndef SKL_LEDGER_H
#define SKL_LEDGER_H

#include <sys/types.h>

#include "itest.h"
#include "skiplock.h"

/* Creates table ledger(job_id, fencing) and enqueues n jobs of kind "ledger". */
void ledger_setup(itest_ctx *t, skl_client *c, int n);
/* Forks a worker process (owner "itest-wN", concurrency 8, the given lease)
 * running the ledger handler against url; SIGTERM drains it. */
pid_t ledger_worker_start(const char *url, int n, int lease_ms);
/* Waits up to timeout_s for every job to finish; returns the ms waited. */
long long ledger_wait(itest_ctx *t, int timeout_s);
/* SIGTERMs the workers and checks each exited 0. */
void ledger_stop(pid_t *pids, int n);
/* Every job completed, no claim wrote twice, exactly one row per job with
 * the completing claim's token, nothing running, nothing left held. */
void ledger_check(itest_ctx *t, int n);

#endif
