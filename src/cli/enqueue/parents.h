/*
 * parents.h — the parents of one job for `skiplock enqueue`:
 * --depends-on ID (repeated, or ids separated by commas), --depends-on-key
 * KEY (repeated) and --on-parent-failure cancel|run, each checked as it is
 * read, so bad input exits 2 before the database is contacted.  Whether a
 * parent exists is the database's answer (skiplock.enqueue_after).
 */
#ifndef SKL_CLI_PARENTS_H
#define SKL_CLI_PARENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cli.h"

typedef struct cli_parents {
	int64_t *ids;
	size_t nids, cap_ids;
	const char **keys;        /* point into argv */
	size_t nkeys, cap_keys;
	const char *policy;       /* --on-parent-failure as written; NULL: not given */
	skl_parent_failure on_failure;
} cli_parents;

/* --depends-on ARG: each id of a comma-separated list, 1 or more.  The
 * option handlers below return CLI_OK, or an exit code after one line. */
int cli_parents_add_ids(const cli_common *cc, cli_parents *p, const char *arg);
/* --depends-on-key KEY: a unique key of 1 to SKL_UNIQUE_KEY_MAX bytes. */
int cli_parents_add_key(const cli_common *cc, cli_parents *p, const char *arg);
/* --on-parent-failure cancel|run. */
int cli_parents_policy(const cli_common *cc, cli_parents *p, const char *arg);

/* Once every option is read: CLI_USAGE after one line for parents with
 * --batch, a policy without parents, or more than SKL_PARENTS_MAX parents;
 * else CLI_OK with o's parent fields pointing into p. */
int cli_parents_apply(const cli_common *cc, const cli_parents *p, bool batch,
                      skl_enqueue_opts *o);
/* Frees what p holds (not the keys, which are argv's). */
void cli_parents_free(cli_parents *p);

#endif
