/*
 * control_print.c — pauses and the action log as JSON (control_print.h).
 */
#include "print/control_print.h"
#include "print/output.h"

json_t *control_pauses_json(const skl_pause_info *p, size_t n)
{
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		json_array_append_new(arr, json_pack("{s:o, s:o, s:o, s:o, s:o}",
		                                     "queue", cli_json_str(p[i].queue),
		                                     "kind", cli_json_str(p[i].kind),
		                                     "paused_at", cli_json_str(p[i].paused_at),
		                                     "paused_by", cli_json_str(p[i].paused_by),
		                                     "role", cli_json_str(p[i].role)));
	return arr;
}

json_t *control_actions_json(const skl_action_info *a, size_t n)
{
	json_t *arr = json_array();
	for (size_t i = 0; arr && i < n; i++)
		json_array_append_new(arr, json_pack("{s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:I}",
		                                     "id", (json_int_t)a[i].id,
		                                     "at", cli_json_str(a[i].at),
		                                     "actor", cli_json_str(a[i].actor),
		                                     "role", cli_json_str(a[i].role),
		                                     "db_user", cli_json_str(a[i].db_user),
		                                     "action", cli_json_str(a[i].action),
		                                     "target", cli_json_raw(a[i].target),
		                                     "matched", (json_int_t)a[i].matched,
		                                     "changed", (json_int_t)a[i].changed));
	return arr;
}
