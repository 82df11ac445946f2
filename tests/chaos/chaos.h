/*
 * chaos.h — the fault campaign: a workload, a nemesis and a checker
 * (docs/chaos.md).
 *
 * One binary, three roles:
 *   chaos run [--duration S] [--seed N] [--logdir DIR]   the campaign
 *   chaos handler        the job handler the workers run (a fenced ledger write)
 *   chaos lease-writer   the command `skiplock lease run` protects
 *
 * `run` needs the environment of tests/harness/with-cluster (SKL_TEST_*),
 * SKL_BIN (the skiplock command) and SKL_CUTPROXY (tests/tools/cutproxy).
 * It creates a database of its own, starts two fault proxies in front of
 * PostgreSQL, four workers (two through a proxy, two through PgBouncer),
 * two `lease run` contenders, a producer and two cron tickers at simulated
 * instants; the nemesis injects faults drawn from a seeded generator;
 * then everything heals, the fleet drains and SQL checks judge the end
 * state.  Every loop is bounded in count and time.
 */
#ifndef SKL_CHAOS_H
#define SKL_CHAOS_H

#include <libpq-fe.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define CHAOS_QUEUE "chaos"
#define CHAOS_LEASE "chaos-singleton"
#define CHAOS_SCHEDULE "chaos-minutely"
#define NWORKERS 4
#define NCONTENDERS 2
#define LEASE_MS 3000          /* worker claim lease */
#define LEASE_TTL "3s"         /* lease run --ttl */
#define CALL_TIMEOUT "2s"      /* client deadline of fleet calls */

/* ---- util.c ---- */

int64_t now_ms(void);
void sleep_ms(int64_t ms);
/* One log line on stderr, prefixed with the seconds since the start. */
void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* splitmix64: the campaign's one source of randomness. */
typedef struct rng { uint64_t s; } rng;
uint64_t rng_next(rng *r);
/* Uniform in [lo, hi]. */
int64_t rng_range(rng *r, int64_t lo, int64_t hi);
/* A blocking connection with connect_timeout 3 s; NULL on failure. */
PGconn *pq_connect(const char *url, const char *appname);
/* One statement with a client-side deadline (non-blocking libpq under
 * poll).  Returns the last result, or NULL when the connection failed or
 * the deadline passed (*sent tells whether the query left us).  On NULL the
 * connection is finished and set to NULL. */
PGresult *pq_exec(PGconn **conn, const char *sql, int n, const char *const *vals,
                  int64_t deadline_ms, bool *sent);
bool pq_ok(const PGresult *r);

/* ---- the campaign's shared state ---- */

typedef struct chaos {
	int64_t duration_s;
	uint64_t seed;
	char logdir[512];
	const char *bin;               /* skiplock */
	const char *cutproxy;
	const char *self;              /* this binary */
	const char *ctl;               /* tests/harness/ctl */
	char db[64];
	char obs_url[512];             /* direct, the observer's */
	char proxy_url[2][512];        /* 0: workers' proxy, 1: producer's proxy */
	char bouncer_url[512];
	char ctl_sock[2][600];
	pid_t proxy_pid[2];
	PGconn *obs;                   /* observer: direct, never faulted on purpose */
	atomic_bool stop_load;         /* producer and tickers stop */
	int64_t t0_sim;                /* the schedule's creation, Unix seconds */
	/* counters for the summary */
	int faults[16];
	long long enq_ok, enq_rolled_back, enq_info, enq_recovered, enq_failed;
	long long ticks, tick_errors;
	int worker_exits;
	bool no_skew;                  /* no faketime here, or --no-skew */
	bool drained;
	bool keep;
	unsigned only;                 /* --faults: a mask of enum fault; 0: all */                     /* keep the database and logs */
} chaos;

/* ---- fleet.c: supervised processes ---- */

enum slot_kind { SLOT_WORKER, SLOT_CONTENDER };

typedef struct slot {
	enum slot_kind kind;
	int n;                 /* index within its kind */
	bool pooled;           /* through PgBouncer, else through proxy 0 */
	pid_t pid;             /* 0: not running */
	int64_t restart_at;    /* when to start it again (0: at once) */
	bool stopped;          /* SIGSTOPped by the nemesis */
	bool expect_exit;      /* we killed it */
	int skew_min;          /* faketime offset in minutes for the next start */
	int64_t term_at;       /* SIGTERM sent at (0: not) */
} slot;

typedef struct fleet {
	slot workers[NWORKERS];
	slot contenders[NCONTENDERS];
	rng r;
} fleet;

bool fleet_start_proxies(chaos *c);
void fleet_init(fleet *f, uint64_t seed);
/* Reaps exited children, restarts what is due; bounded, non-blocking. */
void fleet_tick(chaos *c, fleet *f);
void slot_signal(slot *s, int sig);
/* SIGCONT everything stopped; proxies to pass, no delay. */
void fleet_heal(chaos *c, fleet *f);
/* SIGTERM the fleet and wait (bounded) for it to exit. */
void fleet_stop(chaos *c, fleet *f);
int proxy_ctl(chaos *c, int which, const char *cmd);
/* libfaketime's multi-threaded library, or NULL when not installed. */
const char *faketime_lib(void);

/* ---- producer.c and ticker.c: the load ---- */

int producer_start(chaos *c);
void producer_join(void);
/* Writes the producer's history into chaos_history (observer). */
bool producer_save(chaos *c);
int tickers_start(chaos *c);
void tickers_join(void);

/* ---- nemesis.c ---- */

enum fault {
	F_KILL, F_STOP, F_TERMINATE, F_PG_RESTART, F_BOUNCER_RESTART, F_BOUNCER_FREEZE,
	F_SKEW, F_CUT, F_BLACKHOLE, F_DELAY, F_LOST_COMMIT, F_LEASE_STOP, F_COUNT
};
extern const char *const fault_names[F_COUNT];

typedef struct nemesis nemesis;
nemesis *nemesis_new(chaos *c, fleet *f);
/* Injects or heals what is due now; returns false once the run is over. */
bool nemesis_step(nemesis *n, int64_t until_ms);
void nemesis_free(nemesis *n);

/* ---- checker.c ---- */

/* Runs every check; prints each violation; returns the number. */
long long checker_run(chaos *c);
/* Counts for the summary line into buf. */
void checker_summary(chaos *c, char *buf, size_t cap);

/* ---- handler.c ---- */

int handler_main(void);
int lease_writer_main(int argc, char **argv);

/* ---- schema for the campaign's own tables (setup.c) ---- */

bool setup_database(chaos *c);
void drop_database(chaos *c);
/* The observer's query, reconnecting once when the server restarted. */
PGresult *obs_query(chaos *c, const char *sql);
long long obs_int(chaos *c, const char *sql);

#endif
