#!/usr/bin/env bash
# `skiplock worker --stream`: the examples (Python, Node) direct and pooled
# (--stream-procs), outcomes and retry_after, several jobs in flight, a
# stream process killed mid-job (retried, completed once), a malformed line,
# a stdout line that is not an outcome, a result stored as sent, a timeout
# (the process restarted, its stderr as context), stderr in the log escaped,
# the environment rule, the process dying with the worker, and bad input.
# Handlers that misbehave harder: test_stream_faults.sh.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
PY=${SKL_PYTHON:-/usr/bin/python3}
EX=$SKL_SOURCE_DIR/examples/stream
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
FAST=(--poll 50ms --poll-max 200ms --poll-idle 500ms --rescue-every 300ms --no-cron)
stop_worker() { kill -TERM "$1" 2>/dev/null; wait "$1"; }
enq() { "$S" enqueue --url "$URL" "$@"; }

# --- the examples: Python one job at a time, Node with 2 processes and 8 in flight ---
for ex in "py:$PY $EX/handler.py:1:1" "mjs:node $EX/handler.mjs:2:8"; do
	IFS=: read -r tag cmd procs inflight <<<"$ex"
	if [ "$tag" = mjs ] && ! command -v node >/dev/null; then echo "SKIP the Node example: no node"; continue; fi
	q "DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs"
	for i in $(seq 1 30); do enq greet "{\"name\": \"n$i ü\"}" >/dev/null; done
	nameless=$(enq greet '{}')
	"$S" worker --url "$URL" "${FAST[@]}" --concurrency 8 --stream "greet=$cmd" \
		--stream-procs "$procs" --stream-inflight "$inflight" 2>"$TMP/ex-$tag.log" &
	W=$!
	wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE state IN ('completed', 'discarded')" 31 20 ||
		fail "$tag: jobs did not finish: $(q "SELECT string_agg(state, ' ') FROM skiplock.all_jobs")"
	stop_worker $W
	check_eq "$tag example: worker exits 0 after SIGTERM" "$?" 0
	check_eq "$tag example: 30 completed with their greeting" \
		"$(q "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed' AND result->>'greeting' = 'hello, ' || (payload->>'name') AND attempt = 1")" 30
	check_eq "$tag example: the nameless job discarded with its error" \
		"$(q "SELECT state || ' ' || attempt || ' ' || (errors->0->>'error') FROM skiplock.all_jobs WHERE id = $nameless")" \
		"discarded 1 payload has no name"
	check_eq "$tag example: $procs process(es) started" "$(grep -c "stream handler greet: started pid" "$TMP/ex-$tag.log")" "$procs"
	grep -q "stream handler greet (pid [0-9]*) stderr: job $nameless attempt 1" "$TMP/ex-$tag.log" &&
		pass "$tag example: its stderr is in the log" || fail "$tag example: no stderr line in the log: $(head -c 600 "$TMP/ex-$tag.log")"
done

# --- one test handler for the rest: a thread per job, effects in a file ---
cat >"$TMP/h.py" <<'PY'
import json, os, sys, threading, time
lock, pair = threading.Lock(), threading.Barrier(4)
BIG = '{"big": 123456789012345678901234567890, "f": 0.1000000000000000055511151231257827}' 
def say(obj):
    with lock:
        sys.stdout.write(obj if isinstance(obj, str) else json.dumps(obj) + "\n"); sys.stdout.flush()
def run(job):
    k, a, tmp = job["kind"], job["attempt"], os.environ["STREAM_TMP"]
    ans = {"id": job["id"], "outcome": "ok"}
    if k == "slow":
        open(f"{tmp}/pid.{a}", "w").write(str(os.getpid()))
        if a == 1: time.sleep(60)
    elif k == "hang" and a == 1: time.sleep(60)
    elif k == "bad": return say(f'{{"id": {job["id"]}, "outcome": "maybe"}}\n')
    elif k == "junk": say("this is not JSON\n"); say("[1, 2]\n")
    elif k == "big": return say(f'{{"id": {job["id"]}, "outcome": "ok", "result": {BIG}}}\n')
    elif k == "huge": return say(f'{{"id": {job["id"]}, "outcome": "ok", "result": {{"n": 1e999999}}}}\n')
    elif k == "pair": pair.wait(20)
    elif k == "later" and a == 1: ans = {"id": job["id"], "outcome": "retry", "retry_after": 2, "error": "busy"}
    elif k == "nope": ans = {"id": job["id"], "outcome": "fail", "error": f"nope {a}"}
    elif k == "nap": time.sleep(0.2)
    if ans["outcome"] == "ok":
        with open(f"{tmp}/effects", "a") as f: f.write(f"{job['id']} {a}\n")
        ans["result"] = {"pid": os.getpid(), "attempt": a, "db": os.environ.get("DATABASE_URL"),
                         "skiplock": sorted(v for v in os.environ if v.startswith("SKIPLOCK_"))}
    say(ans)
