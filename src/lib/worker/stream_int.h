/*
 * stream_int.h — the streaming handler's structures and the calls between
 * its files (docs/protocol.md, "The streaming handler"): a kind's jobs go
 * to a few long-lived processes, one JSON line each on a process's stdin,
 * and their outcomes come back as JSON lines on its stdout, in any order,
 * matched by job id.
 *
 * Files, each calling only those above it:
 *   stream_out.c    what a process writes: bounded reads, outcome lines,
 *                   stderr to the log (rate-limited) and its tail; the end
 *                   of a job (skl__stream_finish)
 *   stream_proc.c   a process's life: start, reap by pid, signals, its end
 *   stream_loop.c   the supervisor thread: job lines, assignment, writes,
 *                   deadlines, the poll
 *   stream.c        the handler: registration, a job's run on its handler
 *                   thread, start, stop, capacity
 *
 * Threads.  A handler thread running a job (stream.c) queues it and sleeps
 * on the job's own condition variable.  One supervisor thread per stream
 * handler owns the processes: it starts them (so PR_SET_PDEATHSIG follows
 * its life and the reaper lists them, spawn.h), hands waiting jobs to the
 * process with the fewest in flight, reads outcomes and stderr, fails jobs
 * whose deadline passed or whose lease was lost, and restarts a process
 * that ended.  Everything is under the stream's mutex except poll.  The
 * supervisor never blocks but in poll, for at most TICK_MS: every read is
 * bounded (READ_BUDGET per pipe and turn, NOISE_BYTES_PER_SEC of noise per
 * process), every wait for a process is a waitpid(WNOHANG) by its pid.
 *
 * A job (sjob) lives on its handler thread's stack: the supervisor
 * finishes it (done = true, outcome in its slot) exactly once, under the
 * mutex, and never touches it again.  Once finished, the job is no longer
 * in flight: a late answer for it is logged and ignored.
 *
 * A job's attempt was counted when it was claimed, and the protocol has
 * no call that gives a claim back uncounted: so the worker claims no more
 * jobs of the kind than its processes can take (stream.c's capacity), a
 * job waits for a process without a deadline, and a job whose line its
 * process did not read whole (written, and no longer in the pipe) is not
 * failed when that process ends or stalls: it goes back to the front of
 * the waiting jobs.
 */
#ifndef SKL_STREAM_INT_H
#define SKL_STREAM_INT_H

#include <poll.h>
#include <pthread.h>
#include <stdint.h>

#include "core/buf.h"
#include "worker/worker_int.h"

#define LINE_MAX_BYTES (SKL_STDOUT_MAX + SKL_STDERR_TAIL + 64 * 1024)
#define STDERR_LINE_MAX 2048         /* bytes of one stderr line logged */
#define LOGGED_MAX 200               /* bytes of another line logged */
#define RESTART_FIRST_MS 100         /* restart backoff: 100 ms, doubled ... */
#define RESTART_CAP_MS 10000         /* ... up to 10 s; reset by a good line */
#define TICK_MS 50                   /* lost leases are seen within this */
#define READ_BUDGET (64 * 1024)      /* bytes read from one pipe per turn */
#define LAST_WORDS (256 * 1024)      /* bytes read from an ended process's pipes */
#define LOG_LINES_PER_SEC 50         /* lines of one process logged per second */
#define NOISE_BYTES_PER_SEC (1024 * 1024) /* stderr and other stdout lines read
                                           * per process and second */
#define CLOSE_GRACE_MS 200           /* stdout ended: reaped by then, or SIGKILL */

typedef struct sjob {
	struct sjob *next;
	slot *s;
	char *line;                  /* its line with its newline, built when assigned */
	size_t len;
	int64_t timeout_ms;
	int64_t deadline;            /* monotonic; set when it is given to a process */
	uint64_t wend;               /* where its line ends in that process's input */
	pthread_cond_t cv;
	bool done;
	int code;
} sjob;

/* Lines of one process that are not outcomes (stderr, other stdout lines,
 * malformed or late answers), per second: at most LOG_LINES_PER_SEC
 * logged, the rest counted in one line when the second ends; and the
 * noise bytes read, at most NOISE_BYTES_PER_SEC (the pipes then wait). */
typedef struct noise {
	int64_t since;               /* start of the current second */
	int logged;
	int64_t dropped_err, dropped_out;
	size_t bytes;
	int64_t not_protocol;        /* stdout lines that were not JSON objects, ever */
} noise;

