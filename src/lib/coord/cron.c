/*
 * cron.c — cron expressions: parsing, next fire time in a zone, and the
 * plan of one evaluation (which fire times a tick enqueues).
 *
 * An expression is five bit sets plus Vixie's two "star" flags, or an
 * @every period.  Fire times are found in local wall-clock time, minute by
 * minute but skipping whole months, days and hours that cannot match, and
 * each matching local time is turned into an instant by skl__tz_resolve
 * (tz.c), which applies the DST rule: a skipped local time fires at the end
 * of its gap, a repeated one at its first occurrence.  That map is
 * monotone, so "the first fire time after t" is the first matching local
 * time at or after t's own local time whose instant is after t.
 *
 * Nothing here reads a clock: "now" is always given (the database's).
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coord/cron_int.h"
#include "coord/tz.h"

struct skl_cron_expr {
	uint64_t minute;   /* bit m: minute m, 0..59 */
	uint64_t hour;     /* bit h: hour h, 0..23 */
	uint64_t dom;      /* bit d: day d of the month, 1..31 */
	uint64_t month;    /* bit m: month m, 1..12 */
	uint64_t dow;      /* bit d: weekday d, 0 = Sunday (7 is folded into 0) */
	bool dom_star;     /* the field begins with '*': day matching is AND */
	bool dow_star;
	int64_t every;     /* @every: the period in seconds; 0 otherwise */
};

enum { F_MINUTE, F_HOUR, F_DOM, F_MONTH, F_DOW, NFIELDS };

