/*
 * parents.c — `skiplock enqueue --depends-on ID[,ID…] --depends-on-key KEY
 * --on-parent-failure cancel|run`: parents collected and checked while the
 * options are read.  An id is digits only (no sign, no space) from 1 to
 * 2^63 - 1; the count of parents is checked once all are read, against
 * the database's bound (SKL_PARENTS_MAX, sql/0030_dependencies.sql).
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "enqueue/batch.h"
#include "enqueue/parents.h"

/* Appends v to p->ids; false when out of memory. */
static bool push_id(cli_parents *p, int64_t v)
{
	if (p->nids == p->cap_ids) {
		size_t cap = p->cap_ids ? 2 * p->cap_ids : 8;
		int64_t *ids = realloc(p->ids, cap * sizeof(*ids));
		if (ids == NULL)
			return false;
		p->ids = ids;
		p->cap_ids = cap;
	}
	p->ids[p->nids++] = v;
	return true;
}

/* The id at *s (digits, up to a comma or the end) into *v, *s moved past
 * it; false when it is not one. */
static bool next_id(const char **s, int64_t *v)
{
	const char *p = *s;
	char *end = NULL;
	if (!isdigit((unsigned char)*p))
		return false;
	errno = 0;
	long long n = strtoll(p, &end, 10);
	if (errno || n < 1 || (*end != ',' && *end != '\0'))
		return false;
	*v = n;
	*s = *end == ',' ? end + 1 : end;
	return *end == '\0' || **s != '\0';  /* a trailing comma names nothing */
}

int cli_parents_add_ids(const cli_common *cc, cli_parents *p, const char *arg)
{
	const char *s = arg;
	do {
		int64_t v;
		if (!next_id(&s, &v)) {
			cli_error(cc, "--depends-on: \"%s\" is not a job id from 1 to 2^63-1, or a "
			          "comma-separated list of them", arg);
			return CLI_USAGE;
		}
		if (!push_id(p, v)) {
			cli_error(cc, "out of memory reading --depends-on");
			return CLI_PROBLEM;
		}
	} while (*s);
	return CLI_OK;
}

int cli_parents_add_key(const cli_common *cc, cli_parents *p, const char *arg)
{
	if (!cli_check_len(cc, "--depends-on-key", arg, SKL_UNIQUE_KEY_MAX))
		return CLI_USAGE;
	if (p->nkeys == p->cap_keys) {
		size_t cap = p->cap_keys ? 2 * p->cap_keys : 4;
		const char **keys = realloc(p->keys, cap * sizeof(*keys));
		if (keys == NULL) {
			cli_error(cc, "out of memory reading --depends-on-key");
			return CLI_PROBLEM;
		}
		p->keys = keys;
		p->cap_keys = cap;
	}
	p->keys[p->nkeys++] = arg;
	return CLI_OK;
}

int cli_parents_policy(const cli_common *cc, cli_parents *p, const char *arg)
{
	if (strcmp(arg, "cancel") == 0)
		p->on_failure = SKL_PARENT_FAILURE_CANCEL;
	else if (strcmp(arg, "run") == 0)
		p->on_failure = SKL_PARENT_FAILURE_RUN;
	else {
		cli_error(cc, "--on-parent-failure: unknown policy \"%s\" (expected cancel or run)",
		          arg);
		return CLI_USAGE;
	}
	p->policy = arg;
	return CLI_OK;
}

int cli_parents_apply(const cli_common *cc, const cli_parents *p, bool batch,
                      skl_enqueue_opts *o)
{
	bool any = p->nids + p->nkeys > 0;
	if (batch && (any || p->policy)) {
		cli_error(cc, "--depends-on, --depends-on-key and --on-parent-failure enqueue one "
		          "job; they do not go with --batch");
		return CLI_USAGE;
	}
	if (p->policy && !any) {
		cli_error(cc, "--on-parent-failure goes with --depends-on or --depends-on-key");
		return CLI_USAGE;
	}
	if (p->nids + p->nkeys > SKL_PARENTS_MAX) {
		cli_error(cc, "at most %d parents (--depends-on and --depends-on-key together), "
		          "got %zu", SKL_PARENTS_MAX, p->nids + p->nkeys);
		return CLI_USAGE;
	}
	o->depends_on = p->ids;
	o->ndepends_on = p->nids;
	o->depends_on_keys = p->keys;
	o->ndepends_on_keys = p->nkeys;
	o->on_parent_failure = p->on_failure;
	return CLI_OK;
}

void cli_parents_free(cli_parents *p)
{
	free(p->ids);
	free(p->keys);
	memset(p, 0, sizeof(*p));
}
