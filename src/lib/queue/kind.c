/*
 * kind.c — the one length check of a job kind, for the calls that take a
 * kind on its own (breakers, the worker's handlers and retry settings).
 */
#include <string.h>

#include "queue/queue_int.h"
#include "skiplock/queue.h"

skl_rc skl__check_kind(const char *kind, skl_error *err)
{
	size_t kl = kind ? strlen(kind) : 0;
	if (kl == 0 || kl > SKL_KIND_MAX)
		return skl__seterr(err, SKL_INVALID, "job kind must be 1 to %d bytes", SKL_KIND_MAX);
	return SKL_OK;
}
