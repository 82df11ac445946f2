#!/usr/bin/env bash
# `skiplock worker --metrics`: every line of a scrape parses (tests/tools/
# promcheck, a strict parser of the text format); counters move as jobs
# complete; after the run the counters, the histogram and the queue gauges
# equal what SQL counts; a reconnect is counted; bad addresses are refused.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
: "${SKL_PROMCHECK:?run under CTest}"
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
scrape() { # file: fetch and parse; the parsed samples go to file
	curl -sf --max-time 10 "http://127.0.0.1:$PORT/metrics" >"$1.raw" || { fail "scrape failed"; return 1; }
	"$SKL_PROMCHECK" <"$1.raw" >"$1" 2>"$1.err" || { fail "scrape does not parse: $(cat "$1.err")"; return 1; }
}
metric() { # file series: its value, or "absent"
	K=$2 awk 'index($0, ENVIRON["K"] " ") == 1 { print $NF; found = 1 }
		END { if (!found) print "absent" }' "$1"
}

# The flaky and poison jobs run to the end first, then the ok jobs are
# enqueued and held at the gate (retries never wait behind held slots).
{
	for i in 1 2 3; do echo '{"kind": "flaky", "queue": "slow", "priority": 9, "max_attempts": 3}'; done
	for i in 1 2; do echo '{"kind": "poison", "queue": "slow", "priority": 9}'; done
	echo '{"kind": "ok", "queue": "fast", "delay": "1h"}'        # not due: not in the depth
	for i in 1 2 3 4; do echo '{"kind": "orphan", "queue": "idle \"q\""}'; done  # no handler
} >"$TMP/jobs.ndjson"
for i in $(seq 1 12); do echo "{\"kind\": \"ok\", \"queue\": \"fast\", \"payload\": {\"i\": $i}}"; done >"$TMP/ok.ndjson"
"$S" enqueue --url "$URL" --batch "$TMP/jobs.ndjson" >/dev/null || fail "enqueue"
GATE=$TMP/gate
"$S" worker --url "$URL" --metrics 127.0.0.1:0 --metrics-every 200ms --concurrency 4 \
	--poll 50ms --poll-max 200ms --backoff-base 20ms --backoff-cap 50ms \
	--handler "ok=cat >/dev/null; while [ ! -e '$GATE' ]; do sleep 0.05; done" \
	--handler 'flaky=exit 75' --handler 'poison=exit 65' --breaker ok 2>"$TMP/w.log" &
W=$!
PORT=
for i in $(seq 1 100); do
	PORT=$(sed -n 's|.*metrics: serving http://127.0.0.1:\([0-9]*\)/metrics.*|\1|p' "$TMP/w.log")
	[ -n "$PORT" ] && break
	sleep 0.1
done
[ -n "$PORT" ] && pass "the worker logged its metrics port ($PORT)" || fail "no metrics port in the log: $(cat "$TMP/w.log")"

# --- while ok jobs are held at the gate: none completed, leases held ---
wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE kind IN ('flaky', 'poison') AND state = 'discarded'" 5 30 || fail "flaky and poison jobs did not finish"
"$S" enqueue --url "$URL" --batch "$TMP/ok.ndjson" >/dev/null || fail "enqueue ok jobs"
wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'ok' AND state = 'running'" 4 30 || fail "ok jobs did not start"
scrape "$TMP/s1"
check_eq "before the gate opens: no ok job completed" "$(metric "$TMP/s1" 'skiplock_jobs_completed_total{queue="fast",kind="ok"}')" 0
check_eq "before the gate opens: 4 leases held (concurrency 4)" "$(metric "$TMP/s1" skiplock_worker_leases_held)" 4
# queue gauges are read every 200ms: wait until they show the gate state
for i in $(seq 1 50); do
	scrape "$TMP/s1" || break
	[ "$(metric "$TMP/s1" 'skiplock_queue_depth{queue="fast"}')" = 8 ] && break
	sleep 0.1
done
check_eq "queue depth while 4 run: 8 due ok jobs (the delayed one not counted)" "$(metric "$TMP/s1" 'skiplock_queue_depth{queue="fast"}')" 8

