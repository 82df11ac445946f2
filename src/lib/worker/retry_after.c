/*
 * retry_after.c — the `Retry-After` header (RFC 9110 §10.2.3): a pure
 * parser, kept apart from the HTTP code so it can be tested and fuzzed on
 * its own.
 *
 * delay-seconds is 1*DIGIT; anything else must be an HTTP date, which
 * curl_getdate reads in all three historical forms.  A number that
 * overflows or a date far ahead is capped at one year: a server cannot push
 * a job out of reach by accident.
 */
#include <ctype.h>
#include <string.h>

#include "worker/curl_lazy.h"
#include "core/internal.h"
#include "skiplock/webhook.h"

#define YEAR_MS (366LL * 24 * 3600 * 1000)
#define VALUE_MAX 128 /* longer values are not a date or a sane number */

static bool parse_seconds(const char *s, size_t n, int64_t *ms)
{
	int64_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i]))
			return false;
		if (v < YEAR_MS) /* stop growing once over the cap: no overflow */
			v = v * 10 + (s[i] - '0');
	}
	v = v > YEAR_MS / 1000 ? YEAR_MS : v * 1000;
	*ms = v;
	return true;
}

static bool parse_date(const char *s, int64_t now_s, int64_t *ms)
{
	/* curl_getdate also takes bare numbers and time zone names alone;
	 * an HTTP date always has letters and digits. */
	bool alpha = false, digit = false;
	for (const char *p = s; *p; p++) {
		alpha |= isalpha((unsigned char)*p) != 0;
		digit |= isdigit((unsigned char)*p) != 0;
	}
	if (!alpha || !digit)
		return false;
	if (!skl__curl_load(NULL))
		return false;
	time_t t = curl_getdate(s, NULL);
	if (t == (time_t)-1)
		return false;
	int64_t d = (int64_t)t - now_s;
	if (d <= 0)
		*ms = 0;
	else
		*ms = d > YEAR_MS / 1000 ? YEAR_MS : d * 1000;
	return true;
}

bool skl_retry_after_ms(const char *value, int64_t now_s, int64_t *delay_ms)
{
	if (value == NULL)
		return false;
	while (*value == ' ' || *value == '\t')
		value++;
	size_t n = strlen(value);
	while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t' || value[n - 1] == '\r' ||
	                 value[n - 1] == '\n'))
		n--;
	if (n == 0 || n > VALUE_MAX)
		return false;
	char buf[VALUE_MAX + 1];
	memcpy(buf, value, n);
	buf[n] = '\0';
	int64_t ms;
	bool ok = isdigit((unsigned char)buf[0]) && strspn(buf, "0123456789") == n
	                  ? parse_seconds(buf, n, &ms)
	                  : parse_date(buf, now_s, &ms);
	if (ok)
		*delay_ms = ms;
	return ok;
}
