#!/usr/bin/env bash
# `skiplock lease run`: the command's environment and exit status; many
# processes started together run the command once; a lease-run process
# frozen past its ttl loses the lease — its command is stopped, it exits 1,
# and a fenced write the command tries after waking is rejected; a renewal
# that matches no row stops the command (SIGTERM, then SIGKILL); renewals
# survive terminated backends; --wait; signals are passed on; nothing is
# left behind.  Every wait is bounded.
. "$(dirname "$0")/lib.sh"

export URL TMP
"$SKL_BIN" init --url "$URL" >/dev/null || { fail "init"; finish; exit 1; }
q "CREATE TABLE ledger (id serial, fencing bigint, who text, at timestamptz DEFAULT clock_timestamp())" >/dev/null

# A fenced write, as a command should make one: the token is checked and
# the row written in one transaction, sent in one round trip.
cat >"$TMP/fenced_write" <<'EOF'
#!/bin/sh
# fenced_write WHO: one ledger row under the lease in the environment
exec psql -X -q -At -v ON_ERROR_STOP=1 -v VERBOSITY=verbose "$URL" -c "BEGIN; SELECT skiplock.lease_fence('$SKIPLOCK_LEASE', $SKIPLOCK_FENCING); INSERT INTO ledger (fencing, who) VALUES ($SKIPLOCK_FENCING, '$1'); COMMIT;" >/dev/null
EOF
chmod +x "$TMP/fenced_write"
export PATH="$TMP:$PATH"

lease() { "$SKL_BIN" lease run "$1" --url "$URL" "${@:2}"; }
# bg_lease NAME ARGS...: the same in the background; $! is skiplock's pid.
bg_lease() { "$SKL_BIN" lease run "$1" --url "$URL" "${@:2}" & }

