/*
 * main.c — `skiplock`: dispatch to a subcommand.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const cli_sub commands[] = {
	{"init", cmd_init, .summary = "install or upgrade skiplock's schema in the database"},
	{"enqueue", cmd_enqueue, .summary = "add a job (or a batch of jobs) to the queue"},
	{"worker", cmd_worker, .summary = "run jobs with command and webhook handlers"},
	{"cron", cmd_cron, .summary = "periodic jobs: cron schedules in any time zone"},
	{"jobs", cmd_jobs, .summary = "list, show, retry, cancel, discard and prune jobs; the action log"},
	{"queue", cmd_queue, .summary = "pause and resume a queue or a kind for the whole fleet"},
	{"workers", cmd_workers, .summary = "workers that found nothing to claim; idle while jobs wait"},
	{"idem", cmd_idem, .summary = "idempotency keys: prune the expired"},
	{"status", cmd_status, .summary = "counts and ages per queue and kind"},
	{"breakers", cmd_breakers, .summary = "fleet-wide circuit breakers: list, open, close"},
	{"limits", cmd_limits, .summary = "fleet-wide limits on job starts: show, set, remove"},
	{"retention", cmd_retention, .summary = "how long finished jobs are kept; maintenance"},
	{"lease", cmd_lease, .summary = "run a command only while holding a lease; list leases"},
	{"migrate", cmd_migrate, .summary = "apply SQL migrations safely behind poolers; status, verify"},
	{"doctor", cmd_doctor, .summary = "diagnose locks, poolers and indexes before they page you"},
	{"explain", cmd_explain, .summary = "compare a query's plan and buffers with a candidate index"},
	{"dashboard", cmd_dashboard, .summary = "a web page of queues, jobs, schedules and leases"},
	{"demo", cmd_demo, .summary = "run the embedded demo on a private Postgres"},
};

static void usage(FILE *out)
{
	fprintf(out,
	        "Usage: skiplock COMMAND [OPTIONS] [ARGS]\n"
	        "\n"
	        "Coordinate background work through one PostgreSQL database, correctly\n"
	        "behind transaction-mode poolers (PgBouncer, Neon, Supabase) and on\n"
	        "serverless Postgres.\n"
	        "\n"
	        "Commands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(out,
	        "\n"
	        "Run \"skiplock COMMAND --help\" for a command's options.\n"
	        "Connection: --url URL, else $DATABASE_URL, else libpq's PG* variables.\n"
	        "\n"
	        "Exit status: 0 success, 1 the command ran and found a problem, 2 bad usage\n"
	        "or bad input, 3 database unreachable after retries.\n");
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc < 2) {
		usage(stderr);
		return CLI_USAGE;
	}
	const char *name = argv[1];
	if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
		printf("skiplock %s (schema version %d)\n", skl_version(), skl_schema_latest());
		return CLI_OK;
	}
	static const cli_subs table = {NULL, commands, sizeof(commands) / sizeof(commands[0]), usage};
	return cli_dispatch(&table, argc, argv);
}
