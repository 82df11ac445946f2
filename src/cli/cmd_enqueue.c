/*
 * cmd_enqueue.c — `skiplock enqueue KIND [JSON]` and `--batch FILE|-`.
 *
 * Input is validated completely before anything is sent (JSON, sizes,
 * names), and a batch is one all-or-nothing call: a bad line writes nothing
 * and is named in the error.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
	"Usage: skiplock enqueue [OPTIONS] KIND [JSON]\n"
	"       skiplock enqueue [OPTIONS] --batch FILE|-\n"
	"\n"
	"Add a job of KIND with the JSON payload (default {}; - reads it from standard\n"
	"input) and print its id. With\n"
	"--unique-key, an unfinished job that already holds the key is not duplicated:\n"
	"its id is printed instead. The call is retry-safe: if the answer to COMMIT is\n"
	"lost and skiplock retries, no second job appears.\n"
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
	"  --max-payload BYTES    refuse payloads larger than this (default 1048576)\n"
	"  --batch FILE|-         read NDJSON jobs from FILE, or - for standard input\n"
	"\n";

static const char exit_help[] =
	"\nExit status: 0 enqueued, 1 the database refused, 2 bad usage or bad input\n"
	"(nothing written), 3 database unreachable within --retry-for.\n";

enum { O_QUEUE = OPT_COMMON_LAST + 1, O_PRIO, O_RUN_AT, O_DELAY, O_UKEY, O_MAX, O_TIMEOUT,
       O_BBASE, O_BCAP, O_MAXPAY, O_BATCH, O_BACKOFF };

typedef struct enqueue_args {
	cli_common *cc;
	skl_enqueue_opts opts;
	long long max_payload;
	const char *batch;
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
		return cli_int(a->cc, "--max-payload", arg, 2, 256LL << 20, &a->max_payload) ? 0 : CLI_USAGE;
	case O_BATCH: a->batch = arg; break;
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

/* Validates a name option: 1..max bytes. */
static bool check_len(const cli_common *cc, const char *what, const char *s, size_t max)
{
	size_t n = s ? strlen(s) : 1;
	if (n == 0 || n > max) {
		cli_error(cc, "%s must be 1 to %zu bytes (got %zu)", what, max, n);
		return false;
	}
	return true;
}

static bool check_payload(const enqueue_args *a, const char *json, const char *where)
{
	size_t n = strlen(json);
	if ((long long)n > a->max_payload) {
		cli_error(a->cc, "%spayload is %zu bytes, over the limit of %lld (--max-payload)", where,
		          n, a->max_payload);
		return false;
	}
	json_error_t e;
	json_t *v = json_loads(json, JSON_DECODE_ANY, &e);
	if (v == NULL) {
		cli_error(a->cc, "%sinvalid JSON payload at line %d, column %d: %s", where, e.line,
		          e.column, e.text);
		return false;
	}
	json_decref(v);
	return true;
}

/* Reads a payload from standard input: at most max_payload + 1 bytes, so an
 * oversized payload is refused without reading all of it. */
static char *read_stdin_payload(const enqueue_args *a)
{
	size_t cap = (size_t)a->max_payload + 2, len = 0;
	char *buf = malloc(cap);
	if (buf == NULL)
		return NULL;
	size_t r;
	while (len < cap - 1 && (r = fread(buf + len, 1, cap - 1 - len, stdin)) > 0)
		len += r;
	buf[len] = '\0';
	return buf;
}

static int run_single(enqueue_args *a, skl_client *c, const char *kind, const char *json)
{
	int64_t id = 0;
	skl_error err;
	if (skl_enqueue(c, kind, json, &a->opts, &id, &err) != SKL_OK)
		return cli_fail(a->cc, &err);
	printf("%lld\n", (long long)id);
	return CLI_OK;
}

/* ---- batch ---- */

typedef struct batch {
	skl_job_spec *specs;
	json_t **lines;     /* keep the parsed lines: specs point into them */
	char **payloads;
	size_t n, cap;
} batch;

static void batch_free(batch *b)
{
	for (size_t i = 0; i < b->n; i++) {
		json_decref(b->lines[i]);
		free(b->payloads[i]);
	}
	free(b->specs);
	free(b->lines);
	free(b->payloads);
}

