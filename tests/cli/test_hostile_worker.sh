#!/usr/bin/env bash
# What a hostile worker role cannot do any more (sql/0017_guards.sql), as
# the worker role that logs in with its password, directly and through
# PgBouncer; the reader and operator roles through SET LOCAL ROLE:
#
#   * stall cron and every idle worker with schedule_fire('infinity',
#     '-infinity'): refused (22023), nothing changes; and times planted by
#     the owner around the checks stop neither `cron list`, the other
#     schedules nor the idle poll (an idle worker claims a newly due job);
#   * make every outcome of a kind fail with breaker_configure(…,
#     9223372036854775807, …): refused (22023); settings planted by the owner
#     fail no outcome (a worker completes the jobs of two such kinds);
#   * read another worker's fencing or lease token (42501 for the worker
#     and reader roles; `jobs show` and `lease list` show "-");
#   * store kinds or queues of any size in the worker registry (a claim
#     refuses names over 128 bytes and more than 1000 queues, 22023);
#   * enqueue a payload over skiplock.payload_max() from SQL (22023);
#   * choose the name the action log keeps: it records session_user too;
#   * enqueue into a queue of 128 two-byte characters that no worker with
#     --queue can serve: one limit, 128 bytes, and a 128-byte name works
#     end to end.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
OWNER=$SKL_TEST_OWNER_ROLE
W=$SKL_TEST_WORKER_ROLE
PW=$SKL_TEST_WORKER_PASSWORD
RD=skl_test_rd_$$
OP=skl_test_op_$$
if [ "$MODE" = pooled ]; then PORT=$SKL_TEST_BOUNCER_PORT; else PORT=$SKL_TEST_PGPORT; fi
WURL="postgresql://$W:$PW@$SKL_TEST_PGHOST:$PORT/$DB"
POOLER=()
[ "$MODE" = pooled ] && POOLER=(--pooler transaction)
admin -c "CREATE ROLE $RD NOLOGIN" -c "CREATE ROLE $OP NOLOGIN" >/dev/null
trap 'admin -c "DROP OWNED BY $RD, $OP" -d "$DB" >/dev/null 2>&1; cleanup; admin -c "DROP ROLE IF EXISTS $RD" -c "DROP ROLE IF EXISTS $OP" >/dev/null 2>&1' EXIT
"$S" init --url "$URL" --owner "$OWNER" --grant-worker "$W" --grant-reader "$RD" \
	--grant-operator "$OP" >/dev/null 2>&1 || fail "init with the roles"

# wsql SQL: as the worker role on this mode's URL; the output, or the
# error's SQLSTATE alone ("ERROR:  22023")
wsql() { PGPASSWORD=$PW psql -X -q -At -v VERBOSITY=sqlstate "postgresql://$W@$SKL_TEST_PGHOST:$PORT/$DB" -c "$1" 2>&1; }
# as_role ROLE SQL: as ROLE (SET LOCAL ROLE, rolled back); output or SQLSTATE
as_role() { psql -X -q -At -v VERBOSITY=sqlstate "$URL" -c "BEGIN; SET LOCAL ROLE $1; $2; ROLLBACK" 2>&1; }
refused() { # WHAT STATE OUTPUT
	case $3 in "ERROR:  $2"*) pass "$1: refused ($2)" ;; *) fail "$1: want SQLSTATE $2, got: $3" ;; esac
}
# worker_start LOG ARGS...: a worker as the worker role, idle after 2 s
worker_start() {
	local log=$1
	shift
	"$S" worker --url "$WURL" "${POOLER[@]}" --poll 50ms --poll-max 200ms --log-level debug "$@" \
		>"$TMP/$log" 2>&1 &
	WPID=$!
}
worker_stop() {
	kill -TERM "$WPID" 2>/dev/null
	wait_exit "$WPID" 20
	check_eq "$1: worker exits 0" "$RC" 0
}