/* A process slot.  States (the flags):
 *   down     !up: started again at restart_at, unless the stream stops.
 *   up       up: takes jobs while neither dying nor closed.
 *   dying    SIGTERM sent (a job timed out, or the stream stops), SIGKILL
 *            at kill_at; no new jobs, nothing more written.
 *   closed   its stdout ended (it is dying too): SIGKILL at kill_at, at
 *            most CLOSE_GRACE_MS later, unless reaped by then.
 * A SIGKILL sets reap_by, a kill grace later: a process not reaped by
 * then is given up (ended unreaped, logged), so nothing waits for it.
 * Any state but down ends (skl__stream_ended) when its child is reaped by
 * pid, even while a grandchild still holds its pipes. */
typedef struct sproc {
	skl_child ch;
	bool up, dying, closed;
	bool reaped;                 /* its child was reaped: status is set */
	int status;
	skl_buf wbuf;                /* bytes for its stdin, from woff */
	size_t woff;
	uint64_t wqueued, wsent;     /* bytes queued and written since it started */
	uint64_t wread;              /* bytes it read, when its stdin was closed */
	skl_buf obuf, ebuf;          /* a partial stdout, stderr line */
	bool oskip, eskip;           /* dropping the rest of an over-long line */
	sjob *jobs;                  /* in flight */
	int njobs;
	int deaths;                  /* in a row, for the restart backoff */
	int64_t restart_at, term_at, kill_at, reap_by;
	noise nz;
	char tail[SKL_STDERR_TAIL];  /* its last stderr bytes since it last had */
	size_t tail_len;             /* no job in flight */
	char why[128];               /* why it is being killed, for its jobs */
} sproc;

typedef struct stream {
	char *kind, *command;
	int nprocs, inflight;
	skl_worker *w;
	pthread_mutex_t mu;
	sjob *waiting, *waiting_tail;
	sproc *procs;
	pthread_t thread;
	bool started, stopping;
	int wake[2];
	struct pollfd *fds;          /* the supervisor's poll: the wake pipe, then */
	sproc **map;                 /* 3 per process, map[i] owning fds[i] */
} stream;

/* stream_out.c */
/* Ends job j (waiting when p is NULL, else in flight on p) with code and,
 * when given, error; with tail, p's stderr tail is appended to the error
 * ("; stderr: …"): give it when j is the only job in flight on p. */
void skl__stream_finish(stream *st, sproc *p, sjob *j, int code, const char *error, bool tail);
/* Reads at most budget bytes of p's stdout (out) or stderr: lines to the
 * outcomes or the log.  1: more may be there; 0: nothing now; -1: the
 * pipe ended (or failed). */
int skl__stream_read(stream *st, sproc *p, bool out, size_t budget);
/* The noise window: a new second logs what the last one did not. */
void skl__stream_noise_tick(stream *st, sproc *p, int64_t now);
/* True while p wrote more noise this second than is read. */
bool skl__stream_throttled(const sproc *p);

/* stream_proc.c */
void skl__stream_close_fd(int *fd);
/* Closes p's stdin, keeping how much of it p read. */
void skl__stream_close_input(sproc *p);
/* Bytes of its input p has read: those written less those still in the
 * pipe (FIONREAD), so a job's line is received when it ends at or before. */
uint64_t skl__stream_read_upto(const sproc *p);
/* Starts p; on success the worker may claim for it. */
void skl__stream_start(stream *st, sproc *p, int64_t now);
/* waitpid(WNOHANG) on p's child; true when it was reaped (now or before). */
bool skl__stream_reap(sproc *p);
/* sig to p's child (while not reaped) and to its process group. */
void skl__stream_signal(const sproc *p, int sig);
/* SIGTERM now, SIGKILL after the kill grace; no new jobs.  why goes to
 * the jobs it still has when it ends. */
void skl__stream_kill(stream *st, sproc *p, int64_t now, const char *why);
/* Its stdout ended: reaped soon, or killed. */
void skl__stream_closed(sproc *p, int64_t now);
/* It ended: its last words read, jobs whose line it read whole fail, the
 * others wait again, the restart scheduled. */
void skl__stream_ended(stream *st, sproc *p, int64_t now);

/* stream_loop.c: the supervisor thread's body (arg: the stream). */
void *skl__stream_supervise(void *arg);

#endif
