#!/usr/bin/env bash
# One write path for schedules (sql/0032_schedule_api.sql): the SQL
# functions that `skiplock cron add/remove/pause/resume/apply` call, on
# this run's URL (through PgBouncer in pooled mode):
#
#   * bad input to schedule_add, schedule_remove, schedule_set_paused and
#     schedules_apply: its SQLSTATE (22023, 22004, 23505), and nothing
#     written, neither a schedule nor a row of the action log;
#   * a resume skips the fire times of the pause the same way from the CLI
#     and from SQL: the same last_fire and next_fire, at a given instant
#     and at now();
#   * the CLI's writes are logged with its actor; a retried add succeeds;
#   * an apply whose backend is terminated while it waits for the table
#     lock is retried whole (each change once, one log row), and one whose
#     CLI is killed there writes nothing.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"

# sqlstate SQL: the SQLSTATE the statement fails with on this mode's URL,
# or "ok"
sqlstate() {
	local r
	r=$(psql -X -q -At -v VERBOSITY=sqlstate -v ON_ERROR_STOP=1 "$URL" -c "$1" 2>&1)
	case $r in *ERROR:*) echo "$r" | grep -m1 -oE 'ERROR: +[0-9A-Z]{5}' | awk '{print $2}' ;; *) echo ok ;; esac
}
written() { q "SELECT (SELECT count(*) FROM skiplock.schedules) || '/' || (SELECT count(*) FROM skiplock.actions)"; }

# ---- bad input: the SQLSTATE, and nothing written ----
q "SELECT skiplock.schedule_add('keep', '0 3 * * *', 'k')" >/dev/null
before=$(written)
refused() { # WHAT SQLSTATE SQL
	check_eq "$1: SQLSTATE" "$(sqlstate "$3")" "$2"
	check_eq "$1: nothing written" "$(written)" "$before"
}
refused "add: bad expression" 22023 "SELECT skiplock.schedule_add('a', '0 25 * * *', 'k')"
refused "add: unknown zone" 22023 "SELECT skiplock.schedule_add('a', '0 3 * * *', 'k', zone => 'Mars/Base')"
refused "add: name with a control character" 22023 "SELECT skiplock.schedule_add(E'a\\tb', '0 3 * * *', 'k')"
refused "add: kind too long" 22023 "SELECT skiplock.schedule_add('a', '0 3 * * *', repeat('k', 129))"
refused "add: bad catch_up" 22023 "SELECT skiplock.schedule_add('a', '0 3 * * *', 'k', catch_up => 'some')"
refused "add: max_attempts 0" 22023 "SELECT skiplock.schedule_add('a', '0 3 * * *', 'k', max_attempts => 0)"
refused "add: at out of range" 22023 "SELECT skiplock.schedule_add('a', '0 3 * * *', 'k', at => 'infinity')"
refused "add: an empty actor" 22023 "SELECT skiplock.schedule_add('a', '0 3 * * *', 'k', actor => '')"
refused "add: NULL expression" 22004 "SELECT skiplock.schedule_add('a', NULL, 'k')"
refused "add: NULL queue" 22004 "SELECT skiplock.schedule_add('a', '0 3 * * *', 'k', queue => NULL)"
refused "add: a taken name" 23505 "SELECT skiplock.schedule_add('keep', '0 4 * * *', 'k')"
refused "remove: NULL name" 22004 "SELECT skiplock.schedule_remove(NULL)"
refused "set_paused: NULL paused" 22004 "SELECT skiplock.schedule_set_paused('keep', NULL)"
refused "set_paused: at out of range" 22023 "SELECT skiplock.schedule_set_paused('keep', false, at => '-infinity')"
refused "apply: not an array" 22023 "SELECT * FROM skiplock.schedules_apply('{}')"
refused "apply: NULL prune" 22004 "SELECT * FROM skiplock.schedules_apply('[]', NULL)"
refused "apply: a bad element after a good one" 22023 \
	"SELECT * FROM skiplock.schedules_apply('[{\"name\": \"a\", \"expression\": \"@hourly\", \"kind\": \"k\"}, {\"name\": \"b\", \"expression\": \"0 3 * *\", \"kind\": \"k\"}]', true)"
