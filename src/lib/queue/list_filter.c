/*
 * list_filter.c — the filters of skl_jobs_list that find a job: payload
 * containment (jsonb @>), text in the error history, and a window on one
 * of the job's times.  Everything is checked here so that bad input is
 * SKL_INVALID with a message, never a statement error: the JSON parses,
 * and a bound is either a strict ISO 8601 timestamp whose fields are in
 * range (the database would reject month 13 with a data exception) or a
 * duration before the database's now() (skl_duration_parse).  The job
 * states a filter may name are defined here too (skl_job_state_valid).
 */
#include <ctype.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/internal.h"
#include "queue/list_filter.h"
#include "skiplock/control.h"
#include "skiplock/inspect.h"

static const char *const time_fields[] = {"created", "run", "attempted", "finished", "lease"};

static const char *const job_states[] = {"available", "running", "completed", "discarded",
                                         "cancelled"};

/* skiplock/inspect.h */
bool skl_job_state_valid(const char *s)
{
	for (size_t i = 0; s && i < SKL_ARRAY_LEN(job_states); i++)
		if (strcmp(s, job_states[i]) == 0)
			return true;
	return false;
}

/* Reads n digits at *p into *v; false when one is not a digit. */
static bool digits(const char **p, int n, int *v)
{
	*v = 0;
	for (int i = 0; i < n; i++, (*p)++) {
		if (!isdigit((unsigned char)**p))
			return false;
		*v = *v * 10 + (**p - '0');
	}
	return true;
}

static int days_in(int year, int month)
{
	static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
	return days[month - 1] + (month == 2 && leap);
}

/* The zone after the time: "Z", "+HH", "+HHMM", "+HH:MM" (or "-"), or
 * nothing (then UTC is meant); true when the text ends there. */
static bool zone_ok(const char *p, bool *has_zone)
{
	int h, m = 0;
	*has_zone = *p != '\0';
	if (*p == '\0' || (*p == 'Z' && p[1] == '\0'))
		return true;
	if (*p != '+' && *p != '-')
		return false;
	p++;
	if (!digits(&p, 2, &h))
		return false;
	if (*p == ':')
		p++;
	if (*p && !digits(&p, 2, &m))
		return false;
	return *p == '\0' && h <= 15 && m <= 59;
}

/* "YYYY-MM-DD[( |T)HH:MM[:SS[.fraction]]][zone]" with every field in range. */
static bool timestamp_ok(const char *s, bool *has_zone)
{
	const char *p = s;
	int y, mo, d, h = 0, mi = 0, sec = 0;
	if (!digits(&p, 4, &y) || *p++ != '-' || !digits(&p, 2, &mo) || *p++ != '-' ||
	    !digits(&p, 2, &d))
		return false;
	if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > days_in(y, mo))
		return false;
	if (*p == 'T' || *p == ' ') {
		p++;
		if (!digits(&p, 2, &h) || *p++ != ':' || !digits(&p, 2, &mi))
			return false;
		if (*p == ':' && (p++, !digits(&p, 2, &sec)))
			return false;
		if (*p == '.' && !isdigit((unsigned char)*++p))
			return false;
		while (isdigit((unsigned char)*p))
			p++;
	}
	return h <= 23 && mi <= 59 && sec <= 59 && zone_ok(p, has_zone);
}

/* One bound into ts (a timestamp, "Z" added when it names no zone) or ago
 * (milliseconds before now()); the unused one is left empty. */
static skl_rc bound(const char *name, const char *s, char *ts, size_t tsz, char *ago,
                    size_t agosz, skl_error *err)
{
	bool has_zone;
	int64_t ms;
	if (strlen(s) < tsz - 1 && timestamp_ok(s, &has_zone)) {
		snprintf(ts, tsz, "%s%s", s, has_zone ? "" : "Z");
		return SKL_OK;
	}
	if (skl_duration_parse(s, &ms, err) == SKL_OK) {
		snprintf(ago, agosz, "%" PRId64, ms);
		return SKL_OK;
	}
	return skl__seterr(err, SKL_INVALID,
	                   "%s \"%.64s\" is neither a timestamp (2026-05-01T08:00:00Z) nor a "
	                   "duration before now (15m)", name, s);
}

