/*
 * json_raw.c — JSON kept as the text it was written in (see json_raw.h):
 * number masking, the span of a top-level member, numbers jsonb takes.
 *
 * Every walk reads bytes no parser has accepted yet, so each step is
 * bounded by n and a surprise ends the walk: the parser that runs next
 * reports what is wrong.
 */
#include <string.h>

#include "core/json_raw.h"

#define NO_END ((size_t)-1)
#define EXP_SATURATED 1000000000LL   /* PostgreSQL refuses |exponent| >= 2^30 - 1 */
#define NUMERIC_MAX_WEIGHT 131071    /* 10^131071: 32767 base-10000 digits */
#define NUMERIC_MAX_DSCALE 16383     /* digits after the decimal point */

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static size_t digits(const char *s, size_t i, size_t n)
{
	while (i < n && is_digit(s[i]))
		i++;
	return i;
}

bool skl__json_is_number(const char *s, size_t n)
{
	size_t i = n > 0 && s[0] == '-' ? 1 : 0;
	if (i < n && s[i] == '0')
		i++;
	else if (i < n && is_digit(s[i]))
		i = digits(s, i, n);
	else
		return false;
	if (i < n && s[i] == '.') {
		size_t j = digits(s, i + 1, n);
		if (j == i + 1)
			return false;
		i = j;
	}
	if (i < n && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < n && (s[i] == '+' || s[i] == '-'))
			i++;
		size_t j = digits(s, i, n);
		if (j == i)
			return false;
		i = j;
	}
	return i == n;
}

/* Past the closing quote of the string that starts at t[i]; NO_END when
 * it is not closed. */
static size_t skip_string(const char *t, size_t i, size_t n)
{
	for (i++; i < n; i++) {
		if (t[i] == '\\')
			i++;
		else if (t[i] == '"')
			return i + 1;
	}
	return NO_END;
}