for line in sys.stdin:
    job = json.loads(line)
    print(f"got {job['kind']} {job['id']}\r\x1b[2K forged", file=sys.stderr, flush=True)
    threading.Thread(target=run, args=(job,)).start()
PY
export STREAM_TMP=$TMP
H="exec $PY $TMP/h.py"
KINDS=(slow hang bad junk big huge pair later nope nap ok)
start() { # LOG [OPTIONS…]: a worker with the test handler for every kind
	local log=$1 args=() k
	shift
	for k in "${KINDS[@]}"; do args+=(--stream "$k=$H"); done
	DATABASE_URL=$URL SKIPLOCK_SECRET=x "$S" worker --url "$URL" "${FAST[@]}" --lease 2s "${args[@]}" "$@" 2>"$TMP/$log" &
	W=$!
}

# --- outcomes: ok with result, retry with retry_after, fail; the environment rule ---
q "DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs"
ok=$(enq ok '{}'); later=$(enq later '{}' --max-attempts 3); nope=$(enq nope '{}' --max-attempts 2 --backoff fixed --backoff-base 100ms)
start out.log --concurrency 4
wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE state IN ('completed', 'discarded')" 3 20 || fail "outcome jobs did not finish"
stop_worker $W
check_eq "ok: completed with its result" "$(q "SELECT state || ' ' || (result->>'attempt') FROM skiplock.all_jobs WHERE id = $ok")" "completed 1"
check_eq "the stream process gets no DATABASE_URL and no SKIPLOCK_* variable" \
	"$(q "SELECT coalesce(result->>'db', 'none') || ' ' || (result->'skiplock')::text FROM skiplock.all_jobs WHERE id = $ok")" "none []"
check_eq "retry: retried after its retry_after (2 s), then completed" \
	"$(q "SELECT state || ' ' || attempt || ' ' || (errors->0->>'error') || ' ' || ((errors->0->>'at')::timestamptz + interval '1900 ms' <= finished_at) FROM skiplock.all_jobs WHERE id = $later")" "completed 2 busy true"
check_eq "fail: each attempt's error kept, discarded after max_attempts" \
	"$(q "SELECT state || ' ' || attempt || ' ' || (errors->0->>'error') || ',' || (errors->1->>'error') FROM skiplock.all_jobs WHERE id = $nope")" "discarded 2 nope 1,nope 2"
grep -qF 'stderr: got ok '"$ok"'\r\x1b[2K forged' "$TMP/out.log" &&
	pass "stderr lines in the log, control characters escaped" || fail "stderr not in the log, escaped: $(grep -a "got ok" "$TMP/out.log" | cat -A | head -3)"

# --- several jobs in flight on one process: four that wait for each other ---
q "DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs"
for i in 1 2 3 4; do enq pair '{}' >/dev/null; done
start pair.log --concurrency 4 --stream-inflight 4
wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed' AND attempt = 1" 4 20 ||
	fail "4 jobs were not in flight at once on one process: $(q "SELECT string_agg(state || ' ' || attempt, ', ') FROM skiplock.all_jobs")"
check_eq "--stream-inflight 4: the four ran at once on one process" "$(q "SELECT count(DISTINCT result->>'pid') FROM skiplock.all_jobs WHERE state = 'completed'")" 1
stop_worker $W

# --- a pool: --stream-procs 3 shares the jobs ---
q "DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs"
for i in $(seq 1 24); do enq nap '{}' >/dev/null; done
start pool.log --concurrency 6 --stream-procs 3
wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE state = 'completed'" 24 30 || fail "pooled nap jobs did not finish"
stop_worker $W
check_eq "--stream-procs 3: three processes ran the jobs" "$(q "SELECT count(DISTINCT result->>'pid') FROM skiplock.all_jobs WHERE state = 'completed'")" 3

# --- the stream process killed mid-job: the job fails, is retried, completes once ---
q "DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs"
: >"$TMP/effects"
slow=$(enq slow '{}' --backoff fixed --backoff-base 200ms)
start kill.log --concurrency 2
wait_until "the slow job started" 15 test -s "$TMP/pid.1"
kill -KILL "$(cat "$TMP/pid.1")"
wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $slow" completed 15 || fail "the killed process's job was not completed"
check_eq "killed mid-job: completed at attempt 2, the process's stderr as context" "$(q "SELECT state || ' ' || attempt || ' ' || (errors->0->>'error' LIKE 'stream process (pid %) killed by signal 9; stderr: got slow $slow%')::text FROM skiplock.all_jobs WHERE id = $slow")" "completed 2 true"
check_eq "killed mid-job: one effect" "$(grep -c "^$slow " "$TMP/effects")" 1
grep -q "killed by signal 9; restarting in 100 ms" "$TMP/kill.log" && pass "the death and the restart are logged" || fail "no restart in the log: $(cat "$TMP/kill.log")"
check_eq "a new process ran attempt 2" "$([ "$(cat "$TMP/pid.1")" != "$(cat "$TMP/pid.2")" ] && echo yes)" yes

