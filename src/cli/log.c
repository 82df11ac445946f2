/*
 * log.c — diagnostics of the command on stderr: levels, text or JSON lines.
 *
 * Text lines follow PostgreSQL's message style: "skiplock: LEVEL: message",
 * primary message lower case, no final period; a line about a job starts
 * with its context ("job=… kind=… attempt=… fencing=… queue=…:").  JSON
 * lines (one object per line) carry time, level, message, command and the
 * context as fields: worker, job_id, queue, kind, attempt, fencing, and
 * payload only when the worker was asked to (--log-payloads).  Nothing
 * here prints a URL: the library redacts passwords before logging one.
 *
 * A text line is one line whatever its fields hold: a message's newlines
 * become spaces, and every other control byte of any field is escaped (a
 * carriage return as the two characters \r, ESC as \x1b); a kind or queue
 * that is not one plain word is written in double quotes, with '"' and the
 * backslash escaped too.  So anyone who can enqueue a job or write to a
 * handler's stderr cannot forge a log line.  Free text (the message, a
 * payload) is not quoted: it runs to the end of the line, and a backslash
 * in it is written as it is.
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "cli.h"

static skl_log_level min_level = SKL_LOG_INFO;
static cli_log_format format = LOG_TEXT;

static const char *command;  /* the subcommand, for JSON lines */

static const char *const level_names[] = {"debug", "info", "warning", "error"};

void cli_log_command(const char *name)
{
	command = name;
}

void cli_log_setup(skl_log_level level, cli_log_format fmt)
{
	min_level = level;
	format = fmt;
}

bool cli_log_parse_level(const char *s, skl_log_level *out)
{
	for (int i = 0; i < 4; i++)
		if (strcmp(s, level_names[i]) == 0) {
			*out = (skl_log_level)i;
			return true;
		}
	return false;
}

bool cli_log_parse_format(const char *s, cli_log_format *out)
{
	if (strcmp(s, "text") == 0)
		*out = LOG_TEXT;
	else if (strcmp(s, "json") == 0)
		*out = LOG_JSON;
	else
		return false;
	return true;
}

static void timestamp(char *ts, size_t cap)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	struct tm tm;
	gmtime_r(&tv.tv_sec, &tm);
	size_t n = strftime(ts, cap, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(ts + n, cap - n, ".%03ldZ", (long)(tv.tv_usec / 1000));
}

/* The context as JSON fields; a payload that is not JSON goes as text. */
static void add_context(json_t *o, const skl_log_context *lc)
{
	if (lc->worker)
		json_object_set_new(o, "worker", json_string(lc->worker));
	if (lc->job_id)
		json_object_set_new(o, "job_id", json_integer(lc->job_id));
	if (lc->queue)
		json_object_set_new(o, "queue", json_string(lc->queue));
	if (lc->kind)
		json_object_set_new(o, "kind", json_string(lc->kind));
	if (lc->attempt)
		json_object_set_new(o, "attempt", json_integer(lc->attempt));
	if (lc->fencing)
		json_object_set_new(o, "fencing", json_integer(lc->fencing));
	if (lc->payload) {
		json_t *p = json_loads(lc->payload, JSON_DECODE_ANY, NULL);
		json_object_set_new(o, "payload", p ? p : json_string(lc->payload));
	}
}

static void emit_json(skl_log_level level, const skl_log_context *lc, const char *msg)
{
	char ts[40];
	timestamp(ts, sizeof(ts));
	json_t *o = json_pack("{s:s, s:s, s:s}", "time", ts, "level", level_names[level],
	                      "message", msg);
	if (o && command)
		json_object_set_new(o, "command", json_string(command));
	if (o && lc)
		add_context(o, lc);
	/* invalid UTF-8 in a message must not lose the line */
	char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
	if (line == NULL) {
		json_decref(o);
		o = json_pack("{s:s, s:s, s:s}", "time", ts, "level", level_names[level], "message",
		              "(message not valid UTF-8)");
		line = o ? json_dumps(o, JSON_COMPACT) : NULL;
	}
	if (line)
		fprintf(stderr, "%s\n", line);
	free(line);
	json_decref(o);
}

