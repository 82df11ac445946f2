#!/usr/bin/env bash
# `skiplock jobs` and `skiplock status`: list filters, show with an error
# history made by a real worker, cancel of a running job, retry (a fresh
# budget of attempts: the job runs again), cancel,
# prune, status counts against SQL, JSON output checked by the server's own
# JSON parser, and bad input (exit 2, one line, nothing written).
# shellcheck disable=SC2015,SC2016  # A && pass || fail; handlers expand in their own shell
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
FAST=(--poll 50ms --poll-max 200ms --rescue-every 300ms --log-level warning)

stop_worker() { kill -TERM "$1" 2>/dev/null; wait "$1"; }
# json_q DOC SQL: SQL sees the document as :'doc'; a document that is not
# JSON makes psql fail, so every use also checks that the output parses.
json_q() { printf '%s\n' "$2" | psql -X -q -At -v ON_ERROR_STOP=1 -v doc="$1" "$DIRECT_URL" 2>&1; }
act() { local out; out=$("$@" 2>"$TMP/act.err"); echo "$? $out$(head -c 300 "$TMP/act.err")"; } # exit code, stdout, stderr
ids() { awk 'NR > 1 { printf "%s%s", sep, $1; sep = " " }'; } # ID column of a table

# --- jobs in every state, the error history written by a worker ---
a1=$("$S" enqueue --url "$URL" k '{"n": 1}' --max-attempts 3)
a2=$("$S" enqueue --url "$URL" ok '{"n": 2}')
a3=$("$S" enqueue --url "$URL" k '{"n": 3}' --queue q2 --delay 1h)
a4=$("$S" enqueue --url "$URL" other)
a5=$("$S" enqueue --url "$URL" other --queue q2 --unique-key u5 --priority 4)
"$S" worker --url "$URL" "${FAST[@]}" --backoff-base 50ms --backoff-cap 200ms \
	--handler 'k=echo "boom $SKIPLOCK_ATTEMPT" >&2; echo "second line" >&2; exit 75' \
	--handler 'ok=cat >/dev/null; echo "{\"done\": true}"' 2>"$TMP/w1.log" &
W=$!
wait_for "SELECT string_agg(state, ' ' ORDER BY id) FROM skiplock.all_jobs WHERE id IN ($a1, $a2)" \
	"discarded completed" 20 || fail "worker did not finish: $(cat "$TMP/w1.log")"
stop_worker $W

# --- list: newest first, filters, limit, table and JSON ---
out=$("$S" jobs list --url "$URL")
check_eq "list: newest first" "$(ids <<<"$out")" "$a5 $a4 $a3 $a2 $a1"
head -1 <<<"$out" | grep -q 'ID  *QUEUE  *KIND  *STATE  *ATTEMPT  *PRIORITY  *RUN AT (UTC)  *LEASE  *LAST ERROR' &&
	pass "list: table header" || fail "list: header is '$(head -1 <<<"$out")'"
grep -E "^ *$a1 +default +k +discarded +3/3 +0 +[0-9-]+ [0-9:]+ +- +exit status 75; stderr: boom 3 second line$" <<<"$out" >/dev/null &&
	pass "list: a row carries attempts and the last error on one line" || fail "list: row of $a1: $(grep -E "^ *$a1 " <<<"$out")"
check_eq "list --kind" "$("$S" jobs list --url "$URL" --kind k | ids)" "$a3 $a1"
check_eq "list --queue" "$("$S" jobs list --url "$URL" --queue q2 | ids)" "$a5 $a3"
check_eq "list --state" "$("$S" jobs list --url "$URL" --state discarded | ids)" "$a1"
check_eq "list, filters combined" "$("$S" jobs list --url "$URL" --state available --queue default | ids)" "$a4"
check_eq "list --limit" "$("$S" jobs list --url "$URL" --limit 2 | ids)" "$a5 $a4"
check_eq "list: no match is a header only" "$("$S" jobs list --url "$URL" --kind nothing | wc -l)" 1
doc=$("$S" jobs list --url "$URL" --json)
check_eq "list --json parses, every job, newest first" \
	"$(json_q "$doc" "SELECT json_array_length(:'doc'::json) || ' ' || (:'doc'::json -> 0 ->> 'id')")" "5 $a5"
