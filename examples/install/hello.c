/* hello.c — the smallest program against an installed skiplock: enqueue a
 * job, claim it, complete it.  cc hello.c $(pkg-config --cflags --libs skiplock) */
#include <skiplock.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	skl_client_options co;
	skl_client_options_init(&co);
	co.url = argc > 1 ? argv[1] : NULL;
	skl_client *c = NULL;
	skl_error err;
	int64_t id;
	skl_job *jobs = NULL;
	size_t n = 0;
	const char *kinds[] = {"hello"};
	skl_claim_opts o = {.kinds = kinds, .nkinds = 1, .limit = 1, .lease_ms = 30000, .owner = "hello"};
	if (skl_client_open(&co, &c, &err) || skl_schema_install(c, NULL, &err) ||
	    skl_enqueue(c, "hello", "{\"from\": \"C\"}", NULL, &id, &err) ||
	    skl_claim(c, &o, &jobs, &n, &err)) {
		fprintf(stderr, "hello: %s\n", err.message);
		skl_client_close(c);
		return 1;
	}
	skl_outcome done = {.id = jobs[0].id, .fencing = jobs[0].fencing, .kind = SKL_OUTCOME_COMPLETE};
	skl_rc rc = skl_record(c, &done, 1, NULL, &err);
	printf("skiplock %s: job %lld %s\n", skl_version(), (long long)id, rc ? err.message : "completed");
	skl_jobs_free(jobs, n);
	skl_client_close(c);
	return rc != SKL_OK;
}
