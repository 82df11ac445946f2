/*
 * output.h — formatting for people and machines shared by the inspecting
 * commands: aligned text tables, short durations, one JSON document.
 * Data goes to stdout; nothing here prints diagnostics.
 */
#ifndef SKL_CLI_OUTPUT_H
#define SKL_CLI_OUTPUT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A table of text cells, filled row by row (the first row is the header)
 * and printed with every column padded to its widest cell.  Cells are
 * copied.  A failed allocation sticks and is reported by cli_table_print. */
typedef struct cli_table {
	size_t ncols;
	const char *align;   /* one 'l' or 'r' per column */
	char **cells;
	size_t n, cap;
	bool failed;
} cli_table;

void cli_table_init(cli_table *t, size_t ncols, const char *align);
void cli_table_add(cli_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the table; false when a cell could not be stored. */
bool cli_table_print(const cli_table *t);
void cli_table_free(cli_table *t);

/* A duration for people: "850ms", "4.2s", "37s", "12m05s", "3h07m", "2d04h".
 * Negative durations are printed as their magnitude.  Returns buf. */
const char *cli_fmt_duration(int64_t ms, char *buf, size_t cap);

/* "in 25s" for a positive offset, "expired 3s ago" otherwise.  Returns buf. */
const char *cli_fmt_expiry(int64_t in_ms, char *buf, size_t cap);

/* An ISO 8601 UTC timestamp ("2026-05-01T08:00:00.000Z") for a table:
 * "2026-05-01 08:00:00"; NULL gives "-".  Returns buf. */
const char *cli_fmt_time(const char *iso, char *buf, size_t cap);

/* s on one line (runs of whitespace become one space), cut after max
 * characters with "..." appended; never splits a UTF-8 sequence.  cap
 * should be at least 4 * max + 8.  Returns buf. */
const char *cli_fmt_oneline(const char *s, size_t max, char *buf, size_t cap);

/* JSON helpers: a NULL string or a missing value becomes null. */
json_t *cli_json_str(const char *s);
/* JSON text as a value; text jansson cannot represent (say an integer over
 * 64 bits) is kept as a string rather than lost. */
json_t *cli_json_raw(const char *text);

/* Prints doc (which it consumes) as one indented JSON document and a
 * newline; false when it could not be built or written. */
bool cli_json_print(json_t *doc);

#endif
