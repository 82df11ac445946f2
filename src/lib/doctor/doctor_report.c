/*
 * doctor_report.c — the memory of a `doctor locks` report (every block
 * owned by the report, freed with it), the array literals and session
 * columns read from the statements' rows.  Used by doctor_locks.c (reading)
 * and doctor_findings.c (the findings); calls neither.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "doctor/doctor_int.h"

void *dl_alloc(dl_report *d, size_t size)
{
	if (d->nblocks == d->capblocks) {
		size_t cap = d->capblocks ? 2 * d->capblocks : 16;
		void **b = realloc(d->blocks, cap * sizeof(*b));
		if (b == NULL)
			return NULL;
		d->blocks = b;
		d->capblocks = cap;
	}
	void *p = calloc(1, size ? size : 1);
	if (p)
		d->blocks[d->nblocks++] = p;
	return p;
}

char *dl_strdup(dl_report *d, const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = dl_alloc(d, n);
	if (p)
		memcpy(p, s, n);
	return p;
}

/* Splits an array literal's elements (quoted or not) into a copy. */
static size_t split_elems(char *s, char **elems, size_t max)
{
	size_t n = 0;
	char *p = s + (*s == '{'), *w;
	while (*p && *p != '}' && n < max) {
		elems[n++] = w = p;
		bool quoted = *p == '"';
		p += quoted;
		while (*p && (quoted ? *p != '"' : (*p != ',' && *p != '}'))) {
			if (quoted && *p == '\\' && p[1])
				p++;
			*w++ = *p++;
		}
		p += quoted && *p == '"';
		char end = *p;
		*w = '\0';
		if (end == ',')
			p++;
		else if (end)
			*p = '\0';
	}
	return n;
}

bool dl_text_array(dl_report *d, const char *text, char ***out, size_t *n)
{
	*out = NULL;
	*n = 0;
	if (text == NULL || strcmp(text, "{}") == 0)
		return true;
	char *copy = dl_strdup(d, text);
	size_t max = 1;
	for (const char *p = text; *p; p++)
		max += *p == ',';
	char **elems = dl_alloc(d, max * sizeof(char *));
	if (copy == NULL || elems == NULL)
		return false;
	*n = split_elems(copy, elems, max);
	*out = elems;
	return true;
}

bool dl_int_array(dl_report *d, const char *text, int **out, size_t *n)
{
	char **elems;
	size_t k;
	*out = NULL;
	*n = 0;
	if (!dl_text_array(d, text, &elems, &k))
		return false;
	if (k == 0)
		return true;
	int *v = dl_alloc(d, k * sizeof(int));
	if (v == NULL)
		return false;
	for (size_t i = 0; i < k; i++)
		v[i] = atoi(elems[i]);
	*out = v;
	*n = k;
	return true;
}

const char *dl_text_or_null(const PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
}

int64_t dl_int_or(const PGresult *r, int row, int col, int64_t dflt)
{
	return PQgetisnull(r, row, col) ? dflt : strtoll(PQgetvalue(r, row, col), NULL, 10);
}

void dl_fill_session(skl_db_session *s, const PGresult *r, int row, int pid_col, int col)
{
	*s = (skl_db_session){
		.pid = (int)dl_int_or(r, row, pid_col, 0),
		.state = dl_text_or_null(r, row, col),
		.state_age_ms = dl_int_or(r, row, col + 1, -1),
		.xact_age_ms = dl_int_or(r, row, col + 2, -1),
		.application_name = dl_text_or_null(r, row, col + 3),
		.client_addr = dl_text_or_null(r, row, col + 4),
		.user = dl_text_or_null(r, row, col + 5),
		.query = dl_text_or_null(r, row, col + 6),
		.can_terminate = PQgetvalue(r, row, col + 7)[0] == 't',
		.backend_start_us = dl_int_or(r, row, col + 8, 0),
	};
}
