/*
 * batch.h — NDJSON job batches for `skiplock enqueue --batch`: read and
 * check every line before anything is sent, within fixed bounds.
 *
 * Bounds (all configurable on the command line): a payload is at most
 * max_payload bytes, a line at most max_line bytes (a longer line is
 * refused after reading max_line + 1 bytes of it, so memory stays bounded
 * whatever the input), a batch at most max_jobs jobs.
 */
#ifndef SKL_CLI_BATCH_H
#define SKL_CLI_BATCH_H

#include <jansson.h>
#include <stdio.h>

#include "cli.h"

#define CLI_BATCH_MAX_JOBS_DEFAULT 1000000
#define CLI_BATCH_LINE_SLACK 65536 /* default max_line = max_payload + this */

typedef struct cli_batch_limits {
	long long max_payload;   /* bytes of one payload's JSON text */
	long long max_line;      /* bytes of one NDJSON line */
	long long max_jobs;      /* lines with a job */
} cli_batch_limits;

struct cli_batch_block;

typedef struct cli_batch {
	skl_job_spec *specs;
	struct cli_batch_block *strings; /* the specs' strings, copied from their lines */
	size_t n, cap;
} cli_batch;

/* Checks a name: 1..max bytes.  Prints and returns false otherwise. */
bool cli_check_len(const cli_common *cc, const char *what, const char *s, size_t max);

/* Checks a payload: at most max bytes of valid JSON.  `where` prefixes the
 * message ("line 3: " or ""). */
bool cli_check_payload(const cli_common *cc, long long max, const char *json,
                       const char *where);

/* Reads NDJSON jobs from in into b (zeroed by the caller), each line's
 * missing fields taken from defaults.  Returns CLI_OK, or CLI_USAGE after
 * one message naming the line, or CLI_PROBLEM when out of memory.  Free b
 * with cli_batch_free whatever the result. */
int cli_batch_read(const cli_common *cc, const skl_enqueue_opts *defaults,
                   const cli_batch_limits *lim, FILE *in, cli_batch *b);
void cli_batch_free(cli_batch *b);

#endif
