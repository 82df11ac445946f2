/*
 * tz.c — time zones from the system tz database, without the process TZ.
 *
 * A zone file is TZif (RFC 8536).  Version 2 and later files carry a second
 * data block with 64-bit transition times, which is the one read here (a
 * version 1 file's 32-bit block is read when there is no other), and a
 * footer: a POSIX TZ string ("CET-1CEST,M3.5.0,M10.5.0/3") that gives the
 * rule for every instant after the last transition.  Debian ships "fat"
 * files whose table runs to 2037; "slim" files stop at the last rule
 * change.  Either way, instants after the table are computed from the
 * footer's rule, year by year, so far-future fire times follow the same
 * rule as next year's.
 *
 * Invariants: a loaded zone is immutable and lives until the process ends
 * (the cache only grows, bounded by the number of zone files); the cache
 * is guarded by one mutex, held only to look up or insert.  Zone names are
 * checked before any file is opened, so a name can never leave the zone
 * directory.  Files with leap-second records ("right/…") are refused:
 * their transition times are not Unix seconds.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coord/tz.h"

#define SKL_ZONE_NAME_MAX 128
#define SKL_ZONE_FILE_MAX (1024 * 1024)
#define SKL_OFFSET_MIN (-89999)          /* RFC 8536: utoff in (-25h, 26h) */
#define SKL_OFFSET_MAX 93599

/* ---- civil calendar (days since 1970-01-01, proleptic Gregorian) ---- */

int64_t skl__floordiv(int64_t a, int64_t b)
{
	int64_t q = a / b;
	return (a % b != 0 && a < 0) ? q - 1 : q;
}

int64_t skl__days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = skl__floordiv(y, 400);
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

void skl__civil_from_days(int64_t days, int64_t *y, int *m, int *d)
{
	int64_t z = days + 719468;
	int64_t era = skl__floordiv(z, 146097);
	int64_t doe = z - era * 146097;
	int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64_t mp = (5 * doy + 2) / 153;
	*d = (int)(doy - (153 * mp + 2) / 5 + 1);
	*m = (int)(mp < 10 ? mp + 3 : mp - 9);
	*y = yoe + era * 400 + (*m <= 2);
}

int skl__weekday(int64_t days)
{
	return (int)((days % 7 + 11) % 7); /* 1970-01-01 was a Thursday (4) */
}

