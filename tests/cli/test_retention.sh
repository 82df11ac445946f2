#!/usr/bin/env bash
# test_retention.sh — finished jobs leave skiplock.jobs, are kept for their
# retention and dropped a partition at a time by the leaderless maintenance
# (sql/0013_finished.sql, skiplock retention).
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >"$TMP/init" 2>&1 || fail "init: $(cat "$TMP/init")"

# Claims up to 1000 due jobs of kind K and completes each (the SQL protocol).
complete_all() { # KIND
	psql -X -q -At -v ON_ERROR_STOP=1 "$URL" \
		-c "SELECT count(skiplock.complete(id, fencing)) FROM skiplock.claim('t', ARRAY['$1'], NULL, 1000)"
}
enq() { # KIND QUEUE N
	q "SELECT count(skiplock.enqueue('$1', '{}', '$2')) FROM generate_series(1, $3)" >/dev/null
}
maintain() { "$S" retention maintain --url "$URL" >"$TMP/m" 2>&1; }

# ---- bad input: one line, exit 2, nothing written ----
before=$(q "SELECT count(*) FROM skiplock.retention")
expect_exit "unknown state" 2 "--state must be" -- "$S" retention set --url "$URL" --state "done" --retain 1h
expect_exit "set without a value" 2 "give --retain" -- "$S" retention set --url "$URL"
expect_exit "a bad duration" 2 "retain" -- "$S" retention set --url "$URL" --retain soon
expect_exit "width too large" 2 "partition-width" -- "$S" retention set --url "$URL" --partition-width 2d
expect_exit "width and queue" 2 "does not apply" -- "$S" retention set --url "$URL" --queue a --partition-width 1m
expect_exit "unknown verb" 2 "retention" -- "$S" retention drop --url "$URL"
check_eq "nothing written by bad input" "$(q "SELECT count(*) FROM skiplock.retention")" "$before"
check_eq "SQL refuses a negative retention (22023)" \
	"$(psql -X -q -At "$URL" -c "SELECT skiplock.retention_set('q', NULL, '-1 h')" 2>&1 | grep -c 'keep must be')" 1

# ---- where finished jobs go ----
"$S" retention set --url "$URL" --queue audit --retain forever >/dev/null || fail "set forever"
"$S" retention set --url "$URL" --queue pings --state completed --retain 0 >/dev/null || fail "set 0"
"$S" retention show --url "$URL" --json >"$TMP/show" || fail "show --json"
check_eq "show: audit kept forever" "$(jq -c '[.settings[] | select(.queue == "audit") | .keep_ms] | unique' "$TMP/show")" "[null]"
check_eq "show: the defaults" "$(jq -c '[.settings[] | select(.queue == "*") | .keep_ms]' "$TMP/show")" \
	"[604800000,86400000,604800000]"
enq k default 3; enq k audit 2; enq k pings 4
check_eq "nine jobs completed" "$(complete_all k)" 9
check_eq "no finished job left in skiplock.jobs" "$(q "SELECT count(*) FROM skiplock.jobs")" 0
check_eq "kept: default and audit, not pings" \
	"$(q "SELECT string_agg(queue || ':' || n, ' ' ORDER BY queue) FROM (SELECT queue, count(*) n FROM skiplock.finished_jobs GROUP BY queue) x")" \
	"audit:2 default:3"
check_eq "audit's jobs in the forever partition" "$(q "SELECT count(*) FROM skiplock.finished_jobs_forever")" 2
check_eq "a completed job's expiry is its finish + 24 h" \
	"$(q "SELECT bool_and(expires_at = finished_at + interval '24 hours') FROM skiplock.finished_jobs WHERE queue = 'default'")" t
check_eq "jobs show finds a finished job" \
	"$("$S" jobs show --url "$URL" "$(q "SELECT min(id) FROM skiplock.finished_jobs")" --json | jq -r .state)" completed
id=$(q "SELECT min(id) FROM skiplock.finished_jobs WHERE queue = 'default'")
fencing=$(q "SELECT fencing FROM skiplock.finished_jobs WHERE id = $id")
check_eq "complete again by the same claim: completed" \
	"$(psql -X -q -At "$URL" -c "SELECT skiplock.complete($id, $fencing)")" completed
check_eq "complete by another claim: fenced_out" \
	"$(psql -X -q -At "$URL" -c "SELECT skiplock.complete($id, $((fencing + 1)))")" fenced_out

