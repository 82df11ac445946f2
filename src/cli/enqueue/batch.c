/*
 * batch.c — NDJSON job batches: bounded line reading, one JSON object per
 * line, every field checked before anything is sent.
 *
 * Each line's JSON is freed as soon as it is checked: the strings a job
 * needs (kind, payload text, queue, run_at, unique key) are copied into
 * large blocks, so reading 100,000 lines costs a few hundred allocations
 * of memory instead of keeping 100,000 parsed objects alive.
 *
 * A payload is kept as the exact text of its line (json_text.h): the line
 * is parsed only after the payload's numbers are masked, so a number
 * jansson cannot hold is neither changed nor refused.
 */
#include <stdlib.h>
#include <string.h>

#include "enqueue/batch.h"
#include "enqueue/json_text.h"

bool cli_check_len(const cli_common *cc, const char *what, const char *s, size_t max)
{
	size_t n = s ? strlen(s) : 1;
	if (n == 0 || n > max) {
		cli_error(cc, "%s must be 1 to %zu bytes (got %zu)", what, max, n);
		return false;
	}
	return true;
}

static bool payload_size(const cli_common *cc, long long max, const char *json,
                         const char *where)
{
	size_t n = strlen(json);
	if ((long long)n > max) {
		cli_error(cc, "%spayload is %zu bytes, over the limit of %lld (--max-payload)", where,
		          n, max);
		return false;
	}
	return true;
}

bool cli_check_payload(const cli_common *cc, long long max, const char *json, const char *where)
{
	if (!payload_size(cc, max, json, where))
		return false;
	size_t n = strlen(json);
	char *masked = malloc(n + 1);
	if (masked == NULL) {
		cli_error(cc, "out of memory checking the payload");
		return false;
	}
	cli_json_mask_numbers(memcpy(masked, json, n + 1), n);
	json_error_t e;
	json_t *v = json_loadb(masked, n, JSON_DECODE_ANY, &e);
	free(masked);
	if (v == NULL) {
		cli_error(cc, "%sinvalid JSON payload at line %d, column %d: %s", where, e.line,
		          e.column, e.text);
		return false;
	}
	json_decref(v);
	return true;
}

struct cli_batch_block {
	struct cli_batch_block *next;
	size_t used, cap;
	char data[];
};

#define BLOCK_MIN ((size_t)256 << 10)

void cli_batch_free(cli_batch *b)
{
	for (struct cli_batch_block *k = b->strings, *next; k; k = next) {
		next = k->next;
		free(k);
	}
	free(b->specs);
	memset(b, 0, sizeof(*b));
}

/* Room for n bytes in the current block, or a new block. */
static char *block_alloc(cli_batch *b, size_t n)
{
	struct cli_batch_block *k = b->strings;
	if (k == NULL || k->cap - k->used < n) {
		size_t cap = n > BLOCK_MIN ? n : BLOCK_MIN;
		if ((k = malloc(sizeof(*k) + cap)) == NULL)
			return NULL;
		*k = (struct cli_batch_block){.next = b->strings, .cap = cap};
		b->strings = k;
	}
	char *p = k->data + k->used;
	k->used += n;
	return p;
}

/* *s copied into the batch's blocks, unless it is the default (which
 * outlives the batch) rather than a string of the line's JSON. */
static bool keep(cli_batch *b, const char **s, const char *dflt)
{
	if (*s == NULL || *s == dflt)
		return true;
	size_t n = strlen(*s) + 1;
	char *p = block_alloc(b, n);
	if (p)
		*s = memcpy(p, *s, n);
	return p != NULL;
}

/* The payload's text, copied into the batch's blocks. */
static const char *keep_text(cli_batch *b, const char *text, size_t n)
{
	char *p = block_alloc(b, n + 1);
	if (p) {
		memcpy(p, text, n);
		p[n] = '\0';
	}
	return p;
}

