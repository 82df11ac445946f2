#!/usr/bin/env bash
# cron_languages.sh direct|pooled — one schedule, four languages: the C
# worker (command handlers), and the Node, Python and Rust clients'
# workers, each through its conformance adapter (impl/*.sh) with
# CONFORMANCE_CRON=1, all running at once against one database, direct or
# through PgBouncer in transaction mode.  Every one of them ticks
# (skiplock.cron_tick, schema step 0024); the database decides the fire
# times and who enqueues each.  Checked:
#
#   * exactly one job per fire time of an `@every 1s` schedule, keyed by
#     it, with no gap from the first to the last (at least 8 of them);
#   * each fire time's job completed once, with one effect in the ledger
#     (conformance.effect, fenced);
#   * every worker drains and exits 0 on SIGTERM; no advisory lock and no
#     idle-in-transaction session is left.
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/../cli/lib.sh"
IMPLS=${CRON_IMPLS:-c-command node python rust}
declare -A WPID=()

kill_session() { pkill "-$1" -s "$2" 2>/dev/null; }
cron_cleanup() {
	local pid
	for pid in "${WPID[@]}"; do kill_session KILL "$pid"; done
	cleanup
}
trap cron_cleanup EXIT

"$SKL_BIN" init --url "$URL" >"$TMP/init.log" 2>&1 || fail "skiplock init: $(cat "$TMP/init.log")"
psql -X -q -At -v ON_ERROR_STOP=1 "$DIRECT_URL" -f "$HERE/setup.sql" >/dev/null || fail "setup.sql"
# to show each implementation's tick statement (when the server has it)
q "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null 2>&1

for impl in $IMPLS; do
	direct=()
	[ "$MODE" = pooled ] && direct=("DIRECT_DATABASE_URL=$DIRECT_URL")
	env -u DIRECT_DATABASE_URL DATABASE_URL="$URL" "${direct[@]}" CONFORMANCE_MODE="$MODE" \
		CONFORMANCE_OWNER="cron-$impl" CONFORMANCE_CONCURRENCY=4 CONFORMANCE_LEASE=5s \
		CONFORMANCE_CRON=1 setsid "$HERE/impl/$impl.sh" >"$TMP/$impl.log" 2>&1 &
	WPID[$impl]=$!
done
# Declared once the four are up (CTest builds the Rust adapter first, as
# fixture client.rust.build): from then on each of them ticks at least
# once a second.
sleep 5
for impl in $IMPLS; do
	kill -0 "${WPID[$impl]}" 2>/dev/null || fail "the $impl worker exited early: $(tail -n 5 "$TMP/$impl.log")"
done
q "SELECT action FROM skiplock.schedules_declare('[{\"name\": \"cross\", \"expression\": \"@every 1s\", \"kind\": \"conf.ok\", \"payload\": {\"from\": \"cron\"}}]')" >/dev/null ||
	fail "declaring the schedule"
sleep 12
q "UPDATE skiplock.schedules SET enabled = false WHERE name = 'cross'" >/dev/null
wait_for "SELECT count(*) FROM skiplock.jobs WHERE unique_key LIKE 'cron:cross:%'" 0 30 ||
	fail "the schedule's jobs were not all done within 30 s"

for impl in $IMPLS; do
	kill -TERM "${WPID[$impl]}"
	wait_exit "${WPID[$impl]}" 25
	check_eq "$impl exits 0 after SIGTERM" "$RC" 0
	kill_session KILL "${WPID[$impl]}"
	unset "WPID[$impl]"
done

jobs="FROM skiplock.all_jobs WHERE unique_key LIKE 'cron:cross:%'"
n=$(q "SELECT count(*) $jobs")
check_eq "one job per fire time" "$(q "SELECT count(DISTINCT unique_key) $jobs")" "$n"
check_eq "at least 8 fire times" "$(q "SELECT count(*) >= 8 $jobs")" t
check_eq "no gap: one fire time a second from the first to the last" \
	"$(q "SELECT extract(epoch FROM max(run_at) - min(run_at))::int + 1 $jobs")" "$n"
check_eq "each keyed by its fire time" \
	"$(q "SELECT count(*) $jobs AND unique_key = 'cron:cross:' || to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')")" "$n"
check_eq "all completed" "$(q "SELECT count(*) $jobs AND state = 'completed'")" "$n"
check_eq "one effect per job" \
	"$(q "SELECT count(*) || '/' || count(DISTINCT l.job_id) FROM conformance.ledger l JOIN skiplock.all_jobs j ON j.id = l.job_id WHERE j.unique_key LIKE 'cron:cross:%'")" "$n/$n"
echo "the ticks' statements: $(q "SELECT string_agg(calls || ' x ' || left(regexp_replace(query, '\s+', ' ', 'g'), 60), ' | ') FROM pg_stat_statements WHERE query LIKE 'SELECT%skiplock.cron_tick(%' AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())" 2>/dev/null)"
echo "jobs by the worker that ran them: $(q "SELECT string_agg(owner || '=' || c, ' ') FROM (SELECT l.owner, count(*) c FROM conformance.ledger l GROUP BY 1 ORDER BY 1) x")"
no_leftovers
if [ "$FAILS" != 0 ]; then
	for impl in $IMPLS; do echo "--- $impl log"; tail -n 20 "$TMP/$impl.log"; done
fi
finish
