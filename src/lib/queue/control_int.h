/*
 * control_int.h — what control.c offers bulk.c, limits.c and schedule.c:
 * the check of an actor, and one logged action's statement.
 */
#ifndef SKL_CONTROL_INT_H
#define SKL_CONTROL_INT_H

#include "core/internal.h"
#include "skiplock/control.h"

/* The longest actor name or role, in bytes (skiplock.actions' checks). */
#define SKL_ACTOR_MAX 200

/* SKL_INVALID unless who names an actor and a role of 1 to SKL_ACTOR_MAX
 * bytes. */
skl_rc skl__check_actor(const skl_actor *who, skl_error *err);

/* Runs s, one call of a logged action's function answering one row of one
 * column, never re-sent after an indeterminate outcome (the log would get
 * a second row).  On SKL_OK, *isnull and *out (valid until s->res is
 * cleared, which the caller does) hold its value; another shape is SKL_DB. */
skl_rc skl__act(skl_client *c, skl_stmt *s, bool *isnull, const char **out, skl_error *err);

#endif
