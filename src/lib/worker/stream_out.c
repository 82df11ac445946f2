/*
 * stream_out.c — what a stream process writes (stream_int.h): its stdout
 * as outcome lines, its stderr to the log and to a tail kept as context,
 * and the end of a job.
 *
 * A stdout line that is a JSON object is a protocol line: an outcome for
 * the job it names, or malformed (it then fails the job it names, or the
 * only job in flight).  Any other stdout line (not JSON, or JSON that is
 * not an object) is not a protocol line: counted, logged like stderr, and
 * it changes no job.  The result of an outcome is stored as its text was
 * sent (core/json_raw.h): jansson sees the line with the result's numbers
 * masked.  Reads are bounded per call; log lines per second and noise
 * bytes per second are bounded per process (struct noise).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/json_raw.h"
#include "worker/stream_int.h"

static void unlink_job(sjob **list, sjob *j, sjob **tail)
{
	sjob *prev = NULL;
	for (sjob *p = *list; p; prev = p, p = p->next)
		if (p == j) {
			*(prev ? &prev->next : list) = j->next;
			if (tail && *tail == j)
				*tail = prev;
			return;
		}
}

/* error, then "; stderr: " and p's tail (without its last newline), valid
 * UTF-8; NULL when out of memory. */
static char *with_tail(const sproc *p, const char *error)
{
	size_t n = p->tail_len;
	if (n > 0 && p->tail[n - 1] == '\n')
		n--;
	size_t el = strlen(error);
	char *msg = malloc(el + n + 16);
	if (msg == NULL)
		return NULL;
	memcpy(msg, error, el);
	memcpy(msg + el, "; stderr: ", 10);
	memcpy(msg + el + 10, p->tail, n);
	msg[el + 10 + n] = '\0';
	for (size_t i = el; i < el + 10 + n; i++)
		if (msg[i] == '\0')
			msg[i] = ' ';
	skl__utf8_scrub(msg + el);
	return msg;
}

void skl__stream_finish(stream *st, sproc *p, sjob *j, int code, const char *error, bool tail)
{
	char *full = NULL;
	if (p) {
		if (error && tail && p->tail_len > 0)
			full = with_tail(p, error);
		unlink_job(&p->jobs, j, NULL);
		p->njobs--;
	} else {
		unlink_job(&st->waiting, j, &st->waiting_tail);
	}
	if (error)
		skl__set_text(&j->s->error, full ? full : error);
	free(full);
	j->code = code;
	j->done = true;
	pthread_cond_signal(&j->cv);
}

/* ---- the log of what is not an outcome ---- */

/* True when one more line of p may be logged this second; else counted. */
static bool may_log(sproc *p, bool out)
{
	if (p->nz.logged < LOG_LINES_PER_SEC) {
		p->nz.logged++;
		return true;
	}
	if (out)
		p->nz.dropped_out++;
	else
		p->nz.dropped_err++;
	return false;
}

void skl__stream_noise_tick(stream *st, sproc *p, int64_t now)
{
	if (now - p->nz.since < 1000)
		return;
	int64_t dropped = p->nz.dropped_err + p->nz.dropped_out;
	if (dropped > 0)
		skl__wlog(st->w, SKL_LOG_WARNING, "stream handler %s (pid %d): %" PRId64 " line(s) not "
		          "logged in the last second (%" PRId64 " of stderr, %" PRId64 " of stdout; at "
		          "most %d a second are); %" PRId64 " stdout line(s) not JSON objects so far",
		          st->kind, (int)p->ch.pid, dropped, p->nz.dropped_err, p->nz.dropped_out,
		          LOG_LINES_PER_SEC, p->nz.not_protocol);
	p->nz = (noise){.since = now, .not_protocol = p->nz.not_protocol};
}

bool skl__stream_throttled(const sproc *p)
{
	return p->nz.bytes >= NOISE_BYTES_PER_SEC;
}

/* A line of p's stderr, to the log (its bytes were counted as read). */
static void stderr_line(stream *st, sproc *p, const char *line, bool cut)
{
	if (may_log(p, false))
		skl__wlog(st->w, SKL_LOG_INFO, "stream handler %s (pid %d) stderr: %s%s", st->kind,
		          (int)p->ch.pid, line, cut ? "…" : "");
}

/* Appends what p wrote to stderr to its tail (the last SKL_STDERR_TAIL bytes). */
static void keep_tail(sproc *p, const char *b, size_t n)
{
	if (n >= SKL_STDERR_TAIL) {
		memcpy(p->tail, b + n - SKL_STDERR_TAIL, SKL_STDERR_TAIL);
		p->tail_len = SKL_STDERR_TAIL;
		return;
	}
	if (p->tail_len + n > SKL_STDERR_TAIL) {
		size_t drop = p->tail_len + n - SKL_STDERR_TAIL;
		memmove(p->tail, p->tail + drop, p->tail_len - drop);
		p->tail_len -= drop;
	}
	memcpy(p->tail + p->tail_len, b, n);
	p->tail_len += n;
}

