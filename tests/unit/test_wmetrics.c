/* Unit tests: the worker's metrics table and its Prometheus text —
 * counters per (queue, kind), cumulative buckets, label escaping, gauges
 * only once read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "skiplock.h"
#include "worker/wmetrics.h"

static void has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = text; (p = strstr(p, line)) != NULL; p++)
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return;
	fail_msg("no line \"%s\" in:\n%s", line, text);
}

static void counters_and_histogram(void **state)
{
	(void)state;
	skl_wmetrics *m = skl__wm_new();
	skl__wm_count(m, "mail", "email", WM_CLAIMED, 3);
	skl__wm_count(m, "mail", "email", WM_COMPLETED, 2);
	skl__wm_count(m, "q\"\\\n", "k", WM_RETRIED, 1);
	skl__wm_duration(m, "mail", "email", 0.004);
	skl__wm_duration(m, "mail", "email", 0.2);
	skl__wm_duration(m, "mail", "email", 1000);
	skl__wm_set_scalars(m, 4, 1, 2);
	skl__wm_set_wakeups(m, 7, 5, 1234);
	char *t = skl__wm_render(m);
	assert_non_null(t);
	has_line(t, "# TYPE skiplock_jobs_claimed_total counter");
	has_line(t, "skiplock_jobs_claimed_total{queue=\"mail\",kind=\"email\"} 3");
	has_line(t, "skiplock_jobs_completed_total{queue=\"mail\",kind=\"email\"} 2");
	has_line(t, "skiplock_jobs_failed_total{queue=\"mail\",kind=\"email\"} 0");
	has_line(t, "skiplock_jobs_retried_total{queue=\"q\\\"\\\\\\n\",kind=\"k\"} 1");
	has_line(t, "skiplock_job_duration_seconds_bucket{queue=\"mail\",kind=\"email\",le=\"0.005\"} 1");
	has_line(t, "skiplock_job_duration_seconds_bucket{queue=\"mail\",kind=\"email\",le=\"0.25\"} 2");
	has_line(t, "skiplock_job_duration_seconds_bucket{queue=\"mail\",kind=\"email\",le=\"300\"} 2");
	has_line(t, "skiplock_job_duration_seconds_bucket{queue=\"mail\",kind=\"email\",le=\"+Inf\"} 3");
	has_line(t, "skiplock_job_duration_seconds_count{queue=\"mail\",kind=\"email\"} 3");
	has_line(t, "skiplock_job_duration_seconds_sum{queue=\"mail\",kind=\"email\"} 1000.204");
	has_line(t, "skiplock_worker_leases_held 4");
	has_line(t, "skiplock_db_reconnects_total 1");
	has_line(t, "skiplock_db_indeterminate_total 2");
	has_line(t, "# TYPE skiplock_worker_claims_total counter");
	has_line(t, "skiplock_worker_claims_total 7");
	has_line(t, "skiplock_worker_empty_claims_total 5");
	has_line(t, "skiplock_worker_notifications_total 1234");
	assert_null(strstr(t, "skiplock_queue_depth")); /* not read yet: absent, not 0 */
	free(t);
	skl__wm_free(m);
}

static void queue_gauges(void **state)
{
	(void)state;
	skl_wmetrics *m = skl__wm_new();
	skl_wm_queue *rows = calloc(2, sizeof(*rows));
	rows[0] = (skl_wm_queue){.queue = strdup("a"), .depth = 7, .oldest_s = 12.5};
	rows[1] = (skl_wm_queue){.queue = strdup("b"), .depth = 0, .oldest_s = 0};
	skl__wm_set_queues(m, rows, 2);
	char *t = skl__wm_render(m);
	has_line(t, "# TYPE skiplock_queue_depth gauge");
	has_line(t, "skiplock_queue_depth{queue=\"a\"} 7");
	has_line(t, "skiplock_queue_depth{queue=\"b\"} 0");
	has_line(t, "skiplock_queue_oldest_available_age_seconds{queue=\"a\"} 12.500");
	assert_non_null(strstr(t, "\nskiplock_queue_stats_age_seconds "));
	free(t);
	skl__wm_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(counters_and_histogram),
		cmocka_unit_test(queue_gauges),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
