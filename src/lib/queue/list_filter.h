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

/* Checks the filters of o into f; SKL_INVALID (with a message naming the
 * filter) for JSON that does not parse, an unknown time field, a bound
 * that is neither an ISO 8601 timestamp nor a duration, or a bound without
 * a time field. */
skl_rc skl__list_filter_check(const skl_list_opts *o, skl__list_filter *f, skl_error *err);

#endif