/* ---- outcome lines ---- */

static sjob *in_flight(sproc *p, json_int_t id, const json_t *fencing)
{
	for (sjob *j = p->jobs; j; j = j->next)
		if (j->s->job.id == id &&
		    (!json_is_integer(fencing) || json_integer_value(fencing) == j->s->job.fencing))
			return j;
	return NULL;
}

/* A line that is not a well-formed outcome: logged with the job it names,
 * or the only job in flight, which fails; otherwise logged alone. */
static void malformed(stream *st, sproc *p, sjob *j, const char *why, const char *line)
{
	if (j == NULL && p->njobs == 1)
		j = p->jobs;
	char err[256];
	snprintf(err, sizeof(err), "stream handler: malformed outcome line: %s", why);
	if (j == NULL) {
		if (may_log(p, true))
			skl__wlog(st->w, SKL_LOG_WARNING, "stream handler %s (pid %d): malformed line, for "
			          "none of its %d job(s) in flight: %s: %.*s", st->kind, (int)p->ch.pid,
			          p->njobs, why, LOGGED_MAX, line);
		return;
	}
	if (may_log(p, true))
		skl__wlog_job(st->w, SKL_LOG_WARNING, &j->s->job, "stream handler %s (pid %d): "
		              "malformed line: %s: %.*s", st->kind, (int)p->ch.pid, why, LOGGED_MAX,
		              line);
	skl__stream_finish(st, p, j, 1, err, p->njobs == 1);
}

/* The raw text of "result" for an ok outcome, in s->result, when jsonb
 * takes it as it is; else dropped with a warning. */
static void keep_result(stream *st, slot *s, const char *text, size_t len)
{
	const char *why = len > SKL_STDOUT_MAX ? "over 64 KiB"
	                : !skl__json_numbers_fit(text, len) ? "a number PostgreSQL cannot store"
	                : NULL;
	if (why) {
		skl__wlog_job(st->w, SKL_LOG_WARNING, &s->job, "stream handler: result dropped: %s",
		              why);
		return;
	}
	free(s->result);
	s->result = strndup(text, len);
}

static const char *const OUTCOMES[] = {"ok", "retry", "fail", "discard"};
static const int CODES[] = {SKL_JOB_OK, SKL_JOB_RETRY, 1, SKL_JOB_DISCARD};

/* Applies a well-formed outcome object to j (raw: the text of "result"
 * and of "retry_after" in the line, or NULL); NULL, or why it is not one. */
static const char *apply(stream *st, sproc *p, sjob *j, json_t *o, const char *result,
                         size_t rlen, const char *after)
{
	const char *out = json_string_value(json_object_get(o, "outcome"));
	json_t *error = json_object_get(o, "error"), *aft = json_object_get(o, "retry_after");
	int k = 0;
	while (out && k < 4 && strcmp(out, OUTCOMES[k]) != 0)
		k++;
	if (out == NULL || k == 4)
		return "\"outcome\" is not \"ok\", \"retry\", \"fail\" or \"discard\"";
	if (error && !json_is_string(error) && !json_is_null(error))
		return "\"error\" is not a string";
	if (aft && !json_is_number(aft) && !json_is_null(aft))
		return "\"retry_after\" is not a number of seconds";
	slot *s = j->s;
	if (k == 0 && result && !(rlen == 4 && memcmp(result, "null", 4) == 0))
		keep_result(st, s, result, rlen);
	double secs = json_is_number(aft) && after ? strtod(after, NULL) : 0;
	if (k == 1 && secs > 0 && secs <= 31536000)
		s->retry_delay_ms = (int64_t)(secs * 1000.0 + 0.5);
	const char *e = json_string_value(error);
	char msg[64];
	snprintf(msg, sizeof(msg), "stream handler answered \"%s\"", OUTCOMES[k]);
	char *err = k == 0 ? NULL : strndup(e && *e ? e : msg, SKL_STDERR_TAIL);
	skl__stream_finish(st, p, j, CODES[k], err, !(e && *e) && p->njobs == 1);
	free(err);
	p->deaths = 0;
	return NULL;
}

/* line[0, len) with the numbers of every member but "id" and "fencing"
 * masked, for jansson; *r and *a: the raw text of "result" and
 * "retry_after" (NULL when absent).  NULL when out of memory. */
