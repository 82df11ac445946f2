#!/usr/bin/env bash
# The installed schema against the built-in steps: sql/current.sql is what
# init installs; init refuses a step recorded with another checksum, naming
# it; --repair brings a database installed from the first text of 0003
# (lease functions judging expiry by now()) to the released one, and
# refuses a checksum no repair is known for.
. "$(dirname "$0")/lib.sh"

DUMP=$SKL_SOURCE_DIR/scripts/schema-dump
OLD_0003=$SKL_SOURCE_DIR/tests/fixtures/schema/0003_leases-d74c868.sql

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
q "DROP SCHEMA skiplock CASCADE"
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
no_leftovers
finish
