#!/usr/bin/env bash
# Schedules declared in an application's code (sql/0025_declare.sql) and
# fired by the database (sql/0024_cron.sql), as the worker role that logs
# in with its password, directly and through PgBouncer:
#
#   * created, unchanged, updated; cron_tick fires a declared schedule;
#   * a rolling deploy: after version 2 declared its definition, ten more
#     starts of each version alternate and the schedule never changes back
#     (version 1 gets "superseded"); force applies version 1 (a rollback),
#     and version 2 is then superseded in its turn;
#   * bad input: the same message as `skiplock cron apply` of the same
#     schedule (22023), and nothing written, not even the good schedules of
#     the same call;
#   * the worker role may tick and declare, but not tick at a chosen
#     instant (cron_tick_at, 42501) nor touch the declarations (42501).
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
W=$SKL_TEST_WORKER_ROLE
PW=$SKL_TEST_WORKER_PASSWORD
if [ "$MODE" = pooled ]; then PORT=$SKL_TEST_BOUNCER_PORT; else PORT=$SKL_TEST_PGPORT; fi
"$S" init --url "$URL" --owner "$SKL_TEST_OWNER_ROLE" --grant-worker "$W" >/dev/null 2>&1 ||
	fail "init with the worker role"

# wsql SQL: as the worker role on this mode's URL; the output, or
# "ERROR:  STATE MESSAGE" on one line
wsql() {
	PGPASSWORD=$PW psql -X -q -At -v VERBOSITY=default -v ON_ERROR_STOP=1 \
		"postgresql://$W@$SKL_TEST_PGHOST:$PORT/$DB" -c "$1" 2>&1 | head -n 1
}
state() { PGPASSWORD=$PW psql -X -q -At -v VERBOSITY=sqlstate \
		"postgresql://$W@$SKL_TEST_PGHOST:$PORT/$DB" -c "$1" 2>&1 | head -n 1; }
declare_one() { # declare_one EXPRESSION [FORCE] -> the action
	wsql "SELECT action FROM skiplock.schedules_declare('[{\"name\": \"nightly\", \"expression\": \"$1\", \"kind\": \"report\", \"zone\": \"Europe/Berlin\"}]', ${2:-false})"
}
stored() { q "SELECT expression FROM skiplock.schedules WHERE name = 'nightly'"; }

# ---- created, unchanged, updated, fired ----
check_eq "a new schedule is created" "$(declare_one '0 2 * * *')" created
check_eq "the same again is unchanged" "$(declare_one '0 2 * * *')" unchanged
check_eq "its next fire time is the database's" \
	"$(q "SELECT next_fire = skiplock.cron_next('0 2 * * *', 'Europe/Berlin', now()) FROM skiplock.schedules WHERE name = 'nightly'")" t
check_eq "version 2 updates it" "$(declare_one '0 3 * * *')" updated
check_eq "the stored expression is version 2's" "$(stored)" "0 3 * * *"
check_eq "its next fire time follows" \
	"$(q "SELECT next_fire = skiplock.cron_next('0 3 * * *', 'Europe/Berlin', now()) FROM skiplock.schedules WHERE name = 'nightly'")" t
wsql "SELECT action FROM skiplock.schedules_declare('[{\"name\": \"tick\", \"expression\": \"@every 1s\", \"kind\": \"ping\"}]')" >/dev/null
sleep 1.2
check_eq "the worker role's cron_tick fires it" \
	"$(wsql "SELECT fired >= 1 AND enqueued >= 1 FROM skiplock.cron_tick()")" t
check_eq "one job per fire time, keyed by it" \
	"$(q "SELECT count(*) = count(DISTINCT unique_key) AND count(*) >= 1 AND bool_and(unique_key LIKE 'cron:tick:%Z') FROM skiplock.all_jobs WHERE kind = 'ping'")" t