static bool grow(cli_batch *b)
{
	if (b->n < b->cap)
		return true;
	size_t cap = b->cap ? b->cap * 2 : 256;
	skl_job_spec *s = realloc(b->specs, cap * sizeof(*s));
	if (s == NULL)
		return false;
	b->specs = s;
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
	if (strlen(*out) != json_string_length(v)) {
		cli_error(cc, "%s\"%s\" must not contain a NUL character", where, k);
		return false;
	}
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

static bool check_fields(const cli_common *cc, const cli_batch_limits *lim, json_t *o,
                         skl_job_spec *s, const char *where)
{
	bool ok = known_fields(cc, where, o) && field_str(cc, where, o, "kind", &s->kind) &&
	          field_str(cc, where, o, "queue", &s->opts.queue) &&
	          field_str(cc, where, o, "run_at", &s->opts.run_at) &&
	          field_str(cc, where, o, "unique_key", &s->opts.unique_key) &&
	          field_int(cc, where, o, "priority", -1000000, 1000000, &s->opts.priority) &&
	          field_int(cc, where, o, "max_attempts", 1, 1000000, &s->opts.max_attempts) &&
	          field_dur(cc, where, o, "delay", &s->opts.delay_ms) &&
	          field_dur(cc, where, o, "timeout", &s->opts.timeout_ms);
	if (ok && s->kind == NULL) {
		cli_error(cc, "%s\"kind\" is required", where);
		return false;
	}
	return ok && cli_check_len(cc, "job kind", s->kind, SKL_KIND_MAX) &&
	       cli_check_len(cc, "queue name", s->opts.queue, SKL_KIND_MAX) &&
	       (s->opts.unique_key == NULL ||
	        cli_check_len(cc, "unique key", s->opts.unique_key, SKL_UNIQUE_KEY_MAX)) &&
	       /* the payload was parsed with its line: only its size is left */
	       (s->payload == NULL || payload_size(cc, lim->max_payload, s->payload, where));
}

/* The line's JSON, its payload's text kept first (then masked in line). */
static json_t *load_line(const cli_common *cc, cli_batch *b, skl_job_spec *s, char *line,
                         size_t len, const char *where, int *rc)
{
	size_t off = 0, plen = 0;
	bool has_payload = cli_json_member(line, len, "payload", &off, &plen);
	if (has_payload && (s->payload = keep_text(b, line + off, plen)) == NULL) {
		*rc = CLI_PROBLEM;
		return NULL;
	}
	if (has_payload)
		cli_json_mask_numbers(line + off, plen);
	json_error_t e;
	json_t *o = json_loadb(line, len, 0, &e);
	*rc = CLI_USAGE;
	if (o == NULL)
		cli_error(cc, "%sinvalid JSON at column %d: %s", where, e.column, e.text);
	else if (!json_is_object(o))
		cli_error(cc, "%sexpected a JSON object", where);
	else if ((json_object_get(o, "payload") != NULL) != has_payload)
		cli_error(cc, "%scannot find the text of \"payload\"", where);
	else
		return o;
	json_decref(o);
	return NULL;
}

static int parse_line(const cli_common *cc, const skl_enqueue_opts *defaults,
                      const cli_batch_limits *lim, cli_batch *b, char *line, size_t len,
                      const char *where)
{
	skl_job_spec *s = &b->specs[b->n];
	*s = (skl_job_spec){.opts = *defaults};
	int rc;
	json_t *o = load_line(cc, b, s, line, len, where, &rc);
	if (o && !check_fields(cc, lim, o, s, where))
		rc = CLI_USAGE;
	else if (o && (!keep(b, &s->kind, NULL) || !keep(b, &s->opts.queue, defaults->queue) ||
	               !keep(b, &s->opts.run_at, defaults->run_at) ||
	               !keep(b, &s->opts.unique_key, defaults->unique_key)))
		rc = CLI_PROBLEM;
	else if (o) {
		rc = CLI_OK;
		b->n++;
	}
	if (rc == CLI_PROBLEM)
		cli_error(cc, "out of memory reading the batch");
	json_decref(o);
	return rc;
}

/* Reads one line (without its end) into *buf, at most max bytes: returns
 * its length, -1 at the end of input, -2 when the line is longer than max
 * (the rest of it is not read), -3 when out of memory. */
static long long read_line(FILE *in, char **buf, size_t *cap, long long max)
{
	size_t len = 0;
	int ch = EOF;
	while ((ch = getc_unlocked(in)) != EOF && ch != '\n') {
		if ((long long)len >= max)
			return -2;
		if (len + 2 > *cap) {
			size_t ncap = *cap ? *cap * 2 : 4096;
			char *nb = realloc(*buf, ncap);
			if (nb == NULL)
				return -3;
			*buf = nb;
			*cap = ncap;
		}
		(*buf)[len++] = (char)ch;
	}
	if (ch == EOF && len == 0)
		return -1;
	while (len > 0 && (*buf)[len - 1] == '\r')
		len--;
	if (*buf)
		(*buf)[len] = '\0';
	return (long long)len;
}

static int one_line(const cli_common *cc, const skl_enqueue_opts *defaults,
                    const cli_batch_limits *lim, cli_batch *b, char *line, long long len,
                    const char *where)
{
	if (len == -2) {
		cli_error(cc, "%sline is over the limit of %lld bytes (--max-line)", where,
		          lim->max_line);
		return CLI_USAGE;
	}
	if (len < 0) {
		cli_error(cc, "out of memory reading the batch");
		return CLI_PROBLEM;
	}
	const char *nul = memchr(line, '\0', (size_t)len);
	if (nul) {
		cli_error(cc, "%scontains a NUL byte (at column %td)", where, nul - line + 1);
		return CLI_USAGE;
	}
	if (len == 0 || strspn(line, " \t") == (size_t)len)
		return CLI_OK;
	if ((long long)b->n >= lim->max_jobs) {
		cli_error(cc, "%sbatch is over the limit of %lld jobs (--max-batch); split it", where,
		          lim->max_jobs);
		return CLI_USAGE;
	}
	if (!grow(b)) {
		cli_error(cc, "out of memory reading the batch");
		return CLI_PROBLEM;
	}
	return parse_line(cc, defaults, lim, b, line, (size_t)len, where);
}

int cli_batch_read(const cli_common *cc, const skl_enqueue_opts *defaults,
                   const cli_batch_limits *lim, FILE *in, cli_batch *b)
{
	char *line = NULL;
	size_t cap = 0;
	long long len;
	long lineno = 0;
	int rc = CLI_OK;
	while (rc == CLI_OK && (len = read_line(in, &line, &cap, lim->max_line)) != -1) {
		char where[48];
		snprintf(where, sizeof(where), "line %ld: ", ++lineno);
		char empty[1] = "";
		rc = one_line(cc, defaults, lim, b, line ? line : empty, len, where);
	}
	free(line);
	if (rc == CLI_OK && ferror(in)) {
		cli_error(cc, "cannot read the batch input");
		rc = CLI_USAGE;
	}
	return rc;
}
