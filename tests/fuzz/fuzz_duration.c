/*
 * fuzz_duration.c — skl_duration_parse: never crashes or overflows; a
 * success is in range and parses back to itself from its millisecond form.
 */
#include <inttypes.h>

#include "fuzz.h"
#include "skiplock.h"

#define MAX_MS ((int64_t)100 * 365 * 86400000)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = fuzz_cstr(data, size);
	if (s == NULL)
		return 0;
	int64_t ms = -7, again = -7;
	skl_error err;
	skl_rc rc = skl_duration_parse(s, &ms, &err);
	if (rc == SKL_OK) {
		if (ms < 0 || ms > MAX_MS)
			fuzz_fail("\"%s\" parsed to %" PRId64 " ms", s, ms);
		char back[32];
		snprintf(back, sizeof(back), "%" PRId64 "ms", ms);
		if (skl_duration_parse(back, &again, &err) != SKL_OK || again != ms)
			fuzz_fail("\"%s\" = %" PRId64 " ms does not parse back", s, ms);
	} else if (rc != SKL_INVALID || ms != -7 || err.message[0] == '\0') {
		fuzz_fail("\"%s\": rc %d, out %" PRId64 ", message \"%s\"", s, rc, ms, err.message);
	}
	free(s);
	return 0;
}
