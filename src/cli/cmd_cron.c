/*
 * cmd_cron.c — `skiplock cron add|apply|list|remove|pause|resume|run`: periodic jobs.
 *
 * The schedules live in the database (skiplock/cron.h); every worker
 * evaluates them, so nothing here runs a scheduler.  Every operand and
 * option is checked before the database is contacted, and the library
 * checks the expression and the zone before it writes, so bad input exits
 * 2 with one line and writes nothing.
 *
 * `cron tick` and the `--at TIME` options are for tests and simulations
 * and are left out of the help: they evaluate schedules at an explicit
 * instant instead of the database's clock.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cron/cron_file.h"
#include "print/output.h"

static const char cron_usage[] =
	"Usage: skiplock cron add NAME EXPR KIND [JSON] [--tz ZONE] [--queue Q]\n"
	"                         [--catch-up none|latest|all] [--priority N]\n"
	"                         [--max-attempts N]\n"
	"       skiplock cron apply FILE [--dry-run]\n"
	"       skiplock cron list [--json]\n"
	"       skiplock cron remove NAME\n"
	"       skiplock cron pause NAME\n"
	"       skiplock cron resume NAME\n"
	"       skiplock cron run NAME\n"
	"\n"
	"Periodic jobs. A schedule turns each fire time of a cron expression, in an\n"
	"IANA time zone, into one job. Every worker evaluates every schedule (unless\n"
	"started with --no-cron); no leader is needed: the job of a fire time is\n"
	"enqueued in the same statement that moves the schedule past it, with a\n"
	"compare-and-set, and carries the unique key cron:NAME:<fire time, UTC>.\n"
	"Fire times are judged by the database clock. \"skiplock cron SUBCOMMAND\n"
	"--help\" shows the options of each.\n"
	"\n"
	"  add     create a schedule (--replace: or make an existing one equal)\n"
	"  apply   make the schedules equal to a file: add, change, remove\n"
	"  list    schedules with their last and next fire times\n"
	"  remove  delete a schedule (jobs it enqueued stay)\n"
	"  pause   stop a schedule from firing\n"
	"  resume  let a paused schedule fire again, skipping what passed meanwhile\n"
	"  run     enqueue one job of a schedule now, its fire times unchanged\n"
	"\n"
	"Exit status: 0 success, 1 no such schedule, 2 bad usage or bad input\n"
	"(nothing written), 3 database unreachable within --retry-for.\n";

static const char add_usage[] =
	"Usage: skiplock cron add NAME EXPR KIND [JSON] [OPTIONS]\n"
	"\n"
	"Create schedule NAME: at every fire time of EXPR, enqueue a job of KIND with\n"
	"the JSON payload (default {}; - reads it from standard input), and print the\n"
	"first fire time. NAME must be new, unless --replace: then an existing\n"
	"schedule NAME is changed to match (its paused state stays).\n"
	"\n"
	"EXPR has five fields, minute hour day-of-month month day-of-week:\n"
	"  *  any;  5  one value;  1-5  a range;  */15  1-30/10  5/20  steps;\n"
	"  1,15,30  lists;  jan..dec and sun..sat (day-of-week 7 is Sunday too).\n"
	"When day-of-month and day-of-week are both restricted (neither begins\n"
	"with *), a day matches either, as in Vixie cron. Or one of @yearly,\n"
	"@monthly, @weekly, @daily, @hourly, or \"@every DUR\" (whole seconds,\n"
	"counted from 1970-01-01T00:00:00Z, whatever the zone).\n"
	"\n"
	"Daylight saving time: a local time skipped by a spring-forward fires once,\n"
	"at the first instant after the gap (02:30 on the night clocks jump from\n"
	"02:00 to 03:00 fires at 03:00); a local time that occurs twice fires once,\n"
	"at its first occurrence.\n"
	"\n"
	"Add options:\n"
	"  --tz ZONE              IANA time zone of EXPR (default UTC), from the\n"
	"                         system tz database\n"
	"  --queue Q              queue of the jobs (default \"default\")\n"
	"  --catch-up POLICY      when workers find the schedule behind (its oldest\n"
	"                         due fire time over a minute old: they were down):\n"
	"                         none skips the missed fire times, latest (default)\n"
	"                         enqueues only the newest, all enqueues each of them,\n"
	"                         the newest 100 at most\n"
	"  --priority N           priority of the jobs (default 0)\n"
	"  --max-attempts N       attempts per job (default 25)\n"
	"  --replace              change schedule NAME if it exists; unchanged, nothing\n"
	"                         is written. A new expression or zone skips the fire\n"
	"                         times that passed before now\n"
	"\n"
	"Examples:\n"
	"  skiplock cron add nightly-report '30 2 * * *' report '{\"full\": true}' \\\n"
	"      --tz Europe/Berlin\n"
	"  skiplock cron add heartbeat '@every 30s' ping --catch-up none\n"
	"\n";