static bool is_leap(int64_t y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int skl__days_in_month(int64_t y, int m)
{
	static const int dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	return m == 2 && is_leap(y) ? 29 : dim[m - 1];
}

/* ---- the footer's POSIX TZ rule ---- */

typedef struct rule_date {
	char kind;       /* 'J': Julian day 1..365 without Feb 29; 'D': day 0..365;
	                  * 'M': month a, week b (5 = last), weekday c */
	int a, b, c;
	int32_t time;    /* seconds after local midnight, -167h..167h */
} rule_date;

typedef struct posix_rule {
	int32_t std_off, dst_off;  /* UTC offsets, east positive */
	bool has_dst;
	rule_date start, end;      /* start: in standard time; end: in DST */
} posix_rule;

static const char *parse_abbr(const char *p)
{
	const char *s = p;
	if (*p == '<') {
		for (p++; *p && *p != '>'; p++)
			if (!isalnum((unsigned char)*p) && *p != '+' && *p != '-')
				return NULL;
		return *p == '>' && p - s >= 4 ? p + 1 : NULL;
	}
	while (isalpha((unsigned char)*p))
		p++;
	return p - s >= 3 ? p : NULL;
}

/* [+-]h[hh][:mm[:ss]] into seconds; hours at most max_h. */
static const char *parse_hms(const char *p, int max_h, int32_t *out)
{
	int sign = 1, part[3] = {0, 0, 0};
	if (*p == '+' || *p == '-')
		sign = *p++ == '-' ? -1 : 1;
	for (int i = 0; i < 3; i++) {
		if (i > 0 && *p != ':')
			break;
		p += i > 0;
		if (!isdigit((unsigned char)*p))
			return NULL;
		for (int n = 0; isdigit((unsigned char)*p); p++, n++)
			if (n == 3 || (part[i] = part[i] * 10 + (*p - '0')) > (i ? 59 : max_h))
				return NULL;
	}
	*out = sign * (part[0] * 3600 + part[1] * 60 + part[2]);
	return p;
}

static const char *parse_num(const char *p, int lo, int hi, int *out)
{
	int v = 0, n = 0;
	for (; isdigit((unsigned char)*p); p++, n++)
		if (n == 3 || (v = v * 10 + (*p - '0')) > hi)
			return NULL;
	if (n == 0 || v < lo)
		return NULL;
	*out = v;
	return p;
}

static const char *parse_rule_date(const char *p, rule_date *d)
{
	*d = (rule_date){.kind = 'D', .time = 7200};
	if (*p == 'J') {
		d->kind = 'J';
		p = parse_num(p + 1, 1, 365, &d->a);
	} else if (*p == 'M') {
		d->kind = 'M';
		p = parse_num(p + 1, 1, 12, &d->a);
		p = p && *p == '.' ? parse_num(p + 1, 1, 5, &d->b) : NULL;
		p = p && *p == '.' ? parse_num(p + 1, 0, 6, &d->c) : NULL;
	} else {
		p = parse_num(p, 0, 365, &d->a);
	}
	if (p && *p == '/')
		p = parse_hms(p + 1, 167, &d->time);
	return p;
}

/* Parses a footer TZ string; false when it is not one we understand. */
static bool parse_posix(const char *s, posix_rule *r)
{
	int32_t off;
	const char *p = parse_abbr(s);
	if (p == NULL || (p = parse_hms(p, 24, &off)) == NULL)
		return false;
	*r = (posix_rule){.std_off = -off, .dst_off = -off + 3600};
	if (*p == '\0')
		return true;
	if ((p = parse_abbr(p)) == NULL)
		return false;
	r->has_dst = true;
	if (*p && *p != ',') {
		if ((p = parse_hms(p, 24, &off)) == NULL)
			return false;
		r->dst_off = -off;
	}
	if (*p == '\0') /* no rule given: POSIX leaves it open; use the US rule */
		return parse_rule_date("M3.2.0", &r->start) && parse_rule_date("M11.1.0", &r->end);
	if (*p != ',' || (p = parse_rule_date(p + 1, &r->start)) == NULL || *p != ',')
		return false;
	p = parse_rule_date(p + 1, &r->end);
	return p != NULL && *p == '\0';
}

static int64_t rule_day(const rule_date *d, int64_t y)
{
	int64_t jan1 = skl__days_from_civil(y, 1, 1);
	if (d->kind == 'J')
		return jan1 + d->a - 1 + (is_leap(y) && d->a >= 60);
	if (d->kind == 'D')
		return jan1 + d->a;
	int64_t first = skl__days_from_civil(y, d->a, 1);
	int64_t day = first + (d->c - skl__weekday(first) + 7) % 7 + (d->b - 1) * 7;
	while (day >= first + skl__days_in_month(y, d->a))
		day -= 7;
	return day;
}

typedef struct rule_tr {
	int64_t at;
	int32_t off;   /* offset from `at` on */
} rule_tr;

/* The rule's transitions of years y0..y0+3, in time order (on a tie the
 * start of DST sorts last, so a rule with DST all year stays in DST). */
static void rule_transitions(const posix_rule *r, int64_t y0, rule_tr tr[8])
{
	for (int i = 0; i < 4; i++) {
		tr[2 * i] = (rule_tr){rule_day(&r->end, y0 + i) * 86400 + r->end.time - r->dst_off,
		                      r->std_off};
		tr[2 * i + 1] = (rule_tr){
			rule_day(&r->start, y0 + i) * 86400 + r->start.time - r->std_off, r->dst_off};
	}
	for (int i = 1; i < 8; i++) /* insertion sort, stable */
		for (int j = i; j > 0 && tr[j].at < tr[j - 1].at; j--) {
			rule_tr x = tr[j];
			tr[j] = tr[j - 1];
			tr[j - 1] = x;
		}
}

static int64_t year_of(int64_t t)
{
	int64_t y;
	int m, d;
	skl__civil_from_days(skl__floordiv(t, 86400), &y, &m, &d);
	return y;
}

static int32_t rule_offset(const posix_rule *r, int64_t t)
{
	if (!r->has_dst)
		return r->std_off;
	rule_tr tr[8];
	rule_transitions(r, year_of(t) - 2, tr);
	int32_t off = tr[0].off;
	for (int i = 0; i < 8 && tr[i].at <= t; i++)
		off = tr[i].off;
	return off;
}

static bool rule_next(const posix_rule *r, int64_t t, int64_t *next)
{
	if (!r->has_dst)
		return false;
	rule_tr tr[8];
	rule_transitions(r, year_of(t) - 1, tr);
	for (int i = 0; i < 8; i++)
		if (tr[i].at > t) {
			*next = tr[i].at;
			return true;
		}
	return false;
}

/* ---- zones ---- */

struct skl_tz {
	struct skl_tz *next;            /* the cache's list */
	char name[SKL_ZONE_NAME_MAX + 1];
	size_t ntrans;
	int64_t *trans;                 /* ascending instants */
	unsigned char *types;           /* type index per transition */
	int32_t utoff[256];
	size_t ntypes;
	bool has_rule;
	posix_rule rule;
};

int32_t skl__tz_offset(const skl_tz *z, int64_t t)
{
	if (z->ntrans > 0 && t < z->trans[0])
		return z->utoff[0];
	if (z->has_rule && (z->ntrans == 0 || t >= z->trans[z->ntrans - 1]))
		return rule_offset(&z->rule, t);
	if (z->ntrans == 0)
		return z->utoff[0];
	size_t lo = 0, hi = z->ntrans; /* the last transition <= t is in [lo, hi) */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (z->trans[mid] <= t)
			lo = mid;
		else
			hi = mid;
	}
	return z->utoff[z->types[lo]];
}

