#!/usr/bin/env bash
# `skiplock enqueue --depends-on ID[,ID] --depends-on-key KEY
# --on-parent-failure cancel|run` (skiplock.enqueue_after, schema step
# 0030) and the "waits for:" line of `jobs show`:
# - a child waits, available but not due, until its parents (by id, by
#   unique key, or both) are completed by a claim, then is due; a parent
#   already finished counts at once; --delay still holds after the parents;
# - a cancelled parent cancels a child by default and lets it run with
#   --on-parent-failure run;
# - --json says whether the child was inserted or its unique key was held;
# - bad input exits 2 with one line before the database is contacted, an
#   unknown parent exits 1 with the database's message, nothing written;
# - the worker role may enqueue with parents and see why a job waits.
# shellcheck disable=SC2015  # A && pass || fail
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
WURL=$(worker_url)
"$S" init --url "$URL" --grant-worker "$SKL_TEST_WORKER_ROLE" >/dev/null 2>&1 || fail "init"
enq() { "$S" enqueue --url "$URL" "$@"; }
# a job's state and whether it is due; why it waits
due() { q "SELECT state || ' ' || (run_at <= now()) FROM skiplock.all_jobs WHERE id = $1"; }
waits() { q "SELECT coalesce(skiplock.job_waits_for($1), '-')"; }
# completes the due job of kind $1, claimed and ended by SQL as a worker would
complete() {
	check_eq "a claim of $1 completes one job" \
		"$(q "SELECT count(skiplock.complete(id, fencing)) FROM skiplock.claim('t', ARRAY['$1'], NULL, 1)")" 1
}
# the jobs and the edges: what bad input must not change
stored() {
	q "SELECT (SELECT count(*) FROM skiplock.all_jobs) || ' ' || (SELECT count(*) FROM skiplock.job_waits) || ' ' || (SELECT count(*) FROM skiplock.job_deps)"
}

# --- parents by id, by unique key, both ---
a=$(enq dep.a)
p=$(enq dep.p --unique-key day-1)
b=$(enq dep.b --depends-on "$a")
c=$(enq dep.c --depends-on-key day-1)
d=$(enq dep.d --depends-on "$a,$p" --depends-on "$a" --depends-on-key day-1)
check_eq "children are stored waiting, not due" \
	"$(for j in "$b" "$c" "$d"; do due "$j"; done | tr '\n' ,)" "available false,available false,available false,"
check_eq "one edge per distinct parent" \
	"$(q "SELECT string_agg(child_id || ':' || parent_id, ' ' ORDER BY child_id, parent_id) FROM skiplock.job_deps")" \
	"$b:$a $c:$p $d:$a $d:$p"
check_eq "job_waits_for: B waits for its parent" "$(waits "$b")" "dependencies: 1 of 1 parent(s) not finished"
check_eq "job_waits_for: D waits for two" "$(waits "$d")" "dependencies: 2 of 2 parent(s) not finished"
out=$("$S" jobs show "$b" --url "$URL")
grep -qE '^waits for: +dependencies: 1 of 1 parent\(s\) not finished$' <<<"$out" &&
	pass "jobs show: B waits for its parent" || fail "jobs show B: $out"
grep -qE '^waits for: +due: waiting for a worker$' <<<"$("$S" jobs show "$a" --url "$URL")" &&
	pass "jobs show: A, due, waits for a worker" || fail "jobs show A: $("$S" jobs show "$a" --url "$URL")"
check_eq "jobs show --json: waits_for" \
	"$("$S" jobs show "$c" --url "$URL" --json | jq -r .waits_for)" "dependencies: 1 of 1 parent(s) not finished"

# --- the parents complete ---
complete dep.a
check_eq "A completed: B is due" "$(due "$b")" "available true"
check_eq "B waits for a worker only" "$(waits "$b")" "due: waiting for a worker"
check_eq "D still waits for P" "$(waits "$d")" "dependencies: 1 of 2 parent(s) not finished"
out=$("$S" jobs show "$a" --url "$URL")
grep -q '^waits for:' <<<"$out" && fail "jobs show: a completed job has no waits-for line: $out" ||
	pass "jobs show: no waits-for line for a completed job"
check_eq "jobs show --json: waits_for null for a completed job" \
	"$("$S" jobs show "$a" --url "$URL" --json | jq -c .waits_for)" null
complete dep.p
check_eq "P completed: C and D are due" "$(due "$c"),$(due "$d")" "available true,available true"
g=$(enq dep.g --depends-on "$a" --depends-on-key day-1)
check_eq "parents already finished count at once" "$(due "$g")" "available true"
f=$(enq dep.f)
e=$(enq dep.e --depends-on "$f" --delay 1h)
complete dep.f
check_eq "--delay holds after the parents finished" "$(due "$e")" "available false"
grep -qE '^waits for: +due at ' <<<"$("$S" jobs show "$e" --url "$URL")" &&
	pass "jobs show: a delayed child is due at its time" || fail "jobs show E: $("$S" jobs show "$e" --url "$URL")"