static char *masked(const char *line, size_t len, const char **r, size_t *rlen, const char **a)
{
	size_t off, n, alen;
	char *m = malloc(len + 1);
	if (m == NULL)
		return NULL;
	memcpy(m, line, len);
	m[len] = '\0';
	skl__json_mask_numbers(m, len);
	static const char *const exact[] = {"id", "fencing"};
	for (int i = 0; i < 2; i++)
		if (skl__json_member(line, len, exact[i], &off, &n))
			memcpy(m + off, line + off, n);
	*r = skl__json_member(line, len, "result", &off, rlen) ? line + off : NULL;
	*a = skl__json_member(line, len, "retry_after", &off, &alen) ? line + off : NULL;
	return m;
}

/* A stdout line that is not a JSON object: counted, logged (rate-limited). */
static void not_protocol(stream *st, sproc *p, const char *line, size_t len)
{
	p->nz.bytes += len + 1;
	p->nz.not_protocol++;
	if (may_log(p, true))
		skl__wlog(st->w, SKL_LOG_INFO, "stream handler %s (pid %d): stdout line is not a JSON "
		          "object, ignored: %.*s", st->kind, (int)p->ch.pid, LOGGED_MAX, line);
}

static void on_line(stream *st, sproc *p, const char *line, size_t len)
{
	size_t i = 0, rlen = 0;
	while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
		i++;
	if (i == len || line[i] != '{') {
		not_protocol(st, p, line, len);
		return;
	}
	const char *result, *after;
	char *m = masked(line, len, &result, &rlen, &after);
	json_error_t e;
	json_t *o = m ? json_loadb(m, len, 0, &e) : NULL;
	free(m);
	if (!json_is_object(o)) {
		json_decref(o);
		not_protocol(st, p, line, len);
		return;
	}
	json_t *id = json_object_get(o, "id");
	sjob *j = json_is_integer(id) ? in_flight(p, json_integer_value(id),
	                                          json_object_get(o, "fencing")) : NULL;
	const char *bad = NULL;
	if (!json_is_integer(id))
		bad = "no integer \"id\"";
	else if (json_object_get(o, "result") && result == NULL)
		bad = "cannot find the text of \"result\"";
	else if (j != NULL)
		bad = apply(st, p, j, o, result, rlen, after);
	else if (may_log(p, true))
		skl__wlog(st->w, SKL_LOG_INFO, "stream handler %s (pid %d): outcome for job %" PRId64
		          ", which is not in flight (timed out or stopped): ignored", st->kind,
		          (int)p->ch.pid, (int64_t)json_integer_value(id));
	if (bad)
		malformed(st, p, j, bad, line);
	json_decref(o);
}

/* Whole lines of b to on_line (stdout) or the log (stderr); an over-long
 * line is cut at max and the rest of it dropped. */
static void split_lines(stream *st, sproc *p, skl_buf *b, bool *skip, size_t max, bool out)
{
	size_t at = 0;
	if (b->data == NULL)
		return;
	for (char *nl; (nl = memchr(b->data + at, '\n', b->len - at)) != NULL;
	     at = (size_t)(nl - b->data) + 1) {
		*nl = '\0';
		size_t n = (size_t)(nl - b->data) - at;
		if (*skip) {
			*skip = false; /* the end of an over-long line */
			p->nz.bytes += out ? n + 1 : 0;
		} else if (out) {
			on_line(st, p, b->data + at, n);
		} else {
			stderr_line(st, p, b->data + at, false);
		}
	}
	memmove(b->data, b->data + at, b->len - at);
	b->len -= at;
	if (b->len >= max && !*skip) {
		b->data[max - 1] = '\0';
		size_t i = 0;
		while (out && (b->data[i] == ' ' || b->data[i] == '\t'))
			i++;
		if (out && b->data[i] == '{')
			malformed(st, p, NULL, "line too long", b->data);
		else if (out)
			not_protocol(st, p, b->data, max - 1);
		else
			stderr_line(st, p, b->data, true);
		*skip = true;
		b->len = 0;
	}
	if (*skip && out)
		p->nz.bytes += b->len; /* the rest of an over-long line is noise too */
	if (*skip)
		b->len = 0;
}

int skl__stream_read(stream *st, sproc *p, bool out, size_t budget)
{
	char chunk[16384];
	int fd = out ? p->ch.out : p->ch.err;
	skl_buf *b = out ? &p->obuf : &p->ebuf;
	for (size_t got = 0; got < budget;) {
		ssize_t r = read(fd, chunk, sizeof(chunk) < budget - got ? sizeof(chunk) : budget - got);
		if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR))
			return -1;
		if (r < 0)
			return errno == EINTR ? 1 : 0;
		got += (size_t)r;
		if (!out) {
			keep_tail(p, chunk, (size_t)r);
			p->nz.bytes += (size_t)r; /* all of stderr is noise */
		}
		skl_buf_add(b, chunk, (size_t)r);
		split_lines(st, p, b, out ? &p->oskip : &p->eskip,
		            out ? LINE_MAX_BYTES : STDERR_LINE_MAX, out);
	}
	return 1;
}
