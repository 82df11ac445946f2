/*
 * limits_print.h — the limits on job starts (skiplock/limits.h) as a
 * table and as JSON, as `skiplock limits show` prints them.
 */
#ifndef SKL_CLI_LIMITS_PRINT_H
#define SKL_CLI_LIMITS_PRINT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "skiplock.h"

/* A new JSON array (NULL when out of memory), one object per limit: kind,
 * key_field, max_running, running, rate, per_ms, started, waiting, keys,
 * changed_at, changed_by; null for what the limit does not have. */
json_t *limits_json(const skl_limit_info *l, size_t n);
/* Prints the limits as an aligned table; false when it could not. */
bool limits_print_table(const skl_limit_info *l, size_t n);

#endif
