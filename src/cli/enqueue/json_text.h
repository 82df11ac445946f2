/*
 * json_text.h — JSON checked as text, so that a payload reaches the
 * database exactly as it was written.
 *
 * jansson parses numbers into a 64-bit integer or a double: re-serialising
 * a parsed value changes 0.1, 1e2 or 1.5e300, and an integer over 2^63 or
 * a number past the double range is refused although jsonb stores it.  So
 * a payload is never re-serialised: its text is validated by jansson after
 * every well-formed number in it is masked (overwritten by "0" and spaces,
 * which keeps every column), and the original text is what is sent.
 *
 * Pure functions: no allocation, no printing.
 */
#ifndef SKL_CLI_JSON_TEXT_H
#define SKL_CLI_JSON_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/* True when s[0, n) is a JSON number by RFC 8259's grammar (no sign '+',
 * no leading zeros, digits on both sides of '.', any exponent). */
bool cli_json_is_number(const char *s, size_t n);

/* Overwrites each well-formed number of the JSON text t[0, n) outside its
 * strings with "0" and spaces (same length).  A malformed number is left
 * as it is, for the parser to report; t may be any bytes. */
void cli_json_mask_numbers(char *t, size_t n);

/* Finds the value of the top-level member named key in the JSON object
 * text t[0, n): its offset and length (no surrounding blanks) in *off and
 * *len, of the last such member as a parser that keeps the last duplicate
 * does.  Escaped keys are compared decoded.  Returns false when there is
 * no such member or t is not an object this scanner can walk; t may be
 * any bytes, and is trusted only once a parser accepted it. */
bool cli_json_member(const char *t, size_t n, const char *key, size_t *off, size_t *len);

#endif
