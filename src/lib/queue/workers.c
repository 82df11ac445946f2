/*
 * workers.c — skiplock/workers.h: the registry of workers that claims
 * write (sql/0016_workers.sql), read in one statement.
 *
 * The arrays (kinds, queues, the waiting kinds) come as JSON text, decoded
 * with jansson, so that no element (a kind may hold any character) needs a
 * parser of PostgreSQL's array syntax.  Each row and everything it points
 * to is one allocation: the pointer arrays first (aligned as malloc's
 * block), then the strings.  Columns are found by name (PQfnumber).
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "skiplock/workers.h"

#define TS(x) "to_char((" x ") AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
#define WORKERS_SQL(fn)                                                                     \
	"SELECT w.owner, to_json(w.kinds)::text AS kinds, to_json(w.queues)::text AS queues,"   \
	"       " TS("w.empty_at") " AS empty_at,"                                              \
	"       (extract(epoch FROM now() - w.empty_at) * 1000)::bigint AS empty_age_ms,"      \
	"       " TS("w.first_seen_at") " AS first_seen_at, w.waiting,"                         \
	"       to_json(w.waiting_kinds)::text AS waiting_kinds"                                \
	"  FROM skiplock." fn "($1::bigint * interval '1 millisecond') w ORDER BY w.owner"

static const char *const seen_sql = WORKERS_SQL("workers_seen");
static const char *const idle_sql = WORKERS_SQL("idle_workers");

enum { C_OWNER, C_KINDS, C_QUEUES, C_EMPTY_AT, C_EMPTY_AGE, C_FIRST_SEEN, C_WAITING,
       C_WKINDS, C_NCOLS };
static const char *const col_names[C_NCOLS] = {"owner", "kinds", "queues", "empty_at",
                                               "empty_age_ms", "first_seen_at", "waiting",
                                               "waiting_kinds"};

static const skl_txn_opts read_opts = {.txn = 1, .idempotent = 1};

/* A row's three arrays, decoded; NULL for a JSON null (queues: every one). */
typedef struct row_arrays {
	json_t *a[3];
} row_arrays;

/* True when a is absent or a JSON array of strings. */
static bool strings_only(const json_t *a)
{
	for (size_t i = 0; a && i < json_array_size(a); i++)
		if (!json_is_string(json_array_get(a, i)))
			return false;
	return true;
}

/* Bytes the strings of array a take, each with its NUL. */
static size_t array_bytes(const json_t *a)
{
	size_t bytes = 0;
	for (size_t i = 0; a && i < json_array_size(a); i++)
		bytes += json_string_length(json_array_get(a, i)) + 1;
	return bytes;
}

/* Copies array a's strings to *pp and their pointers to *vp; returns the
 * pointer array (NULL for an absent array). */
static const char *const *array_copy(const json_t *a, const char ***vp, char **pp)
{
	if (a == NULL)
		return NULL;
	const char **v = *vp;
	for (size_t i = 0; i < json_array_size(a); i++) {
		const json_t *s = json_array_get(a, i);
		size_t len = json_string_length(s);
		v[i] = memcpy(*pp, json_string_value(s), len);
		(*pp)[len] = '\0';
		*pp += len + 1;
	}
	*vp += json_array_size(a);
	return v;
}

static size_t text_size(const PGresult *r, int row, const int *col, int which)
{
	return (size_t)PQgetlength(r, row, col[which]) + 1;
}

static const char *text_copy(const PGresult *r, int row, const int *col, int which, char **pp)
{
	const char *s = strcpy(*pp, PQgetvalue(r, row, col[which]));
	*pp += strlen(s) + 1;
	return s;
}

/* Fills w from row `row` and its decoded arrays in one allocation; false
 * when out of memory. */
static bool fill_worker(skl_worker_info *w, const PGresult *r, int row, const int *col,
                        const row_arrays *ra)
{
	size_t bytes = 0, n[3], ptrs = 0;
	for (int i = 0; i < 3; i++) {
		n[i] = ra->a[i] ? json_array_size(ra->a[i]) : 0;
		bytes += array_bytes(ra->a[i]);
		ptrs += n[i];
	}
	bytes += text_size(r, row, col, C_OWNER) + text_size(r, row, col, C_EMPTY_AT) +
	         text_size(r, row, col, C_FIRST_SEEN);
	/* cppcheck-suppress pointerSize ; one block: ptrs pointers, then the bytes they point to */
	char *mem = malloc(ptrs * sizeof(char *) + bytes);
	if (mem == NULL)
		return false;
	const char **vp = (const char **)(void *)mem;
	char *p = mem + ptrs * sizeof(char *);
	*w = (skl_worker_info){.internal = mem, .nkinds = n[0], .nqueues = n[1],
	                       .nwaiting_kinds = n[2]};
	w->kinds = array_copy(ra->a[0], &vp, &p);
	w->queues = array_copy(ra->a[1], &vp, &p);
	w->waiting_kinds = array_copy(ra->a[2], &vp, &p);
	w->owner = text_copy(r, row, col, C_OWNER, &p);
	w->empty_at = text_copy(r, row, col, C_EMPTY_AT, &p);
	w->first_seen_at = text_copy(r, row, col, C_FIRST_SEEN, &p);
	w->empty_age_ms = strtoll(PQgetvalue(r, row, col[C_EMPTY_AGE]), NULL, 10);
	w->waiting = strtoll(PQgetvalue(r, row, col[C_WAITING]), NULL, 10);
	return true;
}

