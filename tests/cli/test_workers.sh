#!/usr/bin/env bash
# `skiplock workers`: a real worker of kind a, started while a job of kind b
# is due, records its empty claims without any option of its own, and
# `workers --idle` lists it (table and JSON) with the job it left behind;
# once a worker of kind b has taken the job, nobody is idle.  Bad input:
# exit 2, one line, nothing read.
# shellcheck disable=SC2015  # A && pass || fail
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
FAST=(--poll 50ms --poll-max 200ms --log-level warning)
stop_worker() { kill -TERM "$1" 2>/dev/null; wait "$1"; }

# --- bad input first: exit 2, one line ---
bad() { expect_exit "$1" 2 "$2" -- "$S" workers "${@:3}" --url "$URL" </dev/null; }
bad "--seen 0s" '--seen must be 1s to 1d, got "0s"' --seen 0s
bad "--seen over a day" '--seen must be 1s to 1d, got "2d"' --seen 2d
bad "--seen not a duration" '^skiplock workers: --seen: .*"soon"' --seen soon
bad "a stray argument" 'unexpected argument "list"' list
bad "a misspelt option" 'unknown option "--idel" \(did you mean "--idle"\?' --idel
check_eq "nobody before any claim" "$("$S" workers --url "$URL" --json)" "[]"

# --- a worker of kind a while a job of kind b is due ---
b=$(q "SELECT skiplock.enqueue('b', '{}', 'default', now() - interval '1 minute')")
# (claiming every 500 ms at most, idle only after 5 s without a job)
"$S" worker --url "$URL" --poll 50ms --poll-max 500ms --log-level warning \
	--handler 'a=cat >/dev/null' 2>"$TMP/wa.log" &
WA=$!
wait_for "SELECT count(*) FROM skiplock.idle_workers()" 1 20 ||
	fail "the worker of kind a was not recorded: $(cat "$TMP/wa.log")"
json=$("$S" workers --url "$URL" --idle --json)
check_eq "workers --idle --json: the worker, its kinds, the job it left" \
	"$(jq -c 'map([.owner, .kinds, .queues, .waiting, .waiting_kinds, .idle])' <<<"$json")" \
	"[[\"$(hostname):$WA\",[\"a\"],null,1,[\"b\"],true]]"
age=$(jq '.[0].empty_age_ms' <<<"$json")
[ "$age" -ge 0 ] && [ "$age" -lt 60000 ] && pass "its empty claim was recent ($age ms ago)" ||
	fail "empty_age_ms: $age"
"$S" workers --url "$URL" --idle | grep -qE "^$(hostname):$WA +\* +a +[0-9.a-z]+ ago +1 \(b\)$" &&
	pass "workers --idle: a table row" || fail "workers --idle: $("$S" workers --url "$URL" --idle)"
x1=$(q "SELECT xmin FROM skiplock.workers")
sleep 1.2 # the worker claims at least twice more, finding nothing
check_eq "its empty claims of the next second wrote nothing (at most one write per 10 s)" \
	"$(q "SELECT count(*) || ' ' || min(xmin::text) FROM skiplock.workers")" "1 $x1"
check_eq "the b job still waits" "$(q "SELECT state || ' ' || attempt FROM skiplock.jobs WHERE id = $b")" \
	"available 0"

# --- a worker of kind b takes it: nobody is idle any more ---
"$S" worker --url "$URL" "${FAST[@]}" --handler 'b=cat >/dev/null' 2>"$TMP/wb.log" &
WB=$!
wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $b" completed 20 ||
	fail "the b job did not run: $(cat "$TMP/wb.log")"
check_eq "workers --idle --json: nobody" "$("$S" workers --url "$URL" --idle --json)" "[]"
stop_worker $WA
stop_worker $WB
check_eq "workers --seen 1h lists both" \
	"$("$S" workers --url "$URL" --seen 1h --json | jq -c 'map(.kinds[0]) | sort')" '["a","b"]'
no_leftovers
finish
