/*
 * bench.h — helpers shared by the benchmark programs in bench/.
 *
 * The programs are measuring tools, not library code: on any unexpected
 * failure they print one line naming what failed and exit 1, and bench/run
 * reports the phase as failed.  Every wait has a deadline.
 *
 * Results go to stdout as one line of key=value pairs, which bench/run
 * parses; diagnostics go to stderr.
 */
#ifndef SKL_BENCH_H
#define SKL_BENCH_H

#include <libpq-fe.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <skiplock.h>

#define BENCH_PAYLOAD "{\"n\": 1}"

/* Clocks, in seconds: monotonic for durations, realtime to compare with
 * timestamps written by the server (same host, same clock). */
double bench_mono(void);
double bench_wall(void);
void bench_sleep(double seconds);

void bench_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* A plain libpq connection for control statements (TRUNCATE, counts). */
PGconn *bench_connect(const char *url, const char *appname);
void bench_exec(PGconn *c, const char *sql);
void bench_reset_jobs(PGconn *c);
int64_t bench_int(PGconn *c, const char *sql);
double bench_float(PGconn *c, const char *sql);
/* Runs sql; returns false (with the message on stderr) instead of dying. */
bool bench_try(PGconn *c, const char *sql);

/* An skl_client for url; pooled selects SKL_POOLER_TRANSACTION. */
skl_client *bench_client(const char *url, bool pooled, const char *appname);

/* Enqueues n jobs of kind through skl_enqueue_bulk, batch at a time. */
void bench_enqueue(skl_client *c, const char *kind, long n, int batch);

/* A counter shared with worker processes: a small file mapped MAP_SHARED.
 * Slot 0 counts handler starts. */
_Atomic uint64_t *bench_counter(const char *path, bool create);

/* Starts bench/worker (the skl-bench-worker next to this program) with the
 * given arguments (NULL-terminated, without argv[0]); stderr goes to
 * logpath when not NULL. */
pid_t bench_spawn_worker(char *const args[], const char *logpath);
/* SIGTERM, then SIGKILL after grace seconds; returns the exit status. */
int bench_stop(pid_t pid, double grace);
/* True while pid runs (reaps it when it has exited). */
bool bench_alive(pid_t pid);

/* VmRSS / VmHWM of pid in KiB from /proc/PID/status, 0 when unreadable. */
long bench_proc_kb(pid_t pid, const char *field);

/* Minimal option parsing: --name value pairs. */
const char *bench_opt(int argc, char **argv, const char *name, const char *dflt);
bool bench_flag(int argc, char **argv, const char *name);

#endif
