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
#include "worker/spawn.h"

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

/* Runs command for job; blocks until it ends, times out or *stop is set.
 * Always fills *res.
 *
 * The command's environment follows env's rule (spawn.h), plus the job's
 * SKIPLOCK_JOB_ID, _JOB_KIND, _QUEUE, _ATTEMPT and _FENCING.
 *
 * The child is started by the calling thread (skl__child_start: a handler
 * thread ends only after its command), in its own process group, and is
 * listed with the reaper (reaper.c), which kills it if this process dies. */
void skl__command_run(const char *command, const skl_job *job, const skl_cmd_env *env,
                      int64_t timeout_ms, int64_t grace_ms, volatile sig_atomic_t *stop,
                      skl_cmd_result *res);

#endif
