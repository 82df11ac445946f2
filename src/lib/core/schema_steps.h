/*
 * schema_steps.h — the versioned SQL steps embedded from sql/ at build time.
 */
#ifndef SKL_SCHEMA_STEPS_H
#define SKL_SCHEMA_STEPS_H

typedef struct skl_schema_step {
	int version;          /* NNNN of sql/NNNN_name.sql */
	const char *name;     /* "NNNN_name" */
	const char *sql;      /* the file's text */
} skl_schema_step;

extern const skl_schema_step skl_schema_steps[];
extern const int skl_schema_nsteps;

#endif
