#!/usr/bin/env bash
# `skiplock cron`: add/list/pause/resume/remove round trips, bad input that
# exits 2 and writes nothing (unknown zone, bad expression, duplicate
# name…), concurrent evaluation at simulated instants, and real workers
# turning an @every schedule into exactly one job per fire time.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
count() { q "SELECT (SELECT count(*) FROM skiplock.schedules) || ' ' || (SELECT count(*) FROM skiplock.all_jobs)"; }
T0=2031-01-06T00:00:00Z

# --- add and list ---
out=$("$S" cron add --url "$URL" nightly '30 2 * * *' report '{"full": true}' --tz Europe/Berlin \
	--queue reports --catch-up all --priority 3 --max-attempts 5 --at 2031-03-30T00:00:00Z)
check_eq "add exits 0" "$?" 0
check_eq "add prints the first fire time (02:30 does not exist that night: 03:00 CEST)" "$out" \
	'schedule "nightly" added; first fire time 2031-03-30T01:00:00Z (2031-03-30T03:00:00+02:00 Europe/Berlin)'
check_eq "options are stored" \
	"$(q "SELECT expression||' '||zone||' '||kind||' '||payload::text||' '||queue||' '||priority||' '||max_attempts||' '||catch_up||' '||enabled FROM skiplock.schedules")" \
	'30 2 * * * Europe/Berlin report {"full": true} reports 3 5 all true'
"$S" cron add --url "$URL" hourly @hourly ping >/dev/null
check_eq "defaults: UTC, {}, default queue, latest" \
	"$(q "SELECT zone||' '||payload::text||' '||queue||' '||catch_up||' '||max_attempts FROM skiplock.schedules WHERE name = 'hourly'")" \
	"UTC {} default latest 25"
echo '{"from": "stdin"}' | "$S" cron add --url "$URL" stdin '*/5 * * * *' k - >/dev/null
check_eq "payload from stdin" "$(q "SELECT payload->>'from' FROM skiplock.schedules WHERE name = 'stdin'")" stdin

"$S" cron list --url "$URL" >"$TMP/list"
check_eq "list: header and one line per schedule" "$(wc -l <"$TMP/list")" 4
check_eq "list: header" "$(head -1 "$TMP/list" | tr -s ' ')" \
	"NAME EXPRESSION ZONE KIND QUEUE CATCH-UP STATE LAST FIRE (UTC) NEXT FIRE (UTC)"
grep -q '^nightly .*2031-03-30 01:00:00' "$TMP/list" && pass "list shows the next fire time" || fail "list: $(cat "$TMP/list")"
json=$("$S" cron list --url "$URL" --json)
check_eq "list --json" "$(q "SELECT string_agg(e->>'name' || ' ' || coalesce(e->>'last_fire', 'null') || ' ' || (e->>'enabled'), ', ' ORDER BY e->>'name') FROM jsonb_array_elements('$json'::jsonb) e")" \
	"hourly null true, nightly null true, stdin null true"
check_eq "list --json: next fire in UTC and local time, payload as JSON" \
	"$(q "SELECT (e->>'next_fire') || ' ' || (e->>'next_fire_local') || ' ' || (e->'payload')::text FROM jsonb_array_elements('$json'::jsonb) e WHERE e->>'name' = 'nightly'")" \
	'2031-03-30T01:00:00Z 2031-03-30T03:00:00+02:00 {"full": true}'

# --- pause, resume, remove ---
check_eq "pause" "$("$S" cron pause --url "$URL" nightly)" 'schedule "nightly" paused'
"$S" cron list --url "$URL" | grep -q '^nightly .* paused ' && pass "list shows paused" || fail "list after pause"
check_eq "resume" "$("$S" cron resume --url "$URL" nightly)" 'schedule "nightly" resumed'
check_eq "remove" "$("$S" cron remove --url "$URL" stdin)" 'schedule "stdin" removed'
expect_exit "remove an unknown schedule" 1 'no schedule "stdin"' -- "$S" cron remove --url "$URL" stdin
expect_exit "pause an unknown schedule" 1 'no schedule "ghost"' -- "$S" cron pause --url "$URL" ghost
expect_exit "resume an unknown schedule" 1 'no schedule "ghost"' -- "$S" cron resume --url "$URL" ghost

