/*
 * spawn.h — a handler's child process, for command handlers (command.c)
 * and streaming handlers (stream.c): /bin/sh -c COMMAND in its own process
 * group, killed when the thread that started it ends and, through the
 * reaper (reaper.c), when this process dies; its stdin, stdout and stderr
 * are non-blocking pipes; its environment follows one rule (below).
 */
#ifndef SKL_SPAWN_H
#define SKL_SPAWN_H

#include <stdbool.h>
#include <sys/types.h>

#include "skiplock/queue.h"

/* What any handler hands back is capped: a result (a command's stdout) at
 * SKL_STDOUT_MAX bytes, an error (the tail of its stderr) at
 * SKL_STDERR_TAIL. */
#define SKL_STDOUT_MAX (64 * 1024)
#define SKL_STDERR_TAIL 4096

/* What a child's environment leaves out of this process's: every
 * SKIPLOCK_* variable, DATABASE_URL, DIRECT_DATABASE_URL, PGPASSWORD and
 * the names in hide, except those in pass (SKIPLOCK_* excepted).  Both
 * lists are NULL-terminated names, or NULL. */
typedef struct skl_cmd_env {
	char **hide;                 /* withheld too (webhook secret variables) */
	char **pass;                 /* passed although the rule withholds them */
} skl_cmd_env;

/* Appends a copy of name to *list (NULL-terminated); false: out of memory. */
bool skl__cmd_env_add(char ***list, const char *name);
void skl__cmd_env_free(skl_cmd_env *ce);

typedef struct skl_child {
	pid_t pid;                   /* also its process group */
	int in, out, err;            /* our ends of its stdin, stdout, stderr */
} skl_child;

/* Starts /bin/sh -c command with the environment rule above plus, when job
 * is not NULL, the job's SKIPLOCK_JOB_ID, _JOB_KIND, _QUEUE, _ATTEMPT and
 * _FENCING.  The child gets PR_SET_PDEATHSIG SIGKILL (it fires when the
 * calling thread ends) and is listed with the reaper.  Returns 0 and fills
 * *ch (pipes non-blocking, close-on-exec), or an errno. */
int skl__child_start(const char *command, const skl_job *job, const skl_cmd_env *ce,
                     skl_child *ch);

/* Kills what is left of the child's process group (SIGKILL) and has the
 * reaper forget it; call after the child itself was reaped. */
void skl__child_forget(const skl_child *ch);

#endif
