/*
 * lock_keys.c — advisory-lock keys: rebuilding them from pg_locks and
 * naming the ones known tools take (docs/doctor.md cites each formula's
 * source).  Pure functions: no database, no allocation.
 *
 * CRC-32 is zlib's crc32(), the IEEE polynomial that Rust's crc crate
 * (CRC_32_ISO_HDLC, used by sqlx) and Go's crc32.ChecksumIEEE (used by
 * golang-migrate) compute.  It is computed here rather than in SQL because
 * PostgreSQL before 18 has no crc32() and the doctor must work on any
 * database without installing anything in it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "core/internal.h"
#include "skiplock/doctor.h"

skl_rc skl_advisory_key_from_tag(uint32_t classid, uint32_t objid, int objsubid,
                                 skl_advisory_key *out)
{
	memset(out, 0, sizeof(*out));
	if (objsubid == 1) {
		/* SET_LOCKTAG_INT64: high half in classid, low half in objid. */
		out->key = (int64_t)(((uint64_t)classid << 32) | objid);
		return SKL_OK;
	}
	if (objsubid == 2) {
		/* SET_LOCKTAG_INT32 pair: each int4 stored as an oid. */
		out->two = true;
		out->k1 = (int32_t)classid;
		out->k2 = (int32_t)objid;
		return SKL_OK;
	}
	return SKL_INVALID;
}

static uint32_t crc32_of(const void *data, size_t len)
{
	uLong crc = crc32(0L, Z_NULL, 0);
	return (uint32_t)crc32(crc, data, (uInt)len);
}

int64_t skl_key_sqlx(const char *database)
{
	/* sqlx: 0x3d32ad9e * (crc as i64).  Both factors are below 2^32 and the
	 * first below 2^30, so the product stays under 2^62: no wrap-around. */
	return (int64_t)0x3d32ad9e * (int64_t)crc32_of(database, strlen(database));
}

int64_t skl_key_golang_migrate(const char *const *names, size_t n)
{
	uLong crc = crc32(0L, Z_NULL, 0);
	for (size_t i = 0; i < n; i++) {
		if (i > 0)
			crc = crc32(crc, (const Bytef *)"", 1);   /* the NUL separator */
		crc = crc32(crc, (const Bytef *)names[i], (uInt)strlen(names[i]));
	}
	uint32_t sum = (uint32_t)crc * UINT32_C(1486364155);   /* uint32 arithmetic */
	return (int64_t)sum;
}

/* golang-migrate's key for the database as "db" or "/db" (the driver's
 * name for it when opened by URL), alone (releases before per-schema keys)
 * or with a schema and its default table. */
static bool golang_migrate_match(int64_t key, const char *database, const char *const *schemas,
                                 size_t nschemas, char *buf, size_t cap)
{
	char slashed[256];
	snprintf(slashed, sizeof(slashed), "/%s", database);
	const char *forms[2] = {database, slashed};
	for (size_t f = 0; f < 2; f++) {
		if (skl_key_golang_migrate(&forms[f], 1) == key) {
			snprintf(buf, cap, "golang-migrate migrations (database %s)", forms[f]);
			return true;
		}
		for (size_t s = 0; s < nschemas; s++) {
			const char *names[3] = {forms[f], schemas[s], "schema_migrations"};
			if (skl_key_golang_migrate(names, 3) == key) {
				snprintf(buf, cap, "golang-migrate migrations (%s.schema_migrations)",
				         schemas[s]);
				return true;
			}
		}
	}
	return false;
}

const char *skl_advisory_key_name(const skl_advisory_key *k, const char *database,
                                  const char *const *schemas, size_t nschemas, char *buf,
                                  size_t cap)
{
	if (k->two || cap == 0)
		return NULL;
	const char *fixed = NULL;
	if (k->key == SKL_KEY_SKIPLOCK_INIT)
		fixed = "skiplock init (schema install)";
	else if (k->key == SKL_KEY_PRISMA)
		fixed = "Prisma migrations";
	else if (k->key == SKL_KEY_SQITCH)
		fixed = "sqitch deploy";
	else if (database && k->key == skl_key_sqlx(database))
		fixed = "sqlx migrations";
	if (fixed) {
		snprintf(buf, cap, "%s", fixed);
		return buf;
	}
	if (database && golang_migrate_match(k->key, database, schemas, nschemas, buf, cap))
		return buf;
	return NULL;
}
