#!/usr/bin/env bash
# `skiplock worker --stream` against handlers that misbehave: one that
# reads its jobs and floods stdout and stderr without answering, one that
# daemonises (its grandchild keeps the pipes), one that joins the worker's
# process group and closes its stdout; and a busy process that must not
# make the jobs claimed for it burn attempts while they wait (docs/protocol.md,
# "The streaming handler").  Each: the other kinds go on, timeouts fire on
# time, SIGTERM ends the worker within a bound, the log stays bounded.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
PY=${SKL_PYTHON:-/usr/bin/python3}
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
FAST=(--poll 50ms --poll-max 200ms --poll-idle 500ms --rescue-every 300ms --no-cron --kill-grace 1s)
enq() { "$S" enqueue --url "$URL" "$@"; }
export STREAM_TMP=$TMP
reset() { q "DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs"; }
# sql_within SQL EXPECTED SECONDS: polls SQL until it prints EXPECTED, for
# SECONDS of wall-clock time however slow each poll is; 1 if it did not.
sql_within() {
	local end=$((SECONDS + $3))
	until [ "$(q "$1")" = "$2" ]; do
		[ "$SECONDS" -ge "$end" ] && return 1
		sleep 0.2
	done
}

# A well-behaved handler: answers ok, appends "id attempt" to $STREAM_TMP/got.KIND
# as each line arrives, and naps NAP seconds first.
cat >"$TMP/fine.py" <<'PY'
import json, os, sys, time
nap, tmp = float(os.environ.get("NAP", "0")), os.environ["STREAM_TMP"]
for line in sys.stdin:
    job = json.loads(line)
    with open(f"{tmp}/got.{job['kind']}", "a") as f: f.write(f"{job['id']} {job['attempt']}\n")
    time.sleep(nap)
    print(json.dumps({"id": job["id"], "outcome": "ok"}), flush=True)
PY
FINE="exec $PY $TMP/fine.py"

# stop_within NAME PID SECONDS: SIGTERM, then the worker must exit 0 within SECONDS.
stop_within() {
	local t0=$SECONDS
	kill -TERM "$2"
	wait_exit "$2" "$3"
	check_eq "$1: SIGTERM: the worker exits 0 within $3 s (took $((SECONDS - t0)) s)" "$RC" 0
}

# --- 1. a process that reads its jobs, never answers, and floods stdout and stderr ---
cat >"$TMP/flood.py" <<'PY'
import sys, threading
threading.Thread(target=lambda: [None for _ in sys.stdin], daemon=True).start()  # reads its jobs
out, err = "not a protocol line\n" * 2000, "noise on stderr\n" * 2000
while True:
    sys.stdout.write(out); sys.stdout.flush()
    sys.stderr.write(err); sys.stderr.flush()
PY
reset
for _ in $(seq 1 6); do enq flood '{}' --timeout 1s --max-attempts 1 >/dev/null; done
for _ in $(seq 1 10); do enq fine '{}' >/dev/null; done
"$S" worker --url "$URL" "${FAST[@]}" --concurrency 4 --stream "flood=exec $PY $TMP/flood.py" \
	--stream "fine=$FINE" 2>"$TMP/flood.log" &
W=$!
sql_within "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'fine' AND state = 'completed'" 10 30 ||
	fail "flood: the other kind's jobs did not all complete: $(q "SELECT string_agg(kind || ' ' || state, ', ') FROM skiplock.all_jobs")"
sql_within "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'flood' AND state = 'discarded'" 6 60 ||
	fail "flood: the flooding kind's jobs did not all time out: $(q "SELECT string_agg(kind || ' ' || state, ', ') FROM skiplock.all_jobs")"
check_eq "flood: each flooding job timed out after its 1 s, on time (within 5 s of its claim)" \
	"$(q "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'flood' AND errors->0->>'error' LIKE 'timed out after 1000 ms%' AND finished_at - attempted_at < interval '5 s'")" 6
stop_within flood $W 15
size=$(stat -c %s "$TMP/flood.log")
[ "$size" -lt 1000000 ] && pass "flood: the worker's log stays bounded ($size bytes)" ||
	fail "flood: the worker's log grew to $size bytes"
grep -q "stream handler flood (pid [0-9]*): [0-9]* line(s) not logged in the last second" "$TMP/flood.log" &&
	pass "flood: suppressed lines are counted in the log" || fail "flood: no count of suppressed lines: $(grep -a -m3 'not logged' "$TMP/flood.log")"
