#!/usr/bin/env bash
# skiplock init --distributed on a Citus cluster: jobs and finished_jobs are
# distributed by queue and colocated, the reference tables are reference
# tables, and the C worker drains two queues that live on different workers,
# every job completed exactly once, also when a worker is SIGKILLed mid-job
# and skiplock.rescue() gives its jobs back.  Runs under
# tests/harness/with-cluster --citus (tests/README.md).
# shellcheck disable=SC2015  # A && pass || fail
. "$(dirname "$0")/../cli/lib.sh"
: "${SKL_TEST_CITUS_WORKER_PORTS:?run under tests/harness/with-cluster --citus}"
S=$SKL_BIN
N=${SKL_DIST_JOBS:-60}

"$S" init --url "$URL" --distributed >"$TMP/init.out" 2>"$TMP/init.err" \
	&& pass "init --distributed" || fail "init --distributed: $(cat "$TMP/init.err")"
check_eq "init says it distributed" "$(grep -c 'distributed by queue' "$TMP/init.out")" 1
"$S" init --url "$URL" --distributed >"$TMP/init2.out" 2>&1 || fail "second init --distributed"
check_eq "a second run changes nothing" "$(grep -c 'distributed already' "$TMP/init2.out")" 1
check_eq "the layout is recorded" "$(q "SELECT distributed FROM skiplock.layout")" t

check_eq "jobs and finished_jobs distributed by queue, colocated" \
	"$(q "SELECT count(DISTINCT p.colocationid) || ' ' || string_agg(c.relname || ':' || p.partmethod::text || ':' || column_to_column_name(p.logicalrelid, p.partkey), ' ' ORDER BY c.relname)
	        FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid
	       WHERE p.logicalrelid IN ('skiplock.jobs'::regclass, 'skiplock.finished_jobs'::regclass)")" \
	"1 finished_jobs:h:queue jobs:h:queue"
check_eq "retention, breakers, breaker_events are reference tables" \
	"$(q "SELECT string_agg(c.relname, ' ' ORDER BY c.relname) FROM pg_dist_partition p
	        JOIN pg_class c ON c.oid = p.logicalrelid
	       WHERE p.partmethod = 'n' AND c.relnamespace = 'skiplock'::regnamespace")" \
	"breaker_events breakers retention"
check_eq "the jobs table has no triggers" \
	"$(q "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'skiplock.jobs'::regclass AND NOT tgisinternal")" 0

# Two queues whose shards are on different workers.
node_of() { q "SELECT nodeport FROM citus_shards WHERE shardid = get_shard_id_for_distribution_column('skiplock.jobs', '$1') LIMIT 1"; }
QA=q0
PA=$(node_of "$QA")
QB=
for i in $(seq 1 40); do
	if [ "$(node_of "q$i")" != "$PA" ]; then QB=q$i; break; fi
done
[ -n "$QB" ] && pass "queues $QA and $QB are on workers $PA and $(node_of "$QB")" || fail "no queue on another worker"

for qn in "$QA" "$QB"; do
	seq 1 "$N" | sed "s/.*/{\"kind\": \"t\", \"payload\": {\"n\": &}, \"queue\": \"$qn\"}/" >"$TMP/$qn.ndjson"
	"$S" enqueue --url "$URL" --batch "$TMP/$qn.ndjson" >/dev/null || fail "enqueue into $qn"
done
check_eq "the jobs are in two queues" "$(q "SELECT string_agg(queue || ':' || n, ' ' ORDER BY queue) FROM (SELECT queue, count(*) n FROM skiplock.jobs GROUP BY queue) x")" \
	"$(printf '%s\n' "$QA:$N" "$QB:$N" | sort | paste -sd' ')"
# the rows are on the workers: each worker's shard holds its queue's rows
for qn in "$QA" "$QB"; do
	port=$(node_of "$qn")
	shard=$(q "SELECT shard_name FROM citus_shards WHERE shardid = get_shard_id_for_distribution_column('skiplock.jobs', '$qn')")
	check_eq "worker $port holds queue $qn" \
		"$(psql -X -q -At "postgresql://$SKL_TEST_DBUSER@$SKL_TEST_PGHOST:$port/$DB" -c "SELECT count(*) FROM $shard WHERE queue = '$qn'")" "$N"
done

FAST=(--poll 50ms --poll-max 200ms --rescue-every 300ms)
# A worker that is SIGKILLed while it holds jobs (its handler sleeps).
"$S" worker --url "$URL" --queue "$QA" --queue "$QB" --concurrency 4 --lease 2s "${FAST[@]}" \
	--handler 't=sleep 30' 2>"$TMP/w0.log" &
