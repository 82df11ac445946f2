#!/usr/bin/env bash
# Dependencies between jobs (sql/0030_dependencies.sql, docs/flow-control.md)
# with real C workers:
# - a batch of 500 jobs and its callback, three workers, one killed with
#   SIGKILL while the batch runs: the callback takes effect exactly once,
#   after the last child finished, with the children counted;
# - a chain of 10,000 jobs runs in order, each after the one before;
# - policies: a cancelled parent cancels its chain ('cancel'), or lets the
#   child run ('run');
# - bad input refused with its SQLSTATE, nothing written.
# The diamond through kill -9, in every language, is the conformance
# suite's (tests/conformance/cases_flow.sh).
. "$(dirname "$0")/lib.sh"

"$SKL_BIN" init --url "$URL" >"$TMP/init.log" 2>&1 || { fail "init: $(cat "$TMP/init.log")"; finish; }
q "CREATE TABLE effects (job_id bigint, kind text, seen bigint, at timestamptz DEFAULT clock_timestamp())" >/dev/null

# bad input: each refused with its SQLSTATE, nothing written
sqlstate() { psql -X -q -At "$URL" -v VERBOSITY=verbose -c "SELECT $1" 2>&1 |
	sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\):.*/\1/p' | head -n 1; }
p=$(q "SELECT skiplock.enqueue('dep.p', '{}')")
check_eq "an unknown parent id: 23503" "$(sqlstate "skiplock.enqueue_after(ARRAY[$p, 987654321], 'dep.bad')")" 23503
check_eq "an unknown parent key: 23503" \
	"$(sqlstate "skiplock.enqueue_after(NULL, 'dep.bad', depends_on_keys => ARRAY['no-such-key'])")" 23503
check_eq "a NULL parent: 22004" "$(sqlstate "skiplock.enqueue_after(ARRAY[NULL::bigint], 'dep.bad')")" 22004
check_eq "an unknown policy: 22023" \
	"$(sqlstate "skiplock.enqueue_after(ARRAY[$p], 'dep.bad', on_parent_failure => 'maybe')")" 22023
check_eq "over 1000 parents: 22023" \
	"$(sqlstate "skiplock.enqueue_after(ARRAY(SELECT $p FROM generate_series(1, 1001)), 'dep.bad')")" 22023
check_eq "an empty batch: 22023" "$(sqlstate "skiplock.enqueue_batch('dep.bad', '{}', 'dep.cb')")" 22023
check_eq "a batch without a callback kind: 22023" \
	"$(sqlstate "skiplock.enqueue_batch('dep.bad', ARRAY['{}'::jsonb], NULL)")" 22023
check_eq "nothing written by the refused calls" \
	"$(q "SELECT (SELECT count(*) FROM skiplock.all_jobs WHERE kind LIKE 'dep.bad%' OR kind = 'dep.cb')
	           + (SELECT count(*) FROM skiplock.job_waits) + (SELECT count(*) FROM skiplock.job_deps)")" 0

# policies: p cancelled -> k1 (cancel) cancelled -> k2 (cancel) cancelled; k3 (run) runs
k1=$(q "SELECT skiplock.enqueue_after(ARRAY[$p], 'dep.k')")
k2=$(q "SELECT skiplock.enqueue_after(ARRAY[$k1], 'dep.k')")
k3=$(q "SELECT skiplock.enqueue_after(ARRAY[$p], 'dep.k', on_parent_failure => 'run')")
check_eq "a waiting child is not due" "$(q "SELECT skiplock.job_waits_for($k2)")" \
	"dependencies: 1 of 1 parent(s) not finished"
q "SELECT skiplock.job_cancel($p)" >/dev/null
check_eq "cancel: the chain is cancelled; run: the child is due" \
	"$(q "SELECT string_agg(state || ' ' || (run_at <= now()), ', ' ORDER BY id) FROM skiplock.all_jobs WHERE id IN ($k1, $k2, $k3)")" \
	"cancelled false, cancelled false, available true"
check_eq "the cancelled child says why" \
	"$(q "SELECT errors -> -1 ->> 'error' FROM skiplock.all_jobs WHERE id = $k2")" \
	"cancelled: a job it depends on was discarded or cancelled"