doc=$("$S" jobs list --url "$URL" --json --queue q2 --kind other)
check_eq "list --json fields" \
	"$(json_q "$doc" "SELECT d->>'state', d->>'priority', d->>'unique_key', d->>'attempt', d->'last_error' FROM json_array_elements(:'doc'::json) d")" \
	"available|4|u5|0|null"
check_eq "list --json with no match is []" "$("$S" jobs list --url "$URL" --json --state running)" "[]"

# --- show: every column, payload, result, the error history ---
out=$("$S" jobs show "$a1" --url "$URL")
check_eq "show exits 0" "$?" 0
for want in "state: *discarded" "attempt: *3 of 3" "fencing: *3" "payload: *\{\"n\": 1\}" \
	"errors: *3, oldest first" "^  attempt 1 at [0-9T:.-]+Z:$" "^  attempt 3 at " "^    exit status 75; stderr: boom 2$" "^    second line$"; do
	grep -qE -- "$want" <<<"$out" && pass "show has /$want/" || fail "show lacks /$want/: $out"
done
doc=$("$S" jobs show "$a1" --url "$URL" --json)
check_eq "show --json: history with attempt numbers, times and errors" \
	"$(json_q "$doc" "SELECT string_agg((e->>'attempt') || ':' || ((e->>'at')::timestamptz <= now()) || ':' || (e->>'error'), '|') FROM json_array_elements(:'doc'::json -> 'errors') e")" \
	"$(q "SELECT string_agg((e->>'attempt') || ':true:' || (e->>'error'), '|' ORDER BY o) FROM skiplock.all_jobs, jsonb_array_elements(errors) WITH ORDINALITY AS x(e, o) WHERE id = $a1")"
check_eq "show --json: columns match the row" \
	"$(json_q "$doc" "SELECT concat_ws(' ', d->>'state', d->>'fencing', d->>'max_attempts', d->'payload'->>'n', d->'lease_owner', d->'result', (d->>'finished_at')::timestamptz) FROM (SELECT :'doc'::json AS d) s")" \
	"$(q "SELECT concat_ws(' ', state, fencing, max_attempts, payload->>'n', 'null', 'null', date_trunc('milliseconds', finished_at)) FROM skiplock.all_jobs WHERE id = $a1")"
doc=$("$S" jobs show "$a2" --url "$URL" --json)
check_eq "show --json: result kept as JSON, no errors" \
	"$(json_q "$doc" "SELECT (:'doc'::json -> 'result' ->> 'done') || ' ' || json_array_length(:'doc'::json -> 'errors')")" "true 0"
"$S" jobs show "$a2" --url "$URL" | grep -qE '^errors: +none$' && pass "show: no errors" || fail "show: errors of $a2"

# --- a running job: lease in list, show and status; cancel while it runs ---
a6=$("$S" enqueue --url "$URL" slow)
"$S" worker --url "$URL" "${FAST[@]}" --lease 3s --shutdown-timeout 3s --owner tester \
	--handler 'slow=sleep 20' 2>"$TMP/w2.log" &
W=$!
wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $a6" running 10 || fail "slow job did not start"
grep -qE "^ *$a6 +default +slow +running +1/25 .* in [0-9.]+s +-$" <<<"$("$S" jobs list --url "$URL" --state running)" &&
	pass "list: lease expiry of a running job" || fail "list: running row: $("$S" jobs list --url "$URL" --state running)"
out=$("$S" jobs show "$a6" --url "$URL")
grep -qE '^lease owner: +tester$' <<<"$out" && grep -qE '^lease expires: +[0-9T:.-]+Z \(in [0-9.]+s\)$' <<<"$out" &&
	pass "show: lease owner and expiry" || fail "show: lease of a running job: $out"
doc=$("$S" status --url "$URL" --json)
check_eq "status --json: running with the next lease expiry" \
	"$(json_q "$doc" "SELECT concat_ws(' ', q->>'running', q->>'lease_expired', (q->>'next_lease_expiry_in_ms')::int BETWEEN 1 AND 3000, (q->>'next_lease_expiry')::timestamptz > now()) FROM json_array_elements(:'doc'::json -> 'queues') q WHERE q->>'kind' = 'slow'")" \
	"1 0 t t"