# ---- 3. schedules: no stored time stalls the fleet ----
"$S" cron add --url "$URL" nightly '0 3 * * *' nightly >/dev/null || fail "cron add nightly"
"$S" cron add --url "$URL" weekly '0 3 * * 0' weekly >/dev/null || fail "cron add weekly"
rows() { q "SELECT string_agg(concat_ws(' ', name, last_fire, next_fire, updated_at), ';' ORDER BY name) FROM skiplock.schedules"; }
before=$(rows)
fire() { # LAST NEXT FIRES KEYS: schedule_fire of nightly as the worker role
	wsql "SELECT skiplock.schedule_fire(name, created_at, last_fire, $1, $2, $3, $4) FROM skiplock.schedules WHERE name = 'nightly'"
}
refused "schedule_fire to infinity and -infinity" 22023 "$(fire "'infinity'" "'-infinity'" "'{}'" "'{}'")"
refused "schedule_fire with a next fire time in 2200" 22023 "$(fire "now()" "'2200-01-01'" "'{}'" "'{}'")"
refused "schedule_fire moving last_fire back" 22023 "$(fire "'1999-01-01'" NULL "'{}'" "'{}'")"
refused "schedule_fire with a next fire time before the last" 22023 \
	"$(fire "now()" "now() - interval '1 day'" "'{}'" "'{}'")"
refused "schedule_fire enqueuing a fire time that is not pending" 22023 \
	"$(fire "now()" NULL "ARRAY[now() + interval '1 day']" "ARRAY['cron:nightly:x']")"
refused "schedule_fire with another schedule's key" 22023 "$(fire "now()" NULL "ARRAY[now()]" "ARRAY['cron:other:x']")"
check_eq "nothing changed by the refused calls" "$(rows)" "$before"
check_eq "no job enqueued by them" "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'nightly'")" 0
"$S" cron list --url "$WURL" >"$TMP/list" 2>&1 && pass "cron list as worker" || fail "cron list: $(cat "$TMP/list")"
# the owner plants them around the checks (a constraint dropped first)
out=$(q "UPDATE skiplock.schedules SET last_fire = 'infinity' WHERE name = 'nightly'" 2>&1)
case $out in *schedules_times_check*) pass "the table refuses an infinite last_fire" ;; *) fail "planted infinity: $out" ;; esac
q "ALTER TABLE skiplock.schedules DROP CONSTRAINT IF EXISTS schedules_times_check;
   UPDATE skiplock.schedules SET last_fire = 'infinity', next_fire = '-infinity' WHERE name = 'nightly'" >/dev/null
"$S" cron list --url "$WURL" >"$TMP/list" 2>&1 && pass "cron list with the planted times" ||
	fail "cron list with the planted times: $(cat "$TMP/list")"
grep -q "^nightly " "$TMP/list" && pass "cron list shows the planted schedule" || fail "cron list: $(cat "$TMP/list")"
worker_start cron.log --handler 'job=cat >/dev/null' --handler 'tick=cat >/dev/null' --poll-idle 2s
wait_until "worker idle" 30 grep -q 'idle: polling every' "$TMP/cron.log"
# a newly due job: its insert's notification comes before it is due, so
# only the idle poll tells the idle worker when to claim it
J=$(q "SELECT skiplock.enqueue('job', run_at => now() + interval '3 seconds')")
if wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $J" completed 30; then
	pass "an idle worker claims a newly due job"
	check_eq "... within 10 s of its run_at" \
		"$(q "SELECT finished_at - run_at < interval '10 seconds' FROM skiplock.all_jobs WHERE id = $J")" t
else
	fail "newly due job: $(q "SELECT state FROM skiplock.all_jobs WHERE id = $J"); $(grep -m3 -E 'failed|error' "$TMP/cron.log")"
fi
# another schedule, added while the planted one is there, fires
"$S" cron add --url "$URL" tick '@every 2s' tick >/dev/null || fail "cron add tick"
wait_for "SELECT count(*) >= 2 FROM skiplock.all_jobs WHERE kind = 'tick' AND state = 'completed'" t 30 &&
	pass "the other schedules keep firing" ||
	fail "tick jobs: $(q "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'tick'"); $(grep -m3 -E 'failed|error' "$TMP/cron.log")"
worker_stop "cron"
if grep -q 'idle poll failed' "$TMP/cron.log"; then
	fail "the idle poll failed: $(grep -m1 'idle poll failed' "$TMP/cron.log")"
