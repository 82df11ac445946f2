#!/usr/bin/env bash
# `skiplock limits`: set, show (a table and --json) and remove round trip,
# with the use the claim makes of a limit (running, started in the window,
# waiting, keys); set and remove written to the action log; every bad
# input exits 2 with one line on stderr and writes nothing; remove of a
# kind without a limit exits 1; the worker role may show the limits but
# neither set nor remove one.
# shellcheck disable=SC2015  # A && pass || fail
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
W=$SKL_TEST_WORKER_ROLE
PW=$SKL_TEST_WORKER_PASSWORD
if [ "$MODE" = pooled ]; then PORT=$SKL_TEST_BOUNCER_PORT; else PORT=$SKL_TEST_PGPORT; fi
WURL="postgresql://$W:$PW@$SKL_TEST_PGHOST:$PORT/$DB"
"$S" init --url "$URL" --grant-worker "$W" >/dev/null 2>&1 || fail "init"
ACTOR="$(id -un)@$(hostname)"
lim() { "$S" limits "$@" --url "$URL"; }
# every limit as stored, and the action log: what bad input must not change
stored() {
	q "SELECT coalesce(string_agg(concat_ws('|', kind, key_field, max_running, rate, per_ms, changed_by), ' ' ORDER BY kind), '-') FROM skiplock.limits"
	q "SELECT count(*) FROM skiplock.actions"
}

# --- nothing yet ---
check_eq "show with no limit: the header only" "$(lim | tr -s ' ')" \
	"KIND KEY FIELD MAX RUNNING RUNNING RATE STARTED WAITING KEYS"
check_eq "show --json with no limit" "$(lim show --json)" "[]"

# --- set ---
check_eq "set a cap per key" "$(lim set export --max-running 2 --key-field customer)" \
	'limit of kind "export" set'
check_eq "set a rate" "$(lim set sms --rate 20 --per 1m)" 'limit of kind "sms" set'
check_eq "set both, the window by default" "$(lim set crawl --max-running 10 --rate 100)" \
	'limit of kind "crawl" set'
check_eq "the limits as stored" "$(stored | head -n 1)" \
	"crawl|10|100|1000|$ACTOR export|customer|2|$ACTOR sms|20|60000|$ACTOR"

# --- the claim's use of them, shown ---
for c in a a a b; do q "SELECT skiplock.enqueue('export', '{\"customer\": \"$c\"}')" >/dev/null; done
q "SELECT skiplock.enqueue('export', '{}')" >/dev/null
q "SELECT count(*) FROM generate_series(1, 25) g, skiplock.enqueue('sms', jsonb_build_object('n', g))" >/dev/null
check_eq "a claim of export starts 2 per customer" \
	"$(q "SELECT count(*) FROM skiplock.claim('t', '{export}', NULL, 10, '1 hour')")" 4
check_eq "a claim of sms starts 20 in the minute" \
	"$(q "SELECT count(*) FROM skiplock.claim('t', '{sms}', NULL, 30, '1 hour')")" 20
check_eq "show: a row per limit" "$(lim | tr -s ' ')" \
	"KIND KEY FIELD MAX RUNNING RUNNING RATE STARTED WAITING KEYS
crawl - 10 0 100/1s 0 0 -
export customer 2 4 - - 1 3
sms - - 20 20/1m 20 5 -"
lim show --json >"$TMP/show.json" || fail "show --json"
check_eq "show --json: every field, null where a limit has none" \
	"$(jq -cS 'map(del(.changed_at)) | .[]' "$TMP/show.json")" \
	"{\"changed_by\":\"$ACTOR\",\"key_field\":null,\"keys\":null,\"kind\":\"crawl\",\"max_running\":10,\"per_ms\":1000,\"rate\":100,\"running\":0,\"started\":0,\"waiting\":0}
{\"changed_by\":\"$ACTOR\",\"key_field\":\"customer\",\"keys\":3,\"kind\":\"export\",\"max_running\":2,\"per_ms\":null,\"rate\":null,\"running\":4,\"started\":null,\"waiting\":1}
{\"changed_by\":\"$ACTOR\",\"key_field\":null,\"keys\":null,\"kind\":\"sms\",\"max_running\":null,\"per_ms\":60000,\"rate\":20,\"running\":20,\"started\":20,\"waiting\":5}"
check_eq "show --json: changed_at is ISO 8601 UTC" \
	"$(jq -r '[.[].changed_at | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]{12}Z$")] | all' "$TMP/show.json")" true