grep -q "stream handler flood (pid [0-9]*): stdout line is not a JSON object, ignored: not a protocol line" "$TMP/flood.log" &&
	pass "flood: a stdout line that is not a JSON object is logged as such" || fail "flood: no such line: $(grep -a -m3 'flood (pid' "$TMP/flood.log")"

# --- 2a. a process that daemonises once (fork, setsid, fork: the grandchild keeps its pipes) ---
cat >"$TMP/daemon.py" <<'PY'
import os, runpy, sys, time
tmp = os.environ["STREAM_TMP"]
if not os.path.exists(f"{tmp}/daemonised"):
    open(f"{tmp}/daemonised", "w").close()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            open(f"{tmp}/daemon.pid", "w").write(str(os.getpid()))
            time.sleep(3600)
        os._exit(0)
    os._exit(0)
runpy.run_path(f"{tmp}/fine.py")
PY
reset
for _ in 1 2 3; do enq daemon '{}' --backoff fixed --backoff-base 100ms >/dev/null; done
"$S" worker --url "$URL" "${FAST[@]}" --concurrency 2 --stream "daemon=exec $PY $TMP/daemon.py" 2>"$TMP/daemon.log" &
W=$!
sql_within "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed' AND attempt = 1" 3 60 ||
	fail "daemonised: the jobs did not complete at their first attempt after the restart: $(q "SELECT string_agg(state || ' ' || attempt, ', ') FROM skiplock.all_jobs")"
grep -q "stream handler daemon: stream process (pid [0-9]*) exited with status 0; restarting" "$TMP/daemon.log" &&
	pass "daemonised: the exit of the process is seen although its grandchild keeps the pipe" ||
	fail "daemonised: no restart in the log: $(grep -a 'stream handler' "$TMP/daemon.log" | head -5)"
stop_within daemonised $W 10
[ -s "$TMP/daemon.pid" ] && kill -KILL "$(cat "$TMP/daemon.pid")" 2>/dev/null

# --- 2b. a process that joins the worker's process group and closes its stdout ---
cat >"$TMP/joiner.py" <<'PY'
import os, runpy, time
tmp = os.environ["STREAM_TMP"]
if not os.path.exists(f"{tmp}/joined"):
    open(f"{tmp}/joined", "w").close()
    os.setpgid(0, os.getpgid(os.getppid()))
    open(f"{tmp}/joined", "w").write(str(os.getpgid(0)))
    os.close(1)
    time.sleep(3600)
runpy.run_path(f"{tmp}/fine.py")
PY
reset
for _ in 1 2 3; do enq joiner '{}' --backoff fixed --backoff-base 100ms >/dev/null; done
"$S" worker --url "$URL" "${FAST[@]}" --concurrency 2 --stream "joiner=exec $PY $TMP/joiner.py" 2>"$TMP/joiner.log" &
W=$!
sql_within "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed' AND attempt = 1" 3 60 ||
	fail "joined the worker's group: the jobs did not complete at their first attempt after the restart: $(q "SELECT string_agg(state || ' ' || attempt, ', ') FROM skiplock.all_jobs")"
check_eq "the process did join the worker's group" "$(cat "$TMP/joined")" "$(ps -o pgid= -p $W | tr -d ' ')"
stop_within "joined the worker's group" $W 10

# --- L6. one busy process: jobs are claimed only as it has room; no attempt without its line ---
reset
rm -f "$TMP/got.nap"
for _ in $(seq 1 8); do enq nap '{}' --timeout 3s >/dev/null; done
NAP=0.6 "$S" worker --url "$URL" "${FAST[@]}" --concurrency 8 --stream "nap=$FINE" \
	--stream-procs 1 --stream-inflight 1 2>"$TMP/nap.log" &
W=$!
sql_within "SELECT count(*) FROM skiplock.all_jobs WHERE state IN ('completed', 'discarded')" 8 60 ||
	fail "busy process: the jobs did not finish: $(q "SELECT string_agg(state || ' ' || attempt, ', ') FROM skiplock.all_jobs")"
stop_within "busy process" $W 10
got=$(sort -n "$TMP/got.nap" | awk '{n[$1]++} END {for (i in n) print i ":" n[i]}' | sort -n | tr '\n' ' ')
check_eq "busy process: each job's attempts are the lines its process received" \
	"$(q "SELECT string_agg(id || ':' || attempt, ' ' ORDER BY id) || ' ' FROM skiplock.all_jobs")" "$got"
check_eq "busy process: all completed at the first attempt" \
	"$(q "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed' AND attempt = 1")" 8

no_leftovers
finish
