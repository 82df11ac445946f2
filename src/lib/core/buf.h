/*
 * buf.h — a growable string with a size cap and a named hand-over.
 *
 * A buffer starts empty (zero-initialised or skl_buf_init).  Appends fail
 * once the cap would be exceeded or memory runs out; the first failure
 * sticks (later appends do nothing) and skl_buf_failed reports it, so a
 * sequence of appends needs one check at the end.  skl_buf_take hands the
 * text to the caller (free with free) and leaves the buffer empty.
 */
#ifndef SKL_BUF_H
#define SKL_BUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct skl_buf {
	char *data;     /* NUL-terminated when len > 0 */
	size_t len;
	size_t cap;     /* allocated bytes */
	size_t max;     /* size cap in bytes; 0: 64 MiB */
	bool failed;
} skl_buf;

void skl_buf_init(skl_buf *b, size_t max);
void skl_buf_free(skl_buf *b);
bool skl_buf_add(skl_buf *b, const char *s, size_t n);
bool skl_buf_adds(skl_buf *b, const char *s);
bool skl_buf_printf(skl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as one element of a PostgreSQL array literal: quoted, with "
 * and \ escaped; NULL appends the unquoted NULL. */
bool skl_buf_array_elem(skl_buf *b, const char *s);
/* The n strings as a PostgreSQL text[] literal (malloc'd); NULL when out
 * of memory. */
char *skl_text_array(const char *const *v, size_t n);
const char *skl_buf_str(const skl_buf *b);  /* "" when empty */
bool skl_buf_failed(const skl_buf *b);
char *skl_buf_take(skl_buf *b);             /* NULL when failed */
void skl_buf_reset(skl_buf *b);             /* empty again, keeps memory */

#endif
