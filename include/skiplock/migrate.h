/*
 * SPDX-License-Identifier: MIT
 * skiplock/migrate.h — applying a directory of SQL migrations safely
 * behind poolers and next to live traffic.
 *
 * A migration is a file NNNN_name.sql (a version of 1 to 18 digits, an
 * underscore, a name of letters, digits, '_' or '-').  Files are applied in
 * version order and recorded in a table (skiplock.migrations by default)
 * with their name, SHA-256 checksum of the text with line endings
 * normalised to LF, applied_at, duration and applied_by.
 *
 * Mutual exclusion is a skiplock lease (skiplock/lease.h), not a session
 * advisory lock: the run holds the lease, renews it from a second
 * connection, and every write to the migrations table checks the lease's
 * fencing token in the same transaction.  A migrator that finds the lease
 * held polls for it with jitter, outside any transaction.  Each file runs
 * in one transaction with SET LOCAL lock_timeout; a file whose first line
 * is "-- skiplock:no-transaction" runs statement by statement outside a
 * transaction (for CREATE INDEX CONCURRENTLY).  docs/migrations.md
 * explains the design.
 *
 * The pure functions (names, headers, checksums, splitting, endpoints) do
 * no I/O and are thread-safe.  skl_migrate_up/status block; they open
 * their own connections from the options given.
 *
 * Memory: sets and reports returned belong to the caller and are freed
 * with the matching *_free function.
 */
#ifndef SKIPLOCK_MIGRATE_H
#define SKIPLOCK_MIGRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "skiplock/client.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SKL_MIGRATE_NAME_MAX 200       /* bytes in the name part of a file name */
#define SKL_MIGRATE_FILE_MAX (16 << 20) /* bytes in one migration file */
#define SKL_MIGRATE_DIRECTIVE "-- skiplock:no-transaction"

/* One migration file, loaded and normalised. */
typedef struct skl_migration {
	int64_t version;
	char file[256];                        /* "0002_add_index.sql" */
	char name[SKL_MIGRATE_NAME_MAX + 1];   /* "add_index" */
	char checksum[65];                     /* hex SHA-256 of sql */
	bool no_transaction;
	char *sql;                             /* the text, line endings LF */
	size_t len;
} skl_migration;

typedef struct skl_migration_set {
	skl_migration *items;                  /* ascending versions */
	size_t n;
} skl_migration_set;

/* ---- pure functions ---- */

/* Parses a file name "NNNN_name.sql": *version (> 0) and the name (into
 * name, cap bytes).  SKL_INVALID naming the problem otherwise. */
SKL_API skl_rc skl_migrate_parse_name(const char *file, int64_t *version, char *name,
                                      size_t cap, skl_error *err);

/* Reads the directives of a file's first line: "-- skiplock:no-transaction"
 * sets *no_transaction.  Any other "-- skiplock:" first line is
 * SKL_INVALID (a misspelt directive must not run inside a transaction by
 * accident); any other text is an ordinary first line. */
SKL_API skl_rc skl_migrate_parse_header(const char *text, size_t len, bool *no_transaction,
                                        skl_error *err);

/* Replaces CRLF and lone CR with LF in place; returns the new length. */
SKL_API size_t skl_migrate_normalise(char *text, size_t len);

/* Hex SHA-256 of text after normalising its line endings (text is not
 * changed).  SKL_NOMEM, or SKL_OK. */
SKL_API skl_rc skl_migrate_checksum(const char *text, size_t len, char out[65],
                                    skl_error *err);

/* The next statement of text at or after *pos: its offset and length
 * (without the ';') and the 1-based line it starts on.  Quotes, quoted
 * identifiers, dollar quotes, "--" and nested block comments are skipped.
 * Returns false when only whitespace and comments are left. */
SKL_API bool skl_migrate_next_statement(const char *text, size_t len, size_t *pos,
                                        size_t *start, size_t *stmt_len, int *line);

/* The URL to migrate through: direct_url when given; else url when it is
 * not a pooler (mode, or detected from url when SKL_POOLER_AUTO); else the derived direct endpoint (a Neon "-pooler" host
 * rewritten); else url itself when allow_pooler, with *pooled set; else
 * SKL_INVALID explaining why a pooled endpoint is refused.  *out is a new
 * string (skl_free).  url and direct_url NULL: $DATABASE_URL and
 * $DIRECT_DATABASE_URL. */
SKL_API skl_rc skl_migrate_endpoint(const char *url, const char *direct_url, skl_pooler mode,
                                    bool allow_pooler, char **out, bool *pooled,
                                    skl_error *err);

/* ---- files ---- */

