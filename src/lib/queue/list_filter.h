/*
 * list_filter.h — the find-a-job filters of skl_jobs_list (payload, error
 * text, time window), checked and turned into statement parameters by
 * list_filter.c before any statement runs.
 */
#ifndef SKL_LIST_FILTER_H
#define SKL_LIST_FILTER_H

#include "skiplock/inspect.h"

/* Parameters $5 to $11 of the list statement, in order: payload (jsonb
 * text), error text, time field, from (timestamp text), from (ms before
 * now()), to (timestamp text), to (ms before now()); NULL where unused. */
enum { SKL_LIST_FILTER_NPARAMS = 7 };

typedef struct skl__list_filter {
	char from_ts[48], from_ago[24], to_ts[48], to_ago[24];
	const char *params[SKL_LIST_FILTER_NPARAMS];
} skl__list_filter;

/* Every job matching the filters, as a FROM item: the one definition of
 * the filters is skiplock.jobs_matching (sql/0014_control.sql), which the
 * planner inlines.  Parameters: $1 queue, $2 kind, $3 state, $5 to $11 as
 * above; $4 is the caller's. */
#define SKL_JOBS_MATCHING                                                                     \
	"skiplock.jobs_matching($1, $2, $3, $5::jsonb, $6, $7, $8::timestamptz, $9::bigint,"     \
	" $10::timestamptz, $11::bigint)"
enum { SKL_MATCHING_NPARAMS = 4 + SKL_LIST_FILTER_NPARAMS };

/* Checks the filters of o into f; SKL_INVALID (with a message naming the
 * filter) for JSON that does not parse, an unknown time field, a bound
 * that is neither an ISO 8601 timestamp nor a duration, or a bound without
 * a time field. */
skl_rc skl__list_filter_check(const skl_list_opts *o, skl__list_filter *f, skl_error *err);

/* Checks o (its state too) and fills params[0..2] and [4..10] of
 * SKL_JOBS_MATCHING (params[3] is left NULL); the texts stay in f and o. */
skl_rc skl__matching_params(const skl_list_opts *o, skl__list_filter *f,
                            const char *params[SKL_MATCHING_NPARAMS], skl_error *err);

#endif