static const char apply_usage[] =
	"Usage: skiplock cron apply FILE [--dry-run]\n"
	"\n"
	"Make the schedules equal to FILE (- reads standard input), in one\n"
	"transaction. FILE is a regular file (a FIFO, as <(...) gives, is refused:\n"
	"pipe into - instead) of at most 1 MiB; standard input is read up to 1 MiB.\n"
	"It adds those missing, change those that differ, remove those not\n"
	"in it. Running it again changes nothing, so every deploy can run it. Prints\n"
	"one line per schedule added, changed (naming the fields) or removed, then\n"
	"the counts. A schedule whose expression or zone changes, or that is\n"
	"resumed, skips the fire times that passed before now; other changes keep\n"
	"them. A run that changed anything is written to the action log as\n"
	"USER@HOST, role cli (skiplock.schedules_apply does the work). FILE is JSON:\n"
	"\n"
	"  {\"schedules\": [\n"
	"    {\"name\": \"nightly-report\", \"expression\": \"30 2 * * *\",\n"
	"     \"kind\": \"report\", \"zone\": \"Europe/Berlin\", \"queue\": \"default\",\n"
	"     \"payload\": {\"full\": true}, \"priority\": 0, \"max_attempts\": 25,\n"
	"     \"catch_up\": \"latest\", \"paused\": false}]}\n"
	"\n"
	"name, expression and kind are required; the others default as in cron add\n"
	"(paused: false). An unknown field, a bad value or a name given twice exits\n"
	"2 and writes nothing.\n"
	"\n"
	"Apply options:\n"
	"  --dry-run              print what would change; write nothing\n"
	"\n";

static const char list_usage[] =
	"Usage: skiplock cron list [--json]\n"
	"\n"
	"List schedules by name. Columns: NAME; EXPRESSION; ZONE; KIND; QUEUE;\n"
	"CATCH-UP; STATE, enabled or paused; LAST FIRE, the newest fire time handled\n"
	"(enqueued or skipped); NEXT FIRE, the next fire time to handle, in UTC, or\n"
	"\"-\" while paused. A next fire time in the past means no worker has\n"
	"evaluated the schedule since. With --json: a JSON array of objects, times\n"
	"in ISO 8601 UTC, next_fire_local in the schedule's zone.\n"
	"\n"
	"List options:\n"
	"  --json                 print JSON instead of a table\n"
	"\n";

static const char remove_usage[] =
	"Usage: skiplock cron remove NAME\n"
	"\n"
	"Delete schedule NAME. Jobs it already enqueued are not touched. Written\n"
	"to the action log (skiplock jobs actions) with its definition, as\n"
	"USER@HOST, role cli.\n"
	"\n";

static const char pause_usage[] =
	"Usage: skiplock cron pause NAME\n"
	"\n"
	"Stop schedule NAME from firing until it is resumed. Pausing a paused\n"
	"schedule changes nothing. Written to the action log (skiplock jobs\n"
	"actions) as USER@HOST, role cli.\n"
	"\n";

static const char resume_usage[] =
	"Usage: skiplock cron resume NAME\n"
	"\n"
	"Let paused schedule NAME fire again. Fire times that passed while it was\n"
	"paused are skipped, whatever its catch-up policy: the next job is for the\n"
	"next fire time. Resuming an enabled schedule changes nothing. Its last\n"
	"fire time moves to the newest that passed and its next fire time to the\n"
	"first after now, at once, as a resume from SQL or the dashboard does\n"
	"(skiplock.schedule_set_paused). Written to the action log as USER@HOST,\n"
	"role cli.\n"
	"\n";

static const char run_usage[] =
	"Usage: skiplock cron run NAME\n"
	"\n"
	"Enqueue one job of schedule NAME now, as its next fire time would (its\n"
	"kind, payload, queue, priority and attempts, without a unique key), and\n"
	"print the job's ID. The schedule's last and next fire times do not move;\n"
	"a paused schedule stays paused. Written to the action log (skiplock jobs\n"
	"actions) as USER@HOST, role cli. An operator's action: the worker role may\n"
	"not.\n"
	"\n";

