/*
 * command.h — run a command handler: /bin/sh -c COMMAND in its own process
 * group, payload on stdin, bounded capture of stdout and stderr, a timeout
 * and a "lost" flag that stop it (SIGTERM, then SIGKILL after a grace).
 */
#ifndef SKL_COMMAND_H
#define SKL_COMMAND_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "skiplock/queue.h"

#define SKL_STDOUT_MAX (64 * 1024)
#define SKL_STDERR_TAIL 4096

typedef enum skl_cmd_end {
	SKL_CMD_EXITED,    /* code holds the exit status */
	SKL_CMD_SIGNALED,  /* code holds the signal */
	SKL_CMD_TIMEOUT,   /* stopped by the timeout */
	SKL_CMD_STOPPED,   /* stopped because *stop became non-zero */
	SKL_CMD_SPAWN      /* could not start; code holds errno */
} skl_cmd_end;

typedef struct skl_cmd_result {
	skl_cmd_end end;
	int code;
	char out[SKL_STDOUT_MAX + 1];   /* stdout, NUL-terminated */
	size_t out_len;
	bool out_truncated;
	char err[SKL_STDERR_TAIL + 1];  /* the last bytes of stderr */
	size_t err_len;
} skl_cmd_result;

/* What a command's environment leaves out of this process's (the rule is
 * in skl__command_run's comment).  Both lists are NULL-terminated names,
 * or NULL. */
typedef struct skl_cmd_env {
	char **hide;                 /* withheld too (webhook secret variables) */
	char **pass;                 /* passed although the rule withholds them */
} skl_cmd_env;

/* Appends a copy of name to *list (NULL-terminated); false: out of memory. */
bool skl__cmd_env_add(char ***list, const char *name);
void skl__cmd_env_free(skl_cmd_env *ce);

/* Runs command for job; blocks until it ends, times out or *stop is set.
 * Always fills *res.
 *
 * The command's environment is this process's minus every SKIPLOCK_*
 * variable, DATABASE_URL, DIRECT_DATABASE_URL, PGPASSWORD and the names in
 * env->hide (except those in env->pass, SKIPLOCK_* excepted), plus the
 * job's SKIPLOCK_JOB_ID, _JOB_KIND, _QUEUE, _ATTEMPT and _FENCING.
 *
 * The child is started by the calling thread, in its own process group,
 * with PR_SET_PDEATHSIG SIGKILL (it fires when this thread ends: a handler
 * thread ends only after its command), and its group is listed with the
 * reaper (reaper.c), which kills it if this process dies. */
void skl__command_run(const char *command, const skl_job *job, const skl_cmd_env *env,
                      int64_t timeout_ms, int64_t grace_ms, volatile sig_atomic_t *stop,
                      skl_cmd_result *res);

#endif