# --- bad input: exit 2, one line, nothing written ---
before=$(count)
expect_exit "unknown zone" 2 'unknown time zone "Mars/Olympus_Mons"' -- "$S" cron add --url "$URL" x '* * * * *' k --tz Mars/Olympus_Mons
expect_exit "zone name climbing out of the tz directory" 2 'invalid time zone name' -- "$S" cron add --url "$URL" x '* * * * *' k --tz ../../etc/passwd
expect_exit "bad expression names field and character" 2 'invalid cron expression "0 25 \* \* \*": hour field, character 3: 25 is out of range 0-23' -- "$S" cron add --url "$URL" x '0 25 * * *' k
expect_exit "bad expression: unknown name" 2 'day-of-week field, character 9: unknown name "funday"' -- "$S" cron add --url "$URL" x '0 0 * * funday' k
expect_exit "bad expression: too few fields" 2 'character 6: expected 5 fields' -- "$S" cron add --url "$URL" x '0 0 *' k
expect_exit "bad expression: never fires" 2 'never fires' -- "$S" cron add --url "$URL" x '0 0 30 2 *' k
expect_exit "bad @every" 2 '@every needs whole seconds' -- "$S" cron add --url "$URL" x '@every 500ms' k
expect_exit "duplicate name" 2 'schedule "nightly" already exists' -- "$S" cron add --url "$URL" nightly '* * * * *' k
expect_exit "invalid JSON payload" 2 'invalid JSON payload at line 1' -- "$S" cron add --url "$URL" x '* * * * *' k '{"a":'
expect_exit "unknown catch-up policy" 2 'unknown catch-up policy "sometimes"' -- "$S" cron add --url "$URL" x '* * * * *' k --catch-up sometimes
expect_exit "bad priority" 2 '--priority: "high" is not an integer' -- "$S" cron add --url "$URL" x '* * * * *' k --priority high
expect_exit "over-long name" 2 'schedule name must be 1 to 128 bytes \(got 129\)' -- "$S" cron add --url "$URL" "$(printf 'n%.0s' $(seq 1 129))" '* * * * *' k
expect_exit "empty kind" 2 'job kind must be 1 to 128 bytes' -- "$S" cron add --url "$URL" x '* * * * *' ''
expect_exit "missing operands" 2 'expected NAME EXPR KIND' -- "$S" cron add --url "$URL" x '* * * * *'
expect_exit "extra operand" 2 'unexpected argument "extra"' -- "$S" cron add --url "$URL" x '* * * * *' k '{}' extra
expect_exit "unknown subcommand" 2 'unknown subcommand "edit"' -- "$S" cron edit --url "$URL"
expect_exit "no subcommand" 2 'missing subcommand \(expected' -- "$S" cron
expect_exit "unknown option" 2 'unknown option "--colour"' -- "$S" cron list --url "$URL" --colour
check_eq "nothing was written by bad input" "$(count)" "$before"

# 8 processes add the same name at once: one wins, the others exit 2
q "DELETE FROM skiplock.schedules"
for i in $(seq 1 8); do
	"$S" cron add --url "$URL" race "*/$i * * * *" k >"$TMP/race.$i.out" 2>"$TMP/race.$i.err" &
done
codes=""
for job in $(jobs -p); do wait "$job"; codes="$codes$?"; done
check_eq "concurrent adds of one name: one exit 0, seven exit 2" "$(echo "$codes" | grep -o . | sort | tr -d '\n')" "02222222"
check_eq "one schedule" "$(q "SELECT count(*) FROM skiplock.schedules")" 1
no_leftovers

# --- three evaluators at the same simulated instants, ten minutes ---
q "DELETE FROM skiplock.schedules"
"$S" cron add --url "$URL" minutely '* * * * *' tick --at "$T0" >/dev/null
for m in $(seq 1 10); do
	for w in 1 2 3; do
		"$S" cron tick --url "$URL" --at "$(date -u -d "$T0 + $m minutes + $((w * 4)) seconds" +%Y-%m-%dT%H:%M:%SZ)" >>"$TMP/ticks.$w" 2>&1 &
	done
	wait
done
check_eq "10 simulated minutes, 3 evaluators: 10 jobs" "$(q "SELECT count(*) || ' ' || count(DISTINCT unique_key) FROM skiplock.all_jobs")" "10 10"
check_eq "evaluations that fired" "$(cat "$TMP"/ticks.* | grep -c 'fired=1')" 10
check_eq "keys name the fire times" "$(q "SELECT min(unique_key) || ' ' || max(unique_key) FROM skiplock.all_jobs")" \
	"cron:minutely:2031-01-06T00:01:00Z cron:minutely:2031-01-06T00:10:00Z"
out=$("$S" cron tick --url "$URL" --at 2031-01-06T02:10:30Z --catch-up-bound 5)
check_eq "behind: catch-up latest enqueues the newest only" "$out" "due=1 fired=1 lost=0 behind=1 failed=0 enqueued=1"
expect_exit "tick: bad --at" 2 'invalid input syntax for type timestamp' -- "$S" cron tick --url "$URL" --at 'the day after tomorrow'