static bool grow(batch *b)
{
	if (b->n < b->cap)
		return true;
	size_t cap = b->cap ? b->cap * 2 : 256;
	skl_job_spec *s = realloc(b->specs, cap * sizeof(*s));
	if (s)
		b->specs = s;
	json_t **l = realloc(b->lines, cap * sizeof(*l));
	if (l)
		b->lines = l;
	char **p = realloc(b->payloads, cap * sizeof(*p));
	if (p)
		b->payloads = p;
	if (!s || !l || !p)
		return false;
	b->cap = cap;
	return true;
}

static const char *const batch_fields[] = {"kind", "payload", "queue", "priority", "run_at",
                                           "delay", "unique_key", "max_attempts", "timeout"};

static bool field_str(const cli_common *cc, const char *where, json_t *o, const char *k,
                      const char **out)
{
	json_t *v = json_object_get(o, k);
	if (v == NULL)
		return true;
	if (!json_is_string(v)) {
		cli_error(cc, "%s\"%s\" must be a string", where, k);
		return false;
	}
	*out = json_string_value(v);
	return true;
}

static bool field_int(const cli_common *cc, const char *where, json_t *o, const char *k,
                      long long min, long long max, int *out)
{
	json_t *v = json_object_get(o, k);
	if (v == NULL)
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
		cli_error(cc, "%s\"%s\" must be an integer from %lld to %lld", where, k, min, max);
		return false;
	}
	*out = (int)json_integer_value(v);
	return true;
}

static bool field_dur(const cli_common *cc, const char *where, json_t *o, const char *k,
                      int64_t *out)
{
	const char *s = NULL;
	if (!field_str(cc, where, o, k, &s))
		return false;
	skl_error err;
	if (s && skl_duration_parse(s, out, &err) != SKL_OK) {
		cli_error(cc, "%s\"%s\": %s", where, k, err.message);
		return false;
	}
	return true;
}

static bool known_fields(const cli_common *cc, const char *where, json_t *o)
{
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v) {
		bool ok = false;
		for (size_t i = 0; i < sizeof(batch_fields) / sizeof(batch_fields[0]); i++)
			ok |= strcmp(k, batch_fields[i]) == 0;
		if (!ok) {
			cli_error(cc, "%sunknown field \"%s\"", where, k);
			return false;
		}
	}
	return true;
}

static bool parse_line(enqueue_args *a, batch *b, const char *line, const char *where)
{
	json_error_t e;
	json_t *o = json_loads(line, 0, &e);
	if (o == NULL || !json_is_object(o)) {
		if (o)
			cli_error(a->cc, "%sexpected a JSON object", where);
		else
			cli_error(a->cc, "%sinvalid JSON at column %d: %s", where, e.column, e.text);
		json_decref(o);
		return false;
	}
	skl_job_spec *s = &b->specs[b->n];
	*s = (skl_job_spec){.opts = a->opts};
	b->lines[b->n] = o;
	b->payloads[b->n] = NULL;
	b->n++;
	json_t *p = json_object_get(o, "payload");
	if (p && (b->payloads[b->n - 1] = json_dumps(p, JSON_COMPACT | JSON_ENCODE_ANY)) == NULL)
		return false;
	s->payload = b->payloads[b->n - 1];
	bool ok = known_fields(a->cc, where, o) && field_str(a->cc, where, o, "kind", &s->kind) &&
	          field_str(a->cc, where, o, "queue", &s->opts.queue) &&
	          field_str(a->cc, where, o, "run_at", &s->opts.run_at) &&
	          field_str(a->cc, where, o, "unique_key", &s->opts.unique_key) &&
	          field_int(a->cc, where, o, "priority", -1000000, 1000000, &s->opts.priority) &&
	          field_int(a->cc, where, o, "max_attempts", 1, 1000000, &s->opts.max_attempts) &&
	          field_dur(a->cc, where, o, "delay", &s->opts.delay_ms) &&
	          field_dur(a->cc, where, o, "timeout", &s->opts.timeout_ms);
	if (ok && s->kind == NULL) {
		cli_error(a->cc, "%s\"kind\" is required", where);
		return false;
	}
	return ok && check_len(a->cc, "job kind", s->kind, SKL_KIND_MAX) &&
	       check_len(a->cc, "queue name", s->opts.queue, SKL_KIND_MAX) &&
	       check_len(a->cc, "unique key", s->opts.unique_key, SKL_UNIQUE_KEY_MAX) &&
	       (s->payload == NULL || check_payload(a, s->payload, where));
}

