/*
 * cron_file.c — the schedules file of `skiplock cron apply`: every field
 * is checked for shape here (unknown fields, wrong types), the values
 * themselves by the library before anything is written.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cron/cron_file.h"

static const char *const fields[] = {"name", "expression", "kind", "zone", "queue", "payload",
                                     "priority", "max_attempts", "catch_up", "paused"};

static bool known(const char *key)
{
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		if (strcmp(key, fields[i]) == 0)
			return true;
	return false;
}

/* A string field: NULL when absent; *bad when present but not a string. */
static const char *str(const json_t *o, const char *key, bool *bad)
{
	const json_t *v = json_object_get(o, key);
	if (v && !json_is_string(v))
		*bad = true;
	return json_string_value(v);
}

static bool int_field(const json_t *o, const char *key, long long min, long long max, int *out)
{
	const json_t *v = json_object_get(o, key);
	if (v == NULL)
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
		return false;
	*out = (int)json_integer_value(v);
	return true;
}

/* One element of "schedules"; where is "FILE: schedules[i]". */
static int load_one(const cli_common *cc, const char *where, const json_t *o,
                    skl_schedule_want *w, char **payload)
{
	const char *key;
	const json_t *v;
	if (!json_is_object(o)) {
		cli_error(cc, "%s: expected an object", where);
		return CLI_USAGE;
	}
	json_object_foreach((json_t *)o, key, v) if (!known(key)) {
		cli_error(cc, "%s: unknown field \"%s\"", where, key);
		return CLI_USAGE;
	}
	bool bad = false;
	skl_schedule_spec *s = &w->spec;
	s->name = str(o, "name", &bad);
	s->expression = str(o, "expression", &bad);
	s->kind = str(o, "kind", &bad);
	s->zone = str(o, "zone", &bad);
	s->queue = str(o, "queue", &bad);
	const char *cu = str(o, "catch_up", &bad);
	const json_t *paused = json_object_get(o, "paused");
	const json_t *p = json_object_get(o, "payload");
	skl_error err;
	if (bad || !s->name || !s->expression || !s->kind)
		cli_error(cc, "%s: \"name\", \"expression\" and \"kind\" are required strings; "
		          "\"zone\", \"queue\" and \"catch_up\" are strings", where);
	else if (!int_field(o, "priority", -1000000, 1000000, &s->priority) ||
	         !int_field(o, "max_attempts", 1, 1000000, &s->max_attempts))
		cli_error(cc, "%s: \"priority\" and \"max_attempts\" must be integers in range", where);
	else if (paused && !json_is_boolean(paused))
		cli_error(cc, "%s: \"paused\" must be true or false", where);
	else if (cu && skl_catch_up_parse(cu, &s->catch_up, &err) != SKL_OK)
		cli_error(cc, "%s: catch_up: %s", where, err.message);
	else if (p && (*payload = json_dumps(p, JSON_COMPACT | JSON_ENCODE_ANY)) == NULL)
		cli_error(cc, "%s: out of memory", where);
	else {
		s->payload = *payload;
		w->paused = paused && json_is_true(paused);
		return CLI_OK;
	}
	return CLI_USAGE;
}

int cron_file_load(const cli_common *cc, const char *path, cron_file *f)
{
	memset(f, 0, sizeof(*f));
	json_error_t e;
	char *text;
	size_t len;
	if (cli_read_file(cc, "", path, true, &text, &len) != CLI_OK)
		return CLI_USAGE;
	f->root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
	free(text);
	const json_t *list = json_object_get(f->root, "schedules");
	if (f->root == NULL)
		cli_error(cc, "%s: %s%s", path, e.line > 0 ? "invalid JSON: " : "", e.text);
	else if (!json_is_object(f->root) || json_object_size(f->root) != 1 || !json_is_array(list))
		cli_error(cc, "%s: expected {\"schedules\": [...]} and nothing else", path);
	if (f->root == NULL || !json_is_array(list) || json_object_size(f->root) != 1)
		return CLI_USAGE;
	size_t n = json_array_size(list);
	f->want = calloc(n ? n : 1, sizeof(*f->want));
	f->payloads = calloc(n ? n : 1, sizeof(char *));
	if (f->want == NULL || f->payloads == NULL) {
		cli_error(cc, "out of memory");
		return CLI_USAGE;
	}
	for (size_t i = 0; i < n; i++) {
		char where[256];
		snprintf(where, sizeof(where), "%.200s: schedules[%zu]", path, i);
		if (load_one(cc, where, json_array_get(list, i), &f->want[i], &f->payloads[i]) != CLI_OK)
			return CLI_USAGE;
		f->n++;
	}
	return CLI_OK;
}

void cron_file_free(cron_file *f)
{
	for (size_t i = 0; f->payloads && i < f->n; i++)
		free(f->payloads[i]);
	free(f->payloads);
	free(f->want);
	json_decref(f->root);
}