lease_gone() { [ "$(q "SELECT count(*) FROM skiplock.leases WHERE name = '$1' AND expires_at > now()")" = 0 ]; }
# No live (non-zombie) process left in process group $1.
group_gone() { ! ps -e -o pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { f = 1 } END { exit !f }'; }
has_line() { grep -q -- "$2" "$1" 2>/dev/null; }
wrote() { [ "$(q "SELECT count(*) FROM ledger WHERE who = '$1'")" -ge 1 ]; }
lease_exists() { [ "$(q "SELECT count(*) FROM skiplock.leases WHERE name = '$1'")" = 1 ]; }

# --- environment, exit status, release, tokens -------------------------
out=$(lease env --ttl 5s -- sh -c 'echo "$SKIPLOCK_LEASE $SKIPLOCK_FENCING"; exit 7')
check_eq "exit status is the command's" "$?" 7
check_eq "SKIPLOCK_LEASE and SKIPLOCK_FENCING exported" "$out" "env 1"
check_eq "released at the end, row and token kept" \
	"$(q "SELECT fencing || ' ' || (expires_at <= now()) FROM skiplock.leases WHERE name = 'env'")" "1 true"
out=$(lease env --ttl 5s -- sh -c 'echo "$SKIPLOCK_FENCING"')
check_eq "the next run gets a larger token" "$out" 2

# --- started together: the command runs once ----------------------------
pids=()
for i in 1 2 3 4 5 6; do
	bg_lease once --ttl 10s -- sh -c "fenced_write once-$i && sleep 2" >"$TMP/once.$i.out" 2>"$TMP/once.$i.err"
	pids+=($!)
done
zero=0
for p in "${pids[@]}"; do wait_exit "$p" 30; [ "$RC" = 0 ] && zero=$((zero + 1)); done
check_eq "6 concurrent lease runs exit 0" "$zero" 6
check_eq "the command ran exactly once" "$(q "SELECT count(*) FROM ledger WHERE who LIKE 'once-%'")" 1
check_eq "5 said the lease is held elsewhere" \
	"$(cat "$TMP"/once.*.err | grep -c 'is held by .*; not running the command')" 5

# --- frozen past its ttl --------------------------------------------------
cat >"$TMP/frozen_cmd" <<'EOF'
#!/usr/bin/env bash
# Writes under the lease every 100 ms; notes each result and whether the
# process was continued after a stop.
echo $$ >"$TMP/frozen.pid"
woke=0
trap 'woke=1' CONT
while :; do
	if fenced_write A 2>"$TMP/frozen.last"; then r=ok; else r="rejected $(grep -o SK001 "$TMP/frozen.last")"; fi
	echo "$r woke=$woke" >>"$TMP/frozen.log"
	sleep 0.1
done
EOF
chmod +x "$TMP/frozen_cmd"
bg_lease frozen --ttl 2s -- frozen_cmd 2>"$TMP/frozen.err"
a=$!
wait_until "the first command writes" 20 has_line "$TMP/frozen.log" "^ok woke=0"
cmd=$(cat "$TMP/frozen.pid")
kill -STOP "$a"
kill -STOP -- "-$cmd"
wait_until "the frozen lease expires" 10 lease_gone frozen
bg_lease frozen --ttl 10s -- sh -c 'fenced_write B && sleep 4' 2>"$TMP/b.err"
b=$!
wait_until "the second process takes over and writes" 20 wrote B
check_eq "the second holder has the next token" "$(q "SELECT fencing FROM ledger WHERE who = 'B'")" 2
kill -CONT -- "-$cmd"
wait_until "the woken command tries a fenced write" 10 has_line "$TMP/frozen.log" "woke=1"
check_eq "its write after waking is rejected with SK001" \
	"$(grep -m1 'woke=1' "$TMP/frozen.log")" "rejected SK001 woke=1"
kill -CONT "$a"
wait_exit "$a" 15
check_eq "the frozen lease run exits 1" "$RC" 1
if grep -q 'lease "frozen" lost' "$TMP/frozen.err"; then pass "it says the lease was lost: $(grep -m1 lost "$TMP/frozen.err")"; else fail "no 'lost' line: $(cat "$TMP/frozen.err")"; fi
wait_until "the first command's process group is gone" 10 group_gone "$cmd" &&
	pass "the first command's process group is gone"
check_eq "no write of the first holder after the takeover" \
	"$(q "SELECT count(*) FROM ledger WHERE who = 'A' AND (fencing <> 1 OR at > (SELECT min(at) FROM ledger WHERE who = 'B'))")" 0
wait_exit "$b" 20
check_eq "the second lease run exits 0" "$RC" 0

# --- a renewal that matches no row stops the command --------------------
steal() { # release NAME under its current token, then take it as "thief"
	q "SELECT skiplock.lease_release(name, owner, fencing) FROM skiplock.leases WHERE name = '$1'" >/dev/null
	q "SELECT skiplock.lease_acquire('$1', 'thief', '1 minute')"
}
bg_lease stolen --ttl 3s -- bash -c 'echo $$ >"$TMP/stolen.pid"; trap "echo term >>\"$TMP/stolen.log\"; exit 143" TERM; while :; do sleep 0.1; done' 2>"$TMP/stolen.err"
a=$!
wait_until "the command starts" 10 test -s "$TMP/stolen.pid"
start=$SECONDS
check_eq "an operator releases it and another owner takes it" "$(steal stolen)" 2
wait_exit "$a" 10
check_eq "zero-row renewal: exit 1" "$RC" 1
check_eq "the command got SIGTERM" "$(cat "$TMP/stolen.log" 2>/dev/null)" term
if grep -q 'lost (token 1): the renewal matched no row' "$TMP/stolen.err"; then pass "zero-row renewal reported"; else fail "stolen.err: $(cat "$TMP/stolen.err")"; fi
[ $((SECONDS - start)) -le 6 ] && pass "stopped within twice the ttl" || fail "stopping took $((SECONDS - start)) s"

bg_lease stubborn --ttl 2s --kill-grace 300ms -- bash -c 'trap "" TERM; echo $$ >"$TMP/stubborn.pid"; while :; do sleep 0.1; done' 2>/dev/null
a=$!
wait_until "the stubborn command starts" 10 test -s "$TMP/stubborn.pid"
steal stubborn >/dev/null
wait_exit "$a" 10
check_eq "a command that ignores SIGTERM: exit 1" "$RC" 1
wait_until "it was killed with SIGKILL" 5 group_gone "$(cat "$TMP/stubborn.pid")" &&
	pass "it was killed with SIGKILL"

# --- terminated backends between renewals --------------------------------
bg_lease etl --ttl 2s --log-level debug -- sh -c "sleep 3.5; echo done >\"$TMP/etl.done\"" 2>"$TMP/etl.err"
a=$!
wait_until "the etl lease is taken" 10 lease_exists etl
killed=0
for i in 1 2 3; do
	sleep 0.6
	n=$(q "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'")
	killed=$((killed + n))
done
wait_exit "$a" 15
[ "$killed" -ge 2 ] && pass "terminated $killed backends" || fail "terminated only $killed backends"
check_eq "renewals reconnected: the command finished under the lease" "$RC" 0
check_eq "the command completed" "$(cat "$TMP/etl.done" 2>/dev/null)" "done"
check_eq "one token throughout" "$(q "SELECT fencing FROM skiplock.leases WHERE name = 'etl'")" 1
if [ "$MODE" = direct ]; then
	n=$(grep -c 'connected (backend pid' "$TMP/etl.err")
	[ "$n" -ge 2 ] && pass "reconnected ($n connections)" || fail "connected $n times: $(cat "$TMP/etl.err")"
fi
grep -q 'renewed lease "etl"' "$TMP/etl.err" && pass "renewals logged" || fail "no renewal: $(cat "$TMP/etl.err")"

# --- --wait ---------------------------------------------------------------
bg_lease queue --ttl 5s -- sh -c 'fenced_write first && sleep 1.5' 2>/dev/null
a=$!
wait_until "the first holder writes" 10 wrote first
lease queue --ttl 5s --wait -- fenced_write second 2>"$TMP/wait.err"
check_eq "--wait runs the command once the lease is free" "$?" 0
wait_exit "$a" 10
check_eq "in order, with the next token" \
	"$(q "SELECT string_agg(who || ':' || fencing, ' ' ORDER BY id) FROM ledger WHERE who IN ('first', 'second')")" \
	"first:1 second:2"
grep -q 'waiting' "$TMP/wait.err" && pass "--wait says it waits" || fail "wait.err: $(cat "$TMP/wait.err")"
out=$(lease queue --ttl 5s -- sleep 3 2>/dev/null & sleep 1; lease queue --ttl 5s --wait-for 500ms -- echo ran 2>&1; wait)
case "$out" in *"not running the command"*) pass "--wait-for gives up" ;; *) fail "--wait-for: $out" ;; esac