check_eq "cancel a running job" "$(act "$S" jobs cancel "$a6" --url "$URL")" "0 job $a6 cancelled"
sleep 1.5 # a heartbeat (lease/3) finds the claim lost and stops the handler
stop_worker $W
check_eq "a cancelled job's handler outcome is refused" \
	"$(q "SELECT state || ' ' || (result IS NULL) || ' ' || (lease_owner IS NULL) FROM skiplock.all_jobs WHERE id = $a6")" "cancelled true true"

# --- retry and cancel: allowed states, refusals exit 1 with one line ---
check_eq "retry a discarded job" "$(act "$S" jobs retry "$a1" --url "$URL")" "0 job $a1 is available"
check_eq "retried job is available now, with a fresh budget of 3 attempts" \
	"$(q "SELECT state || ' ' || (run_at <= now()) || ' ' || attempt || '/' || max_attempts || ' ' || (finished_at IS NULL) FROM skiplock.all_jobs WHERE id = $a1")" \
	"available true 3/6 true"
check_eq "cancel an available job" "$(act "$S" jobs cancel "$a4" --url "$URL")" "0 job $a4 cancelled"
check_eq "cancelled job" "$(q "SELECT state || ' ' || (finished_at IS NOT NULL) FROM skiplock.all_jobs WHERE id = $a4")" "cancelled true"
expect_exit "cancel a completed job" 1 "cannot cancel job $a2: it is completed" -- "$S" jobs cancel "$a2" --url "$URL"
expect_exit "cancel a cancelled job" 1 "cannot cancel job $a4: it is cancelled" -- "$S" jobs cancel "$a4" --url "$URL"
expect_exit "retry a completed job" 1 "cannot retry job $a2: it is completed" -- "$S" jobs retry "$a2" --url "$URL"
expect_exit "cancel a missing job" 1 "no job 987654" -- "$S" jobs cancel 987654 --url "$URL"
expect_exit "retry a missing job" 1 "no job 987654" -- "$S" jobs retry 987654 --url "$URL"
expect_exit "show a missing job" 1 "no job 987654" -- "$S" jobs show 987654 --url "$URL"
check_eq "refusals changed nothing" "$(q "SELECT string_agg(state, ' ' ORDER BY id) FROM skiplock.all_jobs WHERE id IN ($a2, $a4)")" "completed cancelled"

# --- status: counts by state match SQL; failure rate by its formula ---
SQL_COUNTS="SELECT string_agg(format('%s/%s=%s,%s,%s,%s,%s,%s', queue, kind, due, sch, run, com, dis, can), ' ' ORDER BY queue, kind)
  FROM (SELECT queue, kind, count(*) FILTER (WHERE state = 'available' AND run_at <= now()) AS due,
               count(*) FILTER (WHERE state = 'available' AND run_at > now()) AS sch,
               count(*) FILTER (WHERE state = 'running') AS run, count(*) FILTER (WHERE state = 'completed') AS com,
               count(*) FILTER (WHERE state = 'discarded') AS dis, count(*) FILTER (WHERE state = 'cancelled') AS can
          FROM skiplock.all_jobs GROUP BY queue, kind) s"
JSON_COUNTS="SELECT string_agg(format('%s/%s=%s,%s,%s,%s,%s,%s', q->>'queue', q->>'kind', q->>'due', q->>'scheduled',
               q->>'running', q->>'completed', q->>'discarded', q->>'cancelled'), ' ' ORDER BY q->>'queue', q->>'kind')
  FROM jsonb_array_elements(:'doc'::jsonb -> 'queues') q"
q "UPDATE skiplock.jobs SET run_at = now() - interval '90 seconds' WHERE id = $a5"
doc=$("$S" status --url "$URL" --json)
check_eq "status --json counts match SQL" "$(json_q "$doc" "$JSON_COUNTS")" "$(q "$SQL_COUNTS")"
check_eq "status --json: available = due + scheduled, window" \
	"$(json_q "$doc" "SELECT bool_and((q->>'available')::int = (q->>'due')::int + (q->>'scheduled')::int) || ' ' || (:'doc'::json ->> 'window_ms') FROM json_array_elements(:'doc'::json -> 'queues') q")" \
	"true 300000"
check_eq "status --json: oldest due age by the database clock" \
	"$(json_q "$doc" "SELECT (q->>'oldest_due_age_ms')::int BETWEEN 89000 AND 150000 FROM json_array_elements(:'doc'::json -> 'queues') q WHERE q->>'queue' = 'q2' AND q->>'kind' = 'other'")" "t"
