/*
 * duration.c — "250ms", "5s", "1h30m", "2d" and bare seconds to milliseconds.
 */
#include <ctype.h>
#include <stdint.h>
#include <string.h>

#include "core/internal.h"

static const struct unit {
	const char *name;
	int64_t ms;
} units[] = {
	{"ms", 1}, {"s", 1000}, {"sec", 1000}, {"m", 60000}, {"min", 60000},
	{"h", 3600000}, {"d", 86400000},
};

static int64_t unit_ms(const char *u, size_t n)
{
	for (size_t i = 0; i < SKL_ARRAY_LEN(units); i++)
		if (strlen(units[i].name) == n && strncmp(units[i].name, u, n) == 0)
			return units[i].ms;
	return -1;
}

#define SKL_DURATION_MAX_MS ((int64_t)100 * 365 * 86400000)

skl_rc skl_duration_parse(const char *s, int64_t *ms, skl_error *err)
{
	if (s == NULL || *s == '\0')
		return skl__seterr(err, SKL_INVALID, "empty duration");
	int64_t total = 0;
	const char *p = s;
	while (*p) {
		if (!isdigit((unsigned char)*p))
			return skl__seterr(err, SKL_INVALID,
			                   "invalid duration \"%s\": expected a number at \"%s\"", s, p);
		int64_t n = 0;
		for (; isdigit((unsigned char)*p); p++) {
			n = n * 10 + (*p - '0');
			if (n > SKL_DURATION_MAX_MS)
				return skl__seterr(err, SKL_INVALID, "duration \"%s\" is too large", s);
		}
		size_t ul = 0;
		while (isalpha((unsigned char)p[ul]))
			ul++;
		int64_t per = ul == 0 ? (p == s + strlen(s) && total == 0 ? 1000 : -1)
		                      : unit_ms(p, ul);
		if (per < 0)
			return skl__seterr(err, SKL_INVALID,
			                   "invalid duration \"%s\": unknown or missing unit at \"%s\" "
			                   "(use ms, s, m, h or d)", s, p);
		/* cppcheck-suppress zerodivcond ; per > 0: per < 0 returned above and no unit is 0 ms */
		if (n > SKL_DURATION_MAX_MS / per || total + n * per > SKL_DURATION_MAX_MS)
			return skl__seterr(err, SKL_INVALID, "duration \"%s\" is too large", s);
		total += n * per;
		p += ul;
	}
	*ms = total;
	skl_error_clear(err);
	return SKL_OK;
}