# a batch of 500 and a callback; three workers, one killed mid-batch
handler='psql -X -q "$EFFECTS_URL" -c "INSERT INTO effects (job_id, kind) VALUES ($SKIPLOCK_JOB_ID, '"'"'dep.child'"'"')"'
# the callback records how many children it saw completed when it ran
cb='psql -X -q "$EFFECTS_URL" -c "INSERT INTO effects (job_id, kind, seen) SELECT $SKIPLOCK_JOB_ID, '"'"'dep.done'"'"', count(*) FROM skiplock.all_jobs WHERE kind = '"'"'dep.child'"'"' AND state = '"'"'completed'"'"'"'
ids=$(q "SELECT array_to_string(skiplock.enqueue_batch('dep.child', array_fill('{}'::jsonb, ARRAY[500]),
           'dep.done', '{\"invoice\": 7}'), ',')")
cbid=${ids##*,}
pids=()
for n in 1 2 3; do
	EFFECTS_URL=$DIRECT_URL "$SKL_BIN" worker --url "$URL" --handler "dep.child=$handler" \
		--handler "dep.done=$cb" --handler-env EFFECTS_URL --lease 2s --owner "batch-$n" \
		>"$TMP/batch-$n.log" 2>&1 &
	pids+=($!)
done
wait_for "SELECT count(*) >= 100 FROM effects" t 60 || fail "the batch did not start"
kill -KILL "${pids[0]}"
wait "${pids[0]}" 2>/dev/null
wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $cbid" completed 120 ||
	fail "the callback did not complete: $(q "SELECT state || ' ' || count(*) FROM skiplock.all_jobs WHERE id IN ($ids) GROUP BY state")"
for pid in "${pids[@]:1}"; do kill -TERM "$pid"; wait "$pid" || fail "worker $pid did not exit 0"; done
check_eq "every child completed" \
	"$(q "SELECT count(*) FROM skiplock.all_jobs WHERE id IN ($ids) AND id <> $cbid AND state = 'completed'")" 500
check_eq "the callback took effect exactly once" "$(q "SELECT count(*) FROM effects WHERE kind = 'dep.done'")" 1
check_eq "after the last child's effect" \
	"$(q "SELECT (SELECT at FROM effects WHERE kind = 'dep.done') > max(at) FROM effects WHERE kind = 'dep.child'")" t
# (attempted_at and finished_at are each a transaction's now(), its start,
# so they do not order two transactions; the callback's own view does)
check_eq "the callback saw every child completed when it ran" \
	"$(q "SELECT seen FROM effects WHERE kind = 'dep.done'")" 500
check_eq "its payload counts the batch" "$(q "SELECT payload::text FROM skiplock.all_jobs WHERE id = $cbid")" \
	'{"batch": {"size": 500, "cancelled": 0, "completed": 500, "discarded": 0}, "invoice": 7}'

# a chain of 10,000 (fewer through the pooler, to keep the run short)
links=10000; [ "$MODE" = pooled ] && links=2000
q "DO \$\$ DECLARE prev bigint := skiplock.enqueue('dep.link', '{\"i\": 0}');
   BEGIN FOR i IN 1..$((links - 1)) LOOP
     prev := skiplock.enqueue_after(ARRAY[prev], 'dep.link', jsonb_build_object('i', i)); END LOOP; END \$\$" >/dev/null
"$SKL_BIN" worker --url "$URL" --handler 'dep.link=true' --owner chain --concurrency 4 >"$TMP/chain.log" 2>&1 &
chain=$!
start=$SECONDS
wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'dep.link' AND state = 'completed'" "$links" 600 ||
	fail "the chain did not complete: $(q "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'dep.link' AND state = 'completed'") of $links"
echo "     a chain of $links ran in $((SECONDS - start)) s"
kill -TERM "$chain"; wait "$chain" || fail "the chain's worker did not exit 0"
check_eq "the chain ran in order" \
	"$(q "SELECT count(*) FROM (SELECT attempted_at, lag(finished_at) OVER (ORDER BY (payload->>'i')::int) AS prev
	        FROM skiplock.all_jobs WHERE kind = 'dep.link') s WHERE attempted_at < prev")" 0
check_eq "nothing left waiting" "$(q "SELECT count(*) FROM skiplock.job_waits")" 0
finish
