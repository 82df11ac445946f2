/*
 * main.c — `chaos run|handler|lease-writer` (see chaos.h): the campaign's
 * phases and its one summary line.
 */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "chaos.h"

static const char usage[] =
	"usage: chaos run [--duration SECONDS] [--seed N] [--logdir DIR] [--faults F,...]\n"
	"                 [--no-skew] [--keep]\n"
	"       chaos handler          (run by the workers)\n"
	"       chaos lease-writer URL WRITER MS   (run by skiplock lease run)\n"
	"Needs the environment of tests/harness/with-cluster, SKL_BIN and SKL_CUTPROXY.\n";

/* --faults kill,stop,…: only these. */
static bool parse_faults(chaos *c, const char *list)
{
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", list);
	for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		int f = 0;
		while (f < F_COUNT && strcmp(fault_names[f], t) != 0)
			f++;
		if (f == F_COUNT) {
			fprintf(stderr, "chaos: --faults: unknown fault \"%s\"\n", t);
			return false;
		}
		c->only |= 1u << f;
	}
	return c->only != 0;
}

static bool parse(chaos *c, int argc, char **argv)
{
	c->duration_s = 60;
	c->seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
	c->seed %= 1000000000;
	const char *env_seed = getenv("SKL_CHAOS_SEED");
	if (env_seed && *env_seed)
		c->seed = strtoull(env_seed, NULL, 10);
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--no-skew") == 0 || strcmp(a, "--keep") == 0) {
			*(a[2] == 'n' ? &c->no_skew : &c->keep) = true;
			continue;
		}
		if (v == NULL)
			return false;
		if (strcmp(a, "--duration") == 0)
			c->duration_s = atoll(v);
		else if (strcmp(a, "--seed") == 0)
			c->seed = strtoull(v, NULL, 10);
		else if (strcmp(a, "--faults") == 0 && !parse_faults(c, v))
			return false;
		else if (strcmp(a, "--faults") == 0)
			;
		else if (strcmp(a, "--logdir") == 0)
			snprintf(c->logdir, sizeof(c->logdir), "%s", v);
		else
			return false;
		i++;
	}
	return c->duration_s >= 10 && c->duration_s <= 24 * 3600;
}

static bool environment(chaos *c)
{
	static char self[PATH_MAX], ctl[PATH_MAX];
	const char *need[] = {"SKL_BIN", "SKL_CUTPROXY", "SKL_SOURCE_DIR", "SKL_TEST_PGHOST",
	                      "SKL_TEST_PGPORT", "SKL_TEST_BOUNCER_PORT", "SKL_TEST_DBUSER"};
	for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
		if (getenv(need[i]) == NULL || *getenv(need[i]) == '\0') {
			fprintf(stderr, "chaos: %s is not set (run under tests/harness/with-cluster; "
			                "see docs/chaos.md)\n", need[i]);
			return false;
		}
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return false;
	self[n] = '\0';
	snprintf(ctl, sizeof(ctl), "%s/tests/harness/ctl", getenv("SKL_SOURCE_DIR"));
	c->self = self;
	c->ctl = ctl;
	c->bin = getenv("SKL_BIN");
	c->cutproxy = getenv("SKL_CUTPROXY");
	if (c->logdir[0] == '\0') {
		const char *tmp = getenv("TMPDIR");
		snprintf(c->logdir, sizeof(c->logdir), "%s/skiplock-chaos-%llu-XXXXXX",
		         tmp && *tmp ? tmp : "/tmp", (unsigned long long)c->seed);
		if (mkdtemp(c->logdir) == NULL)
			return false;
	} else if (mkdir(c->logdir, 0755) != 0 && access(c->logdir, W_OK) != 0) {
		return false;
	}
	if (!c->no_skew && faketime_lib() == NULL) {
		logf_("libfaketime is not installed (Debian package faketime): no clock skew");
		c->no_skew = true;
	}
	return true;
}