refused "apply: paused not a boolean" 22023 \
	"SELECT * FROM skiplock.schedules_apply('[{\"name\": \"a\", \"expression\": \"@hourly\", \"kind\": \"k\", \"paused\": 1}]')"
refused "apply: a name given twice" 22023 \
	"SELECT * FROM skiplock.schedules_apply('[{\"name\": \"a\", \"expression\": \"@hourly\", \"kind\": \"k\"}, {\"name\": \"a\", \"expression\": \"@daily\", \"kind\": \"k\"}]', true)"
out=$(psql -X -q -At "$URL" -c "SELECT * FROM skiplock.schedules_apply('[{\"name\": \"b\", \"expression\": \"0 3 * *\", \"kind\": \"k\"}]')" 2>&1)
case $out in *'schedule 1 ("b"): invalid cron expression'*) pass "apply: the words of cron apply" ;; *) fail "apply: message: $out" ;; esac
check_eq "remove of none: false, nothing logged" "$(q "SELECT skiplock.schedule_remove('none')")/$(written)" "f/$before"
check_eq "set_paused of none: NULL, nothing logged" "$(q "SELECT skiplock.schedule_set_paused('none', true) IS NULL")/$(written)" "t/$before"
expect_exit "cron add: the database's bound on priority" 2 'priority' -- \
	"$S" cron add --url "$URL" big '0 3 * * *' k --priority 2000000
check_eq "cron add refused: nothing written" "$(written)" "$before"

# ---- resume: the same fire times from the CLI and from SQL ----
for n in cli sql cli-now sql-now; do
	case $n in *now) T0=2020-01-05T00:00:00Z ;; *) T0=2031-01-05T00:00:00Z ;; esac
	"$S" cron add --url "$URL" "r-$n" '0 3 * * *' k --catch-up all --at "$T0" >/dev/null || fail "add r-$n"
	"$S" cron pause --url "$URL" "r-$n" >/dev/null || fail "pause r-$n"
done
"$S" cron resume --url "$URL" r-cli --at 2031-01-09T05:00:00Z >/dev/null || fail "resume r-cli --at"
q "SELECT skiplock.schedule_set_paused('r-sql', false, 'op', 'sql', '2031-01-09T05:00:00Z')" >/dev/null
times() { q "SELECT enabled || ' ' || last_fire AT TIME ZONE 'UTC' || ' ' || next_fire AT TIME ZONE 'UTC' FROM skiplock.schedules WHERE name = '$1'"; }
check_eq "resume at an instant from the CLI: the missed fire times skipped" "$(times r-cli)" \
	"true 2031-01-09 03:00:00 2031-01-10 03:00:00"
check_eq "resume at an instant from SQL: the same" "$(times r-sql)" "$(times r-cli)"
"$S" cron resume --url "$URL" r-cli-now >/dev/null || fail "resume r-cli-now"
q "SELECT skiplock.schedule_set_paused('r-sql-now', false, 'op', 'sql')" >/dev/null
check_eq "resume at now() from the CLI and from SQL: the same fire times" \
	"$(times r-cli-now)" "$(times r-sql-now)"
check_eq "resume at now(): next fire time after now, last at or before it" \
	"$(q "SELECT next_fire > now() AND last_fire <= now() AND last_fire > now() - interval '1 day' FROM skiplock.schedules WHERE name = 'r-sql-now'")" t
tick=$("$S" cron tick --url "$URL" --at 2031-01-09T05:00:01Z)
check_eq "a tick right after the resume enqueues none of the pause's fire times" \
	"$(q "SELECT count(*) FROM skiplock.jobs WHERE unique_key LIKE 'cron:r-cli:%' OR unique_key LIKE 'cron:r-sql:%'")" 0
: "$tick"

# ---- the CLI's writes, logged with its actor ----
"$S" cron remove --url "$URL" r-cli >/dev/null || fail "remove r-cli"
check_eq "remove: logged as the CLI with the definition" \
	"$(q "SELECT role || ' ' || (actor LIKE '%@%') || ' ' || (target->'definition'->>'expression') FROM skiplock.actions WHERE action = 'schedule_remove'")" \
	"cli true 0 3 * * *"
