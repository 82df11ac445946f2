#!/usr/bin/env bash
# `skiplock init`: 8 concurrent processes install the schema exactly once,
# leave no lock or open transaction behind, and a rerun changes nothing.
. "$(dirname "$0")/lib.sh"

pids=()
for i in $(seq 1 8); do
	"$SKL_BIN" init --url "$URL" >"$TMP/init.$i.out" 2>"$TMP/init.$i.err" &
	pids+=($!)
done
ok=0
for i in "${!pids[@]}"; do
	if wait "${pids[$i]}"; then ok=$((ok + 1)); else echo "init $((i + 1)) failed: $(cat "$TMP/init.$((i + 1)).err")"; fi
done
check_eq "8 concurrent init processes exit 0" "$ok" 8
latest=$("$SKL_BIN" --version | sed -n 's/.*schema version \([0-9]*\).*/\1/p')
# Step numbers may have gaps (parts are written in parallel): count the files.
steps=$(find "$SKL_SOURCE_DIR/sql" -name '[0-9][0-9][0-9][0-9]_*.sql' | wc -l)
check_eq "each schema step recorded once" \
	"$(q "SELECT count(*) || ' ' || count(DISTINCT version) || ' ' || max(version) FROM skiplock.schema_version")" \
	"$steps $steps $latest"
check_eq "installed_version() answers" "$(q "SELECT skiplock.installed_version()")" "$latest"
# steps may be applied by different processes, but each exactly once
# (each process logs the steps it applied; stdout names only the version)
applied=$(cat "$TMP"/init.*.err | grep -c 'applied schema step [0-9]\{4\}_')
check_eq "the processes applied each step once between them" "$applied" "$(q "SELECT count(*) FROM skiplock.schema_version")"
no_leftovers

check_eq "init prints the version, not a count of steps" \
	"$(cat "$TMP"/init.*.out | sort -u | grep -v 'is current')" "skiplock schema installed: version $latest"
out=$("$SKL_BIN" init --url "$URL" 2>&1)
check_eq "rerun exits 0" "$?" 0
case "$out" in *"is current"*) pass "rerun reports current" ;; *) fail "rerun said: $out" ;; esac
check_eq "rerun adds no rows" "$(q "SELECT count(*) FROM skiplock.schema_version")" "$steps"

DATABASE_URL=$URL "$SKL_BIN" init >/dev/null 2>&1
check_eq "DATABASE_URL is honoured" "$?" 0

# --distributed needs the citus extension: refused, nothing changed
if [ "${SKL_TEST_CITUS:-}" != 1 ]; then
	"$SKL_BIN" init --url "$URL" --distributed >"$TMP/dist.out" 2>"$TMP/dist.err"
	rc=$?
	if [ "$rc" != 0 ] && grep -q 'citus extension is not installed.*0A000' "$TMP/dist.err"; then
		pass "init --distributed without citus is refused (exit $rc: $(head -1 "$TMP/dist.err"))"
	else
		fail "init --distributed without citus: exit $rc: $(cat "$TMP/dist.err")"
	fi
	check_eq "and changes nothing" \
		"$(q "SELECT distributed || ' ' || (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'skiplock.jobs'::regclass AND NOT tgisinternal) FROM skiplock.layout")" "false 2"
fi
finish
