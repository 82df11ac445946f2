/*
 * schema_steps.h — the versioned SQL steps embedded from sql/ at build time.
 */
#ifndef SKL_SCHEMA_STEPS_H
#define SKL_SCHEMA_STEPS_H

#include "core/buf.h"
#include "core/internal.h"

typedef struct skl_schema_step {
	int version;          /* NNNN of sql/NNNN_name.sql */
	const char *name;     /* "NNNN_name" */
	const char *sql;      /* the file's text */
} skl_schema_step;

extern const skl_schema_step skl_schema_steps[];
extern const int skl_schema_nsteps;

/* An earlier text of a released step (a "superseded" line of sql/CHECKSUMS):
 * reviewed to differ from the step only in function definitions and
 * comments, so a database that recorded it is repaired by re-creating the
 * step's functions. */
typedef struct skl_schema_superseded {
	int version;
	const char *checksum; /* SHA-256, lower-case hex */
} skl_schema_superseded;

extern const skl_schema_superseded skl_schema_superseded_texts[];
extern const int skl_schema_nsuperseded;

/* schema_state.c: the SHA-256 of a step's text, as recorded in
 * skiplock.schema_version.checksum. */
void skl__schema_checksum(const char *sql, char out[65]);

#define SKL_MAX_STEPS 1024 /* versions 1..SKL_MAX_STEPS-1 */
#define SKL_MAX_DRIFT 16

/* An installed step whose recorded checksum is not the built-in text's. */
typedef struct skl_schema_drift {
	int idx;              /* in skl_schema_steps */
	bool repairable;      /* the recorded checksum is a superseded text */
	char recorded[65];
} skl_schema_drift;

/* What skiplock.schema_version says. */
typedef struct skl_schema_state {
	unsigned char have[SKL_MAX_STEPS / 8]; /* bitmap of installed versions */
	int max;                               /* the newest, 0 when none */
	int ndrift;                            /* entries of drift used */
	skl_schema_drift drift[SKL_MAX_DRIFT];
} skl_schema_state;

/* schema_state.c: reads the installed versions and their checksums (one attempt
 * of skl__run; all zero when the schema is not installed). */
skl_rc skl__schema_read(skl_client *c, void *state, skl_error *err);

/* schema_repair.c: SKL_CONFLICT naming the first drifted step (one that no
 * repair is known for first) and what to do, or SKL_OK when none drifted. */
skl_rc skl__schema_drift_error(const skl_schema_state *st, skl_error *err);

/* schema_repair.c: appends to out the statements that repair step
 * skl_schema_steps[idx]: its CREATE FUNCTION statements as CREATE OR
 * REPLACE FUNCTION, and its COMMENT ON FUNCTION statements, leaving out
 * functions that a later step defines again.  Returns how many functions. */
int skl__schema_repair_sql(int idx, skl_buf *out);

#endif
