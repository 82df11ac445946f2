/*
 * fuzz_migrate.c — the pure parts of `skiplock migrate`: file names, the
 * first-line directive, line-ending normalisation, checksums and the
 * statement splitter.  Invariants: a parsed name has a positive version and
 * a bounded name; the checksum ignores line endings; the splitter always
 * advances, stays inside the text and ends.
 */
#include "fuzz.h"
#include "skiplock.h"

static void names(const char *s)
{
	int64_t version = -7;
	char name[64];
	skl_error err;
	if (skl_migrate_parse_name(s, &version, name, sizeof(name), &err) == SKL_OK) {
		if (version <= 0 || strlen(name) >= sizeof(name))
			fuzz_fail("\"%s\" parsed to version %lld, name \"%s\"", s, (long long)version,
			          name);
	} else if (err.message[0] == '\0') {
		fuzz_fail("\"%s\" refused without a message", s);
	}
}

static void checksums(const uint8_t *data, size_t size)
{
	char a[65], b[65];
	skl_error err;
	char *copy = malloc(size ? size : 1);
	if (copy == NULL)
		return;
	memcpy(copy, data, size);
	size_t n = skl_migrate_normalise(copy, size);
	if (n > size || memchr(copy, '\r', n))
		fuzz_fail("normalise left %zu of %zu bytes or a CR", n, size);
	if (skl_migrate_checksum((const char *)data, size, a, &err) == SKL_OK &&
	    skl_migrate_checksum(copy, n, b, &err) == SKL_OK && strcmp(a, b) != 0)
		fuzz_fail("checksum changed by normalising line endings");
	free(copy);
}

static void statements(const char *text, size_t len)
{
	size_t pos = 0, start, slen;
	int line, prev_line = 1;
	bool no_txn;
	skl_error err;
	(void)skl_migrate_parse_header(text, len, &no_txn, &err);
	for (size_t guard = 0; guard <= len + 1; guard++) {
		size_t before = pos;
		if (!skl_migrate_next_statement(text, len, &pos, &start, &slen, &line))
			return;
		if (pos <= before || pos > len || start < before || start + slen > len ||
		    line < prev_line)
			fuzz_fail("splitter: pos %zu -> %zu, start %zu, len %zu, line %d after %d",
			          before, pos, start, slen, line, prev_line);
		prev_line = line;
	}
	fuzz_fail("splitter did not end on %zu bytes", len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	checksums(data, size);
	statements((const char *)data, size);
	char *s = fuzz_cstr(data, size);
	if (s == NULL)
		return 0;
	names(s);
	free(s);
	return 0;
}