static skl_rc check_time(const skl_list_opts *o, skl__list_filter *f, skl_error *err)
{
	if (o->time_field == NULL)
		return o->from || o->to
		           ? skl__seterr(err, SKL_INVALID, "a time bound needs a time field")
		           : SKL_OK;
	bool known = false;
	for (size_t i = 0; i < SKL_ARRAY_LEN(time_fields); i++)
		known = known || strcmp(o->time_field, time_fields[i]) == 0;
	if (!known)
		return skl__seterr(err, SKL_INVALID,
		                   "unknown time field \"%.32s\" (expected created, run, attempted, "
		                   "finished or lease)", o->time_field);
	f->params[2] = o->time_field;
	skl_rc r = SKL_OK;
	if (o->from)
		r = bound("from", o->from, f->from_ts, sizeof(f->from_ts), f->from_ago,
		          sizeof(f->from_ago), err);
	if (r == SKL_OK && o->to)
		r = bound("to", o->to, f->to_ts, sizeof(f->to_ts), f->to_ago, sizeof(f->to_ago), err);
	f->params[3] = f->from_ts[0] ? f->from_ts : NULL;
	f->params[4] = f->from_ago[0] ? f->from_ago : NULL;
	f->params[5] = f->to_ts[0] ? f->to_ts : NULL;
	f->params[6] = f->to_ago[0] ? f->to_ago : NULL;
	return r;
}

skl_rc skl__list_filter_check(const skl_list_opts *o, skl__list_filter *f, skl_error *err)
{
	*f = (skl__list_filter){.params = {NULL}};
	if (o->payload_contains) {
		json_error_t je;
		json_t *doc = json_loads(o->payload_contains, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
		                         &je);
		if (doc == NULL)
			return skl__seterr(err, SKL_INVALID, "payload filter is not JSON: %s at position %d",
			                   je.text, je.position);
		json_decref(doc);
		f->params[0] = o->payload_contains;
	}
	f->params[1] = o->error_contains;
	return check_time(o, f, err);
}

skl_rc skl__matching_params(const skl_list_opts *o, skl__list_filter *f,
                            const char *params[SKL_MATCHING_NPARAMS], skl_error *err)
{
	if (o->state && !skl_job_state_valid(o->state))
		return skl__seterr(err, SKL_INVALID,
		                   "unknown job state \"%s\" (expected available, running, completed, "
		                   "discarded or cancelled)", o->state);
	skl_rc r = skl__list_filter_check(o, f, err);
	if (r != SKL_OK)
		return r;
	params[0] = o->queue;
	params[1] = o->kind;
	params[2] = o->state;
	params[3] = NULL;
	memcpy(params + 4, f->params, sizeof(f->params));
	return SKL_OK;
}

/* {} or []: contained in every object, every array (text that does not
 * parse narrows here; the filter's check refuses it). */
static bool empty_payload(const char *text)
{
	json_t *doc = json_loads(text, JSON_DECODE_ANY, NULL);
	bool empty = (json_is_object(doc) && json_object_size(doc) == 0) ||
	             (json_is_array(doc) && json_array_size(doc) == 0);
	json_decref(doc);
	return empty;
}

bool skl_list_opts_narrows(const skl_list_opts *o, const char **why)
{
	bool no_bound = o && o->time_field && !o->from && !o->to;
	bool empty = o && o->payload_contains && empty_payload(o->payload_contains);
	bool narrows = o && (o->queue || o->kind || o->state || o->error_contains ||
	                     (o->payload_contains && !empty) || (o->time_field && !no_bound) ||
	                     o->from || o->to);
	if (why)
		*why = narrows ? NULL
		       : no_bound && empty ? "a time field without a bound, an empty payload filter"
		       : no_bound ? "a time field without a bound"
		       : empty ? "an empty payload filter"
		       : "no filter";
	return narrows;
}
