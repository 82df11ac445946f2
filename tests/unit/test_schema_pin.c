/* Unit tests: the schema steps built into the library are the texts pinned
 * in sql/CHECKSUMS (a released step never changes; a new one needs a line),
 * and what --repair would run for a step: its functions and their comments,
 * as CREATE OR REPLACE, without those a later step defines again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "core/buf.h"
#include "core/internal.h"
#include "core/schema_steps.h"

#define MAX_LINES 256

typedef struct pin {
	char sum[65];
	char file[128];   /* "sql/NNNN_name.sql" */
	int superseded;
} pin;

/* The lines of sql/CHECKSUMS; fails the test when the file is unreadable. */
static int read_pins(pin *pins)
{
	FILE *f = fopen(SKL_SOURCE_DIR "/sql/CHECKSUMS", "r");
	assert_non_null(f);
	char line[512];
	int n = 0;
	while (fgets(line, sizeof(line), f) && n < MAX_LINES) {
		pin *p = &pins[n];
		memset(p, 0, sizeof(*p));
		if (sscanf(line, "superseded %64s %127s", p->sum, p->file) == 2)
			p->superseded = 1;
		else if (sscanf(line, "%64[0-9a-f] %127s", p->sum, p->file) != 2)
			continue; /* comments and blank lines */
		n++;
	}
	fclose(f);
	return n;
}

static void built_in_steps_match_checksums(void **state)
{
	(void)state;
	static pin pins[MAX_LINES];
	int npins = read_pins(pins), bad = 0;
	for (int i = 0; i < skl_schema_nsteps; i++) {
		char file[160], sum[65];
		snprintf(file, sizeof(file), "sql/%s.sql", skl_schema_steps[i].name);
		skl__schema_checksum(skl_schema_steps[i].sql, sum);
		const pin *found = NULL;
		for (int k = 0; k < npins && !found; k++)
			if (!pins[k].superseded && strcmp(pins[k].file, file) == 0)
				found = &pins[k];
		if (found == NULL) {
			printf("%s has no line in sql/CHECKSUMS: add \"%s  %s\"\n", file, sum, file);
			bad++;
		} else if (strcmp(found->sum, sum) != 0) {
			printf("%s changed after its release (SHA-256 %s, sql/CHECKSUMS %s): a released "
			       "step never changes; put the change in a new step\n", file, sum, found->sum);
			bad++;
		}
	}
	for (int k = 0; k < npins; k++) {
		int built = 0;
		for (int i = 0; i < skl_schema_nsteps; i++) {
			char file[160];
			snprintf(file, sizeof(file), "sql/%s.sql", skl_schema_steps[i].name);
			built |= strcmp(pins[k].file, file) == 0;
		}
		if (!built) {
			printf("sql/CHECKSUMS names %s, which is not a step built in\n", pins[k].file);
			bad++;
		}
	}
	assert_int_equal(bad, 0);
}

static int step_index(const char *name)
{
	for (int i = 0; i < skl_schema_nsteps; i++)
		if (strcmp(skl_schema_steps[i].name, name) == 0)
			return i;
	fail_msg("no built-in step %s", name);
	return -1;
}

static int count(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

static void repair_of_leases_is_its_functions(void **state)
{
	(void)state;
	skl_buf b;
	skl_buf_init(&b, 1 << 20);
	int n = skl__schema_repair_sql(step_index("0003_leases"), &b);
	const char *sql = skl_buf_str(&b);
	/* 0011 redefines lease_check_args and lease_fence: the repair leaves
	 * them to it */
	assert_int_equal(n, 4);
	assert_int_equal(count(sql, "CREATE OR REPLACE FUNCTION skiplock."), 4);
	assert_null(strstr(sql, "FUNCTION skiplock.lease_fence("));
	assert_int_equal(count(sql, "COMMENT ON FUNCTION skiplock.lease_"), 3);
	assert_non_null(strstr(sql, "CREATE OR REPLACE FUNCTION skiplock.lease_acquire("));
	assert_null(strstr(sql, "CREATE TABLE"));
	assert_null(strstr(sql, "CREATE TRIGGER"));
	assert_null(strstr(sql, "CREATE FUNCTION"));
	assert_non_null(strstr(sql, "clock_timestamp()"));
	skl_buf_free(&b);
}

static void repair_leaves_out_functions_defined_later(void **state)
{
	(void)state;
	skl_buf b;
	skl_buf_init(&b, 1 << 20);
	/* 0007 defines breaker_step and enqueue_many; 0010 redefines the
	 * latter, 0017 the former: nothing of 0007 is left to repair. */
	int n = skl__schema_repair_sql(step_index("0007_retry"), &b);
	assert_null(strstr(skl_buf_str(&b), "FUNCTION skiplock.breaker_step("));
	assert_null(strstr(skl_buf_str(&b), "skiplock.enqueue_many"));
	assert_int_equal(n, 0);
	skl_buf_free(&b);
	/* 0009 defines notify_jobs, which no later step redefines */
	skl_buf_init(&b, 1 << 20);
	n = skl__schema_repair_sql(step_index("0009_notify"), &b);
	assert_non_null(strstr(skl_buf_str(&b), "FUNCTION skiplock.notify_jobs("));
	assert_int_equal(n, 1);
	skl_buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(built_in_steps_match_checksums),
		cmocka_unit_test(repair_of_leases_is_its_functions),
		cmocka_unit_test(repair_leaves_out_functions_defined_later),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
