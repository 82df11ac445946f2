/*
 * waits.c — why available jobs wait, counted per queue and reason
 * (skiplock/deps.h, skl_waits_count): one read of skiplock.waits_summary
 * (sql/0031_waits.sql), which decides each reason; this file only checks
 * the bounds and copies the rows out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/internal.h"
#include "skiplock/deps.h"

enum { W_QUEUE, W_REASON, W_JOBS, W_NCOLS };
static const char *const col_names[W_NCOLS] = {"queue", "reason", "jobs"};

/* Fills w from row `row`, its two strings in one allocation; false when
 * out of memory. */
static bool fill_count(skl_wait_count *w, const PGresult *r, int row)
{
	size_t lq = (size_t)PQgetlength(r, row, W_QUEUE);
	size_t lr = (size_t)PQgetlength(r, row, W_REASON);
	char *mem = malloc(lq + lr + 2);
	if (mem == NULL)
		return false;
	memcpy(mem, PQgetvalue(r, row, W_QUEUE), lq + 1);
	memcpy(mem + lq + 1, PQgetvalue(r, row, W_REASON), lr + 1);
	*w = (skl_wait_count){.queue = mem, .reason = mem + lq + 1,
	                      .jobs = strtoll(PQgetvalue(r, row, W_JOBS), NULL, 10),
	                      .internal = mem};
	return true;
}

static skl_rc copy_rows(PGresult *res, skl_wait_count **rows, size_t *n, skl_error *err)
{
	size_t m = (size_t)PQntuples(res), i = 0;
	skl_wait_count *out = m ? calloc(m, sizeof(*out)) : NULL;
	while (out && i < m && fill_count(&out[i], res, (int)i))
		i++;
	if (i < m) {
		skl_wait_counts_free(out, i);
		return skl__seterr(err, SKL_NOMEM, "out of memory reading the waits");
	}
	*rows = out;
	*n = m;
	return SKL_OK;
}

skl_rc skl_waits_count(skl_client *c, const char *const *queues, size_t nqueues, int cap,
                       skl_wait_count **rows, size_t *n, skl_error *err)
{
	*rows = NULL;
	*n = 0;
	if (cap < 0 || cap > 1000000)
		return skl__seterr(err, SKL_INVALID, "waits: cap must be 0 (10000) to 1000000, got %d",
		                   cap);
	if (nqueues > 0 && queues == NULL)
		return skl__seterr(err, SKL_INVALID, "waits: a count of queues without their list");
	char capv[16];
	snprintf(capv, sizeof(capv), "%d", cap ? cap : 10000);
	char *arr = nqueues ? skl_text_array(queues, nqueues) : NULL;
	if (nqueues && arr == NULL)
		return skl__seterr(err, SKL_NOMEM, "out of memory");
	skl_stmt s = {.sql = "SELECT queue, reason, jobs FROM skiplock.waits_summary("
	                     "cap => $1::integer, queues => $2::text[])",
	              .nparams = 2, .params = {capv, arr}};
	static const skl_txn_opts read_opts = {.txn = 1, .idempotent = 1};
	skl_rc rc = skl__run_stmt(c, &read_opts, &s, err);
	free(arr);
	if (rc == SKL_OK)
		rc = skl__check_columns(s.res, col_names, W_NCOLS, err);
	if (rc == SKL_OK)
		rc = copy_rows(s.res, rows, n, err);
	PQclear(s.res);
	return rc;
}

void skl_wait_counts_free(skl_wait_count *rows, size_t n)
{
	for (size_t i = 0; rows && i < n; i++)
		free(rows[i].internal);
	free(rows);
}
