#!/usr/bin/env bash
# `skiplock enqueue`: single and batch round trips, unique keys under
# concurrency, all-or-nothing batches, and bad input that writes nothing.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
count() { q "SELECT count(*) FROM skiplock.all_jobs"; }

id=$("$S" enqueue --url "$URL" email '{"to":"a@example.com"}' --queue mail --priority 5 \
	--max-attempts 3 --delay 1h --timeout 30s --backoff-base 2s --backoff-cap 1m)
check_eq "single enqueue prints the id" "$id" "$(q "SELECT max(id) FROM skiplock.all_jobs")"
check_eq "options are stored" \
	"$(q "SELECT kind||' '||queue||' '||priority||' '||max_attempts||' '||timeout_ms||' '||backoff_base_ms||' '||backoff_cap_ms||' '||payload::text||' '||(run_at > now() + interval '59 minutes') FROM skiplock.all_jobs WHERE id = $id")" \
	'email mail 5 3 30000 2000 60000 {"to": "a@example.com"} true'
id2=$("$S" enqueue --url "$URL" plain)
check_eq "default payload and queue" "$(q "SELECT payload::text||' '||queue FROM skiplock.all_jobs WHERE id = $id2")" "{} default"

# 16 processes, one unique key
for i in $(seq 1 16); do
	"$S" enqueue --url "$URL" report '{"day":"2026-11-29"}' --unique-key report:2026-11-29 >"$TMP/u.$i" 2>&1 &
done
wait
check_eq "16 concurrent enqueues print one id" "$(cat "$TMP"/u.* | sort -u | wc -l)" 1
check_eq "exactly one job holds the key" "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE unique_key = 'report:2026-11-29'")" 1
check_eq "the printed id is that job" "$(cat "$TMP/u.1")" "$(q "SELECT id FROM skiplock.all_jobs WHERE unique_key = 'report:2026-11-29'")"

# batch: ids in input order
before=$(count)
printf '%s\n' '{"kind":"a","payload":{"n":1}}' '' '{"kind":"b","payload":[1,2],"queue":"q2","priority":2}' \
	'{"kind":"a","unique_key":"k1"}' '{"kind":"a","unique_key":"k1","payload":{"dup":true}}' >"$TMP/batch.ndjson"
"$S" enqueue --url "$URL" --batch "$TMP/batch.ndjson" >"$TMP/ids"
check_eq "batch exit status" "$?" 0
check_eq "batch prints one id per job" "$(wc -l <"$TMP/ids")" 4
check_eq "batch inserted 3 jobs (the 4th shares a unique key)" "$(($(count) - before))" 3
check_eq "batch ids follow input order" "$(q "SELECT string_agg(kind||':'||queue, ',' ORDER BY array_position(ARRAY[$(paste -sd, "$TMP/ids")]::bigint[], id)) FROM skiplock.all_jobs WHERE id IN ($(paste -sd, "$TMP/ids"))")" "a:default,b:q2,a:default"
check_eq "duplicate unique key in a batch gets the holder's id" "$(sed -n 3p "$TMP/ids")" "$(sed -n 4p "$TMP/ids")"
big=$(for i in $(seq 1 2000); do printf '{"kind":"bulk","payload":{"i":%d}}\n' "$i"; done)
printf '%s\n' "$big" | "$S" enqueue --url "$URL" --batch - >"$TMP/bulk.ids"
check_eq "2000-job batch from stdin" "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'bulk'")" 2000

# a batch over the library's chunk (5,000 jobs per statement), keyed and
# plain lines mixed: one transaction, ids in input order
awk 'BEGIN { for (i = 1; i <= 12001; i++)
	if (i % 1000 == 0) printf "{\"kind\":\"chunked\",\"unique_key\":\"ck\",\"payload\":{\"i\":%d}}\n", i;
	else printf "{\"kind\":\"chunked\",\"priority\":%d,\"payload\":{\"i\":%d}}\n", i % 3, i }' >"$TMP/chunked.ndjson"
"$S" enqueue --url "$URL" --batch "$TMP/chunked.ndjson" >"$TMP/chunked.ids"
check_eq "12001-line batch prints one id per line" "$(wc -l <"$TMP/chunked.ids")" 12001
check_eq "12001-line batch: 11990 jobs, one per unique key" "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'chunked'")" 11990
check_eq "every keyed line across chunks gets the holder's id" "$(awk 'NR % 1000 == 0' "$TMP/chunked.ids" | sort -u | wc -l)" 1
check_eq "line 7777 is the job with payload 7777 and priority 1" \
	"$(q "SELECT (payload->>'i')||' '||priority FROM skiplock.all_jobs WHERE id = $(sed -n 7777p "$TMP/chunked.ids")")" "7777 1"