static const char *const month_names[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                          "jul", "aug", "sep", "oct", "nov", "dec"};
static const char *const day_names[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

static const struct field_def {
	const char *name;
	int lo, hi;
	const char *const *names;  /* names[i] is value base + i */
	int base, nnames;
} fields[NFIELDS] = {
	{"minute", 0, 59, NULL, 0, 0},
	{"hour", 0, 23, NULL, 0, 0},
	{"day-of-month", 1, 31, NULL, 0, 0},
	{"month", 1, 12, month_names, 1, 12},
	{"day-of-week", 0, 7, day_names, 0, 7},
};

static const struct macro {
	const char *name;
	const char *fields;
} macros[] = {
	{"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
	{"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
	{"@hourly", "0 * * * *"},
};

/* ---- parsing ---- */

typedef struct parser {
	const char *text;     /* the whole expression, for messages */
	int field;            /* index into fields, or -1 */
	skl_error *err;
} parser;

/* "invalid cron expression "…": hour field, character 7: …" */
static skl_rc fail_at(const parser *ps, size_t pos, const char *fmt, ...) SKL_PRINTF(3, 4);
static skl_rc fail_at(const parser *ps, size_t pos, const char *fmt, ...)
{
	char what[200];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return skl__seterr(ps->err, SKL_INVALID, "invalid cron expression \"%s\": %s%scharacter %zu: %s",
	                   ps->text, ps->field >= 0 ? fields[ps->field].name : "",
	                   ps->field >= 0 ? " field, " : "", pos + 1, what);
}

static bool is_sep(char c)
{
	return c == ' ' || c == '\t';
}

/* A number or (where the field has them) a name, at *p < end. */
static skl_rc parse_value(const parser *ps, const char **p, const char *end, int *out)
{
	const struct field_def *f = &fields[ps->field];
	const char *s = *p;
	size_t pos = (size_t)(s - ps->text);
	if (isdigit((unsigned char)*s)) {
		long v = 0;
		for (; *p < end && isdigit((unsigned char)**p); (*p)++)
			if ((v = v * 10 + (**p - '0')) > 9999)
				return fail_at(ps, pos, "number too large");
		if (v < f->lo || v > f->hi)
			return fail_at(ps, pos, "%ld is out of range %d-%d", v, f->lo, f->hi);
		*out = (int)v;
		return SKL_OK;
	}
	if (!isalpha((unsigned char)*s))
		return fail_at(ps, pos, "unexpected character '%c' (expected a number%s)", *s,
		               f->names ? " or a name" : "");
	size_t n = 0;
	while (s + n < end && isalpha((unsigned char)s[n]))
		n++;
	for (int i = 0; f->names && n == 3 && i < f->nnames; i++)
		if (strncasecmp(s, f->names[i], 3) == 0) {
			*p = s + 3;
			*out = f->base + i;
			return SKL_OK;
		}
	if (n == 1 && strchr("LW", toupper((unsigned char)*s)))
		return fail_at(ps, pos, "'%c' is not supported (Vixie cron syntax only)", *s);
	return fail_at(ps, pos, "unknown name \"%.*s\"%s", (int)(n > 20 ? 20 : n), s,
	               f->names ? (ps->field == F_MONTH ? " (expected jan..dec)" : " (expected sun..sat)")
	                        : " (this field takes numbers only)");
}

static void set_range(uint64_t *bits, int field, int lo, int hi, int step)
{
	for (int v = lo; v <= hi; v += step)
		*bits |= UINT64_C(1) << (field == F_DOW && v == 7 ? 0 : v);
}

/* One list item: *, *\/S, N, N-M, N-M/S or N/S (N to the field's end). */
static skl_rc parse_item(const parser *ps, const char **p, const char *end, uint64_t *bits)
{
	const struct field_def *f = &fields[ps->field];
	int lo = f->lo, hi = f->hi, step = 1;
	bool single = false;
	size_t item = (size_t)(*p - ps->text);
	skl_rc rc;
	if (**p == '*') {
		(*p)++;
	} else {
		if ((rc = parse_value(ps, p, end, &lo)) != SKL_OK)
			return rc;
		hi = lo;
		single = true;
		if (*p < end && **p == '-') {
			const char *at = ++(*p);
			if (*p == end)
				return fail_at(ps, (size_t)(at - ps->text), "range without an end");
			if ((rc = parse_value(ps, p, end, &hi)) != SKL_OK)
				return rc;
			if (hi < lo)
				return fail_at(ps, item,
				               "range %d-%d runs backwards (wrap-around is not supported)", lo, hi);
			single = false;
		}
	}
	if (*p < end && **p == '/') {
		const char *at = ++(*p);
		long v = 0;
		for (; *p < end && isdigit((unsigned char)**p); (*p)++)
			if ((v = v * 10 + (**p - '0')) > 9999)
				break;
		if (*p == at)
			return fail_at(ps, (size_t)(at - ps->text), "step must be a number");
		if (v < 1 || v > f->hi)
			return fail_at(ps, (size_t)(at - ps->text), "step %ld is out of range 1-%d", v, f->hi);
		step = (int)v;
		if (single)
			hi = f->hi == 7 ? 6 : f->hi;
	}
	set_range(bits, ps->field, lo, hi, step);
	return SKL_OK;
}

static skl_rc parse_field(parser *ps, const char *s, const char *end, uint64_t *bits,
                          bool *star)
{
	*star = *s == '*';
	const char *p = s;
	for (;;) {
		skl_rc rc = parse_item(ps, &p, end, bits);
		if (rc != SKL_OK)
			return rc;
		if (p == end)
			return SKL_OK;
		if (*p != ',')
			return fail_at(ps, (size_t)(p - ps->text), "unexpected character '%c'", *p);
		if (++p == end)
			return fail_at(ps, (size_t)(p - 1 - ps->text), "list ends with ','");
	}
}

/* True when some selected month has some selected day (Feb 29 counts). */
static bool days_exist(const skl_cron_expr *e)
{
	static const int max_days[13] = {0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	for (int m = 1; m <= 12; m++)
		for (int d = 1; (e->month >> m & 1) && d <= max_days[m]; d++)
			if (e->dom >> d & 1)
				return true;
	return false;
}

static skl_rc parse_fields(parser *ps, const char *s, skl_cron_expr *e)
{
	uint64_t *bits[NFIELDS] = {&e->minute, &e->hour, &e->dom, &e->month, &e->dow};
	bool star[NFIELDS];
	size_t dom_at = 0;
	const char *p = s;
	for (int i = 0; i < NFIELDS; i++) {
		while (is_sep(*p))
			p++;
		ps->field = -1;
		if (*p == '\0')
			return fail_at(ps, (size_t)(p - ps->text), "expected 5 fields (minute hour "
			               "day-of-month month day-of-week), found %d", i);
		const char *end = p;
		while (*end && !is_sep(*end))
			end++;
		ps->field = i;
		if (i == F_DOM)
			dom_at = (size_t)(p - ps->text);
		skl_rc rc = parse_field(ps, p, end, bits[i], &star[i]);
		if (rc != SKL_OK)
			return rc;
		p = end;
	}
	while (is_sep(*p))
		p++;
	ps->field = -1;
	if (*p)
		return fail_at(ps, (size_t)(p - ps->text), "unexpected sixth field (seconds and years "
		               "are not supported)");
	e->dom_star = star[F_DOM];
	e->dow_star = star[F_DOW];
	ps->field = F_DOM;
	if ((e->dom_star || e->dow_star) && !days_exist(e))
		return fail_at(ps, dom_at, "never fires: no selected month has any of the selected days");
	return SKL_OK;
}

static skl_rc parse_every(parser *ps, const char *s, skl_cron_expr *e)
{
	const char *p = s + strlen("@every");
	if (!is_sep(*p))
		return fail_at(ps, (size_t)(p - ps->text), "expected a duration after @every");
	while (is_sep(*p))
		p++;
	char dur[64];
	size_t n = strcspn(p, " \t");
	const char *rest = p + n;
	while (is_sep(*rest))
		rest++;
	if (n == 0 || *rest)
		return fail_at(ps, (size_t)((n ? rest : p) - ps->text), "expected one duration after @every");
	snprintf(dur, sizeof(dur), "%.*s", (int)(n < 63 ? n : 63), p);
	int64_t ms = 0;
	skl_error derr;
	if (skl_duration_parse(dur, &ms, &derr) != SKL_OK)
		return fail_at(ps, (size_t)(p - ps->text), "%s", derr.message);
	if (ms < 1000 || ms % 1000 != 0)
		return fail_at(ps, (size_t)(p - ps->text), "@every needs whole seconds, at least 1s");
	e->every = ms / 1000;
	return SKL_OK;
}

static skl_rc parse_macro(parser *ps, const char *s, skl_cron_expr *e)
{
	size_t n = strcspn(s, " \t");
	if (n == strlen("@every") && strncmp(s, "@every", n) == 0)
		return parse_every(ps, s, e);
	for (size_t i = 0; i < SKL_ARRAY_LEN(macros); i++)
		if (strlen(macros[i].name) == n && strncasecmp(s, macros[i].name, n) == 0) {
			const char *rest = s + n;
			while (is_sep(*rest))
				rest++;
			if (*rest)
				return fail_at(ps, (size_t)(rest - ps->text), "unexpected text after %s",
				               macros[i].name);
			parser sub = {.text = macros[i].fields, .field = -1, .err = ps->err};
			return parse_fields(&sub, macros[i].fields, e);
		}
	return fail_at(ps, (size_t)(s - ps->text), "unknown macro \"%.*s\" (expected @yearly, "
	               "@monthly, @weekly, @daily, @hourly or @every DUR)", (int)(n > 20 ? 20 : n), s);
}

skl_rc skl_cron_parse(const char *text, skl_cron_expr **out, skl_error *err)
{
	*out = NULL;
	if (text == NULL)
		return skl__seterr(err, SKL_INVALID, "cron expression is NULL");
	parser ps = {.text = text, .field = -1, .err = err};
	size_t len = strlen(text);
	if (len > SKL_CRON_EXPR_MAX)
		return skl__seterr(err, SKL_INVALID, "cron expression is %zu bytes, over the limit of %d",
		                   len, SKL_CRON_EXPR_MAX);
	for (size_t i = 0; i < len; i++)
		if (!isprint((unsigned char)text[i]) && text[i] != '\t')
			return fail_at(&ps, i, "unexpected control or non-ASCII character");
	skl_cron_expr *e = calloc(1, sizeof(*e));
	if (e == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	const char *s = text;
	while (is_sep(*s))
		s++;
	skl_rc rc = *s == '@' ? parse_macro(&ps, s, e) : parse_fields(&ps, s, e);
	if (rc != SKL_OK) {
		free(e);
		return rc;
	}
	*out = e;
	skl_error_clear(err);
	return SKL_OK;
}

void skl_cron_expr_free(skl_cron_expr *e)
{
	free(e);
}

/* ---- fire times ---- */

static bool day_matches(const skl_cron_expr *e, int d, int wd)
{
	bool dom = e->dom >> d & 1, dow = e->dow >> wd & 1;
	return e->dom_star || e->dow_star ? dom && dow : dom || dow;
}

/* Advances *local (minute-aligned) to the first matching local time at or
 * after it; false when there is none up to limit. */
static bool match_from(const skl_cron_expr *e, int64_t *local, int64_t limit)
{
	int64_t l = *local;
	while (l <= limit) {
		int64_t days = skl__floordiv(l, 86400), y;
		int sec = (int)(l - days * 86400), m, d, h = sec / 3600, mi = sec % 3600 / 60;
		skl__civil_from_days(days, &y, &m, &d);
		if (!(e->month >> m & 1)) {
			l = skl__days_from_civil(m == 12 ? y + 1 : y, m == 12 ? 1 : m + 1, 1) * 86400;
			continue;
		}
		if (!day_matches(e, d, skl__weekday(days))) {
			l = (days + 1) * 86400;
			continue;
		}
		uint64_t later = e->minute >> mi << mi;
		if (!(e->hour >> h & 1) || later == 0) {
			l = days * 86400 + (h + 1) * 3600;
			continue;
		}
		*local = days * 86400 + h * 3600 + (int64_t)__builtin_ctzll(later) * 60;
		return true;
	}
	return false;
}

static skl_rc next_in_zone(const skl_cron_expr *e, const skl_tz *z, int64_t after,
                           int64_t *next, skl_error *err)
{
	int64_t local = after + skl__tz_offset(z, after);
	int64_t l = (skl__floordiv(local, 60) + 1) * 60;
	int64_t limit = local + INT64_C(100) * 366 * 86400;
	/* The resolved instant of a local time at or after after's own local
	 * time is normally after `after`; it is not only inside a repeated hour
	 * (the first occurrence came earlier), which this loop steps over. */
	while (match_from(e, &l, limit)) {
		int64_t t = skl__tz_resolve(z, l);
		if (t > after && t <= SKL_CRON_T_MAX) {
			*next = t;
			return SKL_OK;
		}
		if (t > after)
			break;
		l += 60;
	}
	return skl__seterr(err, SKL_EMPTY, "the expression does not fire within 100 years");
}

skl_rc skl_cron_next(const skl_cron_expr *e, const char *zone, int64_t after, int64_t *next,
                     skl_error *err)
{
	*next = 0;
	if (e == NULL)
		return skl__seterr(err, SKL_MISUSE, "cron expression is NULL");
	if (after < SKL_CRON_T_MIN || after > SKL_CRON_T_MAX)
		return skl__seterr(err, SKL_INVALID, "instant %lld is outside years 1 to 9999",
		                   (long long)after);
	if (e->every) {
		int64_t t = (skl__floordiv(after, e->every) + 1) * e->every;
		if (t > SKL_CRON_T_MAX)
			return skl__seterr(err, SKL_EMPTY, "no fire time before the year 10000");
		*next = t;
		skl_error_clear(err);
		return SKL_OK;
	}
	const skl_tz *z;
	skl_rc rc = skl__tz_get(zone ? zone : "UTC", &z, err);
	if (rc == SKL_OK && (rc = next_in_zone(e, z, after, next, err)) == SKL_OK)
		skl_error_clear(err);
	return rc;
}

skl_rc skl_cron_zone_check(const char *zone, skl_error *err)
{
	const skl_tz *z;
	skl_rc rc = skl__tz_get(zone, &z, err);
	if (rc == SKL_OK)
		skl_error_clear(err);
	return rc;
}

/* ---- instants as text ---- */

static void format_civil(int64_t local, char *buf, size_t cap)
{
	int64_t days = skl__floordiv(local, 86400), y;
	int sec = (int)(local - days * 86400), m, d;
	skl__civil_from_days(days, &y, &m, &d);
	char tmp[64]; /* years are bounded by SKL_CRON_T_MIN/MAX; the compiler cannot tell */
	int n = snprintf(tmp, sizeof(tmp), "%04lld-%02d-%02dT%02d:%02d:%02d", (long long)y, m, d,
	                 sec / 3600, sec % 3600 / 60, sec % 60);
	size_t len = n < 0 ? 0 : (size_t)n < cap - 1 ? (size_t)n : cap - 1;
	memcpy(buf, tmp, len);
	buf[len] = '\0';
}

void skl_cron_format_utc(int64_t t, char *buf)
{
	if (t < SKL_CRON_T_MIN || t > SKL_CRON_T_MAX)
		t = t < 0 ? SKL_CRON_T_MIN : SKL_CRON_T_MAX;
	format_civil(t, buf, SKL_CRON_TIME_LEN - 1);
	strcat(buf, "Z");
}

skl_rc skl_cron_format_local(int64_t t, const char *zone, char *buf, skl_error *err)
{
	buf[0] = '\0';
	const skl_tz *z;
	skl_rc rc = skl__tz_get(zone ? zone : "UTC", &z, err);
	if (rc != SKL_OK)
		return rc;
	if (t < SKL_CRON_T_MIN || t > SKL_CRON_T_MAX)
		t = t < 0 ? SKL_CRON_T_MIN : SKL_CRON_T_MAX;
	int32_t off = skl__tz_offset(z, t), a = off < 0 ? -off : off;
	format_civil(t + off, buf, SKL_CRON_LOCAL_LEN);
	snprintf(buf + 19, SKL_CRON_LOCAL_LEN - 19, "%c%02d:%02d", off < 0 ? '-' : '+', a / 3600 % 100,
	         a % 3600 / 60 % 60);
	skl_error_clear(err);
	return SKL_OK;
}

static bool digits(const char *s, int n, int *out)
{
	*out = 0;
	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i]))
			return false;
		*out = *out * 10 + (s[i] - '0');
	}
	return true;
}

bool skl__cron_time_parse(const char *s, int64_t *t)
{
	int y, mo, d, h, mi, sec = 0, oh = 0, om = 0;
	if (strlen(s) < 17 || !digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) ||
	    s[7] != '-' || !digits(s + 8, 2, &d) || (s[10] != 'T' && s[10] != ' ') ||
	    !digits(s + 11, 2, &h) || s[13] != ':' || !digits(s + 14, 2, &mi))
		return false;
	const char *p = s + 16;
	if (*p == ':' && !(digits(p + 1, 2, &sec) && (p += 3)))
		return false;
	int sign = *p == '-' ? -1 : 1;
	if (*p == 'Z')
		p++;
	else if ((*p == '+' || *p == '-') && digits(p + 1, 2, &oh) && p[3] == ':' &&
	         digits(p + 4, 2, &om))
		p += 6;
	else
		return false;
	if (*p || mo < 1 || mo > 12 || d < 1 || d > skl__days_in_month(y, mo) || h > 23 ||
	    mi > 59 || sec > 59)
		return false;
	*t = skl__days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec -
	     sign * (oh * 3600 + om * 60);
	return true;
}