else
	pass "the idle poll never failed"
fi
# a due schedule whose job the database refuses (a payload over the limit,
# planted): that schedule fails, the tick goes on with the others
q "INSERT INTO skiplock.schedules (name, expression, kind, payload, next_fire, created_at)
   VALUES ('fat', '* * * * *', 'fat', jsonb_build_object('a', repeat('x', 1048576)),
           now() - interval '1 minute', now() - interval '5 minutes')" >/dev/null
sleep 2.1 # tick is due again
ticks=$(q "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'tick'")
out=$("$S" cron tick --url "$WURL" 2>"$TMP/tick.err")
check_eq "cron tick with a schedule the database refuses: exit 0" "$?" 0
grep -q 'failed=1 ' <<<"$out" && pass "that schedule is counted as failed" || fail "cron tick: $out"
grep -q 'schedule "fat": payload is' "$TMP/tick.err" && pass "and named with the reason" ||
	fail "cron tick's warning: $(cat "$TMP/tick.err")"
check_eq "the other schedule fired in the same tick" \
	"$(q "SELECT count(*) > $ticks FROM skiplock.all_jobs WHERE kind = 'tick'")" t
"$S" cron remove --url "$URL" tick >/dev/null
"$S" cron remove --url "$URL" fat >/dev/null

# ---- 4. breakers: bounded settings, outcomes that never fail ----
for args in "50, 10, 100, 9223372036854775807, 60000, 3" "101, 10, 100, 60000, 60000, 3" \
	"50, 1000001, 100, 60000, 60000, 3" "50, 10, 1000001, 60000, 60000, 3" \
	"50, 10, 100, 60000, 3153600000001, 3" "50, 10, 100, 60000, 60000, 10001" "50, 10, 100, 0, 60000, 3"; do
	refused "breaker_configure($args)" 22023 "$(wsql "SELECT skiplock.breaker_configure('b1', $args)")"
done
check_eq "no breaker written by them" "$(q "SELECT count(*) FROM skiplock.breakers")" 0
check_eq "the largest settings are accepted" \
	"$(wsql "SELECT skiplock.breaker_configure('b0', 100, 1000000, 1000000, 3153600000000, 3153600000000, 10000)")" ""
# the owner plants what the function refuses, around the constraints: b1
# opens at once (a rate of 0) for 2^63 ms, b2's count is at the end of int
q "ALTER TABLE skiplock.breakers DROP CONSTRAINT IF EXISTS breakers_bounds_check;
   ALTER TABLE skiplock.breakers DROP CONSTRAINT IF EXISTS breakers_config_check;
   DELETE FROM skiplock.breakers WHERE kind IN ('b1', 'b2');
   INSERT INTO skiplock.breakers (kind, failure_pct, min_calls, window_calls, window_ms, open_ms,
                                  probes, calls)
   VALUES ('b1', 0, 1, 100, 9223372036854775807, 9223372036854775807, 3, 0),
          ('b2', 50, 2147483647, 2147483647, 9223372036854775807, -1, 2147483647, 2147483646)" >/dev/null
q "SELECT skiplock.enqueue(k) FROM (VALUES ('b1'), ('b2')) v(k), generate_series(1, 20)" >/dev/null
worker_start breakers.log --handler 'b1=cat >/dev/null' --handler 'b2=cat >/dev/null' --concurrency 4
wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE kind IN ('b1', 'b2') AND state = 'completed'" 40 60 &&
	pass "a worker completes the 40 jobs of two kinds with planted breakers" ||
	fail "completed $(q "SELECT count(*) FROM skiplock.all_jobs WHERE kind IN ('b1', 'b2') AND state = 'completed'") of 40: $(grep -m2 -E 'error|failed' "$TMP/breakers.log")"
worker_stop "breakers"
# b2's window is full once its count reaches the end of int, so a later
# outcome starts a new window: how many fall in it depends on batching
check_eq "their outcomes were counted, within int" \
	"$(q "SELECT string_agg(kind || ':' || state || ':' ||
	        CASE WHEN kind = 'b2' AND calls BETWEEN 1 AND 19 THEN 'new window' ELSE calls::text END,
	        ' ' ORDER BY kind) FROM skiplock.breakers WHERE kind IN ('b1', 'b2')")" \
	"b1:closed:20 b2:closed:new window"

