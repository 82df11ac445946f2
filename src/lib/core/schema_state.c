/*
 * schema_state.c — what skiplock.schema_version says: the installed steps,
 * each step's recorded SHA-256 against the built-in text's, and which
 * differing ones are reviewed superseded texts.  Read by the install
 * (schema.c) and the repair (schema_repair.c), which depend on it and not
 * on each other's reading.
 */
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/schema_steps.h"
#include "skiplock/schema.h"

void skl__schema_checksum(const char *text, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	EVP_Digest(text, strlen(text), md, &len, EVP_sha256(), NULL);
	for (unsigned int i = 0; i < len && i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	out[64] = '\0';
}

/* Notes version v, recorded with checksum sum, in st. */
static void note_installed(skl_schema_state *st, int v, const char *sum)
{
	if (v <= 0 || v >= SKL_MAX_STEPS)
		return;
	st->have[v / 8] |= (unsigned char)(1u << (v % 8));
	if (v > st->max)
		st->max = v;
	for (int i = 0; i < skl_schema_nsteps; i++) {
		char built[65];
		if (skl_schema_steps[i].version != v)
			continue;
		skl__schema_checksum(skl_schema_steps[i].sql, built);
		if (strcmp(built, sum) == 0 || st->ndrift == SKL_MAX_DRIFT)
			return;
		skl_schema_drift *d = &st->drift[st->ndrift++];
		d->idx = i;
		snprintf(d->recorded, sizeof(d->recorded), "%s", sum);
		for (int k = 0; k < skl_schema_nsuperseded; k++)
			d->repairable |= skl_schema_superseded_texts[k].version == v &&
			                 strcmp(skl_schema_superseded_texts[k].checksum, sum) == 0;
	}
}

skl_rc skl__schema_read(skl_client *c, void *ctx, skl_error *err)
{
	skl_schema_state *st = ctx;
	memset(st, 0, sizeof(*st));
	PGresult *res = NULL;
	skl_rc rc = skl__exec(c, "SELECT to_regclass('skiplock.schema_version') IS NOT NULL", 0,
	                      NULL, &res, err);
	if (rc != SKL_OK)
		return rc;
	bool exists = PQgetvalue(res, 0, 0)[0] == 't';
	PQclear(res);
	if (!exists)
		return SKL_OK;
	rc = skl__exec(c, "SELECT version, checksum FROM skiplock.schema_version ORDER BY version",
	               0, NULL, &res, err);
	for (int i = 0; rc == SKL_OK && i < PQntuples(res); i++)
		note_installed(st, atoi(PQgetvalue(res, i, 0)), PQgetvalue(res, i, 1));
	PQclear(res);
	return rc;
}

int skl_schema_latest(void)
{
	return skl_schema_nsteps > 0 ? skl_schema_steps[skl_schema_nsteps - 1].version : 0;
}
