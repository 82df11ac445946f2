#!/usr/bin/env bash
# An idle `skiplock worker`: the statements it sends (pg_stat_statements),
# wake-ups by LISTEN on a direct connection (a job enqueued while it idles
# with a 60 s idle poll runs within 2 s, also after its backend was
# terminated), plain polling through PgBouncer (and, given --direct-url,
# wake-ups by LISTEN on the direct endpoint), and a job whose
# notification never came (SET skiplock.notify = off) found by polling, and
# a due job behind an open circuit breaker that does not end the idle.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
# idle after 10 x --poll-max = 2 s without a job
FAST=(--poll 50ms --poll-max 200ms --handler 'ping=cat >/dev/null')
# The harness's PgBouncer port is not one the URL detection knows.
[ "$MODE" = pooled ] && FAST+=(--pooler transaction)

if ! admin -c "SHOW shared_preload_libraries" | grep -q pg_stat_statements; then
	fail "pg_stat_statements is not preloaded by the harness: cannot count statements"
	finish
	exit 1
fi
q "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
# Statements run in this database, without the counting query itself and
# PgBouncer's server_check_query, merged by pg_stat_statements with the
# worker's start-up "SELECT 1" (it checks a server connection idle for
# over server_check_delay before handing it out; the worker sends "SELECT 1"
# only when it starts).
calls() {
	q "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
	    WHERE d.datname = current_database() AND s.query NOT LIKE '%pg_stat_statements%'
	      AND lower(s.query) <> 'select \$1'"
}
# start_worker LOG POLL_IDLE: a worker; waits until it says it is idle.
start_worker() {
	"$S" worker --url "$URL" "${FAST[@]}" --poll-idle "$2" --log-level debug 2>"$TMP/$1" &
	W=$!
	wait_until "worker $1 idle" 30 grep -q 'idle: polling every' "$TMP/$1"
}
stop_worker() {
	kill -TERM "$W" 2>/dev/null
	wait_exit "$W" 20
	check_eq "worker $1 exits 0 on SIGTERM" "$RC" 0
}
# is_idle LOG: the worker's last word on it was "idle"
is_idle() { grep -E 'idle: polling every|no longer idle' "$TMP/$1" | tail -n 1 | grep -q 'idle: polling'; }
# ms_to_done ID: milliseconds from the job's creation to its completion
ms_to_done() {
	q "SELECT round(extract(epoch FROM finished_at - created_at) * 1000) FROM skiplock.all_jobs WHERE id = $1"
}
done_q() { [ "$(q "SELECT state FROM skiplock.all_jobs WHERE id = $1")" = completed ]; }

# --- an idle worker with a 60 s idle poll: statements over 6 s ---
start_worker w1.log 60s
sleep 0.5 # the idle poll that follows the log line
c0=$(calls)
sleep 6
c1=$(calls)
n=$((c1 - c0))
# before the idle design: a cron tick every second and claims every 200 ms (> 40)
if [ "$n" -le 1 ]; then pass "idle worker sent $n statement(s) in 6 s"; else
	fail "idle worker sent $n statements in 6 s: $(q "SELECT string_agg(calls || 'x ' || left(query, 60), ' | ') FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = current_database() AND calls > 0 AND query NOT LIKE '%pg_stat_statements%'")"
fi

if [ "$MODE" = direct ]; then
	# --- LISTEN: picked up long before the next idle poll ---
	id=$("$S" enqueue --url "$URL" ping)
	wait_until "job $id done" 10 done_q "$id"
	ms=$(ms_to_done "$id")
	if [ "${ms:-99999}" -lt 2000 ]; then pass "direct: woken by NOTIFY, done in $ms ms (idle poll 60 s)"; else fail "direct: job took $ms ms"; fi

	# --- its backend is terminated while idle: reconnect, LISTEN again, claim ---
	wait_until "idle again" 20 is_idle w1.log
	old=$(q "SELECT pid FROM pg_stat_activity WHERE application_name = 'skiplock worker' AND datname = current_database()")
	q "SELECT pg_terminate_backend($old)" >/dev/null
	id=$("$S" enqueue --url "$URL" ping)
	wait_until "job $id done after terminate" 10 done_q "$id"
	ms=$(ms_to_done "$id")
	if [ "${ms:-99999}" -lt 2000 ]; then pass "direct: backend $old terminated, job still done in $ms ms"; else fail "direct after terminate: $ms ms"; fi
	check_eq "one connection, listening again" "$(q "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'skiplock worker' AND datname = current_database() AND pid <> $old")" 1
	grep -q 'listening on channel skiplock_jobs' "$TMP/w1.log" && pass "direct: LISTEN logged" || fail "no LISTEN in the log"

	# --- a delayed job: after its notification the worker idles again, and
	# its idle poll sleeps until run_at instead of the whole 60 s ---
	wait_until "idle again" 20 is_idle w1.log
	id=$("$S" enqueue --url "$URL" ping --delay 4s)
	wait_until "delayed job $id done" 20 done_q "$id"
	ms=$(q "SELECT round(extract(epoch FROM finished_at - run_at) * 1000) FROM skiplock.all_jobs WHERE id = $id")
	if [ "${ms:-99999}" -lt 2000 ]; then pass "direct: delayed job done $ms ms after run_at (idle poll 60 s)"; else fail "delayed job: $ms ms after run_at"; fi
