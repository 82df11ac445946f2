/*
 * cmd_init.c — `skiplock init`: install or upgrade skiplock's schema.
 */
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#include "cli.h"
#include "skiplock/retention.h"

static const char usage[] =
	"Usage: skiplock init [OPTIONS]\n"
	"\n"
	"Install or upgrade skiplock's own schema \"skiplock\" in the database.\n"
	"\n"
	"The schema is built into the binary as numbered steps. Each missing step\n"
	"runs in its own short transaction under a transaction-scoped advisory lock,\n"
	"so any number of replicas may run init at once, directly or through a\n"
	"transaction-mode pooler; none leaves a session lock or setting behind.\n"
	"Running it again changes nothing.\n"
	"\n"
	"Each installed step's checksum (SHA-256 of its text) is compared with the\n"
	"built-in step's first. When one differs, init names the step and changes\n"
	"nothing. With --repair, a step installed from an earlier text that differs\n"
	"only in its functions (listed in sql/CHECKSUMS) has its functions and their\n"
	"comments re-created; any other difference is refused (sql/SCHEMA.md).\n"
	"\n"
	"Least privilege (docs/security.md has the table of role x object x\n"
	"privilege): with --owner, ROLE becomes the owner of the schema and\n"
	"everything in it. A worker role works only through skiplock's functions\n"
	"(claim, heartbeat, complete, fail, enqueue, leases, idempotency keys, the\n"
	"cron tick) and may read jobs, breakers, schedules and leases; it writes no\n"
	"table itself, so it cannot forge a fencing token, a lease or the migration\n"
	"history. An operator role may also retry, cancel and prune jobs, edit\n"
	"schedules and force breakers. A reader role only reads. The roles must\n"
	"exist already; they are remembered, and every later init that upgrades the\n"
	"schema grants them the new functions. Needs a superuser, or a member of the\n"
	"owner role.\n"
	"\n"
	"Options:\n"
	"  --owner ROLE           make ROLE the owner of the schema and its objects\n"
	"  --grant-worker ROLE    grant ROLE what workers, enqueue, leases and cron need\n"
	"  --grant-operator ROLE  grant ROLE a worker's rights and the operator's actions\n"
	"  --grant-reader ROLE    grant ROLE read access (status, jobs list, dashboard\n"
	"                         with --read-only)\n"
	"  --repair               re-create the functions of steps installed from an\n"
	"                         earlier text, then install what is missing\n"
	"  --distributed          then spread skiplock's tables over the Citus cluster\n"
	"                         this database coordinates (see below)\n"
	"\n"
	"With --distributed (docs/scaling.md), on a Citus coordinator, init then\n"
	"calls skiplock.distribute() once: skiplock.jobs is distributed by queue\n"
	"(key (queue, id); unique keys become unique per queue; its notification\n"
	"triggers are dropped), skiplock.finished_jobs is colocated with it, and\n"
	"retention and the breakers become reference tables. Claims then run one\n"
	"statement per queue, so priority order holds within a queue, not across\n"
	"queues. It cannot be undone by skiplock. A database without the citus\n"
	"extension is refused (SQLSTATE 0A000) and nothing changes; a second run\n"
	"says the tables are distributed already.\n"
	"\n"
	"Then init does the storage's maintenance (skiplock/retention.h) under the\n"
	"lease skiplock.maintenance: partitions of skiplock.finished_jobs ahead of\n"
	"need and, after an upgrade from before step 0013, the move of finished jobs\n"
	"out of skiplock.jobs in bounded batches, with a progress line on stderr.\n"
	"Workers may run meanwhile; a killed init is resumed by the next one, or by\n"
	"the workers, which do the same now and then.\n"
	"\n";

static const char exit_help[] =
	"\nExit status: 0 installed or already current, 1 the database refused a step or\n"
	"an installed step differs from the built-in one (see --repair),\n"
	"2 bad usage or a role that does not exist, 3 database unreachable within\n"
	"--retry-for.\n";

enum { O_OWNER = OPT_COMMON_LAST + 1, O_WORKER, O_OPERATOR, O_READER, O_REPAIR, O_DISTRIBUTED };

typedef struct init_args {
	skl_roles roles;
	bool repair;
	bool distributed;
} init_args;

static int own_option(int code, const char *arg, void *ctx)
{
	init_args *ia = ctx;
	skl_roles *a = &ia->roles;
	if (code == O_OWNER)
		a->owner = arg;
	else if (code == O_WORKER)
		a->worker = arg;
	else if (code == O_OPERATOR)
		a->operator_role = arg;
	else if (code == O_READER)
		a->reader = arg;
	else if (code == O_REPAIR)
		ia->repair = true;
	else if (code == O_DISTRIBUTED)
		ia->distributed = true;
	else
		return CLI_USAGE;
	return CLI_OK;
}

