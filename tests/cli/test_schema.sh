#!/usr/bin/env bash
# The installed schema against the built-in steps: sql/current.sql is what
# init installs; init refuses a step recorded with another checksum, naming
# it; --repair brings a database installed from the first text of 0003
# (lease functions judging expiry by now()) and one initialised at 54c3c96
# (the first text of 0013) to the released ones, and refuses a checksum no
# repair is known for.
. "$(dirname "$0")/lib.sh"

DUMP=$SKL_SOURCE_DIR/scripts/schema-dump
OLD_0003=$SKL_SOURCE_DIR/tests/fixtures/schema/0003_leases-d74c868.sql
OLD_0013=$SKL_SOURCE_DIR/tests/fixtures/schema/0013_finished-54c3c96.sql

"$SKL_BIN" init --url "$URL" >/dev/null 2>&1
check_eq "init exits 0" "$?" 0
if diff -u "$SKL_SOURCE_DIR/sql/current.sql" <("$DUMP" --print "$DIRECT_URL") \
	--label sql/current.sql --label installed >"$TMP/diff"; then
	pass "sql/current.sql is the schema init installs"
else
	fail "sql/current.sql differs from the installed schema (run scripts/schema-dump):"
	cat "$TMP/diff"
fi
if [ "$MODE" = direct ]; then # the script itself: scratch database, init, dump
	admin_url="postgresql://$SKL_TEST_DBUSER@$SKL_TEST_PGHOST:$SKL_TEST_PGPORT/postgres"
	out=$(SKL_BIN=$SKL_BIN "$DUMP" --check "$admin_url" 2>&1)
	check_eq "scripts/schema-dump --check passes: $out" "$?" 0
fi

# A checksum no repair is known for: refused, with or without --repair.
q "UPDATE skiplock.schema_version SET checksum = repeat('0', 64) WHERE version = 2"
expect_exit "init refuses an unknown text of a step, naming it" 1 \
	'schema step 0002_jobs is installed from a text this build does not know' -- \
	"$SKL_BIN" init --url "$URL"
expect_exit "init --repair refuses it too" 1 'schema step 0002_jobs .* no safe repair' -- \
	"$SKL_BIN" init --repair --url "$URL"

# A database installed before 0003 was edited: the steps applied the way
# init applied them then, 0003 from its first text.
q "DROP SCHEMA skiplock, skiplock_internal CASCADE"
q "CREATE SCHEMA skiplock; CREATE TABLE skiplock.schema_version (version int PRIMARY KEY,
   name text NOT NULL, checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
for f in "$SKL_SOURCE_DIR"/sql/[0-9][0-9][0-9][0-9]_*.sql; do
	name=$(basename "$f" .sql)
	[ "$name" = 0003_leases ] && f=$OLD_0003
	psql -X -q -v ON_ERROR_STOP=1 -1 "$DIRECT_URL" -f "$f" >/dev/null || fail "applying $f"
	q "INSERT INTO skiplock.schema_version (version, name, checksum)
	   VALUES (${name%%_*}, '$name', '$(sha256sum "$f" | cut -d' ' -f1)')"
done
acquire_src="SELECT prosrc LIKE '%clock_timestamp()%' FROM pg_proc WHERE oid = 'skiplock.lease_acquire'::regproc"
check_eq "the old lease_acquire judges expiry by now()" "$(q "$acquire_src")" f
expect_exit "init refuses the old 0003, naming it and --repair" 1 \
	'schema step 0003_leases is installed from an earlier text.*--repair' -- \
	"$SKL_BIN" init --url "$URL"
check_eq "the refusal changed nothing" "$(q "$acquire_src")" f
out=$("$SKL_BIN" init --repair --url "$URL" 2>"$TMP/err")
check_eq "init --repair exits 0 ($(cat "$TMP/err"))" "$?" 0
case "$out" in *"repaired: 1 step"*) pass "--repair reports one step" ;; *) fail "--repair said: $out" ;; esac
check_eq "lease_acquire is the released one" "$(q "$acquire_src")" t
check_eq "the released checksum is recorded" \
	"$(q "SELECT checksum FROM skiplock.schema_version WHERE version = 3")" \
	"$(sha256sum "$SKL_SOURCE_DIR/sql/0003_leases.sql" | cut -d' ' -f1)"