static const char tick_usage[] =
	"Usage: skiplock cron tick [--at TIME] [--catch-up-bound N] [--grace DUR]\n"
	"\n"
	"Evaluate every due schedule once, as a worker does, at TIME (default: the\n"
	"database's now()), and print what happened. For tests and simulations.\n"
	"\n"
	"Tick options:\n"
	"  --at TIME              evaluate at TIME instead of the database's now()\n"
	"  --catch-up-bound N     catch-up all enqueues at most the newest N fire\n"
	"                         times of one schedule per tick (default 100)\n"
	"  --grace DUR            a schedule is behind when its oldest due fire time\n"
	"                         is older than DUR (default 1m)\n"
	"\n";

static const char common_exit[] =
	"\nExit status: 0 success, 1 no such schedule or the database refused, 2 bad\n"
	"usage or bad input (nothing written), 3 database unreachable within\n"
	"--retry-for.\n";

enum { O_TZ = OPT_COMMON_LAST + 1, O_QUEUE, O_CATCH, O_PRIO, O_MAX, O_JSON, O_AT, O_BOUND,
       O_GRACE, O_REPLACE, O_DRY_RUN };

#define AT_OPTION {"at", required_argument, NULL, O_AT}
static const struct option add_opts[] = {
	CLI_COMMON_LONGOPTS,
	{"tz", required_argument, NULL, O_TZ},
	{"queue", required_argument, NULL, O_QUEUE},
	{"catch-up", required_argument, NULL, O_CATCH},
	{"priority", required_argument, NULL, O_PRIO},
	{"max-attempts", required_argument, NULL, O_MAX},
	{"replace", no_argument, NULL, O_REPLACE},
	AT_OPTION,
	{0}};
static const struct option apply_opts[] = {
	CLI_COMMON_LONGOPTS, {"dry-run", no_argument, NULL, O_DRY_RUN}, {0}};
static const struct option list_opts[] = {
	CLI_COMMON_LONGOPTS, {"json", no_argument, NULL, O_JSON}, {0}};
static const struct option name_opts[] = {CLI_COMMON_LONGOPTS, {0}};
static const struct option resume_opts[] = {CLI_COMMON_LONGOPTS, AT_OPTION, {0}};
static const struct option tick_opts[] = {
	CLI_COMMON_LONGOPTS,
	AT_OPTION,
	{"catch-up-bound", required_argument, NULL, O_BOUND},
	{"grace", required_argument, NULL, O_GRACE},
	{0}};

typedef struct cron_args {
	cli_common *cc;
	skl_schedule_spec spec;
	skl_cron_tick_opts tick;
	bool json;
	bool replace;
	bool dry_run;
	const char *at;
} cron_args;

static int own_option(int code, const char *arg, void *ctx)
{
	cron_args *a = ctx;
	long long v = 0;
	skl_error err;
	switch (code) {
	case O_TZ: a->spec.zone = arg; return CLI_OK;
	case O_QUEUE: a->spec.queue = arg; return CLI_OK;
	case O_CATCH:
		if (skl_catch_up_parse(arg, &a->spec.catch_up, &err) == SKL_OK)
			return CLI_OK;
		cli_error(a->cc, "--catch-up: %s", err.message);
		return CLI_USAGE;
	case O_PRIO:
		if (!cli_int(a->cc, "--priority", arg, -1000000, 1000000, &v))
			return CLI_USAGE;
		a->spec.priority = (int)v;
		return CLI_OK;
	case O_MAX:
		if (!cli_int(a->cc, "--max-attempts", arg, 1, 1000000, &v))
			return CLI_USAGE;
		a->spec.max_attempts = (int)v;
		return CLI_OK;
	case O_JSON: a->json = true; return CLI_OK;
	case O_REPLACE: a->replace = true; return CLI_OK;
	case O_DRY_RUN: a->dry_run = true; return CLI_OK;
	case O_AT: a->at = a->tick.at = arg; return CLI_OK;
	case O_BOUND:
		if (!cli_int(a->cc, "--catch-up-bound", arg, 1, 100000, &v))
			return CLI_USAGE;
		a->tick.catch_up_bound = (int)v;
		return CLI_OK;
	case O_GRACE:
		return cli_duration(a->cc, "--grace", arg, &a->tick.grace_ms) ? CLI_OK : CLI_USAGE;
	default: return CLI_USAGE;
	}
}

/* ---- add ---- */