/* The first transition after t, from the table or, past it, the rule. */
static bool next_transition(const skl_tz *z, int64_t t, int64_t *next)
{
	if (z->ntrans > 0 && t < z->trans[z->ntrans - 1]) {
		size_t lo = 0, hi = z->ntrans - 1; /* the first > t is in [lo, hi] */
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (z->trans[mid] > t)
				hi = mid;
			else
				lo = mid + 1;
		}
		*next = z->trans[lo];
		return true;
	}
	if (!z->has_rule)
		return false;
	int64_t floor = z->ntrans ? z->trans[z->ntrans - 1] : t;
	return rule_next(&z->rule, t > floor ? t : floor, next);
}

int64_t skl__tz_resolve(const skl_tz *z, int64_t local)
{
	/* Walk the segments between transitions from well before `local`
	 * (offsets stay within 26 hours): the first segment whose local range
	 * holds `local` gives its first occurrence; a transition that jumps
	 * over it is the end of its gap. */
	int64_t t = local - 30 * 3600;
	int32_t off = skl__tz_offset(z, t);
	for (int i = 0; i < 64; i++) {
		int64_t next;
		if (!next_transition(z, t, &next) || local < next + off)
			return local - off;
		t = next;
		off = skl__tz_offset(z, t);
		if (local < t + off)
			return t;
	}
	return local - off;
}

