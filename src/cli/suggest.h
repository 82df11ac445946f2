/*
 * suggest.h — "did you mean": the name of a table closest to a mistyped one.
 * Pure (no I/O), shared by the subcommand tables and the option tables.
 */
#ifndef SKL_CLI_SUGGEST_H
#define SKL_CLI_SUGGEST_H

#include <stddef.h>

/* Edits (insert, delete, substitute, swap two neighbours) that turn a into
 * b, ignoring ASCII case; at most SUGGEST_MAX_LEN + 1 (names longer than
 * SUGGEST_MAX_LEN compare as if cut there). */
#define SUGGEST_MAX_LEN 63
size_t cli_edit_distance(const char *a, const char *b);

/* The best candidate seen so far for a typed name. */
typedef struct cli_suggest {
	const char *typed;
	const char *best;   /* NULL while none is close enough */
	size_t dist;
} cli_suggest;

void cli_suggest_init(cli_suggest *s, const char *typed);
/* Considers one candidate: kept when it is close enough (one edit for a
 * name of up to four characters, two beyond, and fewer edits than the typed
 * name has characters) and strictly closer than every earlier one, so a tie
 * goes to the first in table order. */
void cli_suggest_add(cli_suggest *s, const char *candidate);

#endif
