/*
 * nemesis.c — one fault at a time, drawn from the seeded generator: which
 * fault, its target, how long it lasts and the gap before the next.  Each
 * fault that lasts is healed by the nemesis itself; the run's end heals
 * everything (fleet_heal).  Faults that cost the whole fleet seconds
 * (PostgreSQL crash-restarts) are bounded in number per run.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chaos.h"

const char *const fault_names[F_COUNT] = {
	"kill", "stop", "terminate", "pg-restart", "bouncer-restart", "bouncer-freeze",
	"skew", "cut", "blackhole", "delay", "lost-commit", "lease-stop"};

struct nemesis {
	chaos *c;
	fleet *f;
	rng r;
	int64_t next_at;
	int active;              /* a fault to heal, or -1 */
	int64_t heal_at;
	slot *target;
	int proxy;
	int max[F_COUNT];
};

nemesis *nemesis_new(chaos *c, fleet *f)
{
	nemesis *n = calloc(1, sizeof(*n));
	if (n == NULL)
		return NULL;
	*n = (nemesis){.c = c, .f = f, .r = {c->seed}, .next_at = now_ms() + 3000, .active = -1};
	for (int i = 0; i < F_COUNT; i++)
		n->max[i] = (int)(c->duration_s / 4 + 2);
	n->max[F_PG_RESTART] = (int)(c->duration_s / 40 + 1);
	n->max[F_BOUNCER_RESTART] = (int)(c->duration_s / 60 + 1);
	return n;
}

void nemesis_free(nemesis *n)
{
	free(n);
}

static void ctl(nemesis *n, const char *cmd)
{
	char line[1024];
	snprintf(line, sizeof(line), "%s %s >>%s/nemesis.log 2>&1", n->c->ctl, cmd, n->c->logdir);
	int64_t t = now_ms();
	if (system(line) != 0)
		logf_("tests/harness/ctl %s failed (see nemesis.log)", cmd);
	if (now_ms() - t > 3000)
		logf_("tests/harness/ctl %s took %.1f s", cmd, (now_ms() - t) / 1000.0);
}

/* A running, not stopped worker (or contender); NULL when there is none. */
static slot *pick(nemesis *n, slot *slots, int count)
{
	int start = (int)rng_range(&n->r, 0, count - 1);
	for (int i = 0; i < count; i++) {
		slot *s = &slots[(start + i) % count];
		if (s->pid > 0 && !s->stopped && s->term_at == 0)
			return s;
	}
	return NULL;
}

static int terminate_backends(nemesis *n)
{
	PGresult *r = obs_query(n->c, "SELECT pid FROM pg_stat_activity WHERE datname = "
	                              "current_database() AND pid <> pg_backend_pid() AND "
	                              "backend_type = 'client backend' ORDER BY pid");
	int rows = pq_ok(r) ? PQntuples(r) : 0, want = (int)rng_range(&n->r, 1, 3), done = 0;
	for (int i = 0; i < want && rows > 0; i++) {
		char sql[96];
		snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%s)::int",
		         PQgetvalue(r, (int)rng_range(&n->r, 0, rows - 1), 0));
		done += obs_int(n->c, sql) == 1;
	}
	PQclear(r);
	return done;
}

/* The contender whose `lease run` holds the lease now (owner HOST:PID:…). */
static slot *lease_holder(nemesis *n)
{
	PGresult *r = obs_query(n->c, "SELECT owner FROM skiplock.leases WHERE name = '" CHAOS_LEASE
	                              "' AND expires_at > clock_timestamp()");
	slot *s = NULL;
	const char *colon = pq_ok(r) && PQntuples(r) ? strchr(PQgetvalue(r, 0, 0), ':') : NULL;
	for (int i = 0; colon && i < NCONTENDERS; i++)
		if (n->f->contenders[i].pid == atoi(colon + 1) && !n->f->contenders[i].stopped)
			s = &n->f->contenders[i];
	PQclear(r);
	return s;
}

static bool inject_process(nemesis *n, int f, int64_t now)
{
	slot *s = f == F_LEASE_STOP ? lease_holder(n) : pick(n, n->f->workers, NWORKERS);
	if (s == NULL)
		return false;
	const char *who = s->kind == SLOT_WORKER ? "worker w" : "lease contender c";
	if (f == F_KILL) {
		s->expect_exit = true;
		s->skew_min = 0;
		s->restart_at = now + rng_range(&n->r, 300, 2000);
		slot_signal(s, SIGKILL);
		logf_("fault kill: SIGKILL %s%d (pid %d)", who, s->n, (int)s->pid);
		n->heal_at = now + 1500;
	} else if (f == F_SKEW) {
		s->expect_exit = true;
		s->skew_min = (int)rng_range(&n->r, 5, 120) * (rng_range(&n->r, 0, 1) ? 1 : -1);
		s->restart_at = 0;
		s->term_at = now;
		slot_signal(s, SIGTERM);
		logf_("fault skew: %s%d restarts under faketime %+d min", who, s->n, s->skew_min);
		n->heal_at = now + 2000;
	} else {
		int64_t past = f == F_LEASE_STOP ? 3000 : LEASE_MS;
		s->stopped = true;
		slot_signal(s, SIGSTOP);
		n->heal_at = now + past + rng_range(&n->r, 1000, 2500);
		n->target = s;
		logf_("fault %s: SIGSTOP %s%d (pid %d) for %lld ms", fault_names[f], who, s->n,
		      (int)s->pid, (long long)(n->heal_at - now));
	}
	return true;
}