check_eq "pause and resume from the CLI: logged as the CLI" \
	"$(q "SELECT count(*) FROM skiplock.actions WHERE action IN ('schedule_pause', 'schedule_resume') AND role = 'cli'")" 5
q "SELECT skiplock.schedule_add('retried', '0 3 * * *', 'k', at => '2031-01-05T00:00:00Z')" >/dev/null
check_eq "add retried after a lost answer (same definition, same at): unchanged" \
	"$(q "SELECT action FROM skiplock.schedule_add('retried', '0 3 * * *', 'k', at => '2031-01-05T00:00:00Z')")" unchanged

# ---- schedules_declare writes through the same function ----
q "SELECT * FROM skiplock.schedules_declare('[{\"name\": \"dc\", \"expression\": \"0 3 * * *\", \"kind\": \"k\"}]')" >/dev/null
nf=$(q "SELECT next_fire FROM skiplock.schedules WHERE name = 'dc'")
check_eq "declare: a new payload alone updates (it failed before step 0032)" \
	"$(q "SELECT action FROM skiplock.schedules_declare('[{\"name\": \"dc\", \"expression\": \"0 3 * * *\", \"kind\": \"k\", \"payload\": {\"x\": 1}}]')")" updated
check_eq "declare: the payload written, the fire times kept" \
	"$(q "SELECT payload->>'x' || ' ' || next_fire FROM skiplock.schedules WHERE name = 'dc'")" "1 $nf"

# ---- apply: a terminated backend, a killed CLI ----
cat >"$TMP/apply.json" <<'EOF'
{"schedules": [{"name": "ap-1", "expression": "@hourly", "kind": "k"},
               {"name": "ap-2", "expression": "0 3 * * *", "kind": "k", "paused": true}]}
EOF
state() { q "SELECT string_agg(name || ':' || enabled, ',' ORDER BY name) FROM skiplock.schedules WHERE name LIKE 'ap-%'"; }
applies() { q "SELECT count(*) FROM skiplock.actions WHERE action = 'schedules_apply'"; }
waiting() { [ "$(q "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%schedules_apply%'")" = 1 ]; }
hold_lock() { # holds the table lock for $1 seconds, in the background
	psql -X -q "$DIRECT_URL" -c "BEGIN; LOCK TABLE skiplock.schedules IN SHARE ROW EXCLUSIVE MODE; SELECT pg_sleep($1); COMMIT" >/dev/null 2>&1 &
	HOLDER=$!
	wait_until "the lock to be held" 10 held
}
held() { [ "$(q "SELECT count(*) FROM pg_locks WHERE relation = 'skiplock.schedules'::regclass AND mode = 'ShareRowExclusiveLock' AND granted")" = 1 ]; }
hold_lock 4
"$S" cron apply --url "$URL" "$TMP/apply.json" >"$TMP/apply.out" 2>&1 &
CLI=$!
wait_until "the apply to wait for the lock" 10 waiting
q "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%schedules_apply%'" >/dev/null
wait "$HOLDER"
wait_exit "$CLI" 30
check_eq "apply with its backend terminated: retried, exit 0" "$RC" 0
check_eq "apply retried: every change once" "$(state)" "ap-1:true,ap-2:false"
check_eq "apply retried: one row of the action log" "$(applies)" 1
q "SELECT skiplock.schedule_remove('ap-1'), skiplock.schedule_remove('ap-2')" >/dev/null
hold_lock 3
"$S" cron apply --url "$URL" "$TMP/apply.json" >/dev/null 2>&1 &
CLI=$!
wait_until "the apply to wait for the lock" 10 waiting
kill -KILL "$CLI"
wait "$CLI" 2>/dev/null
wait "$HOLDER"
wait_for "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE '%schedules_apply%' AND pid <> pg_backend_pid()" 0 10 ||
	fail "the killed apply's backend is gone"
check_eq "apply whose CLI was killed mid-call: nothing written" "$(state)" ""
check_eq "apply whose CLI was killed mid-call: nothing logged" "$(applies)" 1
no_leftovers
finish