# --- open the gate: counters move ---
touch "$GATE"
wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'ok' AND state = 'completed'" 12 30 || fail "ok jobs did not complete"
for i in $(seq 1 50); do # the outcome is counted when recorded; the gauge lags 200ms
	scrape "$TMP/s2" || break
	[ "$(metric "$TMP/s2" 'skiplock_jobs_completed_total{queue="fast",kind="ok"}')" = 12 ] &&
		[ "$(metric "$TMP/s2" 'skiplock_queue_depth{queue="fast"}')" = 0 ] && break
	sleep 0.1
done
sum() { # file metric-name: sum over all series of the name
	awk -v n="$2" 'index($0, n "{") == 1 || index($0, n " ") == 1 { s += $NF } END { print s + 0 }' "$1"
}
kinds="'ok','flaky','poison'"
check_eq "completed_total = SQL completed" "$(sum "$TMP/s2" skiplock_jobs_completed_total)" "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed'")"
check_eq "claimed_total = SQL attempts" "$(sum "$TMP/s2" skiplock_jobs_claimed_total)" "$(q "SELECT sum(attempt) FROM skiplock.all_jobs WHERE kind IN ($kinds)")"
check_eq "discarded_total = SQL discarded" "$(sum "$TMP/s2" skiplock_jobs_discarded_total)" "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'discarded'")"
check_eq "retried_total{flaky} = SQL attempts - jobs" "$(metric "$TMP/s2" 'skiplock_jobs_retried_total{queue="slow",kind="flaky"}')" "$(q "SELECT sum(attempt) - count(*) FROM skiplock.all_jobs WHERE kind = 'flaky'")"
check_eq "failed_total = retried + discarded by handlers" "$(sum "$TMP/s2" skiplock_jobs_failed_total)" "$(( $(sum "$TMP/s2" skiplock_jobs_retried_total) + $(sum "$TMP/s2" skiplock_jobs_discarded_total) ))"
check_eq "poison discarded at once" "$(metric "$TMP/s2" 'skiplock_jobs_discarded_total{queue="slow",kind="poison"}')" 2
check_eq "duration histogram counts every recorded attempt" "$(sum "$TMP/s2" skiplock_job_duration_seconds_count)" "$(q "SELECT sum(attempt) FROM skiplock.all_jobs WHERE kind IN ($kinds)")"
okd=$(metric "$TMP/s2" 'skiplock_job_duration_seconds_bucket{queue="fast",kind="ok",le="0.005"}')
check_eq "held ok jobs are slower than 5ms: only the 8 unheld may be in the first bucket" "$([ "$okd" -le 8 ] && echo yes)" yes
check_eq "no fenced-out outcome, no rescue" "$(sum "$TMP/s2" skiplock_jobs_fenced_out_total) $(sum "$TMP/s2" skiplock_jobs_rescued_total)" "0 0"
check_eq "no lease held after the run" "$(metric "$TMP/s2" skiplock_worker_leases_held)" 0
check_eq "orphan queue depth = SQL (label escaped)" "$(metric "$TMP/s2" 'skiplock_queue_depth{queue="idle \"q\""}')" "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'orphan'")"
# the gauge was read stale seconds before the scrape, which ran between two SQL reads
sql_age() { q "SELECT extract(epoch FROM now() - min(run_at)) FROM skiplock.all_jobs WHERE kind = 'orphan'"; }
a0=$(sql_age)
scrape "$TMP/s2b"
a1=$(sql_age)
age=$(metric "$TMP/s2b" 'skiplock_queue_oldest_available_age_seconds{queue="idle \"q\""}')
stale=$(metric "$TMP/s2b" skiplock_queue_stats_age_seconds)
check_eq "oldest age agrees with SQL ($a0 - $stale <= $age <= $a1)" "$(awk -v a="$age" -v lo="$a0" -v hi="$a1" -v st="$stale" 'BEGIN { print (a >= lo - st - 0.01 && a <= hi + 0.01) ? "yes" : "no" }')" yes
check_eq "no indeterminate outcome" "$(metric "$TMP/s2" skiplock_db_indeterminate_total)" 0