static bool in_number(char c)
{
	return is_digit(c) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

/* Calls fn on each well-formed number of t[0, n) outside its strings;
 * stops (false) when fn says so. */
static bool each_number(char *t, size_t n, bool (*fn)(char *s, size_t len))
{
	size_t i = 0;
	while (i < n) {
		if (t[i] == '"') {
			if ((i = skip_string(t, i, n)) == NO_END)
				return true;
		} else if (t[i] == '-' || is_digit(t[i])) {
			size_t j = i;
			while (j < n && in_number(t[j]))
				j++;
			if (skl__json_is_number(t + i, j - i) && !fn(t + i, j - i))
				return false;
			i = j;
		} else {
			i++;
		}
	}
	return true;
}

static bool mask(char *s, size_t len)
{
	s[0] = '0';
	memset(s + 1, ' ', len - 1);
	return true;
}

void skl__json_mask_numbers(char *t, size_t n)
{
	each_number(t, n, mask);
}

/* The exponent of a well-formed number's "e" part (0 without one),
 * saturated at ±EXP_SATURATED. */
static long long exponent(const char *s, size_t i, size_t n)
{
	if (i >= n)
		return 0;
	bool neg = s[++i] == '-';
	if (s[i] == '-' || s[i] == '+')
		i++;
	long long e = 0;
	for (; i < n; i++)
		e = e < EXP_SATURATED ? e * 10 + (s[i] - '0') : EXP_SATURATED;
	return neg ? -e : e;
}

/* A well-formed number as PostgreSQL's numeric_in takes it: the weight of
 * its first non-zero digit and its scale (digits after the point once the
 * exponent is applied) within numeric's bounds. */
static bool number_fits(char *s, size_t n)
{
	size_t i = s[0] == '-' ? 1 : 0, int0 = i, int1 = digits(s, i, n), frac0 = int1, frac1 = int1;
	if (int1 < n && s[int1] == '.')
		frac1 = digits(s, frac0 = int1 + 1, n);
	long long e = exponent(s, frac1, n);
	if (e >= EXP_SATURATED || e <= -EXP_SATURATED)
		return false;
	long long weight = 0;
	bool zero = true;
	for (size_t k = int0; zero && k < int1; k++)
		if (s[k] != '0') {
			weight = (long long)(int1 - k) - 1;
			zero = false;
		}
	for (size_t k = frac0; zero && k < frac1; k++)
		if (s[k] != '0') {
			weight = -(long long)(k - frac0) - 1;
			zero = false;
		}
	if (!zero && weight + e > NUMERIC_MAX_WEIGHT)
		return false;
	return (long long)(frac1 - frac0) - e <= NUMERIC_MAX_DSCALE;
}

bool skl__json_numbers_fit(const char *t, size_t n)
{
	return each_number((char *)t, n, number_fits); /* number_fits writes nothing */
}

static size_t skip_ws(const char *t, size_t i, size_t n)
{
	while (i < n && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r'))
		i++;
	return i;
}

/* Past the value that starts at t[i]; NO_END when it has no end. */
static size_t skip_value(const char *t, size_t i, size_t n)
{
	if (i >= n)
		return NO_END;
	if (t[i] == '"')
		return skip_string(t, i, n);
	if (t[i] == '{' || t[i] == '[') {
		size_t depth = 0;
		while (i < n) {
			if (t[i] == '"') {
				if ((i = skip_string(t, i, n)) == NO_END)
					return NO_END;
				continue;
			}
			if (t[i] == '{' || t[i] == '[')
				depth++;
			else if ((t[i] == '}' || t[i] == ']') && --depth == 0)
				return i + 1;
			i++;
		}
		return NO_END;
	}
	size_t j = i;
	while (j < n && !strchr(",]} \t\r\n", t[j]))
		j++;
	return j > i ? j : NO_END;
}

static int hex(char c)
{
	if (is_digit(c))
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* One decoded character of the string body s[*i, n) as a byte, or -1 when
 * it is not one ASCII byte (it then equals no byte of an ASCII key). */
static int next_char(const char *s, size_t *i, size_t n)
{
	if (s[*i] != '\\')
		return (unsigned char)s[(*i)++];
	static const char esc[] = "\"\"\\\\//b\bf\fn\nr\rt\t";
	char c = *i + 1 < n ? s[*i + 1] : 'u';
	if (c != 'u') {
		const char *e = c ? strchr(esc, c) : NULL;
		*i += 2;
		return e && (e - esc) % 2 == 0 ? (unsigned char)e[1] : -1;
	}
	int v = 0;
	for (size_t k = 2; k < 6 && v >= 0; k++)
		v = *i + k < n && hex(s[*i + k]) >= 0 ? v * 16 + hex(s[*i + k]) : -1;
	*i += 6;
	return v >= 0 && v < 0x80 ? v : -1;
}

/* True when the string body s[0, n) decodes to the ASCII key. */
static bool key_is(const char *s, size_t n, const char *key)
{
	size_t i = 0, k = 0;
	while (i < n) {
		int c = next_char(s, &i, n);
		if (key[k] == '\0' || c != (unsigned char)key[k])
			return false;
		k++;
	}
	return key[k] == '\0';
}

bool skl__json_member(const char *t, size_t n, const char *key, size_t *off, size_t *len)
{
	bool found = false;
	size_t i = skip_ws(t, 0, n);
	if (i >= n || t[i] != '{')
		return false;
	i = skip_ws(t, i + 1, n);
	while (i < n && t[i] == '"') {
		size_t ke = skip_string(t, i, n);
		if (ke == NO_END)
			return false;
		bool match = key_is(t + i + 1, ke - i - 2, key);
		i = skip_ws(t, ke, n);
		if (i >= n || t[i] != ':')
			return false;
		size_t vs = skip_ws(t, i + 1, n), ve = skip_value(t, vs, n);
		if (ve == NO_END)
			return false;
		if (match) {
			*off = vs;
			*len = ve - vs;
			found = true;
		}
		i = skip_ws(t, ve, n);
		if (i >= n || t[i] != ',')
			break;
		i = skip_ws(t, i + 1, n);
	}
	return found && i < n && t[i] == '}';
}
