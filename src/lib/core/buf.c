/*
 * buf.c — growable string with a cap; see buf.h for the contract.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"

#define SKL_BUF_DEFAULT_MAX ((size_t)64 << 20)

void skl_buf_init(skl_buf *b, size_t max)
{
	memset(b, 0, sizeof(*b));
	b->max = max;
}

void skl_buf_free(skl_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

static bool reserve(skl_buf *b, size_t extra)
{
	size_t max = b->max ? b->max : SKL_BUF_DEFAULT_MAX;
	if (b->failed || extra > max || b->len + extra > max) {
		b->failed = true;
		return false;
	}
	size_t need = b->len + extra + 1;
	if (need <= b->cap)
		return true;
	size_t ncap = b->cap ? b->cap : 256;
	while (ncap < need)
		ncap *= 2;
	char *p = realloc(b->data, ncap);
	if (p == NULL) {
		b->failed = true;
		return false;
	}
	b->data = p;
	b->cap = ncap;
	return true;
}

bool skl_buf_add(skl_buf *b, const char *s, size_t n)
{
	if (!reserve(b, n))
		return false;
	memcpy(b->data + b->len, s, n);
	b->len += n;
	b->data[b->len] = '\0';
	return true;
}

bool skl_buf_adds(skl_buf *b, const char *s)
{
	return skl_buf_add(b, s, strlen(s));
}

bool skl_buf_printf(skl_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !reserve(b, (size_t)n))
		return b->failed = true, false;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return true;
}

bool skl_buf_array_elem(skl_buf *b, const char *s)
{
	if (s == NULL)
		return skl_buf_adds(b, "NULL");
	if (!reserve(b, 2 * strlen(s) + 2))
		return false;
	char *w = b->data + b->len;
	*w++ = '"';
	for (const char *p = s; *p; p++) {
		if (*p == '"' || *p == '\\')
			*w++ = '\\';
		*w++ = *p;
	}
	*w++ = '"';
	*w = '\0';
	b->len = (size_t)(w - b->data);
	return true;
}

char *skl_text_array(const char *const *v, size_t n)
{
	skl_buf b;
	skl_buf_init(&b, 0);
	skl_buf_adds(&b, "{");
	for (size_t i = 0; i < n; i++) {
		if (i)
			skl_buf_adds(&b, ",");
		skl_buf_array_elem(&b, v[i]);
	}
	skl_buf_adds(&b, "}");
	return skl_buf_take(&b);
}

const char *skl_buf_str(const skl_buf *b)
{
	return b->data ? b->data : "";
}

bool skl_buf_failed(const skl_buf *b)
{
	return b->failed;
}

char *skl_buf_take(skl_buf *b)
{
	if (b->failed) {
		skl_buf_free(b);
		return NULL;
	}
	char *s = b->data ? b->data : strdup("");
	memset(b, 0, sizeof(*b));
	return s;
}

void skl_buf_reset(skl_buf *b)
{
	b->len = 0;
	b->failed = false;
	if (b->data)
		b->data[0] = '\0';
}
