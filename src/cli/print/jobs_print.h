/*
 * jobs_print.h — a job for people (a table row, a page) and for machines
 * (JSON), as `skiplock jobs` prints them.
 */
#ifndef SKL_CLI_JOBS_PRINT_H
#define SKL_CLI_JOBS_PRINT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "skiplock.h"

/* Prints jobs as an aligned table with a header; false when it failed. */
bool jobs_print_table(const skl_job_info *jobs, size_t n);
/* Prints one job read by skl_job_get, field by field, with why it waits
 * (skl_job_waits_for; NULL: no such line), then its error history; false
 * when it failed. */
bool jobs_print_one(const skl_job_info *job, const char *waits_for);

/* New JSON values (NULL when out of memory): an array of job objects, and
 * one job with its payload, result and error history. */
json_t *jobs_json_list(const skl_job_info *jobs, size_t n);
json_t *jobs_json_one(const skl_job_info *job);
/* jobs_json_one with "waits_for": why it waits, or null (`jobs show`). */
json_t *jobs_json_show(const skl_job_info *job, const char *waits_for);

#endif