/* Decodes row `row`'s arrays and fills w. */
static skl_rc read_worker(skl_worker_info *w, const PGresult *r, int row, const int *col,
                          skl_error *err)
{
	static const int acols[3] = {C_KINDS, C_QUEUES, C_WKINDS};
	row_arrays ra = {{NULL, NULL, NULL}};
	bool ok = true;
	for (int i = 0; ok && i < 3; i++) {
		if (PQgetisnull(r, row, col[acols[i]]))
			continue;
		ra.a[i] = json_loads(PQgetvalue(r, row, col[acols[i]]), JSON_DECODE_ANY, NULL);
		ok = json_is_array(ra.a[i]) || (json_is_null(ra.a[i]) && i == 1);
		if (json_is_null(ra.a[i])) {
			json_decref(ra.a[i]);
			ra.a[i] = NULL;
		}
		ok = ok && strings_only(ra.a[i]);
	}
	bool filled = ok && fill_worker(w, r, row, col, &ra);
	for (int i = 0; i < 3; i++)
		json_decref(ra.a[i]);
	if (!ok)
		return skl__seterr(err, SKL_DB, "worker \"%s\": kinds or queues are not arrays of text",
		                   PQgetvalue(r, row, col[C_OWNER]));
	return filled ? SKL_OK : skl__seterr(err, SKL_NOMEM, "out of memory reading workers");
}

/* The column numbers of col_names in r, by name; SKL_DB when one lacks. */
static skl_rc find_columns(const PGresult *r, int *col, skl_error *err)
{
	for (int i = 0; i < C_NCOLS; i++)
		if ((col[i] = PQfnumber(r, col_names[i])) < 0)
			return skl__seterr(err, SKL_DB,
			                   "the worker registry has no column \"%s\"; run `skiplock init` "
			                   "to bring the schema to this version", col_names[i]);
	return SKL_OK;
}

static skl_rc read_rows(const PGresult *r, skl_worker_info **rows, size_t *n, skl_error *err)
{
	int col[C_NCOLS];
	skl_rc rc = find_columns(r, col, err);
	size_t m = rc == SKL_OK ? (size_t)PQntuples(r) : 0;
	skl_worker_info *out = m ? calloc(m, sizeof(*out)) : NULL;
	if (m && out == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory reading workers");
	for (size_t i = 0; rc == SKL_OK && i < m; i++)
		rc = read_worker(&out[i], r, (int)i, col, err);
	if (rc != SKL_OK) {
		skl_workers_free(out, m);
		return rc;
	}
	*rows = out;
	*n = m;
	return SKL_OK;
}

skl_rc skl_workers_list(skl_client *c, int64_t seen_ms, bool idle_only, skl_worker_info **rows,
                        size_t *n, skl_error *err)
{
	*rows = NULL;
	*n = 0;
	if (seen_ms == 0)
		seen_ms = SKL_WORKERS_SEEN_DEFAULT_MS;
	if (seen_ms < SKL_WORKERS_SEEN_MIN_MS || seen_ms > SKL_WORKERS_SEEN_MAX_MS)
		return skl__seterr(err, SKL_INVALID, "the window must be 1 s to 1 day, got %" PRId64
		                   " ms", seen_ms);
	char seen[24];
	snprintf(seen, sizeof(seen), "%" PRId64, seen_ms);
	skl_stmt s = {.sql = idle_only ? idle_sql : seen_sql, .nparams = 1, .params = {seen}};
	skl_rc rc = skl__run_stmt(c, &read_opts, &s, err);
	if (rc != SKL_OK)
		return rc;
	rc = read_rows(s.res, rows, n, err);
	PQclear(s.res);
	return rc;
}

void skl_workers_free(skl_worker_info *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		free(rows[i].internal);
	free(rows);
}
