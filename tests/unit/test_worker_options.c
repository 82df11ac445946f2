/* Unit tests: skl_worker_new refuses options outside their bounds with
 * SKL_INVALID before anything starts (the same values `skiplock worker`
 * turns into exit 2), and takes the edges of every bound. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "skiplock.h"

/* A URL that is never dialled: skl_worker_new does not connect. */
static const char url[] = "postgresql://nobody@127.0.0.1:1/none";

static skl_rc try_new(const skl_worker_options *wo, skl_error *err)
{
	skl_client_options co;
	skl_client_options_init(&co);
	co.url = url;
	skl_worker *w = NULL;
	skl_rc rc = skl_worker_new(&co, wo, &w, err);
	assert_true(rc == SKL_OK ? w != NULL : w == NULL);
	skl_worker_free(w);
	return rc;
}

static void refuses(const skl_worker_options *wo, const char *needle)
{
	skl_error err;
	assert_int_equal(try_new(wo, &err), SKL_INVALID);
	if (strstr(err.message, needle) == NULL)
		fail_msg("message \"%s\" lacks \"%s\"", err.message, needle);
}

static void durations(void **state)
{
	(void)state;
	skl_worker_options o;
	skl_worker_options_init(&o);
	o.lease_ms = 1;
	refuses(&o, "lease must be from 1s to 24h (got 1ms)");
	o.lease_ms = 36500LL * 86400000;
	refuses(&o, "lease must be from 1s to 24h");
	o.lease_ms = -5;
	refuses(&o, "lease");
	o.lease_ms = SKL_WORKER_LEASE_MIN_MS;
	o.poll_ms = 1;
	refuses(&o, "poll must be from 10ms to 1h (got 1ms)");
	o.poll_ms = SKL_WORKER_POLL_MIN_MS;
	o.poll_max_ms = SKL_WORKER_POLL_MAX_MS + 1;
	refuses(&o, "poll-max");
	o.poll_max_ms = SKL_WORKER_POLL_MAX_MS;
	o.job_timeout_ms = SKL_WORKER_TIMEOUT_MAX_MS + 1;
	refuses(&o, "timeout must be from 1ms to 720h");
	o.job_timeout_ms = SKL_WORKER_TIMEOUT_MAX_MS;
	skl_error err;
	assert_int_equal(try_new(&o, &err), SKL_OK); /* every edge is taken */
	o.lease_ms = SKL_WORKER_LEASE_MAX_MS;
	o.poll_idle_ms = SKL_WORKER_IDLE_MAX_MS;
	assert_int_equal(try_new(&o, &err), SKL_OK);
}

static void counts_and_names(void **state)
{
	(void)state;
	skl_worker_options o;
	skl_worker_options_init(&o);
	o.concurrency = SKL_WORKER_CONCURRENCY_MAX + 1;
	refuses(&o, "concurrency must be from 1 to 4096");
	o.concurrency = 8;
	char q129[130];
	memset(q129, 'q', 129);
	q129[129] = '\0';
	const char *bad_queues[][1] = {{q129}, {"q\xffq"}, {""}, {"\xed\xa0\x80"}, {"\xc0\xaf"}};
	const char *why[] = {"got 129", "not valid UTF-8 (byte 2)", "got 0", "not valid UTF-8",
	                     "not valid UTF-8"};
	for (size_t i = 0; i < 5; i++) {
		o.queues = bad_queues[i];
		o.nqueues = 1;
		refuses(&o, why[i]);
	}
	const char *good[] = {"\xf0\x9d\x94\xb8", "default"}; /* U+1D538 */
	o.queues = good;
	o.nqueues = 2;
	skl_error err;
	assert_int_equal(try_new(&o, &err), SKL_OK);
	char owner[2 * 257 + 1] = "";
	for (int i = 0; i < 257; i++)
		strcat(owner, "\xd1\x91"); /* ё */
	o.owner = owner;
	refuses(&o, "owner must be 1 to 256 characters (got 257)");
	owner[2 * 256] = '\0';
	assert_int_equal(try_new(&o, &err), SKL_OK);
	const char *env[] = {"SKIPLOCK_QUEUE"};
	o.handler_env = env;
	o.nhandler_env = 1;
	refuses(&o, "SKIPLOCK_");
}

static void kinds(void **state)
{
	(void)state;
	skl_client_options co;
	skl_client_options_init(&co);
	co.url = url;
	skl_worker *w = NULL;
	skl_error err;
	assert_int_equal(skl_worker_new(&co, NULL, &w, &err), SKL_OK);
	assert_int_equal(skl_worker_handle_command(w, "k\xc3", "true", &err), SKL_INVALID);
	assert_non_null(strstr(err.message, "job kind is not valid UTF-8"));
	assert_int_equal(skl_worker_handle_command(w, "k\xc3\xa9", "true", &err), SKL_OK);
	skl_worker_free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(durations), cmocka_unit_test(counts_and_names),
		cmocka_unit_test(kinds),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