/* ---- plans ---- */

static const char *const catch_up_names[] = {
	[SKL_CATCH_UP_LATEST] = "latest", [SKL_CATCH_UP_NONE] = "none", [SKL_CATCH_UP_ALL] = "all"};

skl_rc skl_catch_up_parse(const char *s, skl_catch_up *out, skl_error *err)
{
	for (size_t i = 0; s && i < SKL_ARRAY_LEN(catch_up_names); i++)
		if (strcmp(s, catch_up_names[i]) == 0) {
			*out = (skl_catch_up)i;
			skl_error_clear(err);
			return SKL_OK;
		}
	return skl__seterr(err, SKL_INVALID,
	                   "unknown catch-up policy \"%s\" (expected none, latest or all)", s ? s : "");
}

const char *skl_catch_up_name(skl_catch_up c)
{
	return (unsigned)c < SKL_ARRAY_LEN(catch_up_names) ? catch_up_names[c] : "?";
}

typedef struct window {
	int64_t *ring;      /* the newest `max` fire times seen, circular */
	size_t max;
	size_t total;       /* fire times seen in this pass */
} window;

/* Fire times in (lo, hi] into w, the newest w->max kept. */
static skl_rc scan(const skl_cron_expr *e, const char *zone, int64_t lo, int64_t hi, window *w,
                   skl_error *err)
{
	w->total = 0;
	for (int64_t t = lo;;) {
		int64_t f;
		skl_rc rc = skl_cron_next(e, zone, t, &f, err);
		if (rc == SKL_EMPTY || (rc == SKL_OK && f > hi))
			return SKL_OK;
		if (rc != SKL_OK)
			return rc;
		w->ring[w->total++ % w->max] = f;
		t = f;
	}
}