W0=$!
wait_for "SELECT count(*) >= 4 FROM skiplock.jobs WHERE state = 'running'" t 20 || fail "the first worker claimed nothing: $(tail -5 "$TMP/w0.log")"
kill -KILL "$W0"
wait "$W0" 2>/dev/null
HELD=$(q "SELECT string_agg(id::text, ',' ORDER BY id) FROM skiplock.jobs WHERE state = 'running'")
K=$(q "SELECT count(*) FROM skiplock.jobs WHERE state = 'running'")
[ "$K" -ge 4 ] && pass "the killed worker held $K jobs" || fail "the killed worker held $K jobs"
q "UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 second' WHERE queue IN ('$QA', '$QB') AND state = 'running'" >/dev/null
check_eq "rescue() gives the killed worker's jobs back" \
	"$(q "SELECT count(*) || ' ' || string_agg(state, ',' ORDER BY id) FROM skiplock.rescue(100)" | cut -d' ' -f1)" "$K"
check_eq "they are available again" \
	"$(q "SELECT count(*) FROM skiplock.jobs WHERE id IN ($HELD) AND state = 'available' AND attempt = 1")" "$K"

# Two workers drain both queues.
for w in 1 2; do
	"$S" worker --url "$URL" --queue "$QA" --queue "$QB" --concurrency 4 "${FAST[@]}" \
		--handler 't=cat >/dev/null; echo "{\"w\": '"$w"'}"' 2>"$TMP/w$w.log" &
	eval "W$w=\$!"
done
wait_for "SELECT count(*) FROM skiplock.finished_jobs WHERE state = 'completed'" $((2 * N)) 120 \
	|| fail "not all completed: $(q "SELECT string_agg(state || ':' || n, ' ') FROM (SELECT state, count(*) n FROM skiplock.all_jobs GROUP BY state) x"); $(grep -v '^$' "$TMP/w1.log" | tail -5)"
kill -TERM "$W1" "$W2" 2>/dev/null
wait "$W1" "$W2"
check_eq "every job completed once" \
	"$(q "SELECT count(*) || ' ' || count(DISTINCT id) FROM skiplock.finished_jobs WHERE state = 'completed'")" "$((2 * N)) $((2 * N))"
check_eq "no job left in jobs" "$(q "SELECT count(*) FROM skiplock.jobs")" 0
check_eq "the rescued jobs completed on their second attempt" \
	"$(q "SELECT count(*) FROM skiplock.finished_jobs WHERE id IN ($HELD) AND attempt = 2 AND errors->0->>'error' LIKE 'lease expired%'")" "$K"
check_eq "both workers recorded nothing that failed" \
	"$(cat "$TMP/w1.log" "$TMP/w2.log" | grep -c -i 'failed, will retry')" 0

# The outcome functions themselves, fenced, on one shard each.
id=$(q "SELECT skiplock.enqueue('u', '{}', '$QB')")
row=$(q "SELECT id || ' ' || fencing || ' ' || queue FROM skiplock.claim('t1', '{u}', '{$QB}', 1, '30s')")
read -r cid cf cq <<<"$row"
check_eq "claim by queue" "$cid $cq" "$id $QB"
check_eq "heartbeat" "$(q "SELECT extended FROM skiplock.heartbeat(ARRAY[$cid], ARRAY[$cf], '30s', ARRAY['$cq'])")" t
check_eq "fail (retry) under the queue" "$(q "SELECT skiplock.fail($cid, $cf, 'boom', true, '1 ms', '$cq')")" available
sleep 0.1
row=$(q "SELECT id || ' ' || fencing FROM skiplock.claim('t1', '{u}', NULL, 1, '30s')")
read -r cid cf <<<"$row"
check_eq "claim with no queue finds it" "$cid" "$id"
check_eq "a stale fencing token is refused" "$(q "SELECT skiplock.complete($cid, $((cf - 1)), NULL, '$QB')")" fenced_out
q "BEGIN; SELECT skiplock.job_fence($cid, $cf, '$QB'); COMMIT" >/dev/null && pass "job_fence" || fail "job_fence"
check_eq "complete" "$(q "SELECT skiplock.complete($cid, $cf, '{\"r\": 1}', '$QB')")" completed
check_eq "complete again" "$(q "SELECT skiplock.complete($cid, $cf, NULL, '$QB')")" completed
check_eq "its error history" "$(q "SELECT attempt || ' ' || (errors->0->>'error') FROM skiplock.finished_jobs WHERE id = $cid")" "2 boom"
finish
