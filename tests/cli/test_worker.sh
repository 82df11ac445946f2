#!/usr/bin/env bash
# `skiplock worker`: outcomes by exit code, backoff, crash and freeze of a
# worker mid-job (rescue and fencing), no transaction or lock held while a
# handler runs, graceful drain, one connection (or --connections N), and bad
# input.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
q "CREATE TABLE ledger (job_id bigint, fencing bigint, by text)"
FENCED_INSERT='psql -X -q -At "$LEDGER_URL" -c "INSERT INTO ledger SELECT $SKIPLOCK_JOB_ID, $SKIPLOCK_FENCING, '"'"'$WORKER'"'"' WHERE EXISTS (SELECT 1 FROM skiplock.all_jobs WHERE id = $SKIPLOCK_JOB_ID AND fencing = $SKIPLOCK_FENCING AND state = '"'"'running'"'"')"'
export LEDGER_URL=$DIRECT_URL
FAST=(--poll 50ms --poll-max 200ms --rescue-every 300ms)
stop_worker() { kill -TERM "$1" 2>/dev/null; wait "$1"; }

# --- outcomes by exit status, and growing jittered retry delays ---
for _ in $(seq 1 20); do "$S" enqueue --url "$URL" flaky --max-attempts 4 >/dev/null; done
"$S" enqueue --url "$URL" poison >/dev/null
"$S" enqueue --url "$URL" broken --max-attempts 3 >/dev/null
"$S" enqueue --url "$URL" good '{"n": 7}' >/dev/null
"$S" worker --url "$URL" --concurrency 8 "${FAST[@]}" --backoff-base 300ms --backoff-cap 10s --retry-budget off \
	--handler 'flaky=echo "try $SKIPLOCK_ATTEMPT" >&2; exit 75' \
	--handler 'poison=echo "cannot parse" >&2; exit 65' \
	--handler 'broken=echo "disk on fire" >&2; exit 3' \
	--handler 'good=cat >/dev/null; echo "{\"ok\": $SKIPLOCK_ATTEMPT}"' 2>"$TMP/w1.log" &
W=$!
wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'discarded'" 22 20 || fail "jobs did not all finish: $(q "SELECT string_agg(kind||':'||state||':'||attempt, ' ') FROM skiplock.all_jobs WHERE state <> 'discarded'")"
stop_worker $W
check_eq "worker exits 0 after SIGTERM" "$?" 0
check_eq "exit 0 completes and keeps JSON stdout" "$(q "SELECT state||' '||result::text FROM skiplock.all_jobs WHERE kind = 'good'")" 'completed {"ok": 1}'
check_eq "exit 65 discards at once" "$(q "SELECT state||' '||attempt||' '||(errors->0->>'error') FROM skiplock.all_jobs WHERE kind = 'poison'")" "discarded 1 exit status 65; stderr: cannot parse"
check_eq "other failures discard after max_attempts, history kept" "$(q "SELECT state||' '||attempt||' '||jsonb_array_length(errors)||' '||(errors->2->>'error') FROM skiplock.all_jobs WHERE kind = 'broken'")" "discarded 3 3 exit status 3; stderr: disk on fire"
check_eq "exit 75 retries until max_attempts" "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'flaky' AND state = 'discarded' AND attempt = 4 AND jsonb_array_length(errors) = 4")" 20
# gap between failure n and failure n+1 = backoff delay + run time; its bound doubles
gaps=$(q "SELECT string_agg(round(avg)::text, ' ' ORDER BY n) FROM (SELECT n, avg(gap) FROM (SELECT (e.n)::int AS n, extract(epoch FROM ((errors->(e.n)->>'at')::timestamptz - (errors->(e.n - 1)->>'at')::timestamptz)) * 1000 AS gap FROM skiplock.all_jobs, generate_series(1, 3) AS e(n) WHERE kind = 'flaky') g GROUP BY n) a")
distinct=$(q "SELECT count(DISTINCT round(extract(epoch FROM ((errors->1->>'at')::timestamptz - (errors->0->>'at')::timestamptz)) * 1000)) FROM skiplock.all_jobs WHERE kind = 'flaky'")
read -r g1 g2 g3 <<<"$gaps"
if [ "$g1" -lt "$g3" ] && [ "$g2" -lt "$g3" ]; then pass "retry delays grow (mean gaps ms: $gaps)"; else fail "retry delays do not grow: $gaps"; fi
if [ "$distinct" -ge 10 ]; then pass "retry delays are jittered ($distinct distinct first gaps of 20)"; else fail "only $distinct distinct first gaps of 20"; fi

