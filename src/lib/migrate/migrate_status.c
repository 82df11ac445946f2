/*
 * migrate_status.c — applied and pending migrations, read without a lease:
 * the files of a directory merged with the rows of the migrations table.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "skiplock/migrate.h"

typedef struct status_call {
	const char *table;
	PGresult *res;            /* NULL when the table does not exist */
} status_call;

static skl_rc status_fn(skl_client *c, void *ctx, skl_error *err)
{
	status_call *sc = ctx;
	PGresult *res = NULL;
	const char *p[1] = {sc->table};
	skl_rc rc = skl__exec(c, "SELECT to_regclass($1) IS NOT NULL", 1, p, &res, err);
	if (rc != SKL_OK)
		return rc;
	bool exists = PQgetvalue(res, 0, 0)[0] == 't';
	PQclear(res);
	PQclear(sc->res);
	sc->res = NULL;
	if (!exists)
		return SKL_OK;
	char sql[512];
	snprintf(sql, sizeof(sql),
	         "SELECT version, name, checksum,"
	         "       to_char(applied_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),"
	         "       duration_ms, applied_by FROM %s ORDER BY version", sc->table);
	return skl__exec(c, sql, 0, NULL, &sc->res, err);
}

static void from_row(skl_migrate_row *row, const PGresult *r, int i)
{
	row->version = strtoll(PQgetvalue(r, i, 0), NULL, 10);
	row->applied = true;
	snprintf(row->name, sizeof(row->name), "%s", PQgetvalue(r, i, 1));
	snprintf(row->applied_at, sizeof(row->applied_at), "%s", PQgetvalue(r, i, 3));
	row->duration_ms = strtoll(PQgetvalue(r, i, 4), NULL, 10);
	snprintf(row->applied_by, sizeof(row->applied_by), "%s", PQgetvalue(r, i, 5));
}

static void from_file(skl_migrate_row *row, const skl_migration *m, const char *recorded)
{
	row->version = m->version;
	row->present = true;
	if (!row->applied)
		snprintf(row->name, sizeof(row->name), "%s", m->name);
	row->changed = recorded && strcmp(recorded, m->checksum) != 0;
}

/* Merges the sorted files and the sorted rows into out (room for both). */
static size_t merge(const skl_migration_set *set, const PGresult *r, skl_migrate_row *out)
{
	size_t i = 0, n = 0;
	int j = 0, rows = r ? PQntuples(r) : 0;
	while (i < set->n || j < rows) {
		int64_t fv = i < set->n ? set->items[i].version : INT64_MAX;
		int64_t rv = j < rows ? strtoll(PQgetvalue(r, j, 0), NULL, 10) : INT64_MAX;
		skl_migrate_row *row = &out[n++];
		if (rv <= fv)
			from_row(row, r, j);
		if (fv <= rv)
			from_file(row, &set->items[i], rv == fv ? PQgetvalue(r, j, 2) : NULL);
		i += fv <= rv;
		j += rv <= fv;
	}
	return n;
}

skl_rc skl_migrate_status(skl_client *c, const skl_migration_set *set, const char *table,
                          skl_migrate_row **rows, size_t *n, skl_error *err)
{
	*rows = NULL;
	*n = 0;
	if (table == NULL)
		table = "skiplock.migrations";
	if (skl_migrate_check_table(table, err) != SKL_OK)
		return SKL_INVALID;
	status_call sc = {.table = table};
	static const skl_txn_opts o = {.idempotent = 1};
	skl_rc rc = skl__run(c, &o, status_fn, &sc, err);
	if (rc != SKL_OK) {
		PQclear(sc.res);
		return rc;
	}
	size_t cap = set->n + (sc.res ? (size_t)PQntuples(sc.res) : 0);
	skl_migrate_row *out = cap ? calloc(cap, sizeof(*out)) : NULL;
	if (cap && out == NULL) {
		PQclear(sc.res);
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	}
	*n = cap ? merge(set, sc.res, out) : 0;
	*rows = out;
	PQclear(sc.res);
	skl_error_clear(err);
	return SKL_OK;
}