# --- a parent cancelled: cancel (default) or run ---
x=$(enq dep.x)
y=$(enq dep.y --depends-on "$x" --on-parent-failure run)
z=$(enq dep.z --depends-on "$x")
z2=$(enq dep.z --depends-on "$z" --on-parent-failure cancel)
"$S" jobs cancel "$x" --url "$URL" >/dev/null 2>&1 || fail "jobs cancel $x"
check_eq "run: the child is due; cancel: the child and its own child are cancelled" \
	"$(due "$y"),$(q "SELECT string_agg(state, ' ' ORDER BY id) FROM skiplock.all_jobs WHERE id IN ($z, $z2)")" \
	"available true,cancelled cancelled"

# --- --json: inserted, or the unique key was held ---
h=$(enq dep.h)
check_eq "--json with parents: inserted" \
	"$(enq dep.j --depends-on "$h" --unique-key j-1 --json | jq -c .inserted)" true
j=$(q "SELECT id FROM skiplock.all_jobs WHERE unique_key = 'j-1'")
check_eq "--json with parents, the key held: the holder, not inserted" \
	"$(enq dep.j --depends-on "$h" --unique-key j-1 --json)" "{\"id\":$j,\"inserted\":false}"
check_eq "the holder keeps its one parent" "$(q "SELECT count(*) FROM skiplock.job_deps WHERE child_id = $j")" 1

# --- bad input: exit 2 before the database is contacted, nothing written ---
before=$(stored)
NOWHERE="postgresql://nobody@127.0.0.1:9/none"
bad() {
	expect_exit "$1" 2 "$2" -- "$S" enqueue --url "$NOWHERE" --connect-timeout 1s \
		--retry-for 1s "${@:3}"
}
K513=$(printf 'k%.0s' $(seq 513))
printf '%s\n' '{"kind":"dep.batch"}' >"$TMP/batch.ndjson"
bad "--depends-on 0" '^skiplock enqueue: --depends-on: "0" is not a job id' k --depends-on 0
bad "--depends-on negative" 'is not a job id' k --depends-on -3
bad "--depends-on not a number" 'is not a job id' k --depends-on abc
bad "--depends-on with a sign" 'is not a job id' k --depends-on +5
bad "--depends-on with a space" 'is not a job id' k --depends-on ' 5'
bad "--depends-on empty" 'is not a job id' k --depends-on ''
bad "--depends-on with an empty element" '"1,,2" is not a job id' k --depends-on 1,,2
bad "--depends-on with a trailing comma" '"1," is not a job id' k --depends-on 1,
bad "--depends-on past 2^63-1" 'is not a job id' k --depends-on 9223372036854775808
bad "--depends-on-key empty" '--depends-on-key must be 1 to 512 bytes' k --depends-on-key ''
bad "--depends-on-key of 513 bytes" '--depends-on-key must be 1 to 512 bytes' k --depends-on-key "$K513"
bad "an unknown policy" '--on-parent-failure: unknown policy "maybe" \(expected cancel or run\)' \
	k --depends-on 1 --on-parent-failure maybe
bad "a policy without parents" '--on-parent-failure goes with --depends-on' k --on-parent-failure run
bad "1001 parents" 'at most 1000 parents' k --depends-on "$(seq -s, 1 1001)"
bad "parents with --batch" 'do not go with --batch' --batch "$TMP/batch.ndjson" --depends-on 1
bad "a policy with --batch" 'do not go with --batch' --batch "$TMP/batch.ndjson" --on-parent-failure run
bad "an unknown option" 'did you mean' k --depends-onn 1
ps=$(q "SELECT string_agg(skiplock.enqueue('dep.many')::text, ',') FROM generate_series(1, 1000)")
m=$(enq dep.child --depends-on "$ps" 2>&1)
check_eq "1000 parents are accepted" "$(waits "${m:-0}")" "dependencies: 1000 of 1000 parent(s) not finished"
before=$(stored)
expect_exit "an unknown parent id: exit 1, the database's message" 1 \
	'^skiplock enqueue: depends_on: job 987654321 does not exist \(SQLSTATE 23503\)' -- \
	"$S" enqueue --url "$URL" k --depends-on "$a,987654321"
expect_exit "an unknown parent key: exit 1" 1 'no job holds the unique key no-such-key \(SQLSTATE 23503\)' -- \
	"$S" enqueue --url "$URL" k --depends-on-key no-such-key --json
check_eq "bad input and unknown parents wrote nothing" "$(stored)" "$before"

# --- the worker role ---
k=$(enq dep.k)
wk=$("$S" enqueue --url "$WURL" dep.wk --depends-on "$k" 2>&1)
check_eq "the worker role enqueues with parents" "$(due "${wk:-0}")" "available false"
grep -qE '^waits for: +dependencies: 1 of 1 parent\(s\) not finished$' <<<"$("$S" jobs show "${wk:-0}" --url "$WURL" 2>&1)" &&
	pass "jobs show as the worker role: waits for" || fail "jobs show as the worker role: $("$S" jobs show "${wk:-0}" --url "$WURL" 2>&1)"
no_leftovers
finish
