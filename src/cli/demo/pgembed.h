/*
 * pgembed.h — a private PostgreSQL cluster for `skiplock demo`.
 *
 * The cluster lives in one directory:
 *
 *   DIR/data          PGDATA, made by initdb (superuser "skiplock", trust auth)
 *   DIR/socket        the only place the server listens: a unix socket;
 *                     listen_addresses is empty, so no TCP port is opened
 *   DIR/postgres.log  the server's log; initdb.log and pg_ctl.log beside it
 *   DIR/.lock         flock'ed while a demo uses the cluster
 *
 * The server runs as the calling user, or, when that is root (PostgreSQL
 * refuses to run as root), as the OS user "skiplock" through runuser.
 * Every subprocess runs under a deadline; a missed deadline kills it.
 * This is command-line code: it prints its own errors (one line each).
 */
#ifndef SKL_PGEMBED_H
#define SKL_PGEMBED_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/types.h>

#include "cli.h"

#define PGEMBED_USER "skiplock"  /* database superuser, and OS user under root */
#define PGEMBED_PORT "5432"      /* names the socket file only */

typedef struct pgembed {
	const cli_common *cc;    /* prefixes messages */
	char dir[PATH_MAX];      /* absolute */
	char data[PATH_MAX];
	char sock[PATH_MAX];
	char bindir[PATH_MAX];   /* initdb, pg_ctl, postgres */
	bool as_user;            /* run the server as PGEMBED_USER via runuser */
	uid_t uid;               /* owner of the cluster's files */
	gid_t gid;
	int lock_fd;
} pgembed;

/* Resolves dir, finds the server binaries, creates the directory, takes its
 * lock and, under root, makes sure the OS user exists and can use it.
 * Returns CLI_OK, or CLI_PROBLEM after printing why. */
int pgembed_open(pgembed *pg, const cli_common *cc, const char *dir);

/* Creates the cluster when there is none, (re)writes its settings, starts
 * it unless it is running, and creates database dbname if missing.
 * Returns CLI_OK, or CLI_PROBLEM after printing why (and where the log is). */
int pgembed_start(pgembed *pg, const char *dbname);

/* Stops the server (fast, then immediate), bounded.  CLI_OK when it is
 * down. */
int pgembed_stop(pgembed *pg);

/* Releases the lock.  Leaves the server as it is. */
void pgembed_close(pgembed *pg);

/* A libpq URL for database dbname over the cluster's socket. */
void pgembed_url(const pgembed *pg, const char *dbname, char *out, size_t n);

/* Finds psql: beside the server binaries (bindir may be NULL or ""), in
 * PATH, or in the highest /usr/lib/postgresql/N/bin.  False when absent. */
bool pgembed_find_psql(const char *bindir, char *out, size_t n);

/* Set to the signal number by the caller's SIGINT/SIGTERM handler: a
 * subprocess being waited for is then killed and the wait ends early.  The
 * caller resets it to 0 to clean up (pgembed_stop) after an interruption. */
extern volatile sig_atomic_t pgembed_interrupted;

#endif
