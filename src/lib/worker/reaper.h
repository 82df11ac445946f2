/*
 * reaper.h — command handlers never outlive the process that started them
 * (see reaper.c), and the clone-based start of a child process that both
 * the reaper and command.c use.
 */
#ifndef SKL_REAPER_H
#define SKL_REAPER_H

#include <stdbool.h>
#include <sys/types.h>

/* Starts fn(arg) in a new process; the child ends with fn's return value
 * as its exit status.  Without share_memory the child is a copy of this
 * process, as fork makes (but without fork handlers); with it the child
 * runs in this process's memory and the calling thread waits until the
 * child execs or ends, as vfork (posix_spawn's way: no page tables are
 * copied).  Either way the child may only make async-signal-safe calls,
 * and with share_memory it may write only to its own stack and to what
 * arg points to for the caller.  Returns the child's pid, or -1 with
 * errno set. */
pid_t skl__clone(int (*fn)(void *), void *arg, bool share_memory);

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
