#!/usr/bin/env bash
# Retry policy from the command line: bad input exits 2 and writes
# nothing; a job's own strategy is stored; a command's "retry-after:" line
# sets the next delay; per-kind strategies; `skiplock breakers` list, open
# and close, and the breaker in `skiplock status`.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"

# --- bad input: exit 2, one line, nothing written ---
W=("$S" worker --url "$URL" --handler 'k=true')
expect_exit "unknown strategy (worker)" 2 'unknown strategy "jittery"' -- "${W[@]}" --backoff jittery
expect_exit "unknown strategy for a kind" 2 'unknown strategy "linear"' -- "${W[@]}" --backoff k=linear
expect_exit "negative base" 2 'backoff-base.*"-1s"' -- "${W[@]}" --backoff-base -1s
expect_exit "negative cap for a kind" 2 'backoff-cap.*"-5m"' -- "${W[@]}" --backoff-cap k=-5m
expect_exit "negative budget" 2 'retry-budget' -- "${W[@]}" --retry-budget -10
expect_exit "bad breaker setting" 2 'breaker k: breaker setting "rate:0"' -- "${W[@]}" --breaker k=rate:0
expect_exit "negative breaker duration" 2 'breaker setting "open:-1s"' -- "${W[@]}" --breaker k=open:-1s
expect_exit "unknown strategy (enqueue)" 2 'unknown strategy "none"' -- "$S" enqueue --url "$URL" k --backoff none
expect_exit "negative base (enqueue)" 2 'backoff-base.*"-2s"' -- "$S" enqueue --url "$URL" k --backoff-base -2s
expect_exit "breakers: unknown verb" 2 'unknown subcommand "reset"' -- "$S" breakers --url "$URL" reset k
check_eq "nothing was written" "$(q "SELECT (SELECT count(*) FROM skiplock.all_jobs) + (SELECT count(*) FROM skiplock.breakers)")" 0
"$S" worker --help | grep -q -- "--retry-budget \[KIND=\]PCT" && pass "worker --help names the retry options" || fail "worker --help"
"$S" breakers --help | grep -q "half_open" && pass "breakers --help" || fail "breakers --help"

# --- a job's own strategy is stored and read back by the claim ---
id=$("$S" enqueue --url "$URL" own --backoff decorrelated --backoff-base 2s --backoff-cap 9s)
check_eq "enqueue --backoff stored" "$(q "SELECT backoff||' '||backoff_base_ms||' '||backoff_cap_ms FROM skiplock.all_jobs WHERE id = $id")" "decorrelated 2000 9000"

# --- retry-after on stderr with exit 75; per-kind fixed strategy ---
q "DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs"
a=$("$S" enqueue --url "$URL" asks)
b=$("$S" enqueue --url "$URL" steady)
c=$("$S" enqueue --url "$URL" steady --backoff exponential --backoff-base 40s)
"$S" worker --url "$URL" --poll 50ms --poll-max 200ms --no-cron --backoff-base 1s --backoff steady=fixed \
	--backoff-base steady=20s \
	--handler 'asks=echo "upstream busy" >&2; echo "retry-after: 30" >&2; exit 75' \
	--handler 'steady=exit 75' 2>"$TMP/w.log" &
WP=$!
wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE attempt = 1 AND state = 'available'" 3 60 || fail "jobs did not fail once: $(q "SELECT string_agg(id||':'||state||':'||attempt, ' ') FROM skiplock.all_jobs")"
kill -TERM $WP; wait $WP
delay() { q "SELECT round(extract(epoch FROM run_at - (errors->0->>'at')::timestamptz))::int FROM skiplock.all_jobs WHERE id = $1"; }
da=$(delay "$a"); db=$(delay "$b"); dc=$(delay "$c")
if [ "$da" -ge 30 ] && [ "$da" -le 33 ]; then pass "retry-after: 30 honoured ($da s)"; else fail "retry-after: 30 gave $da s"; fi
check_eq "kind's fixed strategy and base" "$db" 20
check_eq "the job's own strategy comes first" "$dc" 40
check_eq "last_delay_ms kept" "$(q "SELECT last_delay_ms FROM skiplock.all_jobs WHERE id = $b")" 20000

# --- breakers: open, list, status, close ---
"$S" breakers --url "$URL" open asks >"$TMP/out" 2>&1 && pass "breakers open" || fail "breakers open: $(cat "$TMP/out")"
"$S" breakers --url "$URL" list >"$TMP/list" 2>&1
grep -qE '^asks +open +forced open' "$TMP/list" && pass "breakers list shows it forced open" || fail "list: $(cat "$TMP/list")"
"$S" status --url "$URL" >"$TMP/status" 2>&1
grep -qE '^asks +open' "$TMP/status" && pass "status shows the breaker" || fail "status: $(cat "$TMP/status")"
"$S" status --url "$URL" --json >"$TMP/status.json"
grep -q '"open_for_ms": -1' "$TMP/status.json" && grep -q '"state": "open"' "$TMP/status.json" && pass "status --json has the breaker" || fail "status --json: $(cat "$TMP/status.json")"
q "UPDATE skiplock.jobs SET run_at = now() WHERE id = $a"
"$S" worker --url "$URL" --poll 50ms --poll-max 200ms --no-cron --handler 'asks=true' 2>"$TMP/w2.log" &
WP=$!
for _ in $(seq 1 600); do grep -q "started" "$TMP/w2.log" && break; sleep 0.1; done
grep -q "started" "$TMP/w2.log" || fail "the worker did not start: $(cat "$TMP/w2.log")"
sleep 1.5 # several claim polls
check_eq "no claim while forced open" "$(q "SELECT state||' '||attempt FROM skiplock.all_jobs WHERE id = $a")" "available 1"
"$S" breakers --url "$URL" close asks >/dev/null 2>&1 && pass "breakers close" || fail "breakers close"
wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $a" completed 60 && pass "claimed and completed once closed" || fail "not completed after close"
kill -TERM $WP; wait $WP
check_eq "transitions recorded" "$(q "SELECT string_agg(coalesce(from_state, '-')||'>'||to_state, ' ' ORDER BY id) FROM skiplock.breaker_events WHERE kind = 'asks'")" "->open open>closed"
expect_exit "close a kind without a breaker" 1 'kind "nope" has no breaker' -- "$S" breakers --url "$URL" close nope
no_leftovers
finish
