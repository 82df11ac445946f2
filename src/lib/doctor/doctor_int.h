/*
 * doctor_int.h — private to the doctor's files: the report with the memory
 * it owns.  Strings of a report point into its two PGresults or into blocks
 * it allocated; skl_lock_report_free releases all of them at once.
 */
#ifndef SKL_DOCTOR_INT_H
#define SKL_DOCTOR_INT_H

#include "core/internal.h"
#include "skiplock/doctor.h"

typedef struct dl_report {
	skl_lock_report pub;
	PGresult *locks_res;     /* advisory locks (doctor_locks.c locks_sql) */
	PGresult *sessions_res;  /* idle-in-transaction sessions and blockers */
	void **blocks;           /* everything else it allocated */
	size_t nblocks, capblocks;
} dl_report;

/* An allocation (zeroed) or a copy owned by the report; NULL when out of
 * memory. */
void *dl_alloc(dl_report *d, size_t size);
char *dl_strdup(dl_report *d, const char *s);
/* Parses a PostgreSQL int[] / text[] literal ("{1,2}"); NULL text gives an
 * empty array.  False when out of memory. */
bool dl_int_array(dl_report *d, const char *text, int **out, size_t *n);
bool dl_text_array(dl_report *d, const char *text, char ***out, size_t *n);
/* A column's text, NULL when SQL NULL; a column as an integer, dflt when
 * NULL. */
const char *dl_text_or_null(const PGresult *r, int row, int col);
int64_t dl_int_or(const PGresult *r, int row, int col, int64_t dflt);
/* Columns of sessions_sql (doctor_locks.c); SESSION_COLS start at S_SESSION. */
enum { S_PID, S_IIT, S_VICTIMS, S_LONGEST, S_HOLDS, S_SESSION };
/* Fills s from the SESSION_COLS of row starting at col, pid from pid_col;
 * strings point into r. */
void dl_fill_session(skl_db_session *s, const PGresult *r, int row, int pid_col, int col);
/* Builds pub.findings from the locks already read and the sessions result. */
skl_rc dl_findings(dl_report *d, const PGresult *sessions);

#endif