/* The payload operand: "-" reads standard input (at most 1 MiB + 1 byte,
 * so an oversized payload is refused by the library without reading it
 * all).  Returns NULL after printing when it cannot be read. */
static char *read_payload(const cron_args *a)
{
	size_t cap = (size_t)SKL_PAYLOAD_MAX_DEFAULT + 2, len = 0, r;
	char *buf = malloc(cap);
	if (buf == NULL) {
		cli_error(a->cc, "out of memory");
		return NULL;
	}
	while (len < cap - 1 && (r = fread(buf + len, 1, cap - 1 - len, stdin)) > 0)
		len += r;
	buf[len] = '\0';
	return buf;
}

/* The action log's actor of this command: user@host, role "cli". */
typedef struct cron_actor {
	char name[200];
	skl_actor who;
} cron_actor;

static const skl_actor *actor_of(cron_actor *a)
{
	cli_default_actor(a->name, sizeof(a->name));
	a->who = (skl_actor){a->name, CLI_ACTOR_ROLE};
	return &a->who;
}

static void print_steps(const skl_cron_step *st, size_t n, bool dry_run)
{
	static const char *const verb[] = {"", "added", "changed", "removed"};
	size_t count[4] = {0};
	for (size_t i = 0; i < n; i++) {
		count[st[i].change]++;
		if (st[i].change != SKL_CRON_KEEP)
			printf("%s%s \"%s\"%s%s\n", dry_run ? "would be " : "", verb[st[i].change],
			       st[i].name, st[i].fields[0] ? ": " : "", st[i].fields);
	}
	printf("%zu added, %zu changed, %zu removed, %zu unchanged%s\n", count[SKL_CRON_ADD],
	       count[SKL_CRON_CHANGE], count[SKL_CRON_REMOVE], count[SKL_CRON_KEEP],
	       dry_run ? " (dry run: nothing written)" : "");
}

static int apply_wants(cron_args *a, skl_client *c, const skl_schedule_want *w, size_t n,
                       bool prune)
{
	skl_cron_step *st = NULL;
	size_t nst = 0;
	skl_error err;
	cron_actor who;
	skl_rc rc = skl_cron_apply_as(c, w, n, prune, a->dry_run, actor_of(&who), &st, &nst,
	                              &err);
	if (rc == SKL_OK)
		print_steps(st, nst, a->dry_run);
	skl_free(st);
	return rc == SKL_OK ? CLI_OK : cli_fail(a->cc, &err);
}

static int cron_replace(cron_args *a, skl_client *c)
{
	skl_schedule_want w = {.spec = a->spec, .paused = -1};
	return apply_wants(a, c, &w, 1, false);
}

static int cron_apply(cron_args *a, skl_client *c, char **argv, int nargs)
{
	(void)nargs;
	cron_file f;
	int rc = cron_file_load(a->cc, argv[0], &f);
	if (rc == CLI_OK)
		rc = apply_wants(a, c, f.want, f.n, true);
	cron_file_free(&f);
	return rc;
}

static int cron_add(cron_args *a, skl_client *c, char **argv, int nargs)
{
	a->spec.name = argv[0];
	a->spec.expression = argv[1];
	a->spec.kind = argv[2];
	a->spec.payload = nargs > 3 ? argv[3] : "{}";
	char *from_stdin = NULL;
	if (strcmp(a->spec.payload, "-") == 0 && (a->spec.payload = from_stdin = read_payload(a)) == NULL)
		return CLI_PROBLEM;
	if (a->replace) {
		int rc = cron_replace(a, c);
		free(from_stdin);
		return rc;
	}
	int64_t next = 0;
	skl_error err;
	cron_actor who;
	skl_rc rc = skl_cron_add_as(c, &a->spec, a->at, actor_of(&who), &next, &err);
	free(from_stdin);
	if (rc == SKL_CONFLICT) { /* a name that is taken is bad input */
		cli_error(a->cc, "%s", err.message);
		return CLI_USAGE;
	}
	if (rc != SKL_OK)
		return cli_fail(a->cc, &err);
	const char *zone = a->spec.zone ? a->spec.zone : "UTC";
	char utc[SKL_CRON_TIME_LEN], local[SKL_CRON_LOCAL_LEN];
	skl_cron_format_utc(next, utc);
	skl_cron_format_local(next, zone, local, &err);
	if (next)
		printf("schedule \"%s\" added; first fire time %s (%s %s)\n", a->spec.name, utc, local,
		       zone);
	else
		printf("schedule \"%s\" added; it does not fire within 100 years\n", a->spec.name);
	return CLI_OK;
}