if diff -u "$SKL_SOURCE_DIR/sql/current.sql" <("$DUMP" --print "$DIRECT_URL") >"$TMP/diff"; then
	pass "the repaired schema is sql/current.sql"
else
	fail "the repaired schema differs from sql/current.sql:"
	cat "$TMP/diff"
fi
out=$("$SKL_BIN" init --url "$URL" 2>&1)
case "$out" in *"is current"*) pass "init after the repair: current" ;; *) fail "init said: $out" ;; esac
out=$("$SKL_BIN" init --repair --url "$URL" 2>&1)
case "$out" in *repaired*) fail "a second --repair repaired again: $out" ;; *) pass "a second --repair changes nothing" ;; esac
check_eq "leases work" "$(q "SELECT skiplock.lease_acquire('l', 'me', '1 minute')")" 1

# A database initialised at 54c3c96, when 0013 was first committed: steps
# 0001-0012 as released, 0013 from its first text, nothing newer; with jobs
# in it.  init refuses it and names --repair; --repair brings 0013 to its
# released text and applies every newer step, losing no job.
q "DROP SCHEMA skiplock, skiplock_internal CASCADE"
q "CREATE SCHEMA skiplock; CREATE TABLE skiplock.schema_version (version int PRIMARY KEY,
   name text NOT NULL, checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
for f in "$SKL_SOURCE_DIR"/sql/[0-9][0-9][0-9][0-9]_*.sql; do
	name=$(basename "$f" .sql)
	[ "${name%%_*}" -le 13 ] || continue
	[ "$name" = 0013_finished ] && f=$OLD_0013
	psql -X -q -v ON_ERROR_STOP=1 -1 "$DIRECT_URL" -f "$f" >/dev/null || fail "applying $f"
	q "INSERT INTO skiplock.schema_version (version, name, checksum)
	   VALUES (${name%%_*}, '$name', '$(sha256sum "$f" | cut -d' ' -f1)')"
done
q "SELECT skiplock.enqueue('era', jsonb_build_object('n', g)) FROM generate_series(1, 20) g" >/dev/null
expect_exit "init refuses the 54c3c96 text of 0013, naming --repair" 1 \
	'schema step 0013_finished is installed from an earlier text.*--repair' -- \
	"$SKL_BIN" init --url "$URL"
out=$("$SKL_BIN" init --repair --url "$URL" 2>"$TMP/err")
check_eq "init --repair of the 54c3c96 database exits 0 ($(cat "$TMP/err"))" "$?" 0
case "$out" in *"repaired: 1 step"*) pass "--repair reports one step (0013)" ;; *) fail "--repair said: $out" ;; esac
out=$("$SKL_BIN" init --url "$URL" 2>&1)
case "$out" in *"is current"*) pass "init after the 54c3c96 repair: current" ;; *) fail "init said: $out" ;; esac
check_eq "the 54c3c96 database's jobs are all there" \
	"$(q "SELECT count(*) FROM skiplock.jobs WHERE kind = 'era' AND state = 'available'")" 20
check_eq "every built-in step is recorded with its released checksum" \
	"$(q "SELECT count(*) FROM skiplock.schema_version")" \
	"$(ls "$SKL_SOURCE_DIR"/sql/[0-9][0-9][0-9][0-9]_*.sql | wc -l)"
if diff -u "$SKL_SOURCE_DIR/sql/current.sql" <("$DUMP" --print "$DIRECT_URL") >"$TMP/diff"; then
	pass "the repaired 54c3c96 schema is sql/current.sql"
else
	fail "the repaired 54c3c96 schema differs from sql/current.sql:"
	cat "$TMP/diff"
fi
no_leftovers
finish
