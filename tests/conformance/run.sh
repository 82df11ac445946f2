#!/usr/bin/env bash
# run.sh direct|pooled ADAPTER — the worker conformance suite (README.md):
# starts instances of ADAPTER, a worker implementation, against a fresh
# database (direct, or through PgBouncer in transaction mode) and checks the
# worker contract with check.sql after every case.  Runs under CTest and
# tests/harness/with-cluster, like the command-line suites.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../cli/lib.sh"
IMPL=${2:?usage: run.sh direct|pooled ADAPTER}
[ -x "$IMPL" ] || { echo "run.sh: adapter $IMPL is not an executable" >&2; exit 2; }
LEASE=2 # seconds
# On the distributed layout a statement can take a second or more (a new
# backend loads Citus's metadata, an outcome spans coordinator and worker,
# two instances share the pooler's 2 connections): a 2 s lease would
# expire under a healthy instance, and the suite's effect and outcome are
# two transactions, so the job would run again.
[ "${SKL_CONFORMANCE_LAYOUT:-}" = distributed ] && LEASE=5
STARTED=$SECONDS
declare -A WPID=()

psql_direct() { psql -X -q -At -v ON_ERROR_STOP=1 "$DIRECT_URL" "$@"; }
# Every adapter runs in a session of its own, so that kill -9 and SIGSTOP
# reach the worker and everything it started, as when a machine dies or
# pauses.  SIGTERM goes to the adapter's process only.
kill_session() { pkill "-$1" -s "$2" 2>/dev/null; }
conformance_cleanup() {
	local pid
	for pid in "${WPID[@]}"; do kill_session KILL "$pid"; done
	cleanup
}
trap conformance_cleanup EXIT

# start_worker NAME [CONCURRENCY]: an instance whose lease owner is NAME.
start_worker() {
	local name=$1 direct=()
	[ "$MODE" = pooled ] && direct=("DIRECT_DATABASE_URL=$DIRECT_URL")
	env -u DIRECT_DATABASE_URL DATABASE_URL="$URL" "${direct[@]}" CONFORMANCE_MODE="$MODE" \
		CONFORMANCE_OWNER="$name" CONFORMANCE_CONCURRENCY="${2:-4}" CONFORMANCE_LEASE="${LEASE}s" \
		setsid "$IMPL" >"$TMP/$name.log" 2>&1 &
	WPID[$name]=$!
}
# stop_worker NAME: SIGTERM, then it must drain and exit 0 within 25 s.
stop_worker() {
	local pid=${WPID[$1]}
	kill -TERM "$pid"
	wait_exit "$pid" 25
	check_eq "$1 exits 0 after SIGTERM" "$RC" 0
	kill_session KILL "$pid"
	unset "WPID[$1]"
}
# enqueue SQL-ARGS: ids of jobs enqueued by conformance.enqueue(SQL-ARGS).
enqueue() { q "SELECT string_agg(id::text, ' ') FROM conformance.enqueue($1) AS id"; }
# enqueue_cli ARGS...: `skiplock enqueue ARGS` (for per-job retry options);
# prints the id.  Run in $(…), so the caller counts a failure (status 1).
enqueue_cli() {
	local id
	id=$("$SKL_BIN" enqueue --url "$URL" "$@") || return 1
	q "INSERT INTO conformance.enqueued SELECT id, kind FROM skiplock.all_jobs WHERE id = $id" &&
		echo "$id"
}
job() { q "SELECT $2 FROM skiplock.all_jobs j WHERE id = $1"; }
# invariants SCOPE: check.sql's verdicts, counted as checks.
invariants() {
	local line
	while IFS= read -r line; do
		case $line in
		"ok   "*) pass "${line#ok   }" ;;
		"FAIL "*) fail "${line#FAIL }" ;;
		*) fail "check.sql: $line" ;;
		esac
	done < <(psql_direct -v scope="$1" -f "$HERE/check.sql" 2>&1)
}
section() { echo "--- $* ($((SECONDS - STARTED)) s)"; }

section "setup: $(basename "$IMPL") $MODE"
# SKL_CONFORMANCE_LAYOUT=distributed (make test-citus): skiplock's tables
# spread over the Citus cluster by queue (init --distributed).
INIT_ARGS=()
[ "${SKL_CONFORMANCE_LAYOUT:-}" = distributed ] && INIT_ARGS=(--distributed)
"$SKL_BIN" init --url "$URL" "${INIT_ARGS[@]}" >"$TMP/init.log" 2>&1 ||
	fail "skiplock init: $(cat "$TMP/init.log")"
psql_direct -f "$HERE/setup.sql" >/dev/null || fail "setup.sql"
# Jobs of a kind no implementation handles, due all along the run.
enqueue "'conf.unknown', n => 20" >/dev/null

. "$HERE/cases.sh"
. "$HERE/cases_flow.sh"
case_all_done_once
case_outcomes
case_heartbeat
case_kill
case_stop
case_drain
case_startup
if [ "${SKL_CONFORMANCE_LAYOUT:-}" = distributed ]; then
	case_flow_refused
else
	case_rate_limit
	case_concurrency_key
	case_dependencies
fi

section "end"
invariants all
if [ "$FAILS" != 0 ]; then
	for log in "$TMP"/*.log; do echo "=== $(basename "$log")"; tail -n 30 "$log"; done
fi
echo "run time: $((SECONDS - STARTED)) s"
finish