# ---- a rolling deploy never makes it flap ----
before=$(q "SELECT updated_at FROM skiplock.schedules WHERE name = 'nightly'")
sup=0 unch=0
for _ in 1 2 3 4 5 6 7 8 9 10; do
	a=$(declare_one '0 2 * * *')
	[ "$a" = superseded ] && sup=$((sup + 1))
	[ "$(stored)" = "0 3 * * *" ] || fail "version 1's start changed the schedule back: $(stored)"
	a=$(declare_one '0 3 * * *')
	[ "$a" = unchanged ] && unch=$((unch + 1))
done
check_eq "version 1's ten starts: superseded" "$sup" 10
check_eq "version 2's ten starts: unchanged" "$unch" 10
check_eq "the schedule was not written by any of them" \
	"$(q "SELECT updated_at FROM skiplock.schedules WHERE name = 'nightly'")" "$before"
detail=$(wsql "SELECT detail FROM skiplock.schedules_declare('[{\"name\": \"nightly\", \"expression\": \"0 2 * * *\", \"kind\": \"report\", \"zone\": \"Europe/Berlin\"}]')")
case $detail in
	"kept the definition set at "*) pass "superseded names the definition kept" ;;
	*) fail "superseded detail: $detail" ;;
esac
check_eq "force applies version 1 (a rollback)" "$(declare_one '0 2 * * *' true)" updated
check_eq "the stored expression is version 1's" "$(stored)" "0 2 * * *"
check_eq "then version 2 is superseded in its turn" "$(declare_one '0 3 * * *')" superseded

# ---- bad input: the CLI's words, nothing written ----
cli_message() { # cli_message JSON_SCHEDULE: what `cron apply` says of it
	printf '{"schedules": [%s]}' "$1" >"$TMP/apply.json"
	"$S" cron apply "$TMP/apply.json" --url "$URL" --dry-run 2>&1 >/dev/null | sed 's/^skiplock cron apply: //'
}
n_before=$(q "SELECT count(*) FROM skiplock.schedules")
for spec in '{"name": "bad", "expression": "30 25 * * *", "kind": "k"}' \
	'{"name": "bad", "expression": "30 2 * * *", "kind": "k", "zone": "Mars/Base"}' \
	'{"name": "bad", "expression": "30 2 * * *", "kind": "k", "zone": "CET"}' \
	'{"name": "bad", "expression": "@every 500ms", "kind": "k"}' \
	'{"name": "bad", "expression": "0 0 30 2 *", "kind": "k"}'; do
	want=$(cli_message "$spec")
	got=$(wsql "SELECT * FROM skiplock.schedules_declare('[{\"name\": \"good\", \"expression\": \"* * * * *\", \"kind\": \"k\"}, ${spec//\'/\'\'}]')")
	check_eq "declare: $spec" "$got" "ERROR:  ${want/schedule 1/schedule 2}"
	check_eq "declare: $spec: SQLSTATE" \
		"$(state "SELECT * FROM skiplock.schedules_declare('[${spec//\'/\'\'}]')")" "ERROR:  22023"
done
check_eq "bad input wrote nothing (nor the good schedule beside it)" \
	"$(q "SELECT count(*) FROM skiplock.schedules")" "$n_before"
check_eq "a name given twice" \
	"$(wsql "SELECT * FROM skiplock.schedules_declare('[{\"name\": \"x\", \"expression\": \"@daily\", \"kind\": \"k\"}, {\"name\": \"x\", \"expression\": \"@daily\", \"kind\": \"k\"}]')")" \
	'ERROR:  schedule "x" is given twice'
check_eq "an unknown field" \
	"$(wsql "SELECT * FROM skiplock.schedules_declare('[{\"name\": \"x\", \"expression\": \"@daily\", \"kind\": \"k\", \"paused\": true}]')")" \
	'ERROR:  schedule 1 ("x"): unknown field "paused"'

# ---- what the worker role may not do ----
check_eq "cron_tick_at: refused to the worker role" \
	"$(state "SELECT * FROM skiplock.cron_tick_at(now() + interval '1 year')")" "ERROR:  42501"
check_eq "the declarations: not writable by the worker role" \
	"$(state "DELETE FROM skiplock.schedule_declarations")" "ERROR:  42501"
no_leftovers
finish
