/*
 * control_print.h — the operator's pauses and action log as JSON, as
 * `skiplock queue paused --json`, `skiplock jobs actions --json` and the
 * dashboard's /api/pauses and /api/actions send them.
 */
#ifndef SKL_CLI_CONTROL_PRINT_H
#define SKL_CLI_CONTROL_PRINT_H

#include <jansson.h>
#include <stddef.h>

#include "skiplock.h"

/* New JSON arrays (NULL when out of memory): one object per pause, and
 * one per entry of the action log (its target as JSON). */
json_t *control_pauses_json(const skl_pause_info *p, size_t n);
json_t *control_actions_json(const skl_action_info *a, size_t n);

#endif
