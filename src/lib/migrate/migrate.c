/*
 * migrate.c — migration files: names, the first-line directive, line-ending
 * normalisation, checksums, statement splitting, loading a directory, and
 * choosing the endpoint.  Pure except skl_migrate_load_dir (reads files);
 * nothing here talks to the database.  The run is migrate_run.c.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/internal.h"
#include "skiplock/migrate.h"

/* ---- names ---- */

static bool name_char(char ch)
{
	return isalnum((unsigned char)ch) || ch == '_' || ch == '-';
}

skl_rc skl_migrate_parse_name(const char *file, int64_t *version, char *name, size_t cap,
                              skl_error *err)
{
	*version = 0;
	if (cap)
		name[0] = '\0';
	size_t n = file ? strlen(file) : 0, digits = 0;
	while (digits < n && isdigit((unsigned char)file[digits]))
		digits++;
	if (digits == 0 || digits > 18 || digits >= n || file[digits] != '_')
		return skl__seterr(err, SKL_INVALID, "migration file \"%s\" does not match "
		                   "NNNN_name.sql (a version of 1 to 18 digits, then '_')",
		                   file ? file : "");
	if (n < digits + 1 + 4 || strcmp(file + n - 4, ".sql") != 0)
		return skl__seterr(err, SKL_INVALID, "migration file \"%s\" does not end in .sql", file);
	size_t nlen = n - 4 - digits - 1;
	for (size_t i = digits + 1; i < n - 4; i++)
		if (!name_char(file[i]))
			nlen = 0;
	if (nlen == 0 || nlen > SKL_MIGRATE_NAME_MAX || nlen >= cap)
		return skl__seterr(err, SKL_INVALID, "migration file \"%s\": the name after the "
		                   "version must be 1 to %d letters, digits, '_' or '-'", file,
		                   SKL_MIGRATE_NAME_MAX);
	int64_t v = 0;
	for (size_t i = 0; i < digits; i++)
		v = v * 10 + (file[i] - '0');
	if (v <= 0)
		return skl__seterr(err, SKL_INVALID, "migration file \"%s\": version must be above 0",
		                   file);
	*version = v;
	memcpy(name, file + digits + 1, nlen);
	name[nlen] = '\0';
	skl_error_clear(err);
	return SKL_OK;
}

skl_rc skl_migrate_parse_header(const char *text, size_t len, bool *no_transaction,
                                skl_error *err)
{
	static const char prefix[] = "-- skiplock:";
	*no_transaction = false;
	size_t eol = 0;
	while (eol < len && text[eol] != '\n' && text[eol] != '\r')
		eol++;
	size_t end = eol;
	while (end > 0 && (text[end - 1] == ' ' || text[end - 1] == '\t'))
		end--;
	size_t plen = sizeof(prefix) - 1;
	if (end < plen || memcmp(text, prefix, plen) != 0) {
		skl_error_clear(err);
		return SKL_OK;
	}
	if (end == strlen(SKL_MIGRATE_DIRECTIVE) &&
	    memcmp(text, SKL_MIGRATE_DIRECTIVE, end) == 0) {
		*no_transaction = true;
		skl_error_clear(err);
		return SKL_OK;
	}
	int shown = (int)(end > 80 ? 80 : end);
	return skl__seterr(err, SKL_INVALID, "unknown directive \"%.*s\" (the only one is \"%s\")",
	                   shown, text, SKL_MIGRATE_DIRECTIVE);
}

/* ---- line endings and checksums ---- */

size_t skl_migrate_normalise(char *text, size_t len)
{
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		if (text[i] == '\r') {
			text[o++] = '\n';
			if (i + 1 < len && text[i + 1] == '\n')
				i++;
		} else {
			text[o++] = text[i];
		}
	}
	return o;
}

skl_rc skl_migrate_checksum(const char *text, size_t len, char out[65], skl_error *err)
{
	out[0] = '\0';
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
	/* Feed runs between CRs; each CR or CRLF becomes one LF. */
	size_t i = 0;
	while (ok && i < len) {
		size_t j = i;
		while (j < len && text[j] != '\r')
			j++;
		ok = (j == i || EVP_DigestUpdate(ctx, text + i, j - i));
		if (ok && j < len) {
			ok = EVP_DigestUpdate(ctx, "\n", 1);
			j += (j + 1 < len && text[j + 1] == '\n') ? 2 : 1;
		}
		i = j;
	}
	ok = ok && EVP_DigestFinal_ex(ctx, md, &mdlen) && mdlen == 32;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return skl__seterr(err, SKL_NOMEM, "SHA-256 failed in libcrypto");
	static const char digits[] = "0123456789abcdef";
	for (unsigned int k = 0; k < mdlen; k++) {
		out[2 * k] = digits[md[k] >> 4];
		out[2 * k + 1] = digits[md[k] & 0xf];
	}
	out[64] = '\0';
	skl_error_clear(err);
	return SKL_OK;
}

/* ---- statements ---- */