static bool any_role(const skl_roles *a)
{
	return a->owner || a->worker || a->operator_role || a->reader;
}

static int grant(const cli_common *cc, skl_client *c, const skl_roles *a)
{
	skl_error err;
	if (skl_schema_grant_roles(c, a, &err) != SKL_OK)
		return cli_fail(cc, &err);
	const char *const names[4][2] = {{"skiplock schema owner", a->owner},
	                                 {"skiplock worker role", a->worker},
	                                 {"skiplock operator role", a->operator_role},
	                                 {"skiplock reader role", a->reader}};
	for (int i = 0; i < 4; i++)
		if (names[i][1])
			printf("%s: %s\n", names[i][0], names[i][1]);
	return CLI_OK;
}

static int repair(const cli_common *cc, skl_client *c)
{
	skl_error err;
	int n = 0;
	if (skl_schema_repair(c, &n, &err) != SKL_OK)
		return cli_fail(cc, &err);
	if (n > 0)
		printf("skiplock schema repaired: %d step%s installed from an earlier text\n", n,
		       n == 1 ? "" : "s");
	return CLI_OK;
}

static int install(const cli_common *cc, skl_client *c, int *out)
{
	skl_error err;
	int applied = 0;
	*out = 0;
	if (skl_schema_install(c, &applied, &err) != SKL_OK)
		return cli_fail(cc, &err);
	if (applied > 0) /* a version, not a count of steps: sql/SCHEMA.md */
		printf("skiplock schema installed: version %d\n", skl_schema_latest());
	else
		printf("skiplock schema is current: version %d\n", skl_schema_latest());
	*out = applied;
	return CLI_OK;
}

static int distribute(const cli_common *cc, skl_client *c)
{
	skl_error err;
	bool changed = false;
	if (skl_schema_distribute(c, &changed, &err) != SKL_OK)
		return cli_fail(cc, &err);
	printf(changed ? "skiplock tables distributed by queue\n"
	               : "skiplock tables are distributed already\n");
	return CLI_OK;
}

static bool progress_line(const skl_maintenance *m, void *ctx)
{
	(void)ctx;
	if (m->moved > 0 || m->remaining > 0)
		fprintf(stderr, "skiplock: info: moving finished jobs to skiplock.finished_jobs: %" PRId64
		        " moved, %" PRId64 " to go\n", m->moved, m->remaining);
	return true;
}

/* Rounds of maintenance until none is left; another holder of the lease
 * (a worker) finishes it otherwise. */
static int maintain(const cli_common *cc, skl_client *c)
{
	char owner[256];
	cli_default_owner(owner, sizeof(owner), "skiplock init ");
	skl_maintenance m;
	skl_error err;
	bool ran;
	if (skl_maintain(c, owner, 1000000, progress_line, NULL, &m, &ran, &err) != SKL_OK)
		return cli_fail(cc, &err);
	if (!ran)
		fprintf(stderr, "skiplock: info: another holder of the lease skiplock.maintenance "
		                "is maintaining the storage\n");
	else if (m.moved > 0)
		fprintf(stderr, "skiplock: info: moved %" PRId64 " finished job(s) out of skiplock.jobs\n",
		        m.moved);
	return CLI_OK;
}

int cmd_init(int argc, char **argv)
{
	static const struct option opts[] = {CLI_COMMON_LONGOPTS,
	                                     {"owner", required_argument, NULL, O_OWNER},
	                                     {"grant-worker", required_argument, NULL, O_WORKER},
	                                     {"grant-operator", required_argument, NULL, O_OPERATOR},
	                                     {"grant-reader", required_argument, NULL, O_READER},
	                                     {"repair", no_argument, NULL, O_REPAIR},
	                                     {"distributed", no_argument, NULL, O_DISTRIBUTED},
	                                     {0}};
	cli_common cc;
	cli_common_init(&cc, "init");
	init_args a = {0};
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, usage, exit_help, 0, &done);
	if (done)
		return rc;
	skl_client *c;
	rc = cli_open(&cc, &c);
	if (rc != CLI_OK)
		return rc;
	skl_error err;
	int applied = 0;
	if (any_role(&a.roles) && skl_schema_roles_exist(c, &a.roles, &err) != SKL_OK)
		rc = cli_fail(&cc, &err);
	else if (a.repair)
		rc = repair(&cc, c);
	if (rc == CLI_OK)
		rc = install(&cc, c, &applied);
	/* an upgrade grants the roles granted before their new functions */
	if (rc == CLI_OK && (any_role(&a.roles) || applied > 0))
		rc = grant(&cc, c, &a.roles);
	if (rc == CLI_OK && a.distributed)
		rc = distribute(&cc, c);
	if (rc == CLI_OK)
		rc = maintain(&cc, c);
	skl_client_close(c);
	return rc;
}
