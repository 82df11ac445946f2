/*
 * lazy.h — a shared library opened with dlopen on first use, its functions
 * copied into a table of function pointers.
 *
 * The library's webhooks (worker/curl_lazy.c, libcurl) and the command's
 * HTTP endpoints (src/cli/http/mhd_lazy.c, libmicrohttpd) load this way, so
 * a process that never needs them never maps them.  This is the one
 * internal header the command includes (its include path reaches src/lib
 * for it alone; tests/layers/check_layers.sh checks that).
 *
 * A loaded library is never closed: handles, threads and thread-specific
 * data may refer to it until the process ends.
 */
#ifndef SKL_LAZY_H
#define SKL_LAZY_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

/* One function to look up: its symbol, and where its pointer goes in the
 * table (offsetof). */
typedef struct skl__lazy_sym {
	const char *name;
	size_t offset;
} skl__lazy_sym;

typedef struct skl__lazy {
	const char *soname;         /* "libcurl.so.4" */
	const skl__lazy_sym *syms;
	size_t nsyms;
	void *table;                /* the caller's struct of function pointers */
	size_t table_size;          /* filled only when every symbol is found */
	pthread_mutex_t lock;
	bool tried;
	const char *error;          /* NULL once loaded */
	char why[96];
} skl__lazy;

#define SKL__LAZY_INIT(soname, syms, table)                                     \
	{(soname), (syms), sizeof(syms) / sizeof((syms)[0]), &(table), sizeof(table), \
	 PTHREAD_MUTEX_INITIALIZER, false, NULL, {0}}

/* Opens l->soname and fills l->table the first time it is called (any
 * thread; later calls return the first call's result without blocking on
 * dlopen again).  False when the library or one of its functions is
 * missing, with the reason in *why (why may be NULL; the string lives as
 * long as l). */
bool skl__lazy_load(skl__lazy *l, const char **why);

#endif