/* Writes s escaped: control bytes as \\n, \\r, \\t or \\xHH, so no field can
 * end the line or move the cursor.  Quoted, s is written in double quotes
 * with '"' and '\\' escaped as well, so a quoted field ends where it
 * seems to. */
static void put_escaped(FILE *f, const char *s, bool quoted)
{
	if (quoted)
		putc_unlocked('"', f);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		const char *e = *p == '\n' ? "n" : *p == '\r' ? "r" : *p == '\t' ? "t" : NULL;
		if (e || *p < 0x20 || *p == 0x7f || (quoted && (*p == '"' || *p == '\\')))
			putc_unlocked('\\', f);
		if (e)
			fputs(e, f);
		else if (*p < 0x20 || *p == 0x7f)
			fprintf(f, "x%02x", *p);
		else
			putc_unlocked(*p, f);
	}
	if (quoted)
		putc_unlocked('"', f);
}

/* A context value: bare when it is one plain word, else quoted. */
static void put_value(FILE *f, const char *s)
{
	bool plain = *s != '\0';
	for (const unsigned char *p = (const unsigned char *)s; *p && plain; p++)
		plain = *p > 0x20 && *p != 0x7f && *p != '"' && *p != '\\' && *p != '=';
	put_escaped(f, s, !plain);
}

/* One text line.  Every field that comes from outside (a kind, a queue, a
 * payload, a message quoting a handler's stderr) passes put_escaped. */
static void emit_text(skl_log_level level, const skl_log_context *lc, const char *prefix,
                      const char *msg)
{
	flockfile(stderr);
	if (prefix)
		fputs(prefix, stderr);
	else
		fprintf(stderr, "skiplock: %s: ", level_names[level]);
	if (lc && lc->job_id) {
		fprintf(stderr, "job=%lld kind=", (long long)lc->job_id);
		put_value(stderr, lc->kind ? lc->kind : "");
		fprintf(stderr, " attempt=%d fencing=%lld queue=", lc->attempt, (long long)lc->fencing);
		put_value(stderr, lc->queue ? lc->queue : "");
		if (lc->payload) {
			fputs(" payload=", stderr);
			put_escaped(stderr, lc->payload, false);
		}
		fputs(": ", stderr);
	}
	put_escaped(stderr, msg, false);
	putc_unlocked('\n', stderr);
	funlockfile(stderr);
}

static void emit(skl_log_level level, const skl_log_context *lc, const char *msg)
{
	if (format == LOG_JSON)
		emit_json(level, lc, msg);
	else
		emit_text(level, lc, NULL, msg);
}

/* One line: trailing blanks dropped, newlines turned into spaces. */
static void one_line(char *buf)
{
	size_t n = strlen(buf);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	for (char *p = buf; *p; p++)
		if (*p == '\n')
			*p = ' ';
}

void cli_log(skl_log_level level, const char *fmt, ...)
{
	if (level < min_level)
		return;
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	one_line(buf);
	emit(level, NULL, buf);
}

void cli_error(const cli_common *cc, const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	one_line(buf);
	if (format == LOG_JSON) {
		emit(SKL_LOG_ERROR, NULL, buf);
		return;
	}
	char prefix[1024]; /* a command may name a file: --config PATH: "key" */
	if (cc && cc->command)
		snprintf(prefix, sizeof(prefix), "skiplock %s: ", cc->command);
	else
		snprintf(prefix, sizeof(prefix), "skiplock: ");
	emit_text(SKL_LOG_ERROR, NULL, prefix, buf);
}

void cli_log_sink(void *ctx, skl_log_level level, const char *msg)
{
	(void)ctx;
	cli_log(level, "%s", msg);
}

void cli_log_record(void *ctx, skl_log_level level, const skl_log_context *lc, const char *msg)
{
	(void)ctx;
	if (level < min_level)
		return;
	char buf[2048];
	snprintf(buf, sizeof(buf), "%s", msg);
	one_line(buf);
	emit(level, lc, buf);
}
