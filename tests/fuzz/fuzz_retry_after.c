/*
 * fuzz_retry_after.c — skl_retry_after_ms, the webhook handler's reading
 * of an HTTP Retry-After header: never crashes; a value it accepts is a
 * delay between 0 and one year; a refused value leaves the output alone.
 */
#include <inttypes.h>

#include "fuzz.h"
#include "skiplock.h"

#define YEAR_MS ((int64_t)366 * 86400000)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_cstr(data, size);
	if (s == NULL)
		return 0;
	int64_t ms = -7;
	if (skl_retry_after_ms(s, 1790000000, &ms)) {
		if (ms < 0 || ms > YEAR_MS)
			fuzz_fail("\"%s\" gave %" PRId64 " ms", s, ms);
	} else if (ms != -7) {
		fuzz_fail("\"%s\" refused but wrote %" PRId64 " ms", s, ms);
	}
	free(s);
	return 0;
}
