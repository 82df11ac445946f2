/*
 * ticker.c — the minutely schedule evaluated at simulated instants: two
 * threads (one through fault proxy 0, one through PgBouncer) call
 * skl_cron_tick with `at` = the schedule's creation + 10 s per tick, so the
 * run covers many simulated minutes and the two race for every fire time.
 * Ticks may land out of order; the compare-and-set decides.
 */
#include <pthread.h>
#include <stdio.h>

#include "chaos.h"
#include "skiplock.h"

#define SIM_STEP_S 10

static struct {
	chaos *c;
	pthread_t threads[2];
	atomic_llong step, ticks, errors;
} T;

static void *ticker(void *arg)
{
	int n = (int)(intptr_t)arg;
	skl_client_options o;
	skl_client_options_init(&o);
	o.url = n == 0 ? T.c->proxy_url[0] : T.c->bouncer_url;
	o.pooler = n == 0 ? SKL_POOLER_NONE : SKL_POOLER_TRANSACTION;
	o.application_name = "skiplock chaos ticker";
	o.call_timeout_ms = 2000;
	o.retry_max_ms = 10000;
	skl_client *cl = NULL;
	skl_error err;
	if (skl_client_open(&o, &cl, &err) != SKL_OK) {
		logf_("ticker %d: %s", n, err.message);
		return NULL;
	}
	while (!atomic_load(&T.c->stop_load)) {
		long long k = atomic_fetch_add(&T.step, 1) + 1;
		char at[SKL_CRON_TIME_LEN];
		skl_cron_format_utc(T.c->t0_sim + k * SIM_STEP_S, at);
		skl_cron_tick_opts to = {.at = at};
		skl_cron_tick_result r;
		if (skl_cron_tick(cl, &to, &r, &err) == SKL_OK)
			atomic_fetch_add(&T.ticks, 1);
		else
			atomic_fetch_add(&T.errors, 1);
		sleep_ms(600);
	}
	skl_client_close(cl);
	return NULL;
}

int tickers_start(chaos *c)
{
	T.c = c;
	for (intptr_t i = 0; i < 2; i++)
		if (pthread_create(&T.threads[i], NULL, ticker, (void *)i) != 0)
			return -1;
	return 0;
}

void tickers_join(void)
{
	for (int i = 0; i < 2; i++)
		pthread_join(T.threads[i], NULL);
	T.c->ticks = atomic_load(&T.ticks);
	T.c->tick_errors = atomic_load(&T.errors);
}