# --- real workers: @every 1s, two workers, no duplicate and no gap ---
q "DELETE FROM skiplock.schedules; DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs"
"$S" cron add --url "$URL" beat '@every 1s' beat '{"n": 1}' >/dev/null
for w in 1 2; do
	"$S" worker --url "$URL" --poll 100ms --poll-max 300ms --handler 'beat=cat >/dev/null' 2>"$TMP/w$w.log" &
	eval "W$w=\$!"
done
for i in $(seq 1 300); do
	[ "$(q "SELECT count(*) >= 5 FROM skiplock.all_jobs WHERE state = 'completed'")" = t ] && break
	sleep 0.2
done
"$S" cron pause --url "$URL" beat >/dev/null
kill -TERM "$W1" "$W2"; wait "$W1"; r1=$?; wait "$W2"; r2=$?
check_eq "workers drain and exit 0" "$r1 $r2" "0 0"
check_eq "jobs were enqueued by the workers and run" "$(q "SELECT count(*) >= 5 FROM skiplock.all_jobs WHERE state = 'completed'")" t
check_eq "one job per fire time, consecutive seconds, key = run_at" \
	"$(q "SELECT count(*) = count(DISTINCT unique_key) AND count(*) = extract(epoch FROM max(run_at) - min(run_at)) + 1 AND bool_and(unique_key = 'cron:beat:' || to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')) FROM skiplock.all_jobs")" t
no_leftovers

# --- a worker with --no-cron never schedules ---
q "DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs"
"$S" cron resume --url "$URL" beat >/dev/null
"$S" worker --url "$URL" --no-cron --handler 'beat=cat >/dev/null' 2>"$TMP/w3.log" &
W3=$!
sleep 3
kill -TERM "$W3"; wait "$W3"
check_eq "--no-cron: no jobs in 3 s" "$(q "SELECT count(*) FROM skiplock.all_jobs")" 0

# --- cron apply: the schedules become equal to the file, from any state ---
q "DELETE FROM skiplock.schedules"
cat >"$TMP/want.json" <<'JSON'
{"schedules": [
 {"name": "ap-hourly", "expression": "0 * * * *", "kind": "report", "payload": {"a": 1, "b": [1, 2]}},
 {"name": "ap-nightly", "expression": "30 2 * * *", "kind": "report", "zone": "Europe/Berlin",
  "queue": "night", "priority": 5, "max_attempts": 3, "catch_up": "all"},
 {"name": "ap-held", "expression": "@every 1m", "kind": "beat", "paused": true}
]}
JSON
# the schedules as the file states them, one line each, by name
state() { q "SELECT string_agg(concat_ws('|', name, expression, zone, kind, payload::text, queue, priority, max_attempts, catch_up, enabled), ' ; ' ORDER BY name) FROM skiplock.schedules"; }
WANT='ap-held|@every 1m|UTC|beat|{}|default|0|25|latest|f ; ap-hourly|0 * * * *|UTC|report|{"a": 1, "b": [1, 2]}|default|0|25|latest|t ; ap-nightly|30 2 * * *|Europe/Berlin|report|{}|night|5|3|all|t'
converge() { # NAME: apply the file, then the state must be WANT
	out=$("$S" cron apply --url "$URL" "$TMP/want.json" 2>&1) || fail "$1: apply failed: $out"
	check_eq "$1: equal to the file" "$(state)" "$WANT"
}
out=$("$S" cron apply --url "$URL" --dry-run "$TMP/want.json" 2>&1)
check_eq "apply --dry-run prints the plan" "$(echo "$out" | tail -n 1)" "3 added, 0 changed, 0 removed, 0 unchanged (dry run: nothing written)"
check_eq "apply --dry-run writes nothing" "$(q "SELECT count(*) FROM skiplock.schedules")" 0
converge "from nothing"
before=$(q "SELECT max(updated_at) FROM skiplock.schedules")
out=$("$S" cron apply --url "$URL" "$TMP/want.json" 2>&1)
check_eq "apply again: idempotent" "$out" "0 added, 0 changed, 0 removed, 3 unchanged"
check_eq "apply again writes nothing" "$(q "SELECT max(updated_at) FROM skiplock.schedules")" "$before"
# every kind of drift at once: one removed, one changed, pause states swapped, one extra
"$S" cron remove --url "$URL" ap-hourly >/dev/null
q "UPDATE skiplock.schedules SET expression = '15 3 * * *', payload = '{\"x\": 2}', queue = 'other', catch_up = 'none' WHERE name = 'ap-nightly'"
"$S" cron pause --url "$URL" ap-nightly >/dev/null
"$S" cron resume --url "$URL" ap-held >/dev/null
"$S" cron add --url "$URL" ap-extra '@daily' report >/dev/null
out=$("$S" cron apply --url "$URL" --dry-run "$TMP/want.json" 2>&1)
check_eq "the plan names every change" "$out" 'would be added "ap-hourly"
would be changed "ap-nightly": expression, payload, queue, catch_up, paused
would be changed "ap-held": paused
would be removed "ap-extra"
1 added, 2 changed, 1 removed, 0 unchanged (dry run: nothing written)'
converge "from added, changed, removed and paused"
check_eq "a changed expression moves the next fire time" \
	"$(q "SELECT next_fire > now() AND extract(hour FROM next_fire AT TIME ZONE 'Europe/Berlin') = 2 FROM skiplock.schedules WHERE name = 'ap-nightly'")" t
converge "after converging, again"
echo '{"schedules": [{"name": "n", "expression": "@daily", "kind": "k"}, {"name": "m", "expresion": "@daily", "kind": "k"}]}' >"$TMP/typo.json"
expect_exit "apply: unknown field" 2 'typo.json: schedules\[1\]: unknown field "expresion"' -- \
	"$S" cron apply --url "$URL" "$TMP/typo.json"
echo '{"schedules": [{"name": "n", "expression": "@daily", "kind": "k"}, {"name": "m", "expression": "61 * * * *", "kind": "k"}]}' >"$TMP/expr.json"
expect_exit "apply: bad expression, nothing written" 2 'schedule 2 \("m"\): invalid cron expression' -- \
	"$S" cron apply --url "$URL" "$TMP/expr.json"
echo '{"schedules": [{"name": "n", "expression": "@daily", "kind": "k"}, {"name": "n", "expression": "@hourly", "kind": "k"}]}' >"$TMP/twice.json"
expect_exit "apply: a name given twice (on standard input)" 2 'schedule "n" is given twice' -- \
	sh -c '"$0" cron apply --url "$1" - <"$2"' "$S" "$URL" "$TMP/twice.json"
# Only a regular file (or standard input) of at most 1 MiB: a FIFO, as
# <(...) gives, is refused at once, never waited on.
mkfifo "$TMP/fifo"
expect_exit "apply: a FIFO is refused at once" 2 "cron apply: $TMP/fifo: not a regular file \(a FIFO\)" -- \
	timeout 10 "$S" cron apply --url "$URL" "$TMP/fifo"
{ printf '{"schedules": [], "x": 1'; head -c 1048576 /dev/zero | tr '\0' ' '; printf '}'; } >"$TMP/big.json"
expect_exit "apply: a file over 1 MiB is refused" 2 "cron apply: $TMP/big.json: larger than 1 MiB \(1048601 bytes\)" -- \
	"$S" cron apply --url "$URL" "$TMP/big.json"
expect_exit "apply: over 1 MiB on standard input is refused" 2 "cron apply: -: larger than 1 MiB" -- \
	sh -c '"$0" cron apply --url "$1" - <"$2"' "$S" "$URL" "$TMP/big.json"
check_eq "bad files wrote nothing" "$(state)" "$WANT"
out=$(echo '{"schedules": []}' | "$S" cron apply --url "$URL" - 2>&1)
check_eq "an empty file removes every schedule" "$(q "SELECT count(*) FROM skiplock.schedules")|$out" "0|removed \"ap-held\"
removed \"ap-hourly\"
removed \"ap-nightly\"
0 added, 0 changed, 3 removed, 0 unchanged"

# --- cron add --replace: changes one schedule, keeps its paused state ---
"$S" cron add --url "$URL" rp '@hourly' report >/dev/null
expect_exit "add without --replace: the name is taken" 2 'schedule "rp" already exists' -- \
	"$S" cron add --url "$URL" rp '@daily' report
"$S" cron pause --url "$URL" rp >/dev/null
out=$("$S" cron add --url "$URL" rp '@daily' report '{"v": 2}' --replace 2>&1)
check_eq "add --replace changes it" "$out" 'changed "rp": expression, payload
0 added, 1 changed, 0 removed, 0 unchanged'
check_eq "add --replace keeps it paused" "$(q "SELECT expression || ' ' || payload::text || ' ' || enabled FROM skiplock.schedules WHERE name = 'rp'")" '@daily {"v": 2} false'
out=$("$S" cron add --url "$URL" rp '@daily' report '{"v": 2}' --replace 2>&1)
check_eq "add --replace again: unchanged" "$out" "0 added, 0 changed, 0 removed, 1 unchanged"
out=$("$S" cron add --url "$URL" rp2 '@daily' report --replace 2>&1)
check_eq "add --replace of a new name adds it" "$(echo "$out" | head -n 1)" 'added "rp2"'

"$S" cron --help | grep -q "no leader is needed" && pass "cron --help" || fail "cron --help"
"$S" cron add --help | grep -q "first instant after the gap" && pass "cron add --help states the DST rule" || fail "cron add --help"
"$S" worker --help | grep -q -- "--no-cron" && pass "worker --help lists --no-cron" || fail "worker --help"
finish
