/*
 * lazy.c — dlopen on first use, the function table filled all or nothing
 * (see lazy.h).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "core/lazy.h"

/* Fills a copy of the table, so a library lacking one function leaves the
 * caller's table untouched. */
static void load(skl__lazy *l)
{
	void *h = dlopen(l->soname, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		snprintf(l->why, sizeof(l->why), "cannot load %s", l->soname);
		return;
	}
	char copy[512];
	if (l->table_size > sizeof(copy)) {
		snprintf(l->why, sizeof(l->why), "%s: function table too large", l->soname);
		dlclose(h);
		return;
	}
	for (size_t i = 0; i < l->nsyms; i++) {
		void *sym = dlsym(h, l->syms[i].name);
		if (sym == NULL) {
			snprintf(l->why, sizeof(l->why), "%s lacks a function skiplock needs (%s)",
			         l->soname, l->syms[i].name);
			dlclose(h);
			return;
		}
		/* POSIX guarantees a function pointer survives the round trip
		 * through void *; copy the bytes to say so without a cast. */
		memcpy(copy + l->syms[i].offset, &sym, sizeof(sym));
	}
	memcpy(l->table, copy, l->table_size);
	l->error = NULL;
}

bool skl__lazy_load(skl__lazy *l, const char **why)
{
	pthread_mutex_lock(&l->lock);
	if (!l->tried) {
		l->tried = true;
		l->error = l->why;
		load(l);
	}
	const char *error = l->error;
	pthread_mutex_unlock(&l->lock);
	if (why)
		*why = error;
	return error == NULL;
}
