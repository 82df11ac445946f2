/*
 * worker_log.c — the worker's messages: to the application's log_record
 * callback with the job's context as fields, or to its plain log callback
 * with that context as a prefix; silence when it installed neither.  Every
 * worker file logs through here; this file calls no other worker file.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "worker/worker_int.h"

static void wlog(const skl_worker *w, skl_log_level lvl, const skl_job *job, const char *fmt,
                 va_list ap)
{
	if (w->wo.log == NULL && w->wo.log_record == NULL)
		return;
	char buf[1024];
	vsnprintf(buf, sizeof(buf), fmt, ap);
	if (w->wo.log_record) {
		skl_log_context lc = {.worker = w->wo.owner};
		if (job)
			lc = (skl_log_context){.worker = w->wo.owner, .job_id = job->id,
			                       .queue = job->queue, .kind = job->kind,
			                       .attempt = job->attempt, .fencing = job->fencing,
			                       .payload = w->wo.log_payloads ? job->payload : NULL};
		w->wo.log_record(w->wo.log_ctx, lvl, &lc, buf);
		return;
	}
	if (job == NULL) {
		w->wo.log(w->wo.log_ctx, lvl, buf);
		return;
	}
	char line[1400];
	snprintf(line, sizeof(line),
	         "job=%" PRId64 " kind=%s attempt=%d fencing=%" PRId64 " queue=%s: %s", job->id,
	         job->kind, job->attempt, job->fencing, job->queue, buf);
	w->wo.log(w->wo.log_ctx, lvl, line);
}

void skl__wlog(const skl_worker *w, skl_log_level lvl, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	wlog(w, lvl, NULL, fmt, ap);
	va_end(ap);
}

void skl__wlog_job(const skl_worker *w, skl_log_level lvl, const skl_job *job,
                   const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	wlog(w, lvl, job, fmt, ap);
	va_end(ap);
}