# ---- L1. tokens: only their holders know them ----
J=$(q "SELECT skiplock.enqueue('tok')")
wsql "SELECT count(*) FROM skiplock.claim('w', '{tok}')" >/dev/null
"$S" lease run --url "$WURL" nightly-lease --ttl 10s -- true >/dev/null 2>&1 || fail "lease run as worker"
for t in jobs finished_jobs all_jobs leases; do
	refused "worker reads $t.fencing" 42501 "$(wsql "SELECT fencing FROM skiplock.$t")"
	refused "reader reads $t.fencing" 42501 "$(as_role "$RD" "SELECT fencing FROM skiplock.$t")"
	refused "worker reads $t whole" 42501 "$(wsql "SELECT * FROM skiplock.$t")"
	check_eq "operator reads $t.fencing" "$(as_role "$OP" "SELECT count(fencing) >= 0 FROM skiplock.$t")" t
done
check_eq "worker reads every other column of a job" \
	"$(wsql "SELECT state || ' ' || attempt || ' ' || (lease_owner = 'w') FROM skiplock.jobs WHERE id = $J")" "running 1 true"
check_eq "reader counts jobs through jobs_matching" \
	"$(as_role "$RD" "SELECT count(*) FROM skiplock.jobs_matching(NULL, 'tok', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)")" 1
out=$("$S" jobs show "$J" --url "$WURL" 2>&1)
grep -qE '^fencing: +-$' <<<"$out" && pass "jobs show as worker: no token" || fail "jobs show as worker: $out"
check_eq "jobs show --json as worker: token null" \
	"$("$S" jobs show "$J" --url "$WURL" --json | grep -c '"fencing": null')" 1
check_eq "jobs list --json as worker: token null" \
	"$("$S" jobs list --url "$WURL" --json --kind tok | grep -c '"fencing": null')" 1
grep -qE '^fencing: +1$' <<<"$("$S" jobs show "$J" --url "$URL")" && pass "jobs show as admin: the token" ||
	fail "jobs show as admin: $("$S" jobs show "$J" --url "$URL")"
check_eq "jobs list --json as admin: the token" \
	"$("$S" jobs list --url "$URL" --json --kind tok | grep -c '"fencing": 1')" 1
out=$("$S" lease list --url "$WURL" 2>&1)
grep -qE '^nightly-lease +[^ ]+ +- ' <<<"$out" && pass "lease list as worker: no token" || fail "lease list as worker: $out"
"$S" status --url "$WURL" >/dev/null 2>&1 && pass "status as worker" || fail "status as worker"
q "SELECT skiplock.enqueue('tok2')" >/dev/null
check_eq "the claimer still gets its token from the claim" \
	"$(wsql "SELECT fencing FROM skiplock.claim('w2', '{tok2}')")" 1

# ---- L3. the worker registry: bounded names ----
refused "claim with a kind of 129 bytes" 22023 "$(wsql "SELECT count(*) FROM skiplock.claim('big', ARRAY[repeat('k', 129)])")"
refused "claim with a kind of 100 kB" 22023 "$(wsql "SELECT count(*) FROM skiplock.claim('big', ARRAY[repeat('k', 100000)])")"
refused "claim with a queue of 65 two-byte characters" 22023 \
	"$(wsql "SELECT count(*) FROM skiplock.claim('big', '{k}', ARRAY[repeat('é', 65)])")"
refused "claim with 1001 queues" 22023 \
	"$(wsql "SELECT count(*) FROM skiplock.claim('big', '{k}', ARRAY(SELECT 'q' || i FROM generate_series(1, 1001) i))")"
check_eq "nothing recorded for them" "$(q "SELECT count(*) FROM skiplock.workers WHERE owner = 'big'")" 0
check_eq "the largest claim is recorded" \
	"$(wsql "SELECT count(*) FROM skiplock.claim('big', ARRAY(SELECT repeat('k', 124) || i FROM generate_series(1000, 1999) i), ARRAY(SELECT repeat('q', 124) || i FROM generate_series(1000, 1999) i))")" 0
