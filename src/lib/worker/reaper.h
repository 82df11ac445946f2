/*
 * reaper.h — command handlers never outlive the process that started them
 * (see reaper.c), and the clone-based start of a child process that both
 * the reaper and command.c use.
 */
#ifndef SKL_REAPER_H
#define SKL_REAPER_H

#include <sys/types.h>

/* Starts fn(arg) in a new process (a copy of this one, as fork makes, but
 * without fork handlers); the child ends with fn's return value as its
 * exit status.  In the child only async-signal-safe calls are allowed.
 * Returns the child's pid, or -1 with errno set. */
pid_t skl__clone(int (*fn)(void *), void *arg);

/* The descriptor a command's child registers its process group on (see
 * skl__reaper_register), started on first use and again after the reaper
 * died; -1 when no reaper could be started.  The number stays the same
 * for the life of the process.  Any thread. */
int skl__reaper_fd(void);

/* In a command's child, before exec: lists process group pgid with the
 * reaper.  Async-signal-safe. */
void skl__reaper_register(int fd, pid_t pgid);

/* After the group pgid was killed and its leader reaped: the reaper
 * forgets it.  Any thread. */
void skl__reaper_forget(pid_t pgid);

#endif