/* The chaos phase: load, faults, supervision, bounded by the duration. */
static void chaos_phase(chaos *c, fleet *f)
{
	nemesis *n = nemesis_new(c, f);
	int64_t until = now_ms() + c->duration_s * 1000;
	while (n && nemesis_step(n, until) && now_ms() < until + 15000) {
		fleet_tick(c, f);
		sleep_ms(50);
	}
	nemesis_free(n);
	logf_("nemesis stopped; healing everything");
	fleet_heal(c, f);
	atomic_store(&c->stop_load, true);
	producer_join();
	tickers_join();
}

/* Waits (bounded) until no job of the campaign is available or running. */
static void drain(chaos *c, fleet *f)
{
	int64_t start = now_ms(), end = start + 300000;
	long long left = -1;
	for (int64_t next_note = start + 10000; now_ms() < end;) {
		fleet_tick(c, f);
		if (now_ms() >= next_note) {
			PGresult *r = obs_query(c, "SELECT string_agg(state || ' ' || n, ', ') FROM "
			                           "(SELECT state, count(*) n FROM skiplock.all_jobs WHERE "
			                           "state IN ('available', 'running') GROUP BY state) s");
			logf_("drain: %s", pq_ok(r) ? PQgetvalue(r, 0, 0) : "?");
			PQclear(r);
			next_note += 10000;
		}
		left = obs_int(c, "SELECT count(*) FROM skiplock.all_jobs WHERE state IN ('available', "
		                  "'running')");
		if (left == 0)
			break;
		sleep_ms(250);
	}
	c->drained = left == 0;
	logf_("drain: %s after %.1f s", c->drained ? "every job finished" : "jobs left",
	      (now_ms() - start) / 1000.0);
}

static int run(chaos *c)
{
	fleet f;
	fprintf(stderr, "chaos: seed %llu, %lld s; rerun with: make chaos SEED=%llu DURATION=%lld\n",
	        (unsigned long long)c->seed, (long long)c->duration_s,
	        (unsigned long long)c->seed, (long long)c->duration_s);
	logf_("logs in %s", c->logdir);
	if (!setup_database(c) || !fleet_start_proxies(c))
		return 1;
	logf_("database %s ready; proxies up", c->db);
	fleet_init(&f, c->seed);
	fleet_tick(c, &f);
	int64_t t0 = now_ms();
	if (producer_start(c) != 0 || tickers_start(c) != 0)
		return 1;
	chaos_phase(c, &f);
	drain(c, &f);
	fleet_stop(c, &f);
	double secs = (now_ms() - t0) / 1000.0;
	long long violations = !producer_save(c) + checker_run(c);
	char summary[2048];
	checker_summary(c, summary, sizeof(summary));
	printf("chaos: seed=%llu duration=%.0fs %s; violations=%lld\n",
	       (unsigned long long)c->seed, secs, summary, violations);
	fflush(stdout);
	if (violations == 0 && !c->keep) {
		drop_database(c);
		char cmd[600];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->logdir);
		if (system(cmd) != 0)
			logf_("could not remove %s", c->logdir);
	} else if (violations > 0) {
		logf_("FAILED: logs kept in %s; database %s kept; rerun: make chaos SEED=%llu "
		      "DURATION=%lld", c->logdir, c->db, (unsigned long long)c->seed,
		      (long long)c->duration_s);
	}
	PQfinish(c->obs);
	c->obs = NULL;
	return violations == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && strcmp(argv[1], "handler") == 0)
		return handler_main();
	if (argc >= 2 && strcmp(argv[1], "lease-writer") == 0)
		return lease_writer_main(argc - 1, argv + 1);
	static chaos c;
	if (argc < 2 || strcmp(argv[1], "run") != 0 || !parse(&c, argc, argv)) {
		fprintf(stderr, "%s", usage);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	if (!environment(&c))
		return 2;
	return run(&c);
}
