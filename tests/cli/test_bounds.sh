#!/usr/bin/env bash
# Bounded inputs: each cap is fed an input 100 times its size and answers
# with one clean error (exit 2) or a bounded record, writes nothing
# partial, and keeps memory flat.  The peak RSS of a command is the
# kernel's maximum resident set (GNU time %M, from wait4: the VmHWM of
# /proc/PID/status at exit); the worker's is read from /proc/PID/status
# while it runs.  "Flat": the oversized input raises the peak by less than
# a third of the input's size over the same command refusing an input just
# over the cap.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
TIME=/usr/bin/time
jobs_count() { q "SELECT count(*) FROM skiplock.all_jobs"; }
a_run() { head -c "$1" /dev/zero | tr '\0' a; }

# rss_run NAME WANT_EXIT PATTERN INPUT_CMD -- CMD...: runs CMD with the
# output of INPUT_CMD on stdin; checks exit, one stderr line; prints KiB.
rss_run() {
	local name=$1 want=$2 pattern=$3 input=$4
	shift 5
	$input | $TIME -f '%M' -o "$TMP/rss" "$@" >"$TMP/out" 2>"$TMP/err"
	local rc=${PIPESTATUS[1]}
	if [ "$rc" = "$want" ] && [ "$(wc -l <"$TMP/err")" = 1 ] && grep -qE -- "$pattern" "$TMP/err"; then
		pass "$name (exit $rc: $(cut -c1-100 "$TMP/err"))"
	else
		fail "$name: exit $rc, want $want; stderr: $(head -c 300 "$TMP/err")"
	fi
	RSS=$(tail -n 1 "$TMP/rss")
}
flat() { # name small_kib big_kib input_bytes
	if [ $(($3 - $2)) -lt $(($4 / 3 / 1024)) ]; then
		pass "$1: memory flat (peak $2 KiB just over the cap, $3 KiB at 100x; input $(($4 / 1024)) KiB)"
	else
		fail "$1: memory grew from $2 to $3 KiB for $(($4 / 1024)) KiB of input"
	fi
}

# --- payload (--max-payload), from standard input ---
CAP=100000
small() { a_run $((CAP + 10)); }
big() { a_run $((CAP * 100)); }
rss_run "payload just over the cap" 2 'over the limit of 100000' small -- "$S" enqueue --url "$URL" --max-payload $CAP k -
r1=$RSS
rss_run "payload 100x over the cap" 2 'over the limit of 100000' big -- "$S" enqueue --url "$URL" --max-payload $CAP k -
flat "payload" "$r1" "$RSS" $((CAP * 100))

# --- NDJSON line (--max-line) ---
LINE=100000
line_of() { printf '{"kind":"k","payload":"'; a_run "$1"; printf '"}\n'; }
small() { printf '{"kind":"ok"}\n'; line_of $((LINE + 10)); }
big() { printf '{"kind":"ok"}\n'; line_of $((LINE * 100)); }
rss_run "batch line just over the cap" 2 'line 2: line is over the limit of 100000 bytes' small -- \
	"$S" enqueue --url "$URL" --max-line $LINE --batch -
r1=$RSS
rss_run "batch line 100x over the cap" 2 'line 2: line is over the limit of 100000 bytes' big -- \
	"$S" enqueue --url "$URL" --max-line $LINE --batch -
flat "batch line" "$r1" "$RSS" $((LINE * 100))

# --- NDJSON batch size (--max-batch) ---
lines() { local i; for ((i = 0; i < $1; i++)); do echo '{"kind":"k"}'; done; }
big() { lines 1000; }
rss_run "batch 100x over --max-batch 10" 2 'line 11: batch is over the limit of 10 jobs' big -- \
	"$S" enqueue --url "$URL" --max-batch 10 --batch -
check_eq "nothing written by any refused input" "$(jobs_count)" 0

# --- cron catch-up: 10000 missed fire times, bound 100 ---
"$S" cron add --url "$URL" behind '@every 1s' tick --catch-up all --at 2026-01-01T00:00:00Z >/dev/null
"$S" cron tick --url "$URL" --at 2026-01-01T02:46:40Z >"$TMP/tick" 2>&1 || fail "cron tick: $(cat "$TMP/tick")"
check_eq "catch-up enqueues the newest 100 of 10000 missed fire times" \
	"$(q "SELECT count(*) || ' ' || min(unique_key) || ' ' || max(unique_key) FROM skiplock.all_jobs WHERE kind = 'tick'")" \
	"100 cron:behind:2026-01-01T02:45:01Z cron:behind:2026-01-01T02:46:40Z"
"$S" cron remove --url "$URL" behind >/dev/null
q "DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs"

# --- handler output: 100x the 64 KiB of stdout and 4 KiB of stderr kept ---
done_count() { q "SELECT count(*) FROM skiplock.all_jobs WHERE state IN ('completed', 'discarded')"; }
wait_done() { local i; for i in $(seq 1 300); do [ "$(done_count)" = "$1" ] && return 0; sleep 0.1; done; return 1; }
"$S" enqueue --url "$URL" small >/dev/null
"$S" worker --url "$URL" --poll 50ms --poll-max 200ms --no-cron --concurrency 1 \
	--handler "loud=cat >/dev/null; head -c $((6400 * 1024)) /dev/zero | tr '\\0' x" \
	--handler "noisy=cat >/dev/null; head -c $((400 * 1024)) /dev/zero | tr '\\0' e >&2; exit 3" \
	--handler 'small=cat >/dev/null; echo "{}"' 2>"$TMP/worker.log" &
WPID=$!
hwm() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$WPID/status"; }
wait_done 1 || fail "the first job did not finish"
h0=$(hwm)
"$S" enqueue --url "$URL" loud >/dev/null
"$S" enqueue --url "$URL" noisy --max-attempts 1 >/dev/null
wait_done 3 || fail "the loud jobs did not finish: $(cat "$TMP/worker.log")"
h1=$(hwm)
kill -TERM $WPID; wait $WPID
check_eq "oversized stdout: job completed, 64 KiB kept at most, not JSON so no result" \
	"$(q "SELECT state || ' ' || (result IS NULL)::text FROM skiplock.all_jobs WHERE kind = 'loud'")" "completed true"
check_eq "oversized stderr: job discarded with the last 4 KiB as its error" \
	"$(q "SELECT state || ' ' || (length(errors->0->>'error') BETWEEN 4096 AND 4200)::text || ' ' || (errors->0->>'error' LIKE 'exit status 3; stderr: eee%')::text FROM skiplock.all_jobs WHERE kind = 'noisy'")" \
	"discarded true true"
flat "worker handler output (/proc VmHWM)" "${h0:-0}" "${h1:-999999}" $((6800 * 1024))
no_leftovers
finish