# --- SIGKILL a worker (and everything it started) mid-job: rescued, completed once ---
q "DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs"
id=$("$S" enqueue --url "$URL" slow)
HANDLER='slow=touch "'"$TMP"'/started.$SKIPLOCK_ATTEMPT"; [ "$SKIPLOCK_ATTEMPT" = 1 ] && sleep 3; '"$FENCED_INSERT"'; echo "{\"by\": \"$WORKER\"}"'
WORKER=A setsid "$S" worker --url "$URL" --lease 1s "${FAST[@]}" --handler "$HANDLER" 2>"$TMP/wA.log" &
A=$!
for _ in $(seq 1 50); do [ -e "$TMP/started.1" ] && break; sleep 0.1; done
pkill -KILL -s "$A"
{ wait $A; } 2>/dev/null
WORKER=B "$S" worker --url "$URL" --lease 1s "${FAST[@]}" --handler "$HANDLER" 2>"$TMP/wB.log" &
B=$!
wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $id" completed 15 || fail "killed worker's job was not completed"
stop_worker $B
check_eq "rescued job completed by the other worker" "$(q "SELECT state||' '||attempt||' '||fencing||' '||(result->>'by') FROM skiplock.all_jobs WHERE id = $id")" "completed 2 2 B"
check_eq "one accepted effect" "$(q "SELECT string_agg(fencing||':'||by, ',') FROM ledger WHERE job_id = $id")" "2:B"
check_eq "the killed attempt ended by its lease's expiry" \
	"$(q "SELECT errors->0->>'error' LIKE 'lease expired: %' FROM skiplock.all_jobs WHERE id = $id")" t
# Usually the survivor rescues the job; on a loaded machine the killed
# worker's lease may expire before the kill and its own rescue pass ends it.
grep -q "rescued 1 job" "$TMP/wA.log" "$TMP/wB.log" && pass "a worker logged the rescue" ||
	fail "no rescue in the logs: $(cat "$TMP/wA.log" "$TMP/wB.log")"

# --- SIGSTOP a worker past its lease; another completes; SIGCONT: fenced out ---
q "DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs; DELETE FROM ledger"
rm -f "$TMP"/started.*
id=$("$S" enqueue --url "$URL" slow)
WORKER=A "$S" worker --url "$URL" --lease 1s "${FAST[@]}" --handler "$HANDLER" 2>"$TMP/wA2.log" &
A=$!
for _ in $(seq 1 50); do [ -e "$TMP/started.1" ] && break; sleep 0.1; done
kill -STOP $A
WORKER=B "$S" worker --url "$URL" --lease 1s "${FAST[@]}" --handler "$HANDLER" 2>"$TMP/wB2.log" &
B=$!
wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $id" completed 15 || fail "frozen worker's job was not completed by the other"
sleep 2.5 # A's own command finishes meanwhile and tries its fenced write
kill -CONT $A
for _ in $(seq 1 50); do grep -q "outcome dropped" "$TMP/wA2.log" && break; sleep 0.1; done
stop_worker $A
stop_worker $B
check_eq "the woken worker's completion was refused" "$(grep -c 'lease lost, outcome dropped' "$TMP/wA2.log")" 1
check_eq "the job kept the other worker's outcome" "$(q "SELECT state||' '||fencing||' '||(result->>'by') FROM skiplock.all_jobs WHERE id = $id")" "completed 2 B"
check_eq "the frozen worker's late write was rejected by the fence" "$(q "SELECT string_agg(fencing||':'||by, ',') FROM ledger")" "2:B"

# --- nothing held while a handler runs; N connections; drain on SIGTERM ---
# drain_check CONNECTIONS: 6 jobs of 2 s at concurrency 16 over CONNECTIONS
# connections, SIGTERM while they run.
drain_check() {
	local n=$1
	q "DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs"
	for _ in $(seq 1 6); do "$S" enqueue --url "$URL" nap >/dev/null; done
	"$S" worker --url "$URL" --concurrency 16 --connections "$n" "${FAST[@]}" --handler 'nap=sleep 2' 2>"$TMP/w3.log" &
	W=$!
	wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'running'" 6 30 || fail "naps did not start"
	sleep 0.5
	check_eq "$n connection(s): no idle-in-transaction session while handlers run" "$(q "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'")" 0
	# a statement in flight holds locks while it runs; none may be held by a
	# session that is not running one (sampled while the handlers sleep).  One
	# sample can catch a statement that started or ended between its reads of
	# pg_stat_activity and pg_locks; a lock counts only when two samples in a
	# row see it held by a session that stayed idle in between (the same
	# state_change), which no statement in flight can produce.
	held_idle() {
		q "SELECT a.pid||' '||a.state_change||' '||l.locktype||' '||coalesce(l.relation::text, '')||' '||l.mode FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE a.datname = current_database() AND pid <> pg_backend_pid() AND l.locktype <> 'virtualxid' AND a.state <> 'active' ORDER BY 1"
	}
	held=0
	held_idle >"$TMP/locks.prev"
	for _ in $(seq 1 10); do
		sleep 0.1
		held_idle >"$TMP/locks.now"
		held=$((held + $(comm -12 "$TMP/locks.prev" "$TMP/locks.now" | wc -l)))
		mv "$TMP/locks.now" "$TMP/locks.prev"
	done
	check_eq "$n connection(s): no lock held between statements while handlers run" "$held" 0
	if [ "$MODE" = direct ]; then
		check_eq "$n connection(s) at concurrency 16" "$(q "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'skiplock worker' AND datname = current_database()")" "$n"
	fi
	kill -TERM $W
	wait $W
	check_eq "$n connection(s): SIGTERM drains running jobs, exit 0" "$?" 0
	check_eq "$n connection(s): drained jobs completed" "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed'")" 6
}
drain_check 1
drain_check 3