/* The newest w->max fire times in (lo, hi]: scans windows ending at hi
 * that grow fourfold until they hold enough or reach lo, so the work
 * depends on max, not on how far back lo is. */
static skl_rc newest_fires(const skl_cron_expr *e, const char *zone, int64_t lo, int64_t hi,
                           window *w, skl_error *err)
{
	for (int64_t span = 64;; span *= 4) {
		int64_t from = hi - lo <= span ? lo : hi - span;
		skl_rc rc = scan(e, zone, from, hi, w, err);
		if (rc != SKL_OK || w->total >= w->max || from == lo)
			return rc;
	}
}

static skl_rc plan_fires(const skl_cron_expr *e, const char *zone, int64_t cursor, int64_t now,
                         size_t max, skl_cron_plan *p, skl_error *err)
{
	window w = {.ring = malloc(max * sizeof(int64_t)), .max = max};
	if (w.ring == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	skl_rc rc = newest_fires(e, zone, cursor, now, &w, err);
	size_t n = w.total < max ? w.total : max;
	p->fires = rc == SKL_OK && n ? malloc(n * sizeof(int64_t)) : NULL;
	if (rc == SKL_OK && n && p->fires == NULL)
		rc = skl__seterr(err, SKL_NOMEM, "out of memory");
	for (size_t i = 0; rc == SKL_OK && i < n; i++) /* oldest kept first */
		p->fires[i] = w.ring[(w.total - n + i) % max];
	if (rc == SKL_OK) {
		p->nfires = n;
		p->newest = n ? p->fires[n - 1] : cursor;
	}
	free(w.ring);
	return rc;
}

skl_rc skl__cron_plan(const skl_cron_expr *e, const char *zone, int64_t cursor, int64_t now,
                      skl_catch_up policy, int bound, int64_t grace_s, skl_cron_plan *p,
                      skl_error *err)
{
	memset(p, 0, sizeof(*p));
	int64_t first;
	skl_rc rc = skl_cron_next(e, zone, cursor, &first, err);
	if (rc == SKL_EMPTY)
		return SKL_OK; /* never fires again: nothing due, no next */
	if (rc != SKL_OK)
		return rc;
	if (first > now) {
		p->has_next = true;
		p->next = first;
		return SKL_OK;
	}
	p->any_due = true;
	p->behind = now - first > grace_s;
	size_t max = !p->behind || policy == SKL_CATCH_UP_ALL ? (size_t)(bound > 0 ? bound : 1) : 1;
	if ((rc = plan_fires(e, zone, cursor, now, max, p, err)) != SKL_OK)
		return rc;
	if (p->behind && policy == SKL_CATCH_UP_NONE) {
		free(p->fires);
		p->fires = NULL;
		p->nfires = 0;
	}
	rc = skl_cron_next(e, zone, p->newest, &p->next, err);
	p->has_next = rc == SKL_OK;
	return rc == SKL_EMPTY ? SKL_OK : rc;
}

void skl__cron_plan_free(skl_cron_plan *p)
{
	free(p->fires);
	memset(p, 0, sizeof(*p));
}
