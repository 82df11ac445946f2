/*
 * control.c — an operator's fleet-wide actions (skiplock/control.h): not
 * written yet; every call answers SKL_INVALID "not yet".
 */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "skiplock/control.h"

static skl_rc not_yet(skl_error *err)
{
	return skl__seterr(err, SKL_INVALID, "not yet");
}

skl_rc skl_pause(skl_client *c, const char *queue, const char *kind, const skl_actor *who,
                 bool *changed, skl_error *err)
{
	(void)c, (void)queue, (void)kind, (void)who, (void)changed;
	return not_yet(err);
}

skl_rc skl_resume(skl_client *c, const char *queue, const char *kind, const skl_actor *who,
                  bool *changed, skl_error *err)
{
	(void)c, (void)queue, (void)kind, (void)who, (void)changed;
	return not_yet(err);
}

skl_rc skl_pauses_list(skl_client *c, skl_pause_info **rows, size_t *n, skl_error *err)
{
	(void)c, *rows = NULL, *n = 0;
	return not_yet(err);
}

void skl_pauses_free(skl_pause_info *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		free(rows[i].internal);
	free(rows);
}

skl_rc skl_jobs_count(skl_client *c, const skl_list_opts *o, int64_t *n, skl_error *err)
{
	(void)c, (void)o, *n = 0;
	return not_yet(err);
}

const char *skl_bulk_action_name(skl_bulk_action a)
{
	static const char *const names[] = {"retry", "cancel", "discard"};
	return (unsigned)a < 3 ? names[a] : NULL;
}

skl_rc skl_bulk_action_parse(const char *name, skl_bulk_action *a, skl_error *err)
{
	for (int i = 0; i < 3; i++)
		if (name && strcmp(name, skl_bulk_action_name((skl_bulk_action)i)) == 0) {
			*a = (skl_bulk_action)i;
			return SKL_OK;
		}
	return skl__seterr(err, SKL_INVALID, "unknown action (expected retry, cancel or discard)");
}

skl_rc skl_jobs_bulk(skl_client *c, const skl_bulk_opts *o, const skl_actor *who,
                     skl_bulk_result *res, skl_error *err)
{
	(void)c, (void)o, (void)who, (void)res;
	return not_yet(err);
}

skl_rc skl_schedule_run_now(skl_client *c, const char *name, const skl_actor *who,
                            int64_t *job_id, skl_error *err)
{
	(void)c, (void)name, (void)who, (void)job_id;
	return not_yet(err);
}

skl_rc skl_schedule_set_paused(skl_client *c, const char *name, bool paused,
                               const skl_actor *who, bool *changed, skl_error *err)
{
	(void)c, (void)name, (void)paused, (void)who, (void)changed;
	return not_yet(err);
}

skl_rc skl_breaker_set(skl_client *c, const char *kind, bool open, const skl_actor *who,
                       skl_error *err)
{
	(void)c, (void)kind, (void)open, (void)who;
	return not_yet(err);
}

skl_rc skl_actions_list(skl_client *c, int limit, int64_t before_id, skl_action_info **rows,
                        size_t *n, skl_error *err)
{
	(void)c, (void)limit, (void)before_id, *rows = NULL, *n = 0;
	return not_yet(err);
}

void skl_actions_free(skl_action_info *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		free(rows[i].internal);
	free(rows);
}