# --- a malformed outcome: logged with its job, the job fails, the worker goes on ---
bad=$(enq bad '{}' --max-attempts 1)
wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $bad" discarded 10 || fail "the malformed job did not fail"
check_eq "malformed outcome: the job fails with why, and its process's stderr" "$(q "SELECT errors->0->>'error' FROM skiplock.all_jobs WHERE id = $bad")" \
	"$(printf 'stream handler: malformed outcome line: "outcome" is not "ok", "retry", "fail" or "discard"; stderr: got bad %s\r\033[2K forged' "$bad")"
grep -q "job=$bad kind=bad .*malformed line: \"outcome\" is not.*: {\"id\": $bad, \"outcome\": \"maybe\"}" "$TMP/kill.log" &&
	pass "malformed outcome logged with its job" || fail "malformed outcome not logged with its job: $(grep -a malformed "$TMP/kill.log")"

# --- stdout lines that are not JSON objects: logged, counted, no job fails ---
junk=$(enq junk '{}' --max-attempts 1)
wait_for "SELECT state || ' ' || attempt FROM skiplock.all_jobs WHERE id = $junk" "completed 1" 10 ||
	fail "a job whose process wrote lines that are not outcomes did not complete: $(q "SELECT state || ' ' || errors::text FROM skiplock.all_jobs WHERE id = $junk")"
grep -q "stream handler junk (pid [0-9]*): stdout line is not a JSON object, ignored: this is not JSON" "$TMP/kill.log" &&
	grep -q "stream handler junk (pid [0-9]*): stdout line is not a JSON object, ignored: \[1, 2\]" "$TMP/kill.log" &&
	pass "stdout lines that are not JSON objects are logged and change no job" || fail "no such lines in the log: $(grep -a "junk (pid" "$TMP/kill.log")"

# --- a result is stored as sent: an integer over 2^63, a float jansson would round ---
big=$(enq big '{}' --max-attempts 1)
huge=$(enq huge '{}' --max-attempts 1)
wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE id IN ($big, $huge) AND state = 'completed'" 2 10 ||
	fail "the big and huge results' jobs did not complete: $(q "SELECT string_agg(state || ' ' || errors::text, ', ') FROM skiplock.all_jobs WHERE id IN ($big, $huge)")"
check_eq "the result is stored as sent" \
	"$(q "SELECT result = '{\"big\": 123456789012345678901234567890, \"f\": 0.1000000000000000055511151231257827}'::jsonb FROM skiplock.all_jobs WHERE id = $big")" t
check_eq "a result jsonb cannot hold is dropped, the job completed" "$(q "SELECT coalesce(result::text, 'none') FROM skiplock.all_jobs WHERE id = $huge")" none
grep -q "job=$huge .*result dropped: a number PostgreSQL cannot store" "$TMP/kill.log" &&
	pass "the dropped result is logged" || fail "the dropped result is not logged: $(grep -a "job=$huge" "$TMP/kill.log")"
after=$(enq ok '{}')
wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $after" completed 10 && pass "the worker goes on after a malformed line" || fail "no job completed after the malformed line"

# --- a job past its timeout: failed, the process restarted ---
hang=$(enq hang '{}' --timeout 3s --backoff fixed --backoff-base 200ms)
wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $hang" completed 15 || fail "the hung job was not completed after its timeout"
check_eq "timeout: attempt 1 timed out with its process's stderr, attempt 2 completed" "$(q "SELECT attempt || ' ' || (errors->0->>'error') FROM skiplock.all_jobs WHERE id = $hang")" \
	"$(printf '2 timed out after 3000 ms; stderr: got hang %s\r\033[2K forged' "$hang")"
grep -q "job=$hang .*timed out after 3000 ms; restarting the process" "$TMP/kill.log" && pass "the timeout restarts the process" || fail "no restart after the timeout: $(grep -a "timed out" "$TMP/kill.log")"
check_eq "the worker did not restart" "$(kill -0 $W && echo running)" running

# --- the stream process dies with the worker (SIGKILL) ---
spid=$(grep -o "stream handler ok: started pid [0-9]*" "$TMP/kill.log" | tail -1 | grep -o "[0-9]*$")
kill -KILL $W
wait $W 2>/dev/null
for i in $(seq 1 30); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
check_eq "a stream process does not outlive its worker (SIGKILL)" "$(kill -0 "$spid" 2>/dev/null && echo alive || echo gone)" gone
no_leftovers

# --- bad input ---
expect_exit "--stream without KIND=" 2 'expected KIND=COMMAND' -- "$S" worker --url "$URL" --stream nothing
expect_exit "--stream-procs 0" 2 'stream-procs' -- "$S" worker --url "$URL" --stream "a=$H" --stream-procs 0
expect_exit "--stream-inflight over 4096" 2 'stream-inflight' -- "$S" worker --url "$URL" --stream "a=$H" --stream-inflight 4097
expect_exit "--stream with an empty command" 2 'stream command for "a" is empty' -- "$S" worker --url "$URL" --stream "a="
expect_exit "--stream and --handler for one kind" 2 'already has a handler' -- "$S" worker --url "$URL" --handler "a=true" --stream "a=$H"
finish
