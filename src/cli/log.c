/*
 * log.c — diagnostics of the command on stderr: levels, text or JSON lines.
 *
 * Text lines follow PostgreSQL's message style: "skiplock: LEVEL: message",
 * primary message lower case, no final period.  JSON lines carry time,
 * level and message.
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

static const char *const level_names[] = {"debug", "info", "warning", "error"};

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

static void emit(skl_log_level level, const char *msg)
{
	if (format == LOG_JSON) {
		struct timeval tv;
		gettimeofday(&tv, NULL);
		struct tm tm;
		gmtime_r(&tv.tv_sec, &tm);
		char ts[40];
		size_t n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
		snprintf(ts + n, sizeof(ts) - n, ".%03ldZ", (long)(tv.tv_usec / 1000));
		json_t *o = json_pack("{s:s, s:s, s:s}", "time", ts, "level", level_names[level],
		                      "message", msg);
		char *line = o ? json_dumps(o, JSON_COMPACT) : NULL;
		if (line)
			fprintf(stderr, "%s\n", line);
		free(line);
		json_decref(o);
	} else {
		fprintf(stderr, "skiplock: %s: %s\n", level_names[level], msg);
	}
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
	size_t n = strlen(buf);
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	for (char *p = buf; *p; p++)
		if (*p == '\n')
			*p = ' ';
	emit(level, buf);
}

void cli_error(const cli_common *cc, const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	for (char *p = buf; *p; p++)
		if (*p == '\n')
			*p = ' ';
	if (format == LOG_JSON) {
		char line[2200];
		snprintf(line, sizeof(line), "%s%s%s", cc && cc->command ? cc->command : "",
		         cc && cc->command ? ": " : "", buf);
		emit(SKL_LOG_ERROR, line);
		return;
	}
	if (cc && cc->command)
		fprintf(stderr, "skiplock %s: %s\n", cc->command, buf);
	else
		fprintf(stderr, "skiplock: %s\n", buf);
}

void cli_log_sink(void *ctx, skl_log_level level, const char *msg)
{
	(void)ctx;
	cli_log(level, "%s", msg);
}
