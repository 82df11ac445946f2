#!/usr/bin/env bash
# From one PostgreSQL to Citus (docs/scaling.md, "Moving an installed
# database"): a plain install in use — finished jobs kept, a schedule, a
# held lease, an idempotency key, jobs waiting — in a database without
# Citus is dumped and restored on the coordinator (its tables are then
# local there, a plain install again), and `skiplock init --distributed`
# runs while two C workers drain it.  Afterwards: every job completed once
# with one effect, and the finished jobs, the schedule, the lease under its
# token and the key are all there; no session is left idle in a
# transaction.  Runs under tests/harness/with-cluster --citus
# (tests/README.md).
# shellcheck disable=SC2015  # A && pass || fail
. "$(dirname "$0")/../cli/lib.sh"
: "${SKL_TEST_CITUS_WORKER_PORTS:?run under tests/harness/with-cluster --citus}"
S=$SKL_BIN
N=${SKL_MIGRATE_JOBS:-100}
PLAIN=${DB}_plain
PLAIN_URL="postgresql://$SKL_TEST_DBUSER@$SKL_TEST_PGHOST:$SKL_TEST_PGPORT/$PLAIN"
trap 'admin -c "DROP DATABASE IF EXISTS \"$PLAIN\" WITH (FORCE)" >/dev/null 2>&1; cleanup' EXIT
admin -c "CREATE DATABASE \"$PLAIN\"" >/dev/null
pq() { psql -X -q -At -v ON_ERROR_STOP=1 "$PLAIN_URL" -c "$1"; }

# The plain install, in use.
"$S" init --url "$PLAIN_URL" >"$TMP/init.log" 2>&1 || { fail "init: $(cat "$TMP/init.log")"; finish; }
check_eq "the plain database has no citus" "$(pq "SELECT count(*) FROM pg_extension WHERE extname = 'citus'")" 0
for i in $(seq 1 40); do echo '{"kind": "f", "queue": "qa"}'; done >"$TMP/f.ndjson"
"$S" enqueue --url "$PLAIN_URL" --batch "$TMP/f.ndjson" >/dev/null || fail "enqueue f"
"$S" worker --url "$PLAIN_URL" --queue qa --handler 'f=true' --poll 50ms >"$TMP/wf.log" 2>&1 &
wf=$!
wait_for_plain() { local i; for i in $(seq 1 600); do [ "$(pq "$1")" = "$2" ] && return 0; sleep 0.1; done; return 1; }
wait_for_plain "SELECT count(*) FROM skiplock.finished_jobs WHERE kind = 'f'" 40 || fail "the f jobs did not finish"
kill -TERM "$wf"; wait "$wf" || fail "the f worker did not exit 0"
"$S" cron add mig.nightly '0 3 * * *' nightly --url "$PLAIN_URL" >/dev/null || fail "cron add"
token=$(pq "SELECT skiplock.lease_acquire('mig.lease', 'holder', '10 minutes')")
check_eq "idempotency key acquired" \
	"$(pq "SELECT outcome FROM skiplock.idem_claim('mig.key', 'h1', '1 hour', '10 minutes')")" acquired
for qn in qa qb qc; do
	for i in $(seq 1 "$N"); do echo "{\"kind\": \"t\", \"payload\": {\"n\": $i}, \"queue\": \"$qn\"}"; done
done >"$TMP/t.ndjson"
"$S" enqueue --url "$PLAIN_URL" --batch "$TMP/t.ndjson" >/dev/null || fail "enqueue t"
total=$((3 * N))

# Dumped, and restored on the coordinator: a plain install there.
pg_dump -Fc -f "$TMP/plain.dump" "$PLAIN_URL" && pass "pg_dump" || fail "pg_dump"
pg_restore --no-owner -d "$DIRECT_URL" "$TMP/plain.dump" 2>"$TMP/restore.err" \
	&& pass "pg_restore on the coordinator" || fail "pg_restore: $(head -5 "$TMP/restore.err")"
check_eq "the tables start local" "$(q "SELECT distributed FROM skiplock.layout")" f
"$S" init --url "$URL" >"$TMP/init2.log" 2>&1 && pass "init accepts the restored install" \
	|| fail "init on the restored install: $(cat "$TMP/init2.log")"
q "CREATE TABLE effects (job_id bigint, at timestamptz DEFAULT clock_timestamp())" >/dev/null

# Two workers drain while init --distributed runs.
handler='sleep 0.02; psql -X -q "$EFFECTS_URL" -c "INSERT INTO effects (job_id) VALUES ($SKIPLOCK_JOB_ID)"'
pids=()
for w in 1 2; do
	EFFECTS_URL=$DIRECT_URL "$S" worker --url "$URL" --queue qa --queue qb --queue qc --concurrency 4 \
		--lease 30s --poll 50ms --poll-max 200ms --handler "t=$handler" --handler-env EFFECTS_URL \
		--owner "mig-$w" >"$TMP/w$w.log" 2>&1 &
	pids+=($!)
done
wait_for "SELECT count(*) >= 20 FROM effects" t 60 || fail "the workers did not start"
started=$(q "SELECT count(*) FROM effects")
"$S" init --url "$URL" --distributed >"$TMP/dist.out" 2>"$TMP/dist.err" \
	&& pass "init --distributed while workers run" || fail "init --distributed: $(cat "$TMP/dist.err")"
check_eq "it says it distributed" "$(grep -c 'distributed by queue' "$TMP/dist.out")" 1
done_then=$(q "SELECT count(*) FROM effects")
[ "$done_then" -lt "$total" ] && pass "jobs were left to drain after it ($started done before, $done_then after)" \
	|| fail "the drain ended before the layout changed: nothing shown"
wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 't' AND state = 'completed'" "$total" 300 ||
	fail "not all completed: $(q "SELECT string_agg(state || ':' || n, ' ') FROM (SELECT state, count(*) n FROM skiplock.all_jobs GROUP BY state) x"); $(tail -5 "$TMP/w1.log")"
for pid in "${pids[@]}"; do kill -TERM "$pid"; wait "$pid" || fail "worker $pid did not exit 0"; done

check_eq "the layout is distributed" "$(q "SELECT distributed FROM skiplock.layout")" t
check_eq "every job completed once" \
	"$(q "SELECT count(*) || ' ' || count(DISTINCT id) FROM skiplock.finished_jobs WHERE kind = 't' AND state = 'completed'")" \
	"$total $total"
check_eq "each with one effect" "$(q "SELECT count(*) || ' ' || count(DISTINCT job_id) FROM effects")" "$total $total"
check_eq "no job left live" "$(q "SELECT count(*) FROM skiplock.jobs")" 0
check_eq "the finished jobs of before are kept" \
	"$(q "SELECT count(*) FROM skiplock.finished_jobs WHERE kind = 'f' AND state = 'completed'")" 40
check_eq "the schedule is kept" "$(q "SELECT kind || ' ' || expression FROM skiplock.schedules WHERE name = 'mig.nightly'")" \
	"nightly 0 3 * * *"
check_eq "the lease is held under its token" \
	"$(q "SELECT skiplock.lease_renew('mig.lease', 'holder', $token, '10 minutes')")" t
check_eq "the key is still in progress" \
	"$(q "SELECT outcome FROM skiplock.idem_claim('mig.key', 'h1', '1 hour', '10 minutes')")" in_progress
check_eq "no session idle in a transaction" \
	"$(q "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'")" 0
# what the workers said while the layout changed, for the record
grep -h -i 'error\|retry' "$TMP/w1.log" "$TMP/w2.log" | sort | uniq -c | head -5 | sed 's/^/     /'
finish