# --- bad input ---
expect_exit "no handlers" 2 'no handlers' -- "$S" worker --url "$URL"
expect_exit "handler without =" 2 'expected KIND=COMMAND' -- "$S" worker --url "$URL" --handler nothing
expect_exit "zero concurrency" 2 '--concurrency: "0" is not an integer from 1' -- "$S" worker --url "$URL" --handler 'a=true' --concurrency 0
expect_exit "zero connections" 2 '--connections: "0" is not an integer from 1 to 64' -- "$S" worker --url "$URL" --handler 'a=true' --connections 0
expect_exit "connections beyond concurrency + prefetch" 2 'connections must be from 1 to 6 \(got 7\): at most concurrency \+ prefetch' -- "$S" worker --url "$URL" --handler 'a=true' --concurrency 4 --prefetch 2 --connections 7
expect_exit "bad lease" 2 '--lease: invalid duration "soon"' -- "$S" worker --url "$URL" --handler 'a=true' --lease soon
expect_exit "unknown option" 2 'unknown option "--threads"' -- "$S" worker --url "$URL" --handler 'a=true' --threads 4
expect_exit "unknown backoff" 2 'unknown strategy "wobbly"' -- "$S" worker --url "$URL" --handler 'a=true' --backoff wobbly
# --- options outside the bounds the database and the fleet can live with ---
W_=("$S" worker --url "$URL" --handler 'a=true')
expect_exit "a 1 ms lease" 2 'lease must be from 1s to 24h \(got 1ms\)' -- "${W_[@]}" --lease 1ms
expect_exit "a 100-year lease" 2 'lease must be from 1s to 24h \(got 876000h\)' -- "${W_[@]}" --lease 36500d
expect_exit "a 1 ms poll" 2 'poll must be from 10ms to 1h \(got 1ms\)' -- "${W_[@]}" --poll 1ms
expect_exit "a 2-hour poll-max" 2 'poll-max must be from 10ms to 1h' -- "${W_[@]}" --poll-max 2h
expect_exit "a 1 ms rescue-every" 2 'rescue-every must be from 10ms' -- "${W_[@]}" --rescue-every 1ms
expect_exit "a 40-day timeout" 2 'timeout must be from 1ms to 720h' -- "${W_[@]}" --timeout 40d
expect_exit "a queue over 128 bytes" 2 'queue name must be 1 to 128 bytes \(got 129\)' -- "${W_[@]}" --queue "$(printf 'q%.0s' $(seq 1 129))"
expect_exit "a queue that is not UTF-8" 2 'queue name is not valid UTF-8 \(byte 2\)' -- "${W_[@]}" --queue $'q\xffq'
expect_exit "a kind that is not UTF-8" 2 'job kind is not valid UTF-8' -- "$S" worker --url "$URL" --handler $'k\xc3=true'
expect_exit "a kind over 128 bytes" 2 'kind is over 128 bytes' -- "$S" worker --url "$URL" --handler "$(printf 'k%.0s' $(seq 1 129))=true"
expect_exit "an owner over 256 characters" 2 'owner must be 1 to 256 characters \(got 257\)' -- "${W_[@]}" --owner "$(printf 'ё%.0s' $(seq 1 257))"
expect_exit "an owner that is not UTF-8" 2 'owner is not valid UTF-8' -- "${W_[@]}" --owner $'w\xed\xa0\x80'
ok_owner=$(printf 'ё%.0s' $(seq 1 256))
"${W_[@]}" --owner "$ok_owner" --lease 1s --poll 10ms 2>"$TMP/ok.log" &
W=$!
wait_until "the worker with bounds-edge options starts" 20 grep -q 'started:' "$TMP/ok.log"
kill -TERM $W
wait $W
check_eq "an owner of 256 characters, a 1 s lease and a 10 ms poll are accepted" "$?" 0

# A handler's stderr that is not UTF-8 is recorded with '?' for the bad
# bytes, and holds back no other outcome of the batch.
b1=$(q "SELECT skiplock.enqueue('w.badtext', '{}', 'bt', max_attempts => 1)")
g1=$(q "SELECT skiplock.enqueue('w.fine', '{}', 'bt')")
"$S" worker --url "$URL" --queue bt --handler "w.badtext=printf 'x\\377\\376y' >&2; exit 1" \
	--handler w.fine=true --poll 50ms >"$TMP/bt.log" 2>&1 &
W=$!
wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE id IN ($b1, $g1) AND state IN ('discarded', 'completed')" 2 30 ||
	fail "outcomes held back: $(grep -m1 'recording outcomes failed' "$TMP/bt.log")"
kill -TERM $W
wait $W
check_eq "the error text recorded, its bad bytes replaced" \
	"$(q "SELECT errors->-1->>'error' FROM skiplock.all_jobs WHERE id = $b1")" "exit status 1; stderr: x??y"
check_eq "no outcome was refused" "$(grep -c 'recording outcomes failed' "$TMP/bt.log")" 0
no_leftovers
finish