# k/default: 3 attempt errors and no completion; ok/default: 1 completion
check_eq "status --json: recent errors, completions and failure rate" \
	"$(json_q "$doc" "SELECT string_agg(concat_ws(' ', q->>'kind', q->>'recent_errors', q->>'recent_completed', coalesce(q->>'failure_rate', 'null')), ', ' ORDER BY q->>'kind') FROM json_array_elements(:'doc'::json -> 'queues') q WHERE q->>'queue' = 'default'")" \
	"k 3 0 1.0, ok 0 1 0.0, other 0 0 null, slow 0 0 null"
out=$("$S" status --url "$URL")
head -1 <<<"$out" | grep -qE '^QUEUE +KIND +DUE +SCHEDULED +RUNNING +COMPLETED +DISCARDED +CANCELLED +OLDEST DUE +NEXT LEASE +FAILURES \(5m00s\)$' &&
	pass "status: table header" || fail "status header: $(head -1 <<<"$out")"
grep -qE '^default +k +1 +0 +0 +0 +0 +0 +[0-9.ms]+ +- +100% \(3/3\)$' <<<"$out" && pass "status: a row" || fail "status rows: $out"
grep -qE '^q2 +other +1 +0 +0 +0 +0 +0 +1m[3-5][0-9]s +- +-$' <<<"$out" && pass "status: oldest due age" || fail "status rows: $out"
check_eq "status --window" "$(json_q "$("$S" status --url "$URL" --json --window 1ms)" "SELECT sum((q->>'recent_errors')::int) FROM json_array_elements(:'doc'::json -> 'queues') q")" 0

# --- a retry that would break the unique key is refused ---
check_eq "cancel the holder of a unique key" "$(act "$S" jobs cancel "$a5" --url "$URL")" "0 job $a5 cancelled"
a7=$("$S" enqueue --url "$URL" other --queue q2 --unique-key u5)
expect_exit "retry refused while another job holds the unique key" 1 \
	"cannot retry job $a5: another unfinished job holds its unique key" -- "$S" jobs retry "$a5" --url "$URL"
check_eq "refused retry changed nothing" "$(q "SELECT string_agg(state, ' ' ORDER BY id) FROM skiplock.all_jobs WHERE id IN ($a5, $a7)")" "cancelled available"

# --- prune: only finished jobs older than the bound ---
q "UPDATE skiplock.finished_jobs SET finished_at = now() - interval '2 hours' WHERE id IN ($a2, $a4)"
q "UPDATE skiplock.jobs SET finished_at = now() - interval '2 hours' WHERE id = $a3" # available: never pruned
check_eq "prune --older-than, in batches" "$(act "$S" jobs prune --url "$URL" --older-than 1h --batch 1)" "0 deleted 2 finished jobs"
check_eq "prune deleted only old finished jobs" "$(q "SELECT string_agg(id::text, ' ' ORDER BY id DESC) FROM skiplock.all_jobs")" "$a7 $a6 $a5 $a3 $a1"
check_eq "prune again deletes nothing" "$(act "$S" jobs prune --url "$URL" --older-than 1h)" "0 deleted 0 finished jobs"

# --- bad input: exit 2, one line naming the problem, nothing written ---
before=$(q "SELECT string_agg(concat_ws(':', id, state, attempt, fencing, finished_at), ' ' ORDER BY id) FROM skiplock.all_jobs")
bad() { expect_exit "$1" 2 "$2" -- "$S" "${@:3}" --url "$URL"; }
bad "jobs without a subcommand" 'missing subcommand \(expected' jobs
bad "unknown jobs subcommand" 'unknown subcommand "frob"' jobs frob
bad "unknown option" 'unknown option "--bogus"' jobs list --bogus
bad "bad state name" 'unknown job state "finished"' jobs list --state finished
bad "bad limit" '--limit: "0" is not an integer' jobs list --limit 0
bad "empty queue name" '--queue must be 1 to 128 bytes' jobs list --queue ''
bad "missing ID" 'missing job ID' jobs show
bad "bad ID" 'invalid job ID "abc"' jobs show abc
bad "ID with trailing text" 'invalid job ID "12x"' jobs cancel 12x
bad "zero ID" 'invalid job ID "0"' jobs retry 0
bad "several IDs without --yes and no terminal" "pass --yes" jobs cancel "$a5" 2
bad "option of another subcommand" 'unknown option "--json"' jobs cancel --json "$a5"
bad "prune without a bound" '--older-than DUR is required' jobs prune
bad "bad duration" '--older-than.*"soon"' jobs prune --older-than soon
bad "bad batch" '--batch' jobs prune --older-than 1h --batch 0
bad "status: bad window" '--window.*"never"' status --window never
bad "status: stray argument" 'unexpected argument "extra"' status extra
bad "status: unknown option" 'unknown option "--bogus"' status --bogus
check_eq "bad input wrote nothing" "$(q "SELECT string_agg(concat_ws(':', id, state, attempt, fencing, finished_at), ' ' ORDER BY id) FROM skiplock.all_jobs")" "$before"

