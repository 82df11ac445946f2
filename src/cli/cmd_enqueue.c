/*
 * cmd_enqueue.c — `skiplock enqueue KIND [JSON]`, with its parents
 * (`--depends-on`), and `--batch FILE|-`.
 *
 * Input is validated completely before anything is sent (JSON, sizes,
 * names, parents), and a batch is one all-or-nothing call: a bad line
 * writes nothing and is named in the error.  A parent that does not exist
 * is the database's answer (exit 1, nothing written).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "enqueue/batch.h"
#include "enqueue/parents.h"

static const char usage[] =
	"Usage: skiplock enqueue [OPTIONS] KIND [JSON]\n"
	"       skiplock enqueue [OPTIONS] --batch FILE|-\n"
	"\n"
	"Add a job of KIND with the JSON payload (default {}; - reads it from standard\n"
	"input) and print its id. With\n"
	"--unique-key, an unfinished job that already holds the key is not duplicated:\n"
	"its id is printed instead. The call is retry-safe: if the answer to COMMIT is\n"
	"lost and skiplock retries, no second job appears. With --depends-on or\n"
	"--depends-on-key the job waits until its parents have finished, and is\n"
	"retried after a lost COMMIT answer only with --unique-key.\n"
	"\n"
	"With --batch, read one job per line (NDJSON) from FILE or standard input:\n"
	"  {\"kind\": \"email\", \"payload\": {...}, \"queue\": \"q\", \"priority\": 1,\n"
	"   \"run_at\": \"2026-12-01T08:00:00Z\", \"delay\": \"5m\", \"unique_key\": \"k\",\n"
	"   \"max_attempts\": 5, \"timeout\": \"30s\"}\n"
	"Only \"kind\" is required; the options below give the defaults. The batch is\n"
	"all or nothing; the ids are printed one per line in input order.\n"
	"\n"
	"Job options:\n"
	"  --queue Q              queue name (default \"default\")\n"
	"  --priority N           higher runs first (default 0)\n"
	"  --run-at TIME          run at this time (any PostgreSQL timestamptz text)\n"
	"  --delay DUR            run after this delay, by the database clock\n"
	"  --unique-key K         at most one unfinished job per key\n"
	"  --max-attempts N       attempts before the job is discarded (default 25)\n"
	"  --timeout DUR          handler timeout for this job (default: the worker's)\n"
	"  --backoff STRATEGY     retry delay strategy for this job: full, equal,\n"
	"                         decorrelated, exponential or fixed (default: the\n"
	"                         worker's; see skiplock worker --help)\n"
	"  --backoff-base DUR     first retry delay bound (default: the worker's)\n"
	"  --backoff-cap DUR      largest retry delay bound (default: the worker's)\n"
	"  --depends-on ID[,ID]   run only after job ID has finished (repeatable); the\n"
	"                         job waits, available, until every parent has\n"
	"                         finished, then is due at --run-at or --delay\n"
	"  --depends-on-key KEY   run only after the job holding unique key KEY (the\n"
	"                         unfinished one, else the newest finished) (repeatable)\n"
	"  --on-parent-failure cancel|run\n"
	"                         when a parent is discarded or cancelled: cancel this\n"
	"                         job too, and what waits for it (default), or run it\n"
	"  --max-payload BYTES    refuse payloads larger than this (default and at most\n"
	"                         1048576, the database's skiplock.payload_max())\n"
	"  --batch FILE|-         read NDJSON jobs from FILE, or - for standard input\n"
	"  --max-line BYTES       refuse a batch line longer than this (default\n"
	"                         --max-payload + 65536); it is not read into memory\n"
	"  --max-batch N          refuse a batch of more jobs than this (default 1000000)\n"
	"  --json                 print {\"id\":ID,\"inserted\":true|false} per job instead\n"
	"                         of the id: false when a unique key found an unfinished\n"
	"                         job (or an earlier line of the batch); null when a lost\n"
	"                         COMMIT answer leaves it unknown\n"
	"\n";

static const char exit_help[] =
	"\nExit status: 0 enqueued, 1 the database refused (a parent that does not exist\n"
	"too), 2 bad usage or bad input (nothing written), 3 database unreachable within\n"
	"--retry-for.\n";

enum { O_QUEUE = OPT_COMMON_LAST + 1, O_PRIO, O_RUN_AT, O_DELAY, O_UKEY, O_MAX, O_TIMEOUT,
       O_BBASE, O_BCAP, O_MAXPAY, O_BATCH, O_BACKOFF, O_MAXLINE, O_MAXBATCH, O_JSON, O_DEPS,
       O_DEPKEY, O_ONFAIL };

typedef struct enqueue_args {
	cli_common *cc;
	skl_enqueue_opts opts;
	cli_batch_limits lim;
	cli_parents parents;
	const char *batch;
	bool json;
} enqueue_args;

static int own_option(int code, const char *arg, void *ctx)
{
	enqueue_args *a = ctx;
	long long v;
	switch (code) {
	case O_QUEUE: a->opts.queue = arg; break;
	case O_PRIO:
		if (!cli_int(a->cc, "--priority", arg, -1000000, 1000000, &v))
			return CLI_USAGE;
		a->opts.priority = (int)v;
		break;
	case O_RUN_AT: a->opts.run_at = arg; break;
	case O_DELAY: return cli_duration(a->cc, "--delay", arg, &a->opts.delay_ms) ? 0 : CLI_USAGE;
	case O_UKEY: a->opts.unique_key = arg; break;
	case O_MAX:
		if (!cli_int(a->cc, "--max-attempts", arg, 1, 1000000, &v))
			return CLI_USAGE;
		a->opts.max_attempts = (int)v;
		break;
	case O_TIMEOUT: return cli_duration(a->cc, "--timeout", arg, &a->opts.timeout_ms) ? 0 : CLI_USAGE;
	case O_BBASE:
		return cli_duration(a->cc, "--backoff-base", arg, &a->opts.backoff_base_ms) ? 0 : CLI_USAGE;
	case O_BCAP:
		return cli_duration(a->cc, "--backoff-cap", arg, &a->opts.backoff_cap_ms) ? 0 : CLI_USAGE;
	case O_MAXPAY:
		/* the database refuses more (skiplock.payload_max(), sql/0017_guards.sql) */
		return cli_int(a->cc, "--max-payload", arg, 2, SKL_PAYLOAD_MAX_DEFAULT,
		               &a->lim.max_payload) ? 0 : CLI_USAGE;
	case O_MAXLINE:
		return cli_int(a->cc, "--max-line", arg, 2, 1LL << 30, &a->lim.max_line) ? 0 : CLI_USAGE;
	case O_MAXBATCH:
		return cli_int(a->cc, "--max-batch", arg, 1, 100000000, &a->lim.max_jobs) ? 0 : CLI_USAGE;
	case O_BATCH: a->batch = arg; break;
	case O_JSON: a->json = true; break;
	case O_DEPS: return cli_parents_add_ids(a->cc, &a->parents, arg);
	case O_DEPKEY: return cli_parents_add_key(a->cc, &a->parents, arg);
	case O_ONFAIL: return cli_parents_policy(a->cc, &a->parents, arg);
	case O_BACKOFF:
		if (skl_backoff_parse(arg, &a->opts.backoff) != SKL_OK) {
			cli_error(a->cc, "--backoff: unknown strategy \"%s\" (expected full, equal, "
			          "decorrelated, exponential or fixed)", arg);
			return CLI_USAGE;
		}
		break;
	default: return CLI_USAGE;
	}
	return CLI_OK;
}