/* Loads every *.sql file of dir (other files and dot files are ignored).
 * SKL_INVALID for a missing directory, a .sql file whose name breaks the
 * pattern, two files with one version, a bad directive, a file that is
 * not a regular file after following symlinks (a FIFO, a device, a
 * directory) or is larger than SKL_MIGRATE_FILE_MAX; SKL_IO for a read
 * error.  Nothing is sent anywhere. */
SKL_API skl_rc skl_migrate_load_dir(const char *dir, skl_migration_set *out, skl_error *err);
/* Frees the files of a set (not the set itself, which the caller owns).
 * Accepts NULL. */
SKL_API void skl_migrate_set_free(skl_migration_set *set);

/* ---- running ---- */

/* The session found blocking a file's lock, sampled while it waited. */
typedef struct skl_migrate_blocker {
	int pid;                      /* 0: none seen */
	char state[40];
	int64_t state_age_ms;
	int64_t xact_age_ms;          /* -1: no transaction */
	char application_name[72];
	char client_addr[64];
	char query[200];
} skl_migrate_blocker;

typedef enum skl_migrate_event {
	SKL_MIGRATE_APPLYING = 0,     /* a file starts (ms: 0) */
	SKL_MIGRATE_APPLIED = 1,      /* a file was applied and recorded (ms: duration) */
	SKL_MIGRATE_BLOCKED = 2,      /* a lock wait timed out; blocker filled; retrying */
	SKL_MIGRATE_TERMINATED = 3,   /* blocker was idle past idle_for and was terminated */
	SKL_MIGRATE_WAITING = 4       /* another migrator holds the lease (ms: waited) */
} skl_migrate_event;

/* Progress, called from the thread that called skl_migrate_up. */
typedef void (*skl_migrate_progress_fn)(void *ctx, skl_migrate_event ev,
                                        const skl_migration *m,
                                        const skl_migrate_blocker *blocker, int64_t ms);

typedef struct skl_migrate_options {
	const char *table;            /* "schema.table" or "table"; NULL: skiplock.migrations */
	int64_t lock_timeout_ms;      /* per transactional file; default 5000 */
	int64_t max_wait_ms;          /* for the lease and for each blocked file; default 60000 */
	int64_t lease_ttl_ms;         /* default 30000, renewed every ttl/3 */
	bool terminate_idle_holders;  /* terminate a blocker idle (in transaction) for… */
	int64_t idle_for_ms;          /* … longer than this; default 60000 */
	const char *owner;            /* lease owner; NULL: host:pid:random */
	skl_migrate_progress_fn progress;
	void *progress_ctx;
} skl_migrate_options;
/* Fills o with the defaults above. */
SKL_API void skl_migrate_options_init(skl_migrate_options *o);

/* Checks a table name: one or two identifiers [a-z_][a-z0-9_]* joined by a
 * dot.  SKL_INVALID otherwise. */
SKL_API skl_rc skl_migrate_check_table(const char *table, skl_error *err);

/* Applies every pending file of set in order, on connections opened from
 * copts (whose url should be the direct endpoint: skl_migrate_endpoint).
 * Installs skiplock's schema and the migrations table when missing.
 * *applied (may be NULL) counts the files this call applied.
 * SKL_OK: nothing is pending.  SKL_CONFLICT: the lease stayed held past
 * max_wait, a file stayed blocked (err names the blocker), or an applied
 * file's checksum changed.  SKL_DB: a
 * file failed and rolled back (err: "FILE line N: server message").
 * SKL_FENCED: the lease was lost.  SKL_INVALID: bad options. */
SKL_API skl_rc skl_migrate_up(const skl_client_options *copts, const skl_migration_set *set,
                              const skl_migrate_options *o, int *applied, skl_error *err);

/* One row of status: a file, an applied record, or both. */
typedef struct skl_migrate_row {
	int64_t version;
	char name[SKL_MIGRATE_NAME_MAX + 1];
	bool applied;                 /* recorded in the table */
	bool present;                 /* a file exists for it */
	bool changed;                 /* applied and present, checksums differ */
	char applied_at[40];          /* ISO 8601 UTC, or "" */
	int64_t duration_ms;
	char applied_by[272];
} skl_migrate_row;

/* Applied and pending migrations, ordered by version, read without a lease
 * or any lock.  *rows is NULL and *n 0 when there is none; free *rows with
 * skl_free.  A missing migrations table means nothing is applied. */
SKL_API skl_rc skl_migrate_status(skl_client *c, const skl_migration_set *set,
                                  const char *table, skl_migrate_row **rows, size_t *n,
                                  skl_error *err);

#ifdef __cplusplus
}
#endif
#endif
