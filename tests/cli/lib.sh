# shellcheck shell=bash
# lib.sh — helpers for command-line tests.  Sourced by tests/cli/test_*.sh,
# which run under tests/harness/with-cluster with MODE "direct" or "pooled".
# Each test gets a fresh database; it is dropped on exit.
set -u

MODE=${1:?usage: test_x.sh direct|pooled}
: "${SKL_BIN:?run under CTest}" "${SKL_TEST_PGPORT:?run under tests/harness/with-cluster}"
TEST_NAME=$(basename "$0" .sh)
DB="c_${TEST_NAME#test_}_${MODE}_$$"
DIRECT_URL="postgresql://$SKL_TEST_DBUSER@$SKL_TEST_PGHOST:$SKL_TEST_PGPORT/$DB"
POOLED_URL="postgresql://$SKL_TEST_DBUSER@$SKL_TEST_PGHOST:$SKL_TEST_BOUNCER_PORT/$DB"
# shellcheck disable=SC2034 # URL is read by the tests that source this file
if [ "$MODE" = pooled ]; then URL=$POOLED_URL; else URL=$DIRECT_URL; fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/skl-cli.XXXXXX")
FAILS=0
CHECKS=0

# The worker role's login (SKL_TEST_WORKER_ROLE, granted by `init
# --grant-worker`) on this test's database, in this run's mode.
worker_url() {
	local port=$SKL_TEST_PGPORT
	[ "$MODE" = pooled ] && port=$SKL_TEST_BOUNCER_PORT
	echo "postgresql://$SKL_TEST_WORKER_ROLE:$SKL_TEST_WORKER_PASSWORD@$SKL_TEST_PGHOST:$port/$DB"
}
admin() { psql -X -q -At -v ON_ERROR_STOP=1 "postgresql://$SKL_TEST_DBUSER@$SKL_TEST_PGHOST:$SKL_TEST_PGPORT/postgres" "$@"; }
q() { psql -X -q -At -v ON_ERROR_STOP=1 "$DIRECT_URL" -c "$1"; }

cleanup() {
	local pids
	pids=$(jobs -p)
	[ -n "$pids" ] && kill $pids 2>/dev/null
	admin -c "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" >/dev/null 2>&1
	citus_db dropdb
	rm -rf "$TMP"
}
# On a Citus cluster (with-cluster --citus) the test's database is a Citus
# database: on every node, with the extension, the workers registered.
citus_db() { [ "${SKL_TEST_CITUS:-}" != 1 ] || "$SKL_TEST_CTL" "citus-$1" "$DB"; }
trap cleanup EXIT
admin -c "CREATE DATABASE \"$DB\"" >/dev/null
citus_db db >/dev/null || exit 1

pass() { CHECKS=$((CHECKS + 1)); echo "ok   $*"; }
fail() { CHECKS=$((CHECKS + 1)); FAILS=$((FAILS + 1)); echo "FAIL $*"; }
check_eq() { # name got want
	if [ "$2" = "$3" ]; then pass "$1"; else fail "$1: got '$2', want '$3'"; fi
}
# expect_usage NAME EXPECTED_EXIT PATTERN -- CMD...: exit code, exactly one
# stderr line matching PATTERN, nothing on stdout.
expect_exit() {
	local name=$1 want=$2 pattern=$3
	shift 4
	"$@" >"$TMP/out" 2>"$TMP/err"
	local rc=$? lines
	lines=$(wc -l <"$TMP/err")
	if [ "$rc" != "$want" ]; then
		fail "$name: exit $rc, want $want; stderr: $(head -c 400 "$TMP/err")"
	elif [ "$lines" != 1 ]; then
		fail "$name: $lines lines on stderr, want 1: $(head -c 400 "$TMP/err")"
	elif ! grep -qE -- "$pattern" "$TMP/err"; then
		fail "$name: stderr '$(cat "$TMP/err")' does not match /$pattern/"
	elif [ -s "$TMP/out" ]; then
		fail "$name: unexpected stdout: $(head -c 200 "$TMP/out")"
	else
		pass "$name (exit $rc: $(cat "$TMP/err"))"
	fi
}
# wait_until DESCRIPTION SECONDS CMD...: polls CMD until it succeeds.
wait_until() {
	local what=$1 end=$((SECONDS + $2))
	shift 2
	until "$@" >/dev/null 2>&1; do
		if [ "$SECONDS" -ge "$end" ]; then fail "timed out waiting for: $what"; return 1; fi
		sleep 0.05
	done
}
# wait_for SQL EXPECTED SECONDS: polls SQL (direct) until it prints EXPECTED;
# returns 1 when it did not within SECONDS.
wait_for() {
	local _
	for _ in $(seq 1 $(($3 * 10))); do
		[ "$(q "$1")" = "$2" ] && return 0
		sleep 0.1
	done
	return 1
}
# wait_exit PID SECONDS: waits for a background process; sets RC.
wait_exit() {
	local end=$((SECONDS + $2))
	while kill -0 "$1" 2>/dev/null; do
		if [ "$SECONDS" -ge "$end" ]; then
			fail "process $1 still running after $2 s"
			kill -KILL "$1" 2>/dev/null
			break
		fi
		sleep 0.05
	done
	wait "$1"
	# shellcheck disable=SC2034 # RC is the caller's: the process's exit status
	RC=$?
}
no_leftovers() {
	check_eq "no advisory locks left" "$(q "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database WHERE locktype = 'advisory' AND d.datname = current_database()")" 0
	check_eq "no idle-in-transaction sessions" "$(q "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()")" 0
}
finish() {
	echo "$TEST_NAME [$MODE]: $((CHECKS - FAILS)) of $CHECKS checks passed"
	[ "$FAILS" = 0 ]
}