check_eq "its registry row is under 300 kB" \
	"$(q "SELECT pg_column_size(w.*) < 300000 FROM skiplock.workers w WHERE owner = 'big'")" t

# ---- L4. payloads: one limit, in SQL ----
check_eq "payload_max() is the command's default --max-payload" "$(wsql "SELECT skiplock.payload_max()")" 1048576
check_eq "a payload of exactly payload_max() bytes" \
	"$(wsql "SELECT skiplock.enqueue('pay', jsonb_build_object('a', repeat('x', 1048576 - 9))) > 0")" t
refused "enqueue of a payload one byte over" 22023 \
	"$(wsql "SELECT skiplock.enqueue('pay', jsonb_build_object('a', repeat('x', 1048576 - 8)))")"
refused "enqueue_many with one payload over" 22023 \
	"$(wsql "SELECT skiplock.enqueue_many(NULL, '{pay,pay}', ARRAY['{}', jsonb_build_object('a', repeat(E'\\001', 200000))], NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)")"
refused "enqueue_many_unchecked, around the checks" 42501 \
	"$(wsql "SELECT skiplock_internal.enqueue_many_unchecked(NULL, '{pay}', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)")"
check_eq "only the payload at the limit was written" "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'pay'")" 1
expect_exit "--max-payload over the database's limit" 2 "max-payload.* to $(wsql "SELECT skiplock.payload_max()")\$" -- \
	"$S" enqueue --url "$WURL" --max-payload 1048577 pay '{}'

# ---- L12. the action log keeps who logged in ----
psql -X -q -At "$URL" -c "BEGIN; SET LOCAL ROLE $OP; SELECT skiplock.pause('q1', NULL, 'someone-else@forged', 'cli'); COMMIT" >/dev/null
check_eq "the log keeps session_user next to the chosen actor" \
	"$(q "SELECT actor || ' ' || db_user FROM skiplock.actions WHERE target = '{\"queue\": \"q1\"}'")" \
	"someone-else@forged $SKL_TEST_DBUSER"
"$S" jobs actions --url "$URL" | grep -qE "someone-else@forged +cli +$SKL_TEST_DBUSER +pause " &&
	pass "jobs actions shows the db user" || fail "jobs actions: $("$S" jobs actions --url "$URL")"
check_eq "jobs actions --json has db_user (cron add is logged too)" \
	"$("$S" jobs actions --url "$URL" --json | grep -c "\"db_user\": \"$SKL_TEST_DBUSER\"")" \
	"$(q "SELECT count(*) FROM skiplock.actions WHERE db_user = '$SKL_TEST_DBUSER'")"

# ---- Q. a queue name is 1 to 128 bytes everywhere ----
Q128=$(printf 'é%.0s' $(seq 1 64)) # 128 bytes, 64 characters
refused "enqueue into 128 two-byte characters" 22023 "$(wsql "SELECT skiplock.enqueue('qk', queue => repeat('é', 128))")"
refused "enqueue of a kind of 65 two-byte characters" 22023 "$(wsql "SELECT skiplock.enqueue(repeat('é', 65))")"
QJ=$(wsql "SELECT skiplock.enqueue('qk', queue => '$Q128')")
case $QJ in [0-9]*) pass "enqueue into a queue of 128 bytes" ;; *) fail "enqueue into 128 bytes: $QJ" ;; esac
worker_start queue.log --handler 'qk=cat >/dev/null' --queue "$Q128"
wait_for "SELECT state FROM skiplock.all_jobs WHERE id = ${QJ:-0}" completed 30 &&
	pass "a worker with --queue of 128 bytes runs it" || fail "128-byte queue: $(tail -n 3 "$TMP/queue.log")"
worker_stop "queue"
expect_exit "worker --queue of 129 bytes" 2 'queue name must be 1 to 128 bytes' -- \
	"$S" worker --url "$WURL" --handler 'qk=true' --queue "${Q128}x"

no_leftovers
finish