# --- a reconnect is counted (direct: end the worker's backend) ---
if [ "$MODE" = direct ]; then
	before=$(metric "$TMP/s2" skiplock_db_reconnects_total)
	q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'skiplock worker' AND datname = current_database()" >/dev/null
	"$S" enqueue --url "$URL" --queue fast ok >/dev/null
	wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'ok' AND state = 'completed'" 13 30 || fail "no job completed after the backend was ended"
	for i in $(seq 1 50); do
		scrape "$TMP/s3" || break
		[ "$(metric "$TMP/s3" skiplock_db_reconnects_total)" -gt "$before" ] && break
		sleep 0.1
	done
	check_eq "the reconnect was counted" "$(metric "$TMP/s3" skiplock_db_reconnects_total)" $((before + 1))
fi

# --- breaker states: the ok kind's breaker, then an operator opens it ---
breaker() { # file state
	metric "$1" "skiplock_breaker_state{kind=\"ok\",state=\"$2\"}"
}
check_eq "ok's breaker is closed" "$(breaker "$TMP/s2" closed) $(breaker "$TMP/s2" open)" "1 0"
"$S" breakers open ok --url "$URL" >/dev/null || fail "breakers open ok"
for i in $(seq 1 100); do
	scrape "$TMP/s4" || break
	[ "$(breaker "$TMP/s4" open)" = 1 ] && break
	sleep 0.1
done
check_eq "an opened breaker shows as open" \
	"$(breaker "$TMP/s4" closed) $(breaker "$TMP/s4" half_open) $(breaker "$TMP/s4" open)" "0 0 1"

# --- why jobs wait, per reason: with ok's breaker open, 2 new ok jobs are
# held by it, one waits for the delayed job, which is scheduled; the
# orphans (no handler) wait for a worker ---
delayed=$(q "SELECT id FROM skiplock.jobs WHERE kind = 'ok' AND run_at > now()")
q "SELECT skiplock.enqueue('ok', queue => 'fast') FROM generate_series(1, 2)" >/dev/null
q "SELECT skiplock.enqueue_after(ARRAY[$delayed], 'ok', queue => 'fast')" >/dev/null || fail "enqueue_after $delayed"
waits() { metric "$1" "skiplock_jobs_waiting{queue=\"$2\",reason=\"$3\"}"; }
for i in $(seq 1 100); do
	scrape "$TMP/s5" || break
	[ "$(waits "$TMP/s5" fast breaker) $(waits "$TMP/s5" fast dependency)" = "2 1" ] && break
	sleep 0.1
done
check_eq "fast waits: breaker, scheduled, dependency, worker, paused, limit" \
	"$(for r in breaker scheduled dependency worker paused limit; do waits "$TMP/s5" fast $r; done | xargs)" \
	"2 1 1 0 0 0"
check_eq "the orphans wait for a worker (label escaped)" "$(waits "$TMP/s5" 'idle \"q\"' worker)" 4
"$S" breakers close ok --url "$URL" >/dev/null || fail "breakers close ok"

check_eq "other paths: 404" "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/")" 404
expect_exit "port in use" 1 'cannot listen on 127.0.0.1:'"$PORT" -- "$S" worker --url "$URL" --handler 'a=true' --metrics "127.0.0.1:$PORT"
kill -TERM $W
wait $W
check_eq "worker exits 0 after SIGTERM" "$?" 0
expect_exit "no port" 2 'expected HOST:PORT' -- "$S" worker --url "$URL" --handler 'a=true' --metrics 127.0.0.1
expect_exit "bad port" 2 'expected HOST:PORT' -- "$S" worker --url "$URL" --handler 'a=true' --metrics 127.0.0.1:99999
expect_exit "bad host" 2 'cannot resolve' -- "$S" worker --url "$URL" --handler 'a=true' --metrics 'no such host!:9187'
expect_exit "bad --metrics-every" 2 'metrics-every' -- "$S" worker --url "$URL" --handler 'a=true' --metrics 127.0.0.1:0 --metrics-every soon
no_leftovers
finish
