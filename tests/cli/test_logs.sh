#!/usr/bin/env bash
# --log-format json: every line of a worker's stderr (and of a usage error)
# is one JSON object with time, level and message; lines about a job carry
# its context (worker, job_id, queue, kind, attempt, fencing); payloads
# appear only with --log-payloads; a password in the URL never appears;
# --log-level filters.  In text lines, kinds, queues and handler stderr
# are escaped, so they cannot forge a line.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
MARK=payload-mark-7f3a
SECRET=pw-secret-91c2
SURL=${URL/@/:$SECRET@}   # trust auth ignores it; the log must not show it
json_lines() { # file: every line parses as an object with time, level, message
	local n bad
	n=$(wc -l <"$1")
	bad=$(jq -c 'select((type != "object") or (.time | type) != "string" or (.level | IN("debug","info","warning","error") | not) or (.message | type) != "string")' <"$1" 2>&1)
	if [ "$n" -gt 0 ] && [ -z "$bad" ] && jq -e . <"$1" >/dev/null 2>&1 &&
		[ "$(jq -s length <"$1")" = "$n" ]; then pass "$2: all $n lines are JSON log records"
	else fail "$2: not every line is a JSON log record: ${bad:-$(head -c 300 "$1")}"; fi
}
run_worker() { # log-file args...: runs until the fail job is discarded
	local log=$1
	shift
	"$S" worker --url "$SURL" --poll 50ms --poll-max 200ms --backoff-base 10ms --backoff-cap 20ms \
		--handler 'fail=echo "boom" >&2; exit 3' --handler 'ok=cat >/dev/null' "$@" 2>"$log" &
	local w=$!
	for _ in $(seq 1 200); do
		[ "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE state IN ('completed', 'discarded')")" = 2 ] && break
		sleep 0.1
	done
	kill -TERM $w
	wait $w
}

# --- json, default level: a failed job's lines carry id, attempt and context ---
id=$("$S" enqueue --url "$URL" fail "{\"mark\": \"$MARK\"}" --max-attempts 2 --queue jq)
"$S" enqueue --url "$URL" ok "{\"mark\": \"$MARK\"}" --queue jq >/dev/null
run_worker "$TMP/j1.log" --log-format json
json_lines "$TMP/j1.log" "json worker log"
owner=$(jq -r 'select(.message | startswith("worker ")) | .worker' <"$TMP/j1.log" | head -1)
check_eq "attempt 1 failed: a line with id, attempt and context" \
	"$(jq -c "select(.job_id == $id and .attempt == 1) | [.level, .kind, .queue, .fencing, .worker == \"$owner\", .command, (.message | test(\"failed, retry in [0-9]+ ms: exit status 3; stderr: boom\"))]" <"$TMP/j1.log")" \
	'["info","fail","jq",1,true,"worker",true]'
check_eq "attempt 2 discarded: a line with id and attempt" \
	"$(jq -c "select(.job_id == $id and .attempt == 2) | [.level, .fencing, (.message | startswith(\"discarded: exit status 3\"))]" <"$TMP/j1.log")" \
	'["warning",2,true]'
check_eq "no payload in the log without --log-payloads" "$(grep -c "$MARK" "$TMP/j1.log")" 0
check_eq "no password in the log" "$(grep -c "$SECRET" "$TMP/j1.log")" 0

# --- debug level with --log-payloads: claimed/completed lines, payload as JSON ---
q "DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs"
id=$("$S" enqueue --url "$URL" fail "{\"mark\": \"$MARK\"}" --max-attempts 1)
"$S" enqueue --url "$URL" ok "{\"mark\": \"$MARK\"}" >/dev/null
run_worker "$TMP/j2.log" --log-format json --log-level debug --log-payloads
json_lines "$TMP/j2.log" "json debug log with payloads"
check_eq "the failed job's line carries its payload" \
	"$(jq -r "select(.job_id == $id and .level == \"warning\") | .payload.mark" <"$TMP/j2.log")" "$MARK"
check_eq "debug: claimed and completed lines for the ok job" \
	"$(jq -r 'select(.kind == "ok") | .message | sub(" in .*"; "")' <"$TMP/j2.log" | tr '\n' ' ')" "claimed completed "
check_eq "no password at debug level either" "$(grep -c "$SECRET" "$TMP/j2.log")" 0

# --- text: the context as a prefix; --log-level warning drops info lines ---
q "DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs"
id=$("$S" enqueue --url "$URL" fail --max-attempts 2)
"$S" enqueue --url "$URL" ok >/dev/null
run_worker "$TMP/t1.log" --log-level warning
check_eq "text: only warning lines" "$(grep -vc '^skiplock: warning: ' "$TMP/t1.log")" 0
grep -q "^skiplock: warning: job=$id kind=fail attempt=2 fencing=2 queue=default: discarded: exit status 3" "$TMP/t1.log" &&
	pass "text: the discarded line starts with the job's context" || fail "text: no context prefix: $(cat "$TMP/t1.log")"

# --- text: a kind, a queue or handler stderr cannot forge a line ---
# A line that looks like a record of its own, after a newline (kind, queue)
# or a carriage return (stderr): every line of the log, split at both,
# must be one the worker wrote.
q "DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs"
FK=$'fk\nskiplock: error: FORGED-KIND'
FQ=$'fq\nskiplock: error: FORGED-QUEUE'
id=$("$S" enqueue --url "$URL" --queue "$FQ" --max-attempts 1 "$FK")
"$S" worker --url "$URL" --poll 50ms --poll-max 200ms --queue "$FQ" \
	--handler "$FK=printf 'boom\\rskiplock: error: FORGED-STDERR\\033[2K' >&2; exit 3" 2>"$TMP/f1.log" &
w=$!
wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $id" discarded 20 || fail "the forging job was not discarded"
kill -TERM $w
wait $w
check_eq "no forged line, split at newlines and carriage returns" \
	"$(tr '\r' '\n' <"$TMP/f1.log" | grep -c '^skiplock: error: FORGED')" 0
check_eq "no raw control byte but newlines" "$(tr -d '\n' <"$TMP/f1.log" | tr -d '[:print:]' | wc -c)" 0
grep -qF "skiplock: warning: job=$id kind=\"fk\\nskiplock: error: FORGED-KIND\" attempt=1 fencing=1 queue=\"fq\\nskiplock: error: FORGED-QUEUE\": discarded: exit status 3; stderr: boom\\rskiplock: error: FORGED-STDERR\\x1b[2K" "$TMP/f1.log" &&
	pass "text: kind and queue quoted, stderr escaped, on one line" ||
	fail "text: the discarded line is not escaped as expected: $(cat -A "$TMP/f1.log")"
"$S" enqueue --url "$URL" --batch $'nope\rskiplock: error: FORGED-ARG' 2>"$TMP/f2.log"
check_eq "usage errors escape what they quote" "$(tr '\r' '\n' <"$TMP/f2.log" | grep -c '^skiplock: error: FORGED')" 0
check_eq "the usage error is still one line" "$(wc -l <"$TMP/f2.log")" 1

# --- usage errors and other commands: also JSON ---
"$S" enqueue --log-format json --url "$URL" k '{bad' >/dev/null 2>"$TMP/e1.log"
check_eq "bad input exits 2" "$?" 2
json_lines "$TMP/e1.log" "json usage error"
check_eq "the error line names the command" "$(jq -r '[.level, .command] | join(" ")' <"$TMP/e1.log")" "error enqueue"
expect_exit "unknown log format" 2 'unknown log format "yaml"' -- "$S" status --url "$URL" --log-format yaml
no_leftovers
finish