# --- replace, then remove ---
check_eq "set again replaces" "$(lim set sms --rate 10 --per 250ms)" 'limit of kind "sms" set'
check_eq "show: the new rate" "$(lim | awk '$1 == "sms" {print $5}')" "10/250ms"
check_eq "remove" "$(lim remove crawl)" 'limit of kind "crawl" removed'
expect_exit "remove again: no limit, exit 1" 1 '^skiplock limits: kind "crawl" has no limit$' -- \
	"$S" limits remove crawl --url "$URL"
check_eq "the action log: each set and remove, as USER@HOST, role cli" \
	"$(q "SELECT string_agg(concat_ws(' ', action, actor, role, target ->> 'kind', target ->> 'max_running', target ->> 'rate', target ->> 'per_ms', target ->> 'key_field', matched, changed), ',' ORDER BY id) FROM skiplock.actions")" \
	"limit_set $ACTOR cli export 2 customer 1 1,limit_set $ACTOR cli sms 20 60000 1 1,limit_set $ACTOR cli crawl 10 100 1000 1 1,limit_set $ACTOR cli sms 10 250 1 1,limit_remove $ACTOR cli crawl 1 1"

# --- bad input: exit 2, one line, nothing written ---
before=$(stored)
bad() { expect_exit "$1" 2 "$2" -- "$S" limits "${@:3}" --url "$URL"; }
K129=$(printf 'k%.0s' $(seq 129))
bad "set without a limit" 'give --max-running N, --rate N, or both' set k
bad "set without a kind" 'set: expected exactly one KIND' set --rate 1
bad "set with two kinds" 'set: expected exactly one KIND' set a b --rate 1
bad "an empty kind" 'kind must be 1 to 128 bytes' set '' --rate 1
bad "a kind of 129 bytes" 'kind must be 1 to 128 bytes' set "$K129" --rate 1
bad "--max-running 0" '--max-running: "0" is not an integer from 1 to 1000000' set k --max-running 0
bad "--max-running over the cap" 'from 1 to 1000000' set k --max-running 1000001
bad "--max-running not a number" 'not an integer' set k --max-running two
bad "--rate 0" '--rate: "0" is not an integer from 1 to 1000000' set k --rate 0
bad "--rate negative" 'not an integer from 1' set k --rate -5
bad "--per 0" '--per: "0" is not a window from 1ms to 1d' set k --rate 1 --per 0
bad "--per over a day" 'not a window from 1ms to 1d' set k --rate 1 --per 25h
bad "--per not a duration" '^skiplock limits: --per: ' set k --rate 1 --per soon
bad "--per without --rate" 'give --rate N too' set k --max-running 1 --per 1s
bad "an empty --key-field" 'key_field must be 1 to 128 bytes' set k --rate 1 --key-field ''
bad "a --key-field of 129 bytes" 'key_field must be 1 to 128 bytes' set k --rate 1 --key-field "$K129"
bad "a kind the database refuses (not UTF-8)" 'SQLSTATE 22021' set $'k\xff' --rate 1
bad "remove without a kind" 'remove: expected exactly one KIND' remove
bad "remove with an option of set" 'go with set' remove export --rate 1
bad "show with an operand" 'unexpected argument "export"' show export
bad "show with an option of set" 'go with set' show --max-running 1
bad "--json with set" '--json goes with show' set k --rate 1 --json
bad "an unknown subcommand" 'did you mean "remove"' remov export
bad "an unknown option" 'did you mean' set k --max-runing 1
check_eq "bad input wrote nothing" "$(stored)" "$before"

# --- the worker role: may show, may not set or remove ---
out=$("$S" limits --url "$WURL" 2>&1)
check_eq "show as the worker role" "$(echo "$out" | awk 'NR > 1 {print $1}' | tr '\n' ' ')" "export sms "
expect_exit "set as the worker role: refused, exit 1" 1 'permission denied.*SQLSTATE 42501' -- \
	"$S" limits set k --rate 1 --url "$WURL"
expect_exit "remove as the worker role: refused, exit 1" 1 'permission denied.*SQLSTATE 42501' -- \
	"$S" limits remove export --url "$WURL"
check_eq "the worker role changed nothing" "$(stored)" "$before"
no_leftovers
finish
