/*
 * doctor_locks_print.h — `doctor locks` output: the lock table, findings
 * and actions for people, or one JSON document.  Data goes to stdout.
 */
#ifndef SKL_CLI_DOCTOR_LOCKS_PRINT_H
#define SKL_CLI_DOCTOR_LOCKS_PRINT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "skiplock.h"

/* Both return false when the output could not be built or written.
 * terminate: whether --terminate-idle-orphans was given (for the hint). */
bool doctor_locks_table(const skl_lock_report *r, const skl_lock_action *act, size_t nact,
                        bool terminate);
bool doctor_locks_json(const skl_lock_report *r, const skl_lock_action *act, size_t nact,
                       bool needs_action);

/* The document doctor_locks_json prints (new reference; NULL when out of
 * memory), also served by the dashboard. */
json_t *doctor_locks_doc(const skl_lock_report *r, const skl_lock_action *act, size_t nact,
                         bool needs_action);

#endif
