/*
 * json_raw.h — JSON kept as the text it was written in.
 *
 * jansson parses a number into a 64-bit integer or a double: an integer
 * over 2^63 is refused, and a parsed 0.1000000000000000055511151231257827
 * or 1e2 is written back changed.  PostgreSQL's jsonb keeps any number its
 * numeric type holds.  So a value that goes to the database as it was
 * sent (a streaming handler's result) is never re-serialised: its text is
 * found in the line (skl__json_member), the line is parsed by jansson with
 * the numbers of that text masked (skl__json_mask_numbers: "0" and spaces,
 * same length), and the original text is what is stored, once
 * skl__json_numbers_fit says jsonb takes every number in it.
 *
 * The command's own copy of the first two (src/cli/enqueue/json_text.c)
 * serves enqueue: the command includes no internal header of the library.
 * Pure functions: no allocation, no printing; every walk is bounded by n.
 */
#ifndef SKL_JSON_RAW_H
#define SKL_JSON_RAW_H

#include <stdbool.h>
#include <stddef.h>

/* True when s[0, n) is a JSON number by RFC 8259's grammar. */
bool skl__json_is_number(const char *s, size_t n);

/* Overwrites each well-formed number of t[0, n) outside its strings with
 * "0" and spaces (same length); a malformed one is left for the parser to
 * report.  t may be any bytes. */
void skl__json_mask_numbers(char *t, size_t n);

/* The value of the top-level member key of the JSON object text t[0, n):
 * its offset and length in *off and *len, of the last such member (as
 * jansson keeps the last duplicate); escaped keys are compared decoded.
 * False when there is none or t is not an object this walk understands;
 * trust the span only once a parser accepted t. */
bool skl__json_member(const char *t, size_t n, const char *key, size_t *off, size_t *len);

/* True when every number of the JSON text t[0, n) fits PostgreSQL's
 * numeric, so that t::jsonb cannot fail on one: the most significant digit
 * at most 10^131071, at most 16383 digits after the decimal point. */
bool skl__json_numbers_fit(const char *t, size_t n);

#endif