# --- signals are passed on ------------------------------------------------
bg_lease sig --ttl 5s -- sh -c 'echo $$ >"$TMP/sig.pid"; trap "exit 42" TERM; while :; do sleep 0.1; done' 2>/dev/null
a=$!
wait_until "the command starts" 10 test -s "$TMP/sig.pid"
kill -TERM "$a"
wait_exit "$a" 10
check_eq "SIGTERM is passed on; the command's status is returned" "$RC" 42
check_eq "and the lease released" "$(q "SELECT expires_at <= now() FROM skiplock.leases WHERE name = 'sig'")" t

# --- list -----------------------------------------------------------------
"$SKL_BIN" lease list --url "$URL" >"$TMP/list.out"
check_eq "lease list exits 0" "$?" 0
grep -qE '^stolen +thief +2 +held' "$TMP/list.out" && pass "list shows holder and token" || fail "list: $(cat "$TMP/list.out")"
json=$("$SKL_BIN" lease list --url "$URL" --json)
check_eq "list --json parses" "$(q "SELECT string_agg(e->>'name' || ':' || (e->>'fencing') || ':' || (e->>'live'), ' ' ORDER BY e->>'name') FROM jsonb_array_elements('$json'::jsonb) e WHERE e->>'name' IN ('env', 'stolen')")" \
	"env:2:false stolen:2:true"

no_leftovers
finish
