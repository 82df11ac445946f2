#!/usr/bin/env bash
# `skiplock idem prune`: deletes only expired keys, in batches; a pruned
# key can be claimed again; a periodic job can run it through a worker;
# bad input exits 2 with one line and deletes nothing.
# shellcheck disable=SC2015  # A && pass || fail
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
act() { local out; out=$("$@" 2>"$TMP/act.err"); echo "$? $out$(head -c 300 "$TMP/act.err")"; }
claim() { q "SELECT outcome FROM skiplock.idem_claim('$1', '$2')"; }

for k in b c d e live; do claim "$k" h >/dev/null; done
HA=$(q "SELECT holder FROM skiplock.idem_claim('a', 'h')")
q "SELECT skiplock.idem_complete('a', 201, '{\"id\": 1}', '$HA')" >/dev/null
q "UPDATE skiplock.idempotency_keys SET expires_at = now() - interval '1 minute' WHERE key <> 'live'" >/dev/null

# --- bad input first: nothing deleted ---
bad() { expect_exit "$1" 2 "$2" -- "$S" "${@:3}" --url "$URL"; }
bad "idem without a subcommand" 'missing subcommand \(expected' idem
bad "unknown idem subcommand" 'unknown subcommand "frob"' idem frob
bad "bad batch" '--batch' idem prune --batch 0
bad "batch not a number" '--batch' idem prune --batch lots
bad "extra operand" 'unexpected argument "now"' idem prune now
bad "unknown option" 'unknown option "--bogus"' idem prune --bogus
check_eq "bad input deleted nothing" "$(q "SELECT count(*) FROM skiplock.idempotency_keys")" 6

# --- prune in batches of 2: only the expired ---
check_eq "prune in batches" "$(act "$S" idem prune --url "$URL" --batch 2)" "0 deleted 5 expired idempotency keys"
check_eq "the live key stays" "$(q "SELECT string_agg(key, ',') FROM skiplock.idempotency_keys")" "live"
check_eq "prune again deletes nothing" "$(act "$S" idem prune --url "$URL")" "0 deleted 0 expired idempotency keys"
check_eq "a pruned key can be claimed again" "$(claim a other)" "acquired"
check_eq "a live key is still in progress" "$(claim live h)" "in_progress"

# --- a periodic job runs it: a worker with a handler for the kind ---
q "UPDATE skiplock.idempotency_keys SET expires_at = now() - interval '1 minute' WHERE key = 'a'" >/dev/null
"$S" enqueue --url "$URL" idem-prune >/dev/null || fail "enqueue idem-prune"
"$S" worker --url "$URL" --poll 50ms --poll-max 200ms --log-level warning \
	--handler "idem-prune=cat >/dev/null; '$S' idem prune --url '$URL'" 2>"$TMP/w.log" &
W=$!
for _ in $(seq 1 200); do
	[ "$(q "SELECT state FROM skiplock.all_jobs WHERE kind = 'idem-prune'")" = completed ] && break
	sleep 0.1
done
kill -TERM $W 2>/dev/null; wait $W
check_eq "the job ran prune" "$(q "SELECT state FROM skiplock.all_jobs WHERE kind = 'idem-prune'") $(q "SELECT string_agg(key, ',') FROM skiplock.idempotency_keys")" "completed live"

for cmd in "idem" "idem prune"; do
	# shellcheck disable=SC2086
	"$S" $cmd --help | grep -q "^Exit status:" && pass "$cmd --help" || fail "$cmd --help"
done
no_leftovers
finish