for cmd in "jobs list" "jobs show" "jobs retry" "jobs cancel" "jobs prune" "status"; do
	# shellcheck disable=SC2086
	"$S" $cmd --help | grep -q "^Exit status:" && pass "$cmd --help" || fail "$cmd --help"
done
"$S" jobs --help | grep -q "^Exit status:" && pass "jobs --help" || fail "jobs --help"
"$S" jobs retry --help | grep -q -- "--attempts N" && pass "jobs retry --help names --attempts" || fail "jobs retry --help"

# --- a retried discarded job runs again with a fresh budget of attempts ---
f=$("$S" enqueue --url "$URL" fails --max-attempts 2)
run_fails() { # runs a worker until job $f is discarded at attempt $1
	"$S" worker --url "$URL" "${FAST[@]}" --backoff-base 10ms --backoff-cap 20ms \
		--handler 'fails=echo "no $SKIPLOCK_ATTEMPT" >&2; exit 1' 2>"$TMP/wf.log" &
	local w=$!
	wait_for "SELECT state || ' ' || attempt FROM skiplock.all_jobs WHERE id = $f" "discarded $1" 20 ||
		fail "job $f not discarded at attempt $1: $(q "SELECT state || ' ' || attempt FROM skiplock.all_jobs WHERE id = $f")"
	stop_worker $w
}
run_fails 2
check_eq "retry the discarded job" "$(act "$S" jobs retry "$f" --url "$URL")" "0 job $f is available"
check_eq "as many attempts again as it had" "$(q "SELECT attempt || '/' || max_attempts FROM skiplock.all_jobs WHERE id = $f")" "2/4"
run_fails 4
check_eq "it ran attempts 3 and 4, errors and fencing kept" \
	"$(q "SELECT string_agg(e->>'attempt', ',') || ' ' || max(fencing) FROM skiplock.all_jobs, jsonb_array_elements(errors) e WHERE id = $f")" \
	"1,2,3,4 4"
check_eq "retry --attempts 1" "$(act "$S" jobs retry "$f" --attempts 1 --url "$URL")" "0 job $f is available"
run_fails 5
check_eq "--attempts 1: one more attempt only" "$(q "SELECT attempt || '/' || max_attempts || ' ' || jsonb_array_length(errors) FROM skiplock.all_jobs WHERE id = $f")" "5/5 5"
check_eq "retry --attempts on an available job sets its budget" \
	"$(act "$S" jobs retry "$a1" --attempts 10 --url "$URL"; q "SELECT attempt || '/' || max_attempts FROM skiplock.all_jobs WHERE id = $a1")" \
	"0 job $a1 is available
3/13"
before=$(q "SELECT string_agg(concat_ws(':', id, state, max_attempts), ' ' ORDER BY id) FROM skiplock.all_jobs")
bad "retry --attempts 0" '--attempts: "0" is not an integer from 1' jobs retry "$f" --attempts 0
bad "retry --attempts not a number" '--attempts: "many" is not an integer' jobs retry "$f" --attempts many
bad "--attempts is retry's alone" 'unknown option "--attempts"' jobs cancel "$a5" --attempts 1
check_eq "refused --attempts changed nothing" "$(q "SELECT string_agg(concat_ws(':', id, state, max_attempts), ' ' ORDER BY id) FROM skiplock.all_jobs")" "$before"
"$S" status --help | grep -q "E / (E + C)" && pass "status --help defines the failure rate" || fail "status --help formula"
no_leftovers
finish
