/*
 * fuzz_ndjson.c — `skiplock enqueue --batch` input: bounded lines, JSON
 * objects, every field checked.  A batch read without error has one spec
 * per job line, each with a kind and names within their limits.
 */
#include "enqueue/batch.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	FILE *in = fmemopen((void *)data, size, "r");
	if (in == NULL)
		return 0;
	cli_common cc;
	cli_common_init(&cc, "enqueue");
	skl_enqueue_opts defaults;
	skl_enqueue_opts_init(&defaults);
	/* small limits, so that the fuzzer reaches them */
	cli_batch_limits lim = {.max_payload = 512, .max_line = 1024, .max_jobs = 8};
	cli_batch b = {0};
	int rc = cli_batch_read(&cc, &defaults, &lim, in, &b);
	fclose(in);
	if (rc == CLI_OK) {
		if ((long long)b.n > lim.max_jobs)
			fuzz_fail("%zu jobs over the limit", b.n);
		for (size_t i = 0; i < b.n; i++) {
			const skl_job_spec *s = &b.specs[i];
			size_t k = strlen(s->kind), q = s->opts.queue ? strlen(s->opts.queue) : 1;
			if (k == 0 || k > SKL_KIND_MAX || q == 0 || q > SKL_KIND_MAX)
				fuzz_fail("job %zu: kind or queue out of bounds", i);
			if (s->payload && strlen(s->payload) > (size_t)lim.max_payload)
				fuzz_fail("job %zu: payload over the limit", i);
		}
	} else if (rc != CLI_USAGE) {
		fuzz_fail("cli_batch_read returned %d", rc);
	}
	cli_batch_free(&b);
	return 0;
}