/* ---- list ---- */

static void add_row(cli_table *t, const skl_schedule_info *s)
{
	char utc[SKL_CRON_TIME_LEN], last[32], next[32];
	cli_table_add(t, "%s", s->name);
	cli_table_add(t, "%s", s->expression);
	cli_table_add(t, "%s", s->zone);
	cli_table_add(t, "%s", s->kind);
	cli_table_add(t, "%s", s->queue);
	cli_table_add(t, "%s", skl_catch_up_name(s->catch_up));
	cli_table_add(t, "%s", s->enabled ? "enabled" : "paused");
	skl_cron_format_utc(s->last_fire, utc);
	cli_table_add(t, "%s", cli_fmt_time(s->has_last_fire ? utc : NULL, last, sizeof(last)));
	skl_cron_format_utc(s->next_fire, utc);
	cli_table_add(t, "%s", cli_fmt_time(s->has_next_fire ? utc : NULL, next, sizeof(next)));
}

static bool print_table(const skl_schedule_info *s, size_t n)
{
	cli_table t;
	cli_table_init(&t, 9, "lllllllll");
	static const char *const head[] = {"NAME", "EXPRESSION", "ZONE", "KIND", "QUEUE",
	                                   "CATCH-UP", "STATE", "LAST FIRE (UTC)", "NEXT FIRE (UTC)"};
	for (size_t i = 0; i < 9; i++)
		cli_table_add(&t, "%s", head[i]);
	for (size_t i = 0; i < n; i++)
		add_row(&t, &s[i]);
	bool ok = cli_table_print(&t);
	cli_table_free(&t);
	return ok;
}

static json_t *json_time(bool has, int64_t t)
{
	char utc[SKL_CRON_TIME_LEN];
	skl_cron_format_utc(t, utc);
	return has ? json_string(utc) : json_null();
}

static json_t *schedule_json(const skl_schedule_info *s)
{
	char local[SKL_CRON_LOCAL_LEN];
	skl_error err;
	bool has_local = s->has_next_fire &&
	                 skl_cron_format_local(s->next_fire, s->zone, local, &err) == SKL_OK;
	return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:i, s:i, s:s, s:b, s:o, s:o, s:o, s:o}",
	                 "name", cli_json_str(s->name), "expression", cli_json_str(s->expression),
	                 "zone", cli_json_str(s->zone), "kind", cli_json_str(s->kind),
	                 "payload", cli_json_raw(s->payload), "queue", cli_json_str(s->queue),
	                 "priority", s->priority, "max_attempts", s->max_attempts,
	                 "catch_up", skl_catch_up_name(s->catch_up), "enabled", s->enabled,
	                 "created_at", json_time(true, s->created_at),
	                 "last_fire", json_time(s->has_last_fire, s->last_fire),
	                 "next_fire", json_time(s->has_next_fire, s->next_fire),
	                 "next_fire_local", has_local ? json_string(local) : json_null());
}