/* ---- TZif ---- */

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p)
{
	return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

typedef struct tzif_counts {
	size_t isut, isstd, leap, time, type, chars;
} tzif_counts;

static bool read_counts(const unsigned char *h, size_t len, tzif_counts *c)
{
	if (len < 44 || memcmp(h, "TZif", 4) != 0)
		return false;
	*c = (tzif_counts){be32(h + 20), be32(h + 24), be32(h + 28), be32(h + 32), be32(h + 36),
	                   be32(h + 40)};
	return c->time < 1000000 && c->type >= 1 && c->type <= 256 && c->chars < 100000 &&
	       c->leap < 100000 && c->isut <= c->type && c->isstd <= c->type;
}

static size_t block_size(const tzif_counts *c, size_t tsize)
{
	return c->time * (tsize + 1) + c->type * 6 + c->chars + c->leap * (tsize + 4) + c->isstd +
	       c->isut;
}

/* Fills z from the data block at p (times of tsize bytes). */
static skl_rc load_block(skl_tz *z, const unsigned char *p, const tzif_counts *c, size_t tsize,
                         skl_error *err)
{
	if (c->leap > 0)
		return skl__seterr(err, SKL_INVALID, "time zone \"%s\" counts leap seconds, which "
		                   "cron schedules do not support", z->name);
	z->trans = malloc((c->time ? c->time : 1) * sizeof(int64_t));
	z->types = malloc(c->time ? c->time : 1);
	if (z->trans == NULL || z->types == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	for (size_t i = 0; i < c->time; i++) {
		z->trans[i] = tsize == 8 ? be64(p + 8 * i) : (int32_t)be32(p + 4 * i);
		z->types[i] = p[c->time * tsize + i];
		if (z->types[i] >= c->type || (i > 0 && z->trans[i] <= z->trans[i - 1]))
			return skl__seterr(err, SKL_INVALID, "time zone file of \"%s\" is corrupt", z->name);
	}
	const unsigned char *tt = p + c->time * (tsize + 1);
	for (size_t i = 0; i < c->type; i++) {
		z->utoff[i] = (int32_t)be32(tt + 6 * i);
		if (z->utoff[i] < SKL_OFFSET_MIN || z->utoff[i] > SKL_OFFSET_MAX)
			return skl__seterr(err, SKL_INVALID, "time zone file of \"%s\" is corrupt", z->name);
	}
	z->ntrans = c->time;
	z->ntypes = c->type;
	return SKL_OK;
}

static skl_rc parse_tzif(skl_tz *z, const unsigned char *buf, size_t len, skl_error *err)
{
	tzif_counts c1, c2;
	if (!read_counts(buf, len, &c1))
		return skl__seterr(err, SKL_INVALID, "\"%s\" is not a time zone (not a TZif file)",
		                   z->name);
	size_t v1 = 44 + block_size(&c1, 4);
	if (buf[4] < '2' || v1 > len) /* version 1: 32-bit times, no footer */
		return v1 > len ? skl__seterr(err, SKL_INVALID, "time zone file of \"%s\" is truncated",
		                              z->name)
		                : load_block(z, buf + 44, &c1, 4, err);
	if (!read_counts(buf + v1, len - v1, &c2) || v1 + 44 + block_size(&c2, 8) > len)
		return skl__seterr(err, SKL_INVALID, "time zone file of \"%s\" is truncated", z->name);
	skl_rc rc = load_block(z, buf + v1 + 44, &c2, 8, err);
	size_t foot = v1 + 44 + block_size(&c2, 8);
	if (rc != SKL_OK || foot >= len || buf[foot] != '\n')
		return rc;
	const unsigned char *end = memchr(buf + foot + 1, '\n', len - foot - 1);
	char tzstr[128];
	size_t n = end ? (size_t)(end - (buf + foot + 1)) : 0;
	if (n == 0 || n >= sizeof(tzstr))
		return SKL_OK; /* no rule: the last transition's type holds for ever */
	memcpy(tzstr, buf + foot + 1, n);
	tzstr[n] = '\0';
	z->has_rule = parse_posix(tzstr, &z->rule);
	if (!z->has_rule)
		return skl__seterr(err, SKL_INVALID, "time zone \"%s\": cannot read its rule \"%s\"",
		                   z->name, tzstr);
	return SKL_OK;
}

/* A name is components of [A-Za-z0-9_+-] (dots allowed, not leading),
 * separated by single slashes: nothing can climb out of the directory. */
static bool name_ok(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > SKL_ZONE_NAME_MAX)
		return false;
	for (const char *p = name; *p; p++) {
		bool start = p == name || p[-1] == '/';
		if (start && (*p == '/' || *p == '.' || *p == '\0'))
			return false;
		if (!isalnum((unsigned char)*p) && !strchr("_+-./", *p))
			return false;
	}
	return name[n - 1] != '/';
}

static void tz_free(skl_tz *z)
{
	if (z) {
		free(z->trans);
		free(z->types);
		free(z);
	}
}

static skl_rc read_zone_file(const char *name, unsigned char **out, size_t *len, skl_error *err)
{
	const char *dir = getenv("TZDIR");
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir && dir[0] == '/' ? dir : "/usr/share/zoneinfo",
	         name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > SKL_ZONE_FILE_MAX) {
		if (fd >= 0)
			close(fd);
		return skl__seterr(err, SKL_INVALID, "unknown time zone \"%s\" (not in the tz database)",
		                   name);
	}
	unsigned char *buf = malloc((size_t)st.st_size + 1);
	size_t got = 0;
	ssize_t r = 1;
	while (buf && got < (size_t)st.st_size && r > 0)
		if ((r = read(fd, buf + got, (size_t)st.st_size - got)) > 0)
			got += (size_t)r;
	close(fd);
	if (buf == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	*out = buf;
	*len = got;
	return SKL_OK;
}

static skl_rc load_zone(const char *name, skl_tz **out, skl_error *err)
{
	skl_tz *z = calloc(1, sizeof(*z));
	if (z == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	snprintf(z->name, sizeof(z->name), "%s", name);
	if (strcmp(name, "UTC") == 0) { /* works without the tz database */
		z->ntypes = 1;
		*out = z;
		return SKL_OK;
	}
	unsigned char *buf = NULL;
	size_t len = 0;
	skl_rc rc = read_zone_file(name, &buf, &len, err);
	if (rc == SKL_OK)
		rc = parse_tzif(z, buf, len, err);
	free(buf);
	if (rc != SKL_OK) {
		tz_free(z);
		return rc;
	}
	*out = z;
	return SKL_OK;
}

static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;
static skl_tz *cache;

static const skl_tz *cache_find(const char *name)
{
	for (const skl_tz *z = cache; z; z = z->next)
		if (strcmp(z->name, name) == 0)
			return z;
	return NULL;
}

skl_rc skl__tz_get(const char *name, const skl_tz **out, skl_error *err)
{
	*out = NULL;
	if (name == NULL || !name_ok(name))
		return skl__seterr(err, SKL_INVALID, "invalid time zone name \"%s\"",
		                   name ? name : "(null)");
	pthread_mutex_lock(&cache_mu);
	const skl_tz *found = cache_find(name);
	pthread_mutex_unlock(&cache_mu);
	if (found) {
		*out = found;
		return SKL_OK;
	}
	skl_tz *z = NULL;
	skl_rc rc = load_zone(name, &z, err); /* outside the lock: file I/O */
	if (rc != SKL_OK)
		return rc;
	pthread_mutex_lock(&cache_mu);
	found = cache_find(name); /* another thread may have loaded it meanwhile */
	if (found == NULL) {
		z->next = cache;
		cache = z;
		found = z;
		z = NULL;
	}
	pthread_mutex_unlock(&cache_mu);
	tz_free(z);
	*out = found;
	return SKL_OK;
}