/* Reads a payload from standard input: at most max_payload + 1 bytes, so an
 * oversized payload is refused without reading all of it.  *len is what was
 * read (a NUL byte in it would cut the text short). */
static char *read_stdin_payload(const enqueue_args *a, size_t *len)
{
	size_t cap = (size_t)a->lim.max_payload + 2;
	char *buf = malloc(cap);
	if (buf == NULL)
		return NULL;
	size_t r;
	*len = 0;
	while (*len < cap - 1 && (r = fread(buf + *len, 1, cap - 1 - *len, stdin)) > 0)
		*len += r;
	buf[*len] = '\0';
	return buf;
}

/* The payload from standard input in *out, or CLI_USAGE / CLI_PROBLEM after
 * one message. */
static int stdin_payload(enqueue_args *a, char **out)
{
	size_t len = 0;
	if ((*out = read_stdin_payload(a, &len)) == NULL) {
		cli_error(a->cc, "out of memory reading the payload");
		return CLI_PROBLEM;
	}
	const char *nul = memchr(*out, '\0', len);
	if (nul == NULL)
		return CLI_OK;
	cli_error(a->cc, "payload on standard input contains a NUL byte (at byte %td)",
	          nul - *out + 1);
	return CLI_USAGE;
}

/* One job's line: its id, or with --json the id and whether it was
 * inserted. */
static void print_job(const enqueue_args *a, int64_t id, skl_enqueued how)
{
	static const char *const names[] = {"false", "true", "null"};
	if (a->json)
		printf("{\"id\":%lld,\"inserted\":%s}\n", (long long)id,
		       names[(unsigned)how < 3 ? how : SKL_ENQUEUED_UNKNOWN]);
	else
		printf("%lld\n", (long long)id);
}

static int run_single(enqueue_args *a, skl_client *c, const char *kind, const char *json)
{
	skl_job_spec spec = {.kind = kind, .payload = json, .opts = a->opts};
	int64_t id = 0;
	skl_enqueued how = SKL_ENQUEUED_UNKNOWN;
	skl_error err;
	if (skl_enqueue_bulk_ex(c, &spec, 1, &id, a->json ? &how : NULL, &err) != SKL_OK) {
		int rc = cli_fail(a->cc, &err);
		/* a parent that does not exist: the database's state, not the input's
		 * form, which was checked (skiplock/queue.h, skl_enqueue) */
		return strcmp(err.sqlstate, "23503") == 0 ? CLI_PROBLEM : rc;
	}
	print_job(a, id, how);
	return CLI_OK;
}