else
	grep -q 'listening on channel' "$TMP/w1.log" && fail "pooled worker LISTENed" || pass "pooled: no LISTEN"
fi
if [ "$MODE" = pooled ]; then
	# --pooler auto cannot tell PgBouncer on this port from the URL; the
	# server's port gives it away, and the worker does not LISTEN.
	"$S" worker --url "$URL" --handler 'ping=true' --log-level debug 2>"$TMP/w0.log" &
	W0=$!
	wait_until "auto worker checked the port" 20 grep -q 'polling without LISTEN' "$TMP/w0.log"
	kill -TERM "$W0"; wait "$W0"
	grep -q 'listening on channel' "$TMP/w0.log" && fail "auto: LISTEN through PgBouncer" || pass "auto: no LISTEN through PgBouncer"

	# With --direct-url as well, a second connection LISTENs on the direct
	# endpoint: the pooled worker wakes at once, long before its idle poll.
	listeners() { q "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN skiplock_jobs'"; }
	"$S" worker --url "$URL" --direct-url "$DIRECT_URL" "${FAST[@]}" --poll-idle 60s \
		--log-level debug 2>"$TMP/wd.log" &
	WD=$!
	wait_until "worker wd idle" 30 grep -q 'idle: polling every' "$TMP/wd.log"
	grep -q 'listening on channel skiplock_jobs on the direct endpoint' "$TMP/wd.log" &&
		pass "pooled + --direct-url: LISTEN on the direct endpoint" || fail "no direct LISTEN: $(tail -n 5 "$TMP/wd.log")"
	check_eq "one listening connection" "$(listeners)" 1
	id=$("$S" enqueue --url "$URL" ping)
	wait_until "job $id done" 10 done_q "$id"
	ms=$(ms_to_done "$id")
	if [ "${ms:-99999}" -lt 2000 ]; then pass "pooled + --direct-url: woken by NOTIFY, done in $ms ms (idle poll 60 s)"; else fail "pooled + --direct-url: job took $ms ms"; fi
	kill -TERM "$WD"; wait_exit "$WD" 20
	check_eq "wd exits 0 on SIGTERM" "$RC" 0
	no_listener() { [ "$(listeners)" = 0 ]; }
	wait_until "its listener closed" 10 no_listener && pass "its listener closed"

	# --pooler auto with --direct-url: once the server's port gives the
	# pooler away, the worker LISTENs on the direct endpoint instead.
	"$S" worker --url "$URL" --direct-url "$DIRECT_URL" --poll 50ms --poll-max 200ms \
		--handler 'ping=cat >/dev/null' --poll-idle 60s --log-level debug 2>"$TMP/wa.log" &
	WA=$!
	wait_until "worker wa listens" 30 grep -q 'listening on channel skiplock_jobs on the direct endpoint' "$TMP/wa.log" &&
		pass "auto + --direct-url: LISTEN on the direct endpoint" || fail "auto: no direct LISTEN: $(tail -n 5 "$TMP/wa.log")"
	wait_until "worker wa idle" 30 grep -q 'idle: polling every' "$TMP/wa.log"
	id=$("$S" enqueue --url "$URL" ping)
	wait_until "job $id done" 10 done_q "$id"
	ms=$(ms_to_done "$id")
	if [ "${ms:-99999}" -lt 2000 ]; then pass "auto + --direct-url: woken by NOTIFY, done in $ms ms (idle poll 60 s)"; else fail "auto + --direct-url: job took $ms ms"; fi
	kill -TERM "$WA"; wait_exit "$WA" 20
	check_eq "wa exits 0 on SIGTERM" "$RC" 0
fi
stop_worker w1

# --- no notification (skiplock.notify off): polling still finds the job ---
start_worker w2.log 2s
id=$(psql -X -q -At -v ON_ERROR_STOP=1 "$URL" -c "BEGIN" -c "SET LOCAL skiplock.notify = 'off'" \
	-c "SELECT skiplock.enqueue('ping')" -c "COMMIT")
wait_until "job $id done by polling" 15 done_q "$id"
ms=$(ms_to_done "$id")
check_eq "polled job completed" "$(q "SELECT state FROM skiplock.all_jobs WHERE id = $id")" completed
echo "     (without a notification: done in $ms ms, idle poll 2-2.5 s)"
stop_worker w2

if [ "$MODE" = pooled ]; then
	# --- a due job whose kind's breaker is open does not end the idle ---
	"$S" breakers open ping --url "$URL" >/dev/null || fail "breakers open ping"
	"$S" enqueue --url "$URL" ping >/dev/null
	start_worker w3.log 60s
	sleep 0.5
	c0=$(calls)
	sleep 4
	n=$(($(calls) - c0))
	if [ "$n" -le 1 ]; then pass "open breaker: $n statement(s) in 4 s"; else fail "open breaker: $n statements in 4 s"; fi
	stop_worker w3
fi
no_leftovers
finish
