/*
 * fuzz.h — small helpers shared by the libFuzzer targets in tests/fuzz.
 *
 * A target is one file, fuzz_<name>.c, defining LLVMFuzzerTestOneInput; its
 * seed corpus is tests/fuzz/corpus/<name>/ (tests/fuzz/make-corpus writes
 * it from the unit-test tables).  A broken invariant calls fuzz_fail, which
 * aborts so that libFuzzer saves the input.
 */
#ifndef SKL_FUZZ_H
#define SKL_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a C string; NULL when it holds a NUL byte (every parser
 * here takes C strings).  Free with free(). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
	if (memchr(data, 0, size))
		return NULL;
	char *s = malloc(size + 1);
	if (s) {
		memcpy(s, data, size);
		s[size] = '\0';
	}
	return s;
}

#define fuzz_fail(...)                                                     \
	do {                                                                   \
		fprintf(stderr, "fuzz invariant broken: " __VA_ARGS__);            \
		fputc('\n', stderr);                                               \
		abort();                                                           \
	} while (0)

#endif