static int run_batch(enqueue_args *a, skl_client *c)
{
	FILE *in = strcmp(a->batch, "-") == 0 ? stdin : fopen(a->batch, "r");
	if (in == NULL) {
		cli_error(a->cc, "cannot open batch file \"%s\"", a->batch);
		return CLI_USAGE;
	}
	cli_batch b = {0};
	int rc = cli_batch_read(a->cc, &a->opts, &a->lim, in, &b);
	if (in != stdin)
		fclose(in);
	int64_t *ids = rc == CLI_OK && b.n ? calloc(b.n, sizeof(int64_t)) : NULL;
	skl_enqueued *how = rc == CLI_OK && b.n && a->json ? calloc(b.n, sizeof(*how)) : NULL;
	skl_error err;
	if (rc == CLI_OK && b.n && (ids == NULL || (a->json && how == NULL))) {
		cli_error(a->cc, "out of memory for %zu ids", b.n);
		rc = CLI_PROBLEM;
	} else if (rc == CLI_OK && b.n && skl_enqueue_bulk_ex(c, b.specs, b.n, ids, how, &err) != SKL_OK)
		rc = cli_fail(a->cc, &err);
	for (size_t i = 0; rc == CLI_OK && i < b.n; i++)
		print_job(a, ids[i], how ? how[i] : SKL_ENQUEUED_UNKNOWN);
	free(how);
	free(ids);
	cli_batch_free(&b);
	return rc;
}

/* Everything after the options: the operands, the payload, the call. */
static int enqueue_run(enqueue_args *a, int argc, char **argv)
{
	cli_common *cc = a->cc;
	if (a->lim.max_line == 0)
		a->lim.max_line = a->lim.max_payload + CLI_BATCH_LINE_SLACK;
	int nargs = argc - optind;
	const char *kind = nargs > 0 ? argv[optind] : NULL;
	const char *json = nargs > 1 ? argv[optind + 1] : "{}";
	if (a->batch ? nargs != 0 : (nargs < 1 || nargs > 2)) {
		cli_error(cc, a->batch ? "--batch takes no KIND or JSON arguments"
		                       : "expected KIND and an optional JSON payload (see --help)");
		return CLI_USAGE;
	}
	char *from_stdin = NULL;
	int rc = CLI_OK;
	if (!a->batch && strcmp(json, "-") == 0) {
		rc = stdin_payload(a, &from_stdin);
		json = from_stdin;
	}
	if (rc != CLI_OK || (!a->batch && (!cli_check_len(cc, "job kind", kind, SKL_KIND_MAX) ||
	                                   !cli_check_payload(cc, a->lim.max_payload, json, "")))) {
		free(from_stdin);
		return rc != CLI_OK ? rc : CLI_USAGE;
	}
	skl_client *c = NULL;
	if (!cli_check_len(cc, "queue name", a->opts.queue, SKL_KIND_MAX) ||
	    !cli_check_len(cc, "unique key", a->opts.unique_key, SKL_UNIQUE_KEY_MAX))
		rc = CLI_USAGE;
	else if ((rc = cli_open(cc, &c)) == CLI_OK)
		rc = a->batch ? run_batch(a, c) : run_single(a, c, kind, json);
	skl_client_close(c);
	free(from_stdin);
	return rc;
}

int cmd_enqueue(int argc, char **argv)
{
	static const struct option opts[] = {
		CLI_COMMON_LONGOPTS,
		{"queue", required_argument, NULL, O_QUEUE},
		{"priority", required_argument, NULL, O_PRIO},
		{"run-at", required_argument, NULL, O_RUN_AT},
		{"delay", required_argument, NULL, O_DELAY},
		{"unique-key", required_argument, NULL, O_UKEY},
		{"max-attempts", required_argument, NULL, O_MAX},
		{"timeout", required_argument, NULL, O_TIMEOUT},
		{"backoff-base", required_argument, NULL, O_BBASE},
		{"backoff-cap", required_argument, NULL, O_BCAP},
		{"backoff", required_argument, NULL, O_BACKOFF},
		{"depends-on", required_argument, NULL, O_DEPS},
		{"depends-on-key", required_argument, NULL, O_DEPKEY},
		{"on-parent-failure", required_argument, NULL, O_ONFAIL},
		{"max-payload", required_argument, NULL, O_MAXPAY},
		{"batch", required_argument, NULL, O_BATCH},
		{"max-line", required_argument, NULL, O_MAXLINE},
		{"max-batch", required_argument, NULL, O_MAXBATCH},
		{"json", no_argument, NULL, O_JSON},
		{0}};
	cli_common cc;
	cli_common_init(&cc, "enqueue");
	enqueue_args a = {.cc = &cc,
	                  .lim = {.max_payload = SKL_PAYLOAD_MAX_DEFAULT,
	                          .max_jobs = CLI_BATCH_MAX_JOBS_DEFAULT}};
	skl_enqueue_opts_init(&a.opts);
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, usage, exit_help, -1, &done);
	if (!done)
		rc = cli_parents_apply(&cc, &a.parents, a.batch != NULL, &a.opts);
	if (!done && rc == CLI_OK)
		rc = enqueue_run(&a, argc, argv);
	cli_parents_free(&a.parents);
	return rc;
}