check_eq "ids rise in input order" "$(awk 'NR % 1000 != 0' "$TMP/chunked.ids" | sort -c -n && echo sorted)" sorted
before=$(count)
{ cat "$TMP/chunked.ndjson"; echo '{"kind":"chunked","run_at":"not a time"}'; } >"$TMP/chunked-bad.ndjson"
expect_exit "a bad run_at in the last chunk fails the whole batch" 2 'invalid input syntax for type timestamp' -- \
	"$S" enqueue --url "$URL" --batch "$TMP/chunked-bad.ndjson"
check_eq "nothing of the failed batch was written" "$(count)" "$before"

echo '{"from":"stdin"}' | "$S" enqueue --url "$URL" stdin-kind - >/dev/null
check_eq "payload from stdin" "$(q "SELECT payload->>'from' FROM skiplock.all_jobs WHERE kind = 'stdin-kind'")" stdin

# payloads reach the database as written (jsonb's own normalisation aside):
# single, stdin and batch store the same text as the SQL cast of the input
exact=('{"n": 0.1}' '{"n":1e2, "m": 1E+2, "z": -0}' '{"n": 1.5e300, "r": 2.50}'
	'[18446744073709551616, -9223372036854775809]' '1e400'
	'{"big": 123456789012345678901234567890.5e-3}' '{ "s" : "x\u0041\n" , "a":[1.0] }')
: >"$TMP/exact.ndjson"
for p in "${exact[@]}"; do printf '{"kind":"exact","payload": %s }\n' "$p" >>"$TMP/exact.ndjson"; done
"$S" enqueue --url "$URL" --batch "$TMP/exact.ndjson" >"$TMP/exact.ids" 2>"$TMP/exact.err" ||
	fail "batch of exact payloads: $(cat "$TMP/exact.err")"
i=0
for p in "${exact[@]}"; do
	i=$((i + 1))
	want=$(q "SELECT \$p\$$p\$p\$::jsonb::text")
	id=$("$S" enqueue --url "$URL" exact "$p" 2>&1)
	check_eq "single enqueue keeps $p" "$(q "SELECT payload::text FROM skiplock.all_jobs WHERE id = ${id:-0}")" "$want"
	id=$(printf '%s' "$p" | "$S" enqueue --url "$URL" exact - 2>&1)
	check_eq "stdin enqueue keeps $p" "$(q "SELECT payload::text FROM skiplock.all_jobs WHERE id = ${id:-0}")" "$want"
	id=$(sed -n "${i}p" "$TMP/exact.ids")
	check_eq "batch enqueue keeps $p" "$(q "SELECT payload::text FROM skiplock.all_jobs WHERE id = ${id:-0}")" "$want"
done

# --json: whether a unique key found an existing job
out=$("$S" enqueue --url "$URL" --json --unique-key j1 jkind)
jid=$(q "SELECT id FROM skiplock.all_jobs WHERE unique_key = 'j1'")
check_eq "--json: a new job is inserted" "$out" "{\"id\":$jid,\"inserted\":true}"
check_eq "--json: a held unique key finds the job" "$("$S" enqueue --url "$URL" --json --unique-key j1 jkind)" \
	"{\"id\":$jid,\"inserted\":false}"
check_eq "--json without a unique key" "$("$S" enqueue --url "$URL" --json jkind | sed 's/[0-9]\+/N/')" \
	'{"id":N,"inserted":true}'
before=$(count)
printf '%s\n' '{"kind":"jb","unique_key":"j2"}' '{"kind":"jb","unique_key":"j1"}' '{"kind":"jb"}' \
	'{"kind":"jb","unique_key":"j2"}' >"$TMP/json.ndjson"
"$S" enqueue --url "$URL" --json --batch "$TMP/json.ndjson" >"$TMP/json.out"
check_eq "--batch --json: one line per job, inserted only where a row was written" \
	"$(sed 's/"id":[0-9]*,//' "$TMP/json.out" | tr '\n' ' ')" \
	'{"inserted":true} {"inserted":false} {"inserted":true} {"inserted":false} '
check_eq "--batch --json: the held key's line has its holder's id" "$(sed -n 2p "$TMP/json.out")" \
	"{\"id\":$jid,\"inserted\":false}"
check_eq "--batch --json: a key repeated in the batch is inserted at its first line" \
	"$(sed -n 1p "$TMP/json.out" | sed 's/,.*//')" "$(sed -n 4p "$TMP/json.out" | sed 's/,.*//')"
check_eq "--batch --json wrote 2 jobs" "$(($(count) - before))" 2
awk 'BEGIN { for (i = 1; i <= 6001; i++)
	if (i % 3000 == 0) printf "{\"kind\":\"jc\",\"unique_key\":\"jck\"}\n"; else printf "{\"kind\":\"jc\"}\n" }' |
	"$S" enqueue --url "$URL" --json --batch - >"$TMP/jc.out"