static bool inject_net(nemesis *n, int f, int64_t now)
{
	char cmd[64];
	n->proxy = (int)rng_range(&n->r, 0, 1);
	if (f == F_CUT) {
		proxy_ctl(n->c, 0, "reset");
		proxy_ctl(n->c, 1, "reset");
		logf_("fault cut: every connection through both proxies reset");
		n->heal_at = now + 1000;
	} else if (f == F_BLACKHOLE) {
		proxy_ctl(n->c, n->proxy, "mode blackhole");
		n->heal_at = now + rng_range(&n->r, 1500, 4000);
		logf_("fault blackhole: proxy %d for %lld ms", n->proxy, (long long)(n->heal_at - now));
	} else if (f == F_DELAY) {
		snprintf(cmd, sizeof(cmd), "delay %lld", (long long)rng_range(&n->r, 50, 300));
		proxy_ctl(n->c, 0, cmd);
		proxy_ctl(n->c, 1, cmd);
		n->heal_at = now + rng_range(&n->r, 2000, 5000);
		logf_("fault delay: %s on both proxies for %lld ms", cmd,
		      (long long)(n->heal_at - now));
	} else {
		n->proxy = rng_range(&n->r, 0, 2) ? 1 : 0; /* mostly the producer's */
		proxy_ctl(n->c, n->proxy, "drop-commit-reply");
		n->heal_at = now + 3000;
		logf_("fault lost-commit: the next COMMIT answer through proxy %d is dropped",
		      n->proxy);
	}
	return true;
}

static bool inject_db(nemesis *n, int f, int64_t now)
{
	if (f == F_TERMINATE) {
		logf_("fault terminate: pg_terminate_backend of %d backend(s)", terminate_backends(n));
		n->heal_at = now + 1000;
	} else if (f == F_PG_RESTART) {
		logf_("fault pg-restart: pg_ctl stop -m immediate, start");
		ctl(n, "pg-restart-immediate");
		n->heal_at = now_ms() + 2000;
	} else if (f == F_BOUNCER_RESTART) {
		logf_("fault bouncer-restart");
		ctl(n, "bouncer-restart");
		n->heal_at = now_ms() + 1500;
	} else {
		ctl(n, "bouncer-pause");
		n->heal_at = now + rng_range(&n->r, 2500, 4500);
		logf_("fault bouncer-freeze: SIGSTOP pgbouncer for %lld ms (client deadline %s)",
		      (long long)(n->heal_at - now), CALL_TIMEOUT);
	}
	return true;
}

static bool inject(nemesis *n, int f, int64_t now)
{
	n->target = NULL;
	switch (f) {
	case F_KILL: case F_STOP: case F_SKEW: case F_LEASE_STOP:
		return inject_process(n, f, now);
	case F_CUT: case F_BLACKHOLE: case F_DELAY: case F_LOST_COMMIT:
		return inject_net(n, f, now);
	default:
		return inject_db(n, f, now);
	}
}

static void heal(nemesis *n)
{
	int f = n->active;
	if ((f == F_STOP || f == F_LEASE_STOP) && n->target) {
		slot_signal(n->target, SIGCONT);
		n->target->stopped = false;
	} else if (f == F_BLACKHOLE) {
		proxy_ctl(n->c, n->proxy, "mode pass");
	} else if (f == F_DELAY) {
		proxy_ctl(n->c, 0, "delay 0");
		proxy_ctl(n->c, 1, "delay 0");
	} else if (f == F_LOST_COMMIT) {
		proxy_ctl(n->c, n->proxy, "drop-commit-reply off");
	} else if (f == F_BOUNCER_FREEZE) {
		ctl(n, "bouncer-resume");
	}
	n->active = -1;
	n->next_at = now_ms() + rng_range(&n->r, 800, 3000);
}

bool nemesis_step(nemesis *n, int64_t until_ms)
{
	int64_t now = now_ms();
	if (n->active >= 0 && now >= n->heal_at)
		heal(n);
	if (n->active >= 0)
		return true;
	if (now >= until_ms)
		return false;
	if (now < n->next_at)
		return true;
	for (int tries = 0; tries < 64; tries++) {
		int f = (int)rng_range(&n->r, 0, F_COUNT - 1);
		if (n->c->faults[f] >= n->max[f] || (f == F_SKEW && n->c->no_skew) ||
		    (n->c->only && !(n->c->only & (1u << f))))
			continue;
		if (inject(n, f, now)) {
			n->c->faults[f]++;
			n->active = f;
			return true;
		}
	}
	n->next_at = now + 500;
	return true;
}
