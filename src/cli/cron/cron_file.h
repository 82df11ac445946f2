/*
 * cron_file.h — the schedules file of `skiplock cron apply` (JSON).
 */
#ifndef SKL_CRON_FILE_H
#define SKL_CRON_FILE_H

#include <jansson.h>

#include "cli.h"

typedef struct cron_file {
	json_t *root;              /* the strings of want point into it */
	skl_schedule_want *want;
	char **payloads;           /* want[i].spec.payload, owned */
	size_t n;
} cron_file;

/* Reads (cli_read_file: a regular file or "-", standard input, at most
 * CLI_FILE_MAX bytes) and checks the shape of PATH: {"schedules":
 * [{"name", "expression", "kind", and optionally "zone", "queue",
 * "payload" (any JSON), "priority", "max_attempts", "catch_up", "paused"}]}.
 * CLI_OK, or CLI_USAGE after printing one line naming the place. */
int cron_file_load(const cli_common *cc, const char *path, cron_file *f);
void cron_file_free(cron_file *f);

#endif
