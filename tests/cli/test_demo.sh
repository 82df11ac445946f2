#!/usr/bin/env bash
# `skiplock demo`: a worker is SIGKILLed mid-job and every job still
# completes exactly once in effect, in the test database (directly and
# through PgBouncer).  Direct mode also runs the private-cluster path twice
# (create, then reuse) and checks that it leaves no server running.
. "$(dirname "$0")/lib.sh"

# run_demo NAME ARGS...: runs the demo, checks exit 0 and the summary.
run_demo() {
	local name=$1
	shift
	"$@" >"$TMP/out" 2>"$TMP/err"
	local rc=$?
	if [ "$rc" = 0 ]; then pass "$name exits 0"; else
		fail "$name: exit $rc; stderr: $(tail -n 8 "$TMP/err")"
	fi
	local summary
	summary=$(grep '^demo: .* jobs, ' "$TMP/out")
	echo "     $summary"
	case $summary in *" 0 duplicate effects"*) pass "$name: 0 duplicate effects" ;;
		*) fail "$name: summary '$summary' lacks '0 duplicate effects'" ;; esac
	case $summary in *", 0 lost,"*) pass "$name: 0 lost" ;;
		*) fail "$name: summary '$summary' lacks '0 lost'" ;; esac
}

run_demo "demo --url" "$SKL_BIN" demo --url "$URL" --jobs 120
check_eq "one ledger row per job" \
	"$(q "SELECT count(*) || ' ' || count(DISTINCT job_id) FROM skiplock_demo.ledger")" "120 120"
check_eq "every demo job completed" \
	"$(q "SELECT count(*) FILTER (WHERE state = 'completed') FROM skiplock.all_jobs WHERE queue = 'skiplock_demo'")" 120
check_eq "a killed worker's jobs were rescued" \
	"$(q "SELECT count(*) > 0 FROM skiplock.all_jobs WHERE queue = 'skiplock_demo' AND errors::text LIKE '%lease expired%'")" t
no_leftovers

expect_exit "--dir with --url" 2 'apply only to the private cluster' -- \
	"$SKL_BIN" demo --url "$URL" --dir "$TMP/x"
"$SKL_BIN" demo --help | grep -q "Exit status" && pass "demo --help" || fail "demo --help"

# Processes whose command line names the cluster's directory.
cluster_procs() {
	local p
	for p in /proc/[0-9]*; do
		tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF "$TMP/pg/" && echo "${p#/proc/}"
	done
	return 0
}

if [ "$MODE" = direct ]; then
	chmod 755 "$TMP" # under root the cluster runs as another OS user, which must reach it
	run_demo "private cluster" env -u DATABASE_URL "$SKL_BIN" demo --dir "$TMP/pg" --jobs 60
	grep -q "creating a PostgreSQL cluster" "$TMP/err" && pass "private cluster: created" ||
		fail "private cluster: no 'creating' line: $(head -c 400 "$TMP/err")"
	check_eq "private cluster: no server left running" "$(cluster_procs)" ""
	check_eq "private cluster: no postmaster.pid left" "$(ls "$TMP/pg/data/postmaster.pid" 2>/dev/null)" ""
	check_eq "private cluster: listens on no TCP port" \
		"$(grep -c "^listen_addresses = ''" "$TMP/pg/data/skiplock_demo.conf")" 1

	run_demo "private cluster, again" env -u DATABASE_URL "$SKL_BIN" demo --dir "$TMP/pg" --jobs 40
	grep -q "creating a PostgreSQL cluster" "$TMP/err" && fail "rerun created a new cluster" ||
		pass "rerun reuses the cluster"
	check_eq "rerun: no server left running" "$(cluster_procs)" ""
fi
finish