#define SKL_BATCH_MAX_JOBS 1000000

static int read_batch(enqueue_args *a, FILE *in, batch *b)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t len;
	long lineno = 0;
	int rc = CLI_OK;
	while (rc == CLI_OK && (len = getline(&line, &cap, in)) >= 0) {
		lineno++;
		char where[48];
		snprintf(where, sizeof(where), "line %ld: ", lineno);
		while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		if (strspn(line, " \t") == (size_t)len)
			continue;
		if (len > a->max_payload + 65536) {
			cli_error(a->cc, "%sline is %zd bytes, over the limit", where, len);
			rc = CLI_USAGE;
		} else if (b->n >= SKL_BATCH_MAX_JOBS) {
			cli_error(a->cc, "%sbatch is over %d jobs; split it", where, SKL_BATCH_MAX_JOBS);
			rc = CLI_USAGE;
		} else if (!grow(b)) {
			cli_error(a->cc, "out of memory reading the batch");
			rc = CLI_PROBLEM;
		} else if (!parse_line(a, b, line, where)) {
			rc = CLI_USAGE;
		}
	}
	free(line);
	if (rc == CLI_OK && ferror(in)) {
		cli_error(a->cc, "cannot read the batch input");
		rc = CLI_USAGE;
	}
	return rc;
}

static int run_batch(enqueue_args *a, skl_client *c)
{
	FILE *in = strcmp(a->batch, "-") == 0 ? stdin : fopen(a->batch, "r");
	if (in == NULL) {
		cli_error(a->cc, "cannot open batch file \"%s\"", a->batch);
		return CLI_USAGE;
	}
	batch b = {0};
	int rc = read_batch(a, in, &b);
	if (in != stdin)
		fclose(in);
	int64_t *ids = rc == CLI_OK && b.n ? calloc(b.n, sizeof(int64_t)) : NULL;
	skl_error err;
	if (rc == CLI_OK && b.n && ids == NULL)
		rc = CLI_PROBLEM;
	else if (rc == CLI_OK && b.n && skl_enqueue_bulk(c, b.specs, b.n, ids, &err) != SKL_OK)
		rc = cli_fail(a->cc, &err);
	for (size_t i = 0; rc == CLI_OK && i < b.n; i++)
		printf("%lld\n", (long long)ids[i]);
	free(ids);
	batch_free(&b);
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
		{"max-payload", required_argument, NULL, O_MAXPAY},
		{"batch", required_argument, NULL, O_BATCH},
		{0}};
	cli_common cc;
	cli_common_init(&cc, "enqueue");
	enqueue_args a = {.cc = &cc, .max_payload = SKL_PAYLOAD_MAX_DEFAULT};
	skl_enqueue_opts_init(&a.opts);
	bool done;
	int rc = cli_start(&cc, argc, argv, opts, own_option, &a, usage, exit_help, -1, &done);
	if (done)
		return rc;
	int nargs = argc - optind;
	const char *kind = nargs > 0 ? argv[optind] : NULL;
	const char *json = nargs > 1 ? argv[optind + 1] : "{}";
	if (a.batch ? nargs != 0 : (nargs < 1 || nargs > 2)) {
		cli_error(&cc, a.batch ? "--batch takes no KIND or JSON arguments"
		                       : "expected KIND and an optional JSON payload (see --help)");
		return CLI_USAGE;
	}
	char *from_stdin = NULL;
	if (!a.batch && strcmp(json, "-") == 0 && (json = from_stdin = read_stdin_payload(&a)) == NULL) {
		cli_error(&cc, "out of memory reading the payload");
		return CLI_PROBLEM;
	}
	if (!a.batch && (!check_len(&cc, "job kind", kind, SKL_KIND_MAX) ||
	                 !check_payload(&a, json, ""))) {
		free(from_stdin);
		return CLI_USAGE;
	}
	skl_client *c = NULL;
	if (!check_len(&cc, "queue name", a.opts.queue, SKL_KIND_MAX) ||
	    !check_len(&cc, "unique key", a.opts.unique_key, SKL_UNIQUE_KEY_MAX))
		rc = CLI_USAGE;
	else if ((rc = cli_open(&cc, &c)) == CLI_OK)
		rc = a.batch ? run_batch(&a, c) : run_single(&a, c, kind, json);
	skl_client_close(c);
	free(from_stdin);
	return rc;
}
