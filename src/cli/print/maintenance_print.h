/*
 * maintenance_print.h — the maintenance's status and its one finding
 * (skl_maintenance_check, skiplock/retention.h) as text and as JSON, as
 * `skiplock doctor maintenance` prints it and the dashboard's
 * /api/doctor/maintenance sends it.
 */
#ifndef SKL_CLI_MAINTENANCE_PRINT_H
#define SKL_CLI_MAINTENANCE_PRINT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "skiplock.h"

/* The finding's sentence ("maintenance has not run for 12m05s while jobs
 * ran …") into buf; "" when st is not overdue.  Returns buf. */
const char *maintenance_finding(const skl_maintenance_status *st, char *buf, size_t cap);
/* A new JSON object (NULL when out of memory): installed, last_run_at,
 * last_run_age_ms, last_owner, last_summary, lease_owner, lease_left_ms,
 * busy_age_ms, expected_ms, overdue, findings ([{kind, message}]),
 * needs_action. */
json_t *maintenance_json(const skl_maintenance_status *st);
/* Prints the status as lines for people; false when it could not. */
bool maintenance_print_text(const skl_maintenance_status *st);

#endif
