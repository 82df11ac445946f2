#!/usr/bin/env bash
# `skiplock worker` and the processes it starts: SIGHUP drains like
# SIGTERM; a worker killed by SIGKILL takes its handler and the handler's
# process group with it (within 1 s); a command handler's environment
# holds no skiplock setting or secret; SKIPLOCK_QUEUE carries a queue of
# 128 four-byte characters whole.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
FAST=(--poll 50ms --poll-max 200ms --no-cron)
# alive PID: the process exists and is not a zombie
alive() { [ -r "/proc/$1/stat" ] && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
gone() { ! alive "$1"; }
reaper_of() { pgrep -P "$1" -x skiplock-reaper; }
wait_file() { for _ in $(seq 1 100); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }

# --- SIGHUP drains: the running job completes once, exit 0, nothing left ---
id=$("$S" enqueue --url "$URL" hup)
"$S" worker --url "$URL" "${FAST[@]}" \
	--handler 'hup=echo $$ >"'"$TMP"'/hup.pid"; sleep 1; echo "{\"n\": $SKIPLOCK_ATTEMPT}"' 2>"$TMP/hup.log" &
W=$!
wait_file "$TMP/hup.pid" || fail "the hup handler did not start: $(cat "$TMP/hup.log")"
R=$(reaper_of $W)
kill -HUP $W
wait_exit $W 15
check_eq "SIGHUP: the worker drains and exits 0" "$RC" 0
check_eq "SIGHUP: the running job completed once" "$(q "SELECT state||' '||attempt||' '||result::text FROM skiplock.all_jobs WHERE id = $id")" 'completed 1 {"n": 1}'
gone "$(cat "$TMP/hup.pid")" && pass "SIGHUP: the handler is not left running" || fail "SIGHUP: handler $(cat "$TMP/hup.pid") still running"
if [ -n "$R" ]; then
	wait_until "the reaper $R ends with its worker" 2 gone "$R" && pass "the reaper ends with its worker"
else
	fail "no skiplock-reaper child of the worker while a command ran"
fi

# --- SIGKILL: the handler and a grandchild in its group die within 1 s ---
id=$("$S" enqueue --url "$URL" nap)
"$S" worker --url "$URL" "${FAST[@]}" \
	--handler 'nap=sleep 60 & echo $! >"'"$TMP"'/gc.pid"; echo $$ >"'"$TMP"'/nap.pid"; wait' 2>"$TMP/kill.log" &
W=$!
wait_file "$TMP/nap.pid" && wait_file "$TMP/gc.pid" || fail "the nap handler did not start: $(cat "$TMP/kill.log")"
H=$(cat "$TMP/nap.pid") G=$(cat "$TMP/gc.pid")
alive "$H" && alive "$G" && pass "handler $H and grandchild $G run" || fail "handler or grandchild not running"
kill -KILL $W
start=$(date +%s%N)
for _ in $(seq 1 100); do gone "$H" && gone "$G" && break; sleep 0.01; done
ms=$((($(date +%s%N) - start) / 1000000))
if gone "$H" && gone "$G" && [ "$ms" -le 1000 ]; then
	pass "SIGKILL of the worker: handler and grandchild gone in $ms ms"
else
	fail "SIGKILL of the worker: after $ms ms handler alive=$(alive "$H" && echo y || echo n), grandchild alive=$(alive "$G" && echo y || echo n)"
	kill -KILL "$H" "$G" 2>/dev/null
fi
{ wait $W; } 2>/dev/null
q "DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs" >/dev/null

# --- the handler's environment: no skiplock setting or secret ---
env_of() { # ID: the names in job ID's handler environment, one per line
	cut -d= -f1 "$TMP/env.$1" | sort
}
run_env_job() { # WORKER_OPTS...: runs one job whose handler saves its env; prints the id
	local id
	id=$("$S" enqueue --url "$URL" env)
	DATABASE_URL=$URL DIRECT_DATABASE_URL=$DIRECT_URL PGPASSWORD=not-used HOOK_SECRET=s3cr3t-value \
		SKIPLOCK_WORKER_ARGS=--concurrency KEEP_ME=yes \
		"$S" worker --url "$URL" "${FAST[@]}" --handler 'env=env >"'"$TMP"'/env.$SKIPLOCK_JOB_ID"' \
		--webhook 'hook=http://127.0.0.1:9/' --webhook-secret-env HOOK_SECRET "$@" 2>"$TMP/env.log" &
	local w=$!
	wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $id" completed 15 || fail "env job $id not completed: $(cat "$TMP/env.log")"
	kill -TERM $w
	wait $w
	echo "$id"
}
id=$(run_env_job)
names=$(env_of "$id")
for v in HOOK_SECRET DATABASE_URL DIRECT_DATABASE_URL PGPASSWORD SKIPLOCK_WORKER_ARGS; do
	grep -qx "$v" <<<"$names" && fail "the handler sees $v" || pass "the handler does not see $v"
done
grep -q 's3cr3t-value' "$TMP/env.$id" && fail "the webhook secret's value reached the handler" || pass "the webhook secret's value is nowhere in the handler's environment"
check_eq "the handler sees the job's five variables and the rest" \
	"$(grep -xE 'SKIPLOCK_.*|KEEP_ME|PATH' <<<"$names" | tr '\n' ' ')" \
	"KEEP_ME PATH SKIPLOCK_ATTEMPT SKIPLOCK_FENCING SKIPLOCK_JOB_ID SKIPLOCK_JOB_KIND SKIPLOCK_QUEUE "
id=$(run_env_job --handler-env DATABASE_URL)
check_eq "--handler-env DATABASE_URL passes it on" "$(grep '^DATABASE_URL=' "$TMP/env.$id")" "DATABASE_URL=$URL"
grep -qx HOOK_SECRET <(env_of "$id") && fail "--handler-env DATABASE_URL let the secret through" || pass "the secret stays withheld"
expect_exit "--handler-env SKIPLOCK_*" 2 'SKIPLOCK_\* are the job' -- "$S" worker --url "$URL" --handler 'a=true' --handler-env SKIPLOCK_QUEUE

# --- a queue of 32 four-byte characters (128 bytes, the longest allowed) reaches the handler whole ---
long=$(printf '𝔸%.0s' $(seq 1 32))
kind=$(printf 'k%.0s' $(seq 1 128))
id=$(q "SELECT skiplock.enqueue('$kind', '{}', '$long')")
"$S" worker --url "$URL" "${FAST[@]}" --handler "$kind=printf '%s' \"\$SKIPLOCK_QUEUE\" >'$TMP/queue'; printf '%s' \"\$SKIPLOCK_JOB_KIND\" >'$TMP/kind'" 2>"$TMP/long.log" &
W=$!
wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $id" completed 15 || fail "the long-queue job did not complete: $(cat "$TMP/long.log")"
kill -TERM $W
wait $W
check_eq "SKIPLOCK_QUEUE holds the whole 128-byte queue" "$(wc -c <"$TMP/queue") $(cat "$TMP/queue")" "128 $long"
check_eq "SKIPLOCK_JOB_KIND holds the whole 128-byte kind" "$(cat "$TMP/kind")" "$kind"
no_leftovers
finish
