#!/usr/bin/env bash
# The schema installer the client packages bundle (sql/install.sql, made
# by scripts/install-sql from the steps), directly and through PgBouncer:
#
#   * it is what scripts/install-sql generates from sql/ now, and so is
#     every copy a package bundles;
#   * on an empty database, seven installers at once — two `skiplock init`,
#     two runs of the script by psql, `npx skiplock init` (the Node
#     package's command), `python -m skiplock init` and the Rust crate's
#     `examples/init` — end with one schema, no error, one row per step,
#     and the same schema and step rows as `skiplock init` alone gives;
#   * run again, it changes nothing; `skiplock init` then finds the schema
#     current;
#   * a step installed from another text is refused (55000, naming it),
#     nothing applied after it.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
SRC=$SKL_SOURCE_DIR
INSTALL=$SRC/sql/install.sql

mapfile -t copies < "$SRC/sql/install-copies"
# the packages' copies are made from the steps where a package is built or
# tested (not committed); made here too, for the clients' installers below
python3 "$SRC/scripts/install-sql" "${copies[@]}" || fail "scripts/install-sql"
if python3 "$SRC/scripts/install-sql" --check "${copies[@]}" 2>"$TMP/check"; then
	pass "sql/install.sql and the packages' copies are what scripts/install-sql generates"
else
	fail "$(cat "$TMP/check")"
fi

run_script() { psql -X -q -v ON_ERROR_STOP=1 "$URL" -f "$INSTALL" >"$TMP/$1.out" 2>&1; }
run_init() { "$S" init --url "$URL" >"$TMP/$1.out" 2>&1; }
run_node() { node "$SRC/clients/node/bin/skiplock.js" init --url "$URL" >"$TMP/node.out" 2>&1; }
run_python() {
	PYTHONPATH="$SRC/clients/python/src" PYTHONDONTWRITEBYTECODE=1 \
		"${SKL_PYTHON:-/usr/bin/python3}" -m skiplock init --url "$URL" >"$TMP/python.out" 2>&1
}
run_rust() { "$SRC/clients/rust/target/release/examples/init" --url "$URL" >"$TMP/rust.out" 2>&1; }
bash "$SRC/clients/node/test/ensure-deps.sh" >/dev/null 2>&1 || fail "the Node client's dependencies"
pids=()
run_init c1 & pids+=($!)
run_node & pids+=($!)
run_script s1 & pids+=($!)
run_python & pids+=($!)
run_init c2 & pids+=($!)
run_rust & pids+=($!)
run_script s2 & pids+=($!)
errors=0
for p in "${pids[@]}"; do wait "$p" || errors=$((errors + 1)); done
check_eq "seven installers at once (C, psql, Node, Python, Rust): none failed" "$errors" 0
[ "$errors" = 0 ] || cat "$TMP"/*.out
steps=("$SRC"/sql/[0-9][0-9][0-9][0-9]_*.sql)
nsteps=${#steps[@]}
check_eq "one row per step" "$(q "SELECT count(*) || '/' || count(DISTINCT version) FROM skiplock.schema_version")" "$nsteps/$nsteps"

# the same as `skiplock init` alone gives, on a database of its own
REF="${DB}_ref"
admin -c "CREATE DATABASE \"$REF\"" >/dev/null
trap 'cleanup; admin -c "DROP DATABASE IF EXISTS \"$REF\" WITH (FORCE)" >/dev/null 2>&1' EXIT
REF_URL="postgresql://$SKL_TEST_DBUSER@$SKL_TEST_PGHOST:$SKL_TEST_PGPORT/$REF"
"$S" init --url "$REF_URL" >/dev/null 2>&1 || fail "skiplock init of the reference"
dump() { pg_dump -s --no-owner -d "$1" | grep -v -e '^--' -e '^\\restrict' -e '^\\unrestrict'; }
dump "$DIRECT_URL" >"$TMP/mixed.sql"
dump "$REF_URL" >"$TMP/ref.sql"
if diff -q "$TMP/mixed.sql" "$TMP/ref.sql" >/dev/null; then
	pass "the schema equals skiplock init's"
else
	fail "the schema differs from skiplock init's: $(diff "$TMP/mixed.sql" "$TMP/ref.sql" | head -20)"
fi
rows() { psql -X -q -At "$1" -c "SELECT version, name, checksum FROM skiplock.schema_version ORDER BY 1"; }
check_eq "the step rows equal skiplock init's" "$(rows "$DIRECT_URL")" "$(rows "$REF_URL")"

before=$(q "SELECT max(applied_at) FROM skiplock.schema_version")
if run_script again; then pass "run again: no error"; else fail "run again: $(cat "$TMP/again.out")"; fi
check_eq "run again: nothing applied" "$(q "SELECT max(applied_at) FROM skiplock.schema_version")" "$before"
case $("$S" init --url "$URL" 2>&1) in
	*"schema is current"*) pass "skiplock init finds it current" ;;
	*) fail "skiplock init after the script: $("$S" init --url "$URL" 2>&1)" ;;
esac

# a drifted step: refused, named, nothing after it
q "UPDATE skiplock.schema_version SET checksum = repeat('0', 64) WHERE version = 3" >/dev/null
q "DELETE FROM skiplock.schema_version WHERE version = (SELECT max(version) FROM skiplock.schema_version)" >/dev/null
n=$(q "SELECT count(*) FROM skiplock.schema_version")
psql -X -q -v ON_ERROR_STOP=1 -v VERBOSITY=default "$URL" -f "$INSTALL" >"$TMP/drift.out" 2>&1
check_eq "a drifted step: the script fails" "$?" 3
if grep -q 'schema step 0003_leases is installed from a text this installer does not know (checksum 000000000000' "$TMP/drift.out"; then
	pass "a drifted step: named"
else
	fail "a drifted step: $(cat "$TMP/drift.out")"
fi
check_eq "a drifted step: nothing applied" "$(q "SELECT count(*) FROM skiplock.schema_version")" "$n"
no_leftovers
finish