# ---- retry of a discarded job, cancel ----
enq d default 1
did=$(q "SELECT max(id) FROM skiplock.jobs")
psql -X -q -At "$URL" -c "SELECT skiplock.fail(id, fencing, 'no', false) FROM skiplock.claim('t', ARRAY['d'])" >/dev/null
check_eq "discarded job moved" "$(q "SELECT state FROM skiplock.finished_jobs WHERE id = $did")" discarded
"$S" jobs retry --url "$URL" "$did" >/dev/null 2>&1 || fail "jobs retry of a discarded job"
check_eq "retried: back in skiplock.jobs, available" \
	"$(q "SELECT state FROM skiplock.jobs WHERE id = $did")/$(q "SELECT count(*) FROM skiplock.finished_jobs WHERE id = $did")" "available/0"
"$S" jobs cancel --url "$URL" "$did" >/dev/null 2>&1 || fail "jobs cancel"
check_eq "cancelled: moved" "$(q "SELECT state FROM skiplock.all_jobs WHERE id = $did")" cancelled
expect_exit "cancel a cancelled job" 1 "cannot cancel job" -- "$S" jobs cancel --url "$URL" "$did"

# ---- expiry: whole partitions, never a job before its time ----
"$S" retention set --url "$URL" --partition-width 1s >/dev/null || fail "width 1s"
"$S" retention set --url "$URL" --retain 2s >/dev/null || fail "retain 2s"
q "DELETE FROM skiplock.retention WHERE queue = 'pings'" >/dev/null
maintain || fail "maintain: $(cat "$TMP/m")"
q "CREATE TABLE seen (id bigint PRIMARY KEY, expires_at timestamptz)" >/dev/null
early=0
for round in $(seq 1 25); do
	enq k default 20
	complete_all k >/dev/null
	q "INSERT INTO seen SELECT id, expires_at FROM skiplock.finished_jobs ON CONFLICT DO NOTHING" >/dev/null
	maintain || fail "maintain round $round: $(cat "$TMP/m")"
	n=$(q "SELECT count(*) FROM seen s WHERE s.expires_at > now()
	        AND NOT EXISTS (SELECT FROM skiplock.finished_jobs f WHERE f.id = s.id)")
	early=$((early + n))
	sleep 0.2
done
check_eq "no job dropped before its expiry (25 rounds across partition boundaries)" "$early" 0
check_eq "expired jobs were dropped" "$(q "SELECT count(*) > 0 FROM seen s WHERE NOT EXISTS (SELECT FROM skiplock.finished_jobs f WHERE f.id = s.id)")" t
# (the last step of the last run found nothing to expire: none whose
# bound had passed when it ran is left, whatever time passed since)
check_eq "only expired partitions remain dropped: none left behind" \
	"$(q "SELECT count(*) FROM skiplock.finished_partitions WHERE hi <= (SELECT last_run_at FROM skiplock.maintenance)")" 0
check_eq "every partition is registered" \
	"$(q "SELECT count(*) FROM pg_inherits WHERE inhparent = 'skiplock.finished_jobs'::regclass")" \
	"$(q "SELECT count(*) + 2 FROM skiplock.finished_partitions")"
check_eq "kept forever: audit's jobs" "$(q "SELECT count(*) FROM skiplock.finished_jobs WHERE queue = 'audit'")" 2

# ---- the width follows the retention; tokens are pruned ----
expect_exit "a bad width" 2 "partition-width" -- "$S" retention set --url "$URL" --partition-width wide
"$S" retention set --url "$URL" --partition-width auto >/dev/null || fail "width auto"
"$S" retention set --url "$URL" --retain 5m >/dev/null || fail "retain 5m"
check_eq "auto width: a quarter of 5 minutes, rounded up to a minute" \
	"$(q "SELECT skiplock.partition_width()")" "00:02:00"
"$S" retention show --url "$URL" --json >"$TMP/w" || fail "show --json"
check_eq "show: the width and that it is automatic" \
	"$(jq -c '[.partition_width_ms, .partition_width_auto]' "$TMP/w")" "[120000,true]"
# A job expiring past the partitions made ahead waits in the default
# partition; the partitions near now are made all the same.
q "INSERT INTO skiplock.finished_jobs (id, kind, queue, state, expires_at)
   VALUES (nextval('skiplock.jobs_id_seq'), 'far', 'default', 'discarded', now() + interval '10 days')" >/dev/null
check_eq "the far job is in the default partition" \
	"$(q "SELECT count(*) FROM skiplock.finished_jobs_default WHERE kind = 'far'")" 1
q "INSERT INTO skiplock.enqueue_tokens (token, created_at)
   SELECT 'old-' || g, now() - interval '16 minutes' FROM generate_series(1, 3) g
   UNION ALL SELECT 'new-' || g, now() - interval '14 minutes' FROM generate_series(1, 2) g" >/dev/null
maintain || fail "maintain at the automatic width: $(cat "$TMP/m")"
check_eq "a 2-minute partition covers now + 3 minutes" \
	"$(q "SELECT count(*) FROM skiplock.finished_partitions
	       WHERE lo <= now() + interval '3 minutes' AND hi > now() + interval '3 minutes'
	         AND hi - lo = interval '2 minutes'")" 1
check_eq "new partitions are not vacuumed for inserts alone" \
	"$(q "SELECT c.reloptions::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	       WHERE n.nspname = 'skiplock' AND c.relname = (SELECT name FROM skiplock.finished_partitions
	                                                      WHERE hi - lo = interval '2 minutes'
	                                                      ORDER BY lo DESC LIMIT 1)")" \
	"{autovacuum_vacuum_insert_threshold=-1}"
check_eq "tokens older than 15 minutes pruned, younger ones kept" \
	"$(q "SELECT string_agg(token, ' ' ORDER BY token) FROM skiplock.enqueue_tokens
	       WHERE token LIKE 'old-%' OR token LIKE 'new-%'")" "new-1 new-2"
q "DELETE FROM skiplock.finished_jobs WHERE kind = 'far'" >/dev/null
"$S" retention set --url "$URL" --partition-width 1h >/dev/null || fail "width 1h"
check_eq "a width set by hand" "$(q "SELECT skiplock.partition_width()")/$(q "SELECT partition_width IS NULL FROM skiplock.maintenance")" "01:00:00/f"

# ---- two at once do nothing twice ----
"$S" retention maintain --url "$URL" >"$TMP/a" 2>&1 & A=$!
"$S" retention maintain --url "$URL" >"$TMP/b" 2>&1 & B=$!
wait $A; ra=$?; wait $B; rb=$?
check_eq "two maintainers at once both exit 0" "$ra$rb" 00
check_eq "no partition twice" "$(q "SELECT count(*) = count(DISTINCT lo) FROM skiplock.finished_partitions")" t
check_eq "a stale token does nothing (SK001)" \
	"$(psql -X -q -At "$URL" -c "SELECT skiplock.maintain('x', 0)" 2>&1 | grep -c 'stale fencing token')" 1

# ---- the move of an older installation's finished jobs, killed half-way ----
"$S" retention reset --url "$URL" >/dev/null || fail "reset"
"$S" retention set --url "$URL" --partition-width 6h >/dev/null || fail "width back to 6h"
q "INSERT INTO skiplock.jobs (id, kind, queue, state, finished_at, attempt)
   SELECT nextval('skiplock.jobs_id_seq'), 'old', 'default', 'completed', now() - interval '1 hour', 1
     FROM generate_series(1, 60000)" >/dev/null
total=60000
# (a lease the runs above did not release in time expires within 15 s)
wait_for "SELECT count(*) FROM skiplock.leases WHERE name = 'skiplock.maintenance' AND expires_at > clock_timestamp()" 0 20 ||
	fail "the maintenance lease stayed taken: $(q "SELECT owner FROM skiplock.leases WHERE name = 'skiplock.maintenance'")"
"$S" retention maintain --url "$URL" >"$TMP/k" 2>&1 & K=$!
wait_for "SELECT count(*) < 60000 FROM skiplock.jobs WHERE state = 'completed'" t 30 || fail "the move did not start: $(cat "$TMP/k")"
kill -KILL $K; wait $K 2>/dev/null
check_eq "killed half-way: nothing lost, nothing twice" \
	"$(q "SELECT count(*) || ' ' || count(DISTINCT id) FROM skiplock.all_jobs WHERE kind = 'old'")" "$total $total"
no_leftovers
end=$((SECONDS + 30))
until maintain && ! grep -q "another holder" "$TMP/m"; do
	[ $SECONDS -lt $end ] || { fail "the next maintenance never ran: $(cat "$TMP/m")"; break; }
	sleep 1
done
check_eq "the next run finished the move" \
	"$(q "SELECT count(*) FROM skiplock.jobs WHERE state = 'completed'")/$(q "SELECT count(*) FROM skiplock.finished_jobs WHERE kind = 'old'")" "0/60000"
check_eq "moved jobs keep their expiry from their finish" \
	"$(q "SELECT bool_and(expires_at = finished_at + interval '24 hours') FROM skiplock.finished_jobs WHERE kind = 'old'")" t

# ---- status and the claim's plan ----
"$S" status --url "$URL" >"$TMP/st" 2>&1 || fail "status: $(cat "$TMP/st")"
grep -q "retention" "$TMP/st" && pass "status shows the retention" || fail "status: no retention line: $(cat "$TMP/st")"
finish