bool skl_migrate_next_statement(const char *text, size_t len, size_t *pos, size_t *start,
                                size_t *stmt_len, int *line)
{
	return skl__next_statement(text, len, pos, start, stmt_len, line);
}

/* ---- the endpoint ---- */

static const char *env_or(const char *v, const char *name)
{
	if (v && *v)
		return v;
	const char *e = getenv(name);
	return e && *e ? e : NULL;
}

skl_rc skl_migrate_endpoint(const char *url, const char *direct_url, skl_pooler mode,
                            bool allow_pooler, char **out, bool *pooled, skl_error *err)
{
	*out = NULL;
	*pooled = false;
	url = env_or(url, "DATABASE_URL");
	direct_url = env_or(direct_url, "DIRECT_DATABASE_URL");
	const char *pick = direct_url ? direct_url : url ? url : "";
	skl_pooler p = SKL_POOLER_NONE;
	if (skl_url_detect_pooler(pick, &p, err) != SKL_OK)
		return SKL_INVALID;
	if (direct_url == NULL && mode != SKL_POOLER_AUTO)
		p = mode;
	if (direct_url == NULL && p != SKL_POOLER_NONE) {
		if (skl_url_direct(pick, out, err) == SKL_OK && strcmp(*out, pick) != 0)
			return SKL_OK; /* a Neon "-pooler" host, rewritten */
		free(*out);
		*out = NULL;
		if (!allow_pooler)
			return skl__seterr(err, SKL_INVALID,
			                   "refusing to migrate through a connection pooler: the URL "
			                   "looks pooled (%s mode) and no direct endpoint is known; "
			                   "migrations need one session for DDL, lock diagnostics and "
			                   "no-transaction statements, so pass --direct-url or set "
			                   "DIRECT_DATABASE_URL (or --allow-pooler to run anyway)",
			                   skl_pooler_name(p));
		*pooled = true;
	}
	if ((*out = skl__strdup(pick)) == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	skl_error_clear(err);
	return SKL_OK;
}

/* ---- loading a directory ---- */

/* Opened without blocking (a FIFO has no writer to wait for), following
 * symlinks; what is open must then be a regular file of at most
 * SKL_MIGRATE_FILE_MAX bytes, so a FIFO, a device such as /dev/zero or a
 * directory named like a migration is refused before a byte is read. */
static skl_rc open_regular(const char *path, int *fd, skl_error *err)
{
	struct stat st;
	*fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (*fd < 0)
		return skl__seterr_errno(err, errno, "cannot open %s", path);
	const char *why = fstat(*fd, &st) != 0 ? strerror(errno)
	                  : !S_ISREG(st.st_mode) ? "not a regular file"
	                  : st.st_size > SKL_MIGRATE_FILE_MAX ? "larger than the limit" : NULL;
	if (why == NULL)
		return SKL_OK;
	close(*fd);
	*fd = -1;
	return skl__seterr(err, SKL_INVALID, "migration file %s: %s (a migration must be a "
	                   "regular file of at most %d MiB; a symlink is followed)", path, why,
	                   SKL_MIGRATE_FILE_MAX >> 20);
}

/* Reads at most SKL_MIGRATE_FILE_MAX bytes: the file may grow after fstat. */
static skl_rc read_capped(int fd, const char *path, skl_buf *b, skl_error *err)
{
	char chunk[8192];
	for (;;) {
		ssize_t n = read(fd, chunk, sizeof(chunk));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return skl__seterr_errno(err, errno, "cannot read %s", path);
		if (n == 0)
			return SKL_OK;
		if (b->len + (size_t)n > SKL_MIGRATE_FILE_MAX)
			return skl__seterr(err, SKL_INVALID, "migration file %s: larger than the limit "
			                   "(a migration must be a regular file of at most %d MiB)",
			                   path, SKL_MIGRATE_FILE_MAX >> 20);
		if (!skl_buf_add(b, chunk, (size_t)n))
			return skl__seterr(err, SKL_NOMEM, "out of memory reading %s", path);
	}
}

static skl_rc read_file(const char *path, char **text, size_t *len, skl_error *err)
{
	*text = NULL;
	*len = 0;
	int fd;
	skl_rc rc = open_regular(path, &fd, err);
	if (rc != SKL_OK)
		return rc;
	skl_buf b = {0};
	rc = read_capped(fd, path, &b, err);
	close(fd);
	if (rc == SKL_OK && memchr(b.data ? b.data : "", '\0', b.len) != NULL)
		rc = skl__seterr(err, SKL_INVALID, "%s contains a NUL byte: not SQL text", path);
	if (rc != SKL_OK) {
		skl_buf_free(&b);
		return rc;
	}
	*len = skl_migrate_normalise(b.data, b.len);
	if (b.data)
		b.data[*len] = '\0';
	*text = b.data ? b.data : strdup("");
	return *text ? SKL_OK : skl__seterr(err, SKL_NOMEM, "out of memory");
}

static bool wanted(const char *n)
{
	size_t len = strlen(n);
	return n[0] != '.' && len >= 4 && strcmp(n + len - 4, ".sql") == 0;
}

static int by_version(const void *a, const void *b)
{
	const skl_migration *x = a, *y = b;
	return x->version < y->version ? -1 : x->version > y->version;
}

/* Names, versions and duplicates, before any file is read. */
static skl_rc list_dir(const char *dir, skl_migration_set *set, skl_error *err)
{
	DIR *d = opendir(dir);
	if (d == NULL)
		return errno == ENOENT || errno == ENOTDIR
		           ? skl__seterr(err, SKL_INVALID, "migrations directory %s: %s", dir,
		                         strerror(errno))
		           : skl__seterr_errno(err, errno, "cannot read directory %s", dir);
	size_t cap = 0;
	skl_rc rc = SKL_OK;
	for (struct dirent *e; rc == SKL_OK && (e = readdir(d)) != NULL;) {
		if (!wanted(e->d_name))
			continue;
		if (set->n == cap) {
			cap = cap ? 2 * cap : 16;
			skl_migration *grown = realloc(set->items, cap * sizeof(*grown));
			if (grown == NULL) {
				rc = skl__seterr(err, SKL_NOMEM, "out of memory");
				break;
			}
			set->items = grown;
		}
		skl_migration *m = &set->items[set->n];
		memset(m, 0, sizeof(*m));
		rc = skl_migrate_parse_name(e->d_name, &m->version, m->name, sizeof(m->name), err);
		snprintf(m->file, sizeof(m->file), "%s", e->d_name);
		set->n += rc == SKL_OK;
	}
	closedir(d);
	return rc;
}

static skl_rc check_duplicates(const skl_migration_set *set, skl_error *err)
{
	for (size_t i = 1; i < set->n; i++)
		if (set->items[i].version == set->items[i - 1].version)
			return skl__seterr(err, SKL_INVALID, "%s and %s have the same version %" PRId64,
			                   set->items[i - 1].file, set->items[i].file,
			                   set->items[i].version);
	return SKL_OK;
}

/* A transactional file must not end or start transactions itself: its
 * statements already run inside one, with the record written last. */
static skl_rc check_txn_control(const skl_migration *m, skl_error *err)
{
	static const char *const words[] = {"begin", "commit", "rollback", "end", "start",
	                                    "abort"};
	size_t pos = 0, start, len;
	int line;
	while (skl_migrate_next_statement(m->sql, m->len, &pos, &start, &len, &line)) {
		size_t w = 0;
		while (w < len && isalpha((unsigned char)m->sql[start + w]))
			w++;
		for (size_t i = 0; i < SKL_ARRAY_LEN(words); i++)
			if (w == strlen(words[i]) && strncasecmp(m->sql + start, words[i], w) == 0)
				return skl__seterr(err, SKL_INVALID, "%s line %d: %.*s is not allowed: the "
				                   "file already runs in a transaction of its own (use the "
				                   "first line \"%s\" to run it without one)", m->file, line,
				                   (int)w, m->sql + start, SKL_MIGRATE_DIRECTIVE);
	}
	return SKL_OK;
}

static skl_rc load_one(const char *dir, skl_migration *m, skl_error *err)
{
	char path[4096];
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, m->file) >= sizeof(path))
		return skl__seterr(err, SKL_INVALID, "path too long: %s/%s", dir, m->file);
	skl_rc rc = read_file(path, &m->sql, &m->len, err);
	if (rc == SKL_OK)
		rc = skl_migrate_checksum(m->sql, m->len, m->checksum, err);
	if (rc == SKL_OK && skl_migrate_parse_header(m->sql, m->len, &m->no_transaction, err)) {
		char why[sizeof(err->message)];
		snprintf(why, sizeof(why), "%s", err->message);
		rc = skl__seterr(err, SKL_INVALID, "%s: %.400s", m->file, why);
	}
	if (rc == SKL_OK && !m->no_transaction)
		rc = check_txn_control(m, err);
	return rc;
}

skl_rc skl_migrate_load_dir(const char *dir, skl_migration_set *out, skl_error *err)
{
	*out = (skl_migration_set){0};
	struct stat st;
	if (dir == NULL || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
		return skl__seterr(err, SKL_INVALID, "migrations directory %s does not exist or is "
		                   "not a directory", dir ? dir : "(none)");
	skl_rc rc = list_dir(dir, out, err);
	if (rc == SKL_OK && out->n > 1) /* qsort's base must not be NULL, even for 0 items */
		qsort(out->items, out->n, sizeof(*out->items), by_version);
	if (rc == SKL_OK)
		rc = check_duplicates(out, err);
	for (size_t i = 0; rc == SKL_OK && i < out->n; i++)
		rc = load_one(dir, &out->items[i], err);
	if (rc != SKL_OK) {
		skl_migrate_set_free(out);
		return rc;
	}
	skl_error_clear(err);
	return SKL_OK;
}

void skl_migrate_set_free(skl_migration_set *set)
{
	if (set == NULL)
		return;
	for (size_t i = 0; i < set->n; i++)
		free(set->items[i].sql);
	free(set->items);
	*set = (skl_migration_set){0};
}
