/*
 * control_int.h — what control.c offers bulk.c: the check of an actor.
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

#endif