check_eq "--batch --json over a chunk: a key repeated across chunks is inserted once" \
	"$(grep -c '"inserted":true' "$TMP/jc.out") $(sed -n 6000p "$TMP/jc.out" | grep -c false)" "6000 1"
check_eq "--batch --json over a chunk: 6000 jobs" "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'jc'")" 6000

# bad input: one line, exit 2, nothing written
before=$(count)
expect_exit "NUL byte in a stdin payload" 2 'payload on standard input contains a NUL byte \(at byte 8\)' -- \
	sh -c 'printf '"'"'{"a":1}\0{"b":2}'"'"' | "$0" enqueue --url "$1" k -' "$S" "$URL"
printf '{"kind":"a"}\n{"kind":"b","payload":"x\0y"}\n' >"$TMP/nul.ndjson"
expect_exit "NUL byte in a batch line" 2 '^skiplock enqueue: line 2: contains a NUL byte \(at column 25\)' -- \
	"$S" enqueue --url "$URL" --batch "$TMP/nul.ndjson"
printf '{"kind":"a"}\n\0\n' >"$TMP/nul2.ndjson"
expect_exit "NUL byte on an otherwise empty batch line" 2 'line 2: contains a NUL byte' -- \
	"$S" enqueue --url "$URL" --batch "$TMP/nul2.ndjson"
expect_exit "a malformed number is still refused" 2 'invalid JSON payload at line 1, column 7' -- \
	"$S" enqueue --url "$URL" k '{"a": 01}'
printf '%s\n' '{"kind":"a","payload":[1.5e300, 1-2]}' >"$TMP/badnum.ndjson"
expect_exit "a malformed number in a batch payload is refused" 2 'line 1: invalid JSON at column' -- \
	"$S" enqueue --url "$URL" --batch "$TMP/badnum.ndjson"
printf '%s\n' '{"kind":"a"}' '{"kind":"b"}' '{"kind":"c",' '{"kind":"d"}' >"$TMP/bad.ndjson"
expect_exit "batch with a malformed line" 2 '^skiplock enqueue: line 3: invalid JSON' -- "$S" enqueue --url "$URL" --batch "$TMP/bad.ndjson"
printf '%s\n' '{"kind":"a"}' '{"payload":{}}' >"$TMP/bad2.ndjson"
expect_exit "batch line without kind" 2 'line 2: "kind" is required' -- "$S" enqueue --url "$URL" --batch "$TMP/bad2.ndjson"
printf '%s\n' '{"kind":"a","colour":"red"}' >"$TMP/bad3.ndjson"
expect_exit "batch line with an unknown field" 2 'line 1: unknown field "colour"' -- "$S" enqueue --url "$URL" --batch "$TMP/bad3.ndjson"
expect_exit "batch file missing" 2 'cannot open batch file' -- "$S" enqueue --url "$URL" --batch "$TMP/nope"
expect_exit "invalid JSON payload" 2 'invalid JSON payload at line 1, column' -- "$S" enqueue --url "$URL" k '{"a":'
expect_exit "empty kind" 2 'job kind must be 1 to 128 bytes' -- "$S" enqueue --url "$URL" '' '{}'
expect_exit "over-long kind" 2 'job kind must be 1 to 128 bytes \(got 129\)' -- "$S" enqueue --url "$URL" "$(printf 'k%.0s' $(seq 1 129))"
expect_exit "payload over the limit" 2 'payload is [0-9]+ bytes, over the limit of 100' -- "$S" enqueue --url "$URL" k "{\"x\":\"$(printf 'y%.0s' $(seq 1 120))\"}" --max-payload 100
{ printf '{"x":"'; head -c 1100000 /dev/zero | tr '\0' y; printf '"}'; } >"$TMP/huge.json"
expect_exit "payload over the default limit (stdin)" 2 'over the limit of 1048576' -- sh -c '"$0" enqueue --url "$1" k - <"$2"' "$S" "$URL" "$TMP/huge.json"
expect_exit "unknown option" 2 'unknown option "--colour"' -- "$S" enqueue --url "$URL" --colour red k
expect_exit "bad priority" 2 '--priority: "high" is not an integer' -- "$S" enqueue --url "$URL" --priority high k
expect_exit "negative delay" 2 '--delay: invalid duration "-5s"' -- "$S" enqueue --url "$URL" --delay -5s k
expect_exit "zero max attempts" 2 '--max-attempts: "0" is not an integer from 1' -- "$S" enqueue --url "$URL" --max-attempts 0 k
expect_exit "bad run-at" 2 'invalid input syntax for type timestamp' -- "$S" enqueue --url "$URL" --run-at 'next tuesday-ish' k
expect_exit "missing kind" 2 'expected KIND' -- "$S" enqueue --url "$URL"
check_eq "nothing was written by bad input" "$(count)" "$before"
no_leftovers
finish