static int cron_list(cron_args *a, skl_client *c, char **argv, int nargs)
{
	(void)argv, (void)nargs;
	skl_schedule_info *s = NULL;
	size_t n = 0;
	skl_error err;
	if (skl_cron_list(c, &s, &n, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	bool ok;
	if (a->json) {
		json_t *arr = json_array();
		for (size_t i = 0; arr && i < n; i++)
			json_array_append_new(arr, schedule_json(&s[i]));
		ok = cli_json_print(arr);
	} else {
		ok = print_table(s, n);
	}
	skl_schedule_info_free(s, n);
	if (!ok)
		cli_error(a->cc, "cannot write the output");
	return ok ? CLI_OK : CLI_PROBLEM;
}

/* ---- remove, pause, resume, tick ---- */

static int by_name(cron_args *a, skl_rc rc, const skl_error *err, const char *name,
                   const char *done)
{
	if (rc != SKL_OK)
		return cli_fail(a->cc, err);
	printf("schedule \"%s\" %s\n", name, done);
	return CLI_OK;
}

static int cron_remove(cron_args *a, skl_client *c, char **argv, int nargs)
{
	(void)nargs;
	skl_error err;
	cron_actor who;
	return by_name(a, skl_cron_remove_as(c, argv[0], actor_of(&who), &err), &err, argv[0],
	               "removed");
}

/* Pause, and resume at now(), logged as this command's actor
 * (skiplock/control.h); resume --at TIME, for tests, the same function at
 * that instant, logged with the role "library" (skl_cron_resume). */
static int set_paused(cron_args *a, skl_client *c, const char *name, bool paused)
{
	skl_error err;
	if (!paused && a->at)
		return by_name(a, skl_cron_resume(c, name, a->at, &err), &err, name, "resumed");
	cron_actor who;
	return by_name(a, skl_schedule_set_paused(c, name, paused, actor_of(&who), NULL, &err),
	               &err, name, paused ? "paused" : "resumed");
}

static int cron_pause(cron_args *a, skl_client *c, char **argv, int nargs)
{
	(void)nargs;
	return set_paused(a, c, argv[0], true);
}

static int cron_resume(cron_args *a, skl_client *c, char **argv, int nargs)
{
	(void)nargs;
	return set_paused(a, c, argv[0], false);
}

static int cron_run(cron_args *a, skl_client *c, char **argv, int nargs)
{
	(void)nargs;
	cron_actor who;
	int64_t id = 0;
	skl_error err;
	if (skl_schedule_run_now(c, argv[0], actor_of(&who), &id, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	printf("schedule \"%s\" enqueued job %" PRId64 "\n", argv[0], id);
	return CLI_OK;
}

static int cron_tick(cron_args *a, skl_client *c, char **argv, int nargs)
{
	(void)argv, (void)nargs;
	skl_cron_tick_result r;
	skl_error err;
	if (skl_cron_tick(c, &a->tick, &r, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	printf("due=%d fired=%d lost=%d behind=%d failed=%d enqueued=%lld\n", r.due, r.fired,
	       r.lost, r.behind, r.failed, (long long)r.enqueued);
	if (r.failed)
		cli_log(SKL_LOG_WARNING, "cron tick: %s", r.failure);
	return CLI_OK;
}

/* ---- dispatch ---- */

typedef struct cron_sub {
	const char *command;      /* prefixes messages */
	const char *usage;
	const struct option *opts;
	int min_args, max_args;
	const char *operands;     /* named in "missing" messages */
	int (*run)(cron_args *a, skl_client *c, char **argv, int nargs);
} cron_sub;

static int run_sub(const cli_sub *sub, int argc, char **argv);
#define CRON_SUB(name, command, usage, opts, min, max, operands, fn)                 \
	{name, NULL, run_sub, &(const cron_sub){command, usage, opts, min, max, operands, fn}, NULL}
static const cli_sub subs[] = {
	CRON_SUB("add", "cron add", add_usage, add_opts, 3, 4, "NAME EXPR KIND", cron_add),
	CRON_SUB("apply", "cron apply", apply_usage, apply_opts, 1, 1, "FILE", cron_apply),
	CRON_SUB("list", "cron list", list_usage, list_opts, 0, 0, "", cron_list),
	CRON_SUB("remove", "cron remove", remove_usage, name_opts, 1, 1, "NAME", cron_remove),
	CRON_SUB("pause", "cron pause", pause_usage, name_opts, 1, 1, "NAME", cron_pause),
	CRON_SUB("resume", "cron resume", resume_usage, resume_opts, 1, 1, "NAME", cron_resume),
	CRON_SUB("run", "cron run", run_usage, name_opts, 1, 1, "NAME", cron_run),
	CRON_SUB("tick", "cron tick", tick_usage, tick_opts, 0, 0, "", cron_tick),
};

static int run_sub(const cli_sub *sub, int argc, char **argv)
{
	const cron_sub *s = sub->spec;
	cli_common cc;
	cli_common_init(&cc, s->command);
	cron_args a = {.cc = &cc};
	bool done;
	int rc = cli_start(&cc, argc, argv, s->opts, own_option, &a, s->usage, common_exit,
	                   s->max_args, &done);
	if (done)
		return rc;
	int nargs = argc - optind;
	if (nargs < s->min_args) {
		cli_error(&cc, "expected %s (see skiplock %s --help)", s->operands, s->command);
		return CLI_USAGE;
	}
	skl_client *c;
	if ((rc = cli_open(&cc, &c)) != CLI_OK)
		return rc;
	rc = s->run(&a, c, argv + optind, nargs);
	skl_client_close(c);
	return rc;
}

static void help(FILE *out)
{
	fputs(cron_usage, out);
}

int cmd_cron(int argc, char **argv)
{
	static const cli_subs table = {"cron", subs, sizeof(subs) / sizeof(subs[0]), help};
	return cli_dispatch(&table, argc, argv);
}
