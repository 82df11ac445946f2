/*
 * workers_print.h — the worker registry (skiplock/workers.h) as a table
 * and as JSON, as `skiplock workers` prints it and the dashboard's
 * /api/workers sends it.
 */
#ifndef SKL_CLI_WORKERS_PRINT_H
#define SKL_CLI_WORKERS_PRINT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "skiplock.h"

/* A new JSON array (NULL when out of memory), one object per worker:
 * owner, kinds, queues (null: every queue), empty_at, empty_age_ms,
 * first_seen_at, waiting, waiting_kinds, idle (waiting > 0). */
json_t *workers_json(const skl_worker_info *w, size_t n);
/* Prints the workers as an aligned table; false when it could not. */
bool workers_print_table(const skl_worker_info *w, size_t n);

#endif
