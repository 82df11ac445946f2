/*
 * columns.c — result rows read by name: a statement's columns are an enum
 * next to its SQL with a table of their names, and the server's answer is
 * checked against that table before any column is read by position.
 */
#include <string.h>

#include "core/internal.h"

/* The first of names[0..n) that res does not have in its place, or -1. */
static int first_mismatch(const PGresult *res, const char *const *names, int n)
{
	for (int i = 0; i < n; i++)
		if (i >= PQnfields(res) || strcmp(PQfname(res, i), names[i]) != 0)
			return i;
	return -1;
}

bool skl__columns_match(const PGresult *res, const char *const *names, int n)
{
	return first_mismatch(res, names, n) < 0;
}

skl_rc skl__check_columns(const PGresult *res, const char *const *names, int n, skl_error *err)
{
	int i = first_mismatch(res, names, n);
	if (i < 0)
		return SKL_OK;
	return skl__seterr(err, SKL_DB,
	                   "column %d of the answer is \"%s\", expected \"%s\"; run `skiplock init` "
	                   "to bring the schema to this version",
	                   i + 1, i < PQnfields(res) ? PQfname(res, i) : "(none)", names[i]);
}
