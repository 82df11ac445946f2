/*
 * cmd_idem.c — `skiplock idem prune`: delete expired idempotency keys.
 *
 * Keys are claimed, completed and released by applications, through the
 * library (skiplock/idem.h) or the SQL functions, under the holder token a
 * claim returns; the command line only cleans up.  Options are checked before the database is contacted, so
 * bad input exits 2 with one line and deletes nothing.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char idem_usage[] =
	"Usage: skiplock idem prune [--batch N]\n"
	"\n"
	"Idempotency keys (skiplock.idempotency_keys): an application claims a key\n"
	"before a side effect and stores the response after it, with the holder\n"
	"token the claim returned (no other caller can store one); a retry with the\n"
	"same key replays that response until the key expires.\n"
	"\n"
	"  prune   delete expired keys, N per short transaction, oldest first, and\n"
	"          print how many were deleted; run it from cron or a periodic job\n"
	"\n"
	"Exit status: 0 success, 2 bad usage or bad input (nothing deleted), 1 the\n"
	"database refused, 3 database unreachable within --retry-for.\n";

static const char prune_usage[] =
	"Usage: skiplock idem prune [--batch N]\n"
	"\n"
	"Delete idempotency keys whose expiry (claim time + ttl, by the database\n"
	"clock) has passed, N rows per short transaction, and print how many were\n"
	"deleted. An expired key is already reusable; pruning only reclaims space.\n"
	"\n"
	"Prune options:\n"
	"  --batch N              rows per transaction (default 1000, at most 100000)\n"
	"\n";

static const char prune_exit[] =
	"\nExit status: 0 pruned (also when nothing had expired), 1 the database\n"
	"refused, 2 bad usage or bad input, 3 database unreachable within --retry-for.\n";

enum { O_BATCH = OPT_COMMON_LAST + 1 };

static const struct option prune_opts[] = {
	CLI_COMMON_LONGOPTS, {"batch", required_argument, NULL, O_BATCH}, {0}};

typedef struct prune_args {
	cli_common *cc;
	int batch;
} prune_args;

static int own_option(int code, const char *arg, void *ctx)
{
	prune_args *a = ctx;
	long long v = 0;
	if (code != O_BATCH || !cli_int(a->cc, "--batch", arg, 1, 100000, &v))
		return CLI_USAGE;
	a->batch = (int)v;
	return CLI_OK;
}

static int idem_prune(int argc, char **argv)
{
	cli_common cc;
	cli_common_init(&cc, "idem prune");
	prune_args a = {.cc = &cc};
	bool done;
	int rc = cli_start(&cc, argc, argv, prune_opts, own_option, &a, prune_usage, prune_exit, 0,
	                   &done);
	if (done)
		return rc;
	skl_client *c;
	if ((rc = cli_open(&cc, &c)) != CLI_OK)
		return rc;
	int64_t deleted = 0;
	skl_error err;
	if (skl_idem_prune(c, a.batch, &deleted, &err) != SKL_OK)
		rc = cli_fail(&cc, &err);
	else
		printf("deleted %" PRId64 " expired idempotency key%s\n", deleted,
		       deleted == 1 ? "" : "s");
	skl_client_close(c);
	return rc;
}

static void help(FILE *out)
{
	fputs(idem_usage, out);
}

int cmd_idem(int argc, char **argv)
{
	static const cli_sub subs[] = {{"prune", idem_prune, NULL, NULL, NULL}};
	static const cli_subs table = {"idem", subs, 1, help};
	return cli_dispatch(&table, argc, argv);
}
