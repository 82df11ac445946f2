#!/usr/bin/env bash
# test_upgrade.sh — schema step 0013 upgrades an installation holding
# SKL_UPGRADE_JOBS jobs (1,000,000 by default) in place while workers keep
# running: `skiplock init` installs the step, then moves the finished jobs
# out of skiplock.jobs in bounded batches with a progress line; nothing is
# lost, no job runs twice, no lock or transaction is left behind.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
SQL=$(cd "$(dirname "$0")/../../sql" && pwd -P)
N=${SKL_UPGRADE_JOBS:-1000000}
# The newest step's number: init installs up to it.
LATEST=$(ls "$SQL" | sed -n 's/^0*\([0-9][0-9]*\)_.*\.sql$/\1/p' | sort -n | tail -1)

# ---- the schema as the release before step 0013 left it ----
# (the bootstrap of src/lib/core/schema.c, then each step and its record)
q "CREATE SCHEMA skiplock; CREATE TABLE skiplock.schema_version (version int PRIMARY KEY,
   name text NOT NULL, checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
for f in "$SQL"/00[0-9][0-9]_*.sql; do
	step=$(basename "$f" .sql)
	[ $((10#${step%%_*})) -le 12 ] || continue
	psql -X -q -v ON_ERROR_STOP=1 "$DIRECT_URL" -f "$f" >/dev/null 2>"$TMP/step" ||
		{ fail "step $step: $(head -c 300 "$TMP/step")"; finish; }
	q "INSERT INTO skiplock.schema_version (version, name, checksum)
	   VALUES ($((10#${step%%_*})), '$step', '$(sha256sum "$f" | cut -d' ' -f1)')" >/dev/null
done
check_eq "installed up to step 12" "$(q "SELECT max(version) FROM skiplock.schema_version")" 12

# ---- N jobs: finished over the last 20 hours (a tenth discarded), and a backlog ----
t0=$SECONDS
q "INSERT INTO skiplock.jobs (kind, queue, state, attempt, payload, created_at, finished_at)
   SELECT 'old', 'q' || (i % 4), CASE WHEN i % 10 = 0 THEN 'discarded' ELSE 'completed' END, 1,
          jsonb_build_object('i', i), now() - interval '21 hours',
          now() - (i % 72000) * interval '1 second'
     FROM generate_series(1, $N) i" >/dev/null
q "SELECT count(skiplock.enqueue('live', jsonb_build_object('i', i))) FROM generate_series(1, 2000) i" >/dev/null
q "VACUUM ANALYZE skiplock.jobs" >/dev/null
echo "# $N finished jobs and 2000 waiting written in $((SECONDS - t0)) s"
finished=$N

# ---- workers on the protocol keep running through the upgrade ----
worker() { # NAME: claims and completes live jobs until stopped
	while [ ! -e "$TMP/stop" ]; do
		psql -X -q -At "$URL" -c "SELECT count(skiplock.complete(id, fencing))
		  FROM skiplock.claim('$1', ARRAY['live'], NULL, 20)" >>"$TMP/$1.log" 2>&1
	done
}
worker w1 & W1=$!
worker w2 & W2=$!
producer() { # more live jobs while the upgrade runs
	local i=0
	while [ ! -e "$TMP/stop" ] && [ $i -lt 40 ]; do
		psql -X -q -At "$URL" -c "SELECT count(skiplock.enqueue('live')) FROM generate_series(1, 50)" >/dev/null 2>&1 && i=$((i + 1))
		sleep 0.1
	done
}
producer & P=$!

t0=$SECONDS
"$S" init --url "$URL" >"$TMP/init.out" 2>"$TMP/init.err"
rc=$?
took=$((SECONDS - t0))
check_eq "init exits 0" "$rc" 0
grep -q "installed: version $LATEST" "$TMP/init.out" && pass "step 0013 installed" || fail "init: $(cat "$TMP/init.out" "$TMP/init.err" | head -c 400)"
lines=$(grep -c "moving finished jobs to skiplock.finished_jobs: [0-9]* moved, [0-9]* to go" "$TMP/init.err")
[ "$lines" -ge 2 ] && pass "a progress line per batch ($lines)" || fail "progress lines: $(head -c 400 "$TMP/init.err")"
echo "# init: $took s; $(tail -n 1 "$TMP/init.err")"
wait $P
touch "$TMP/stop"
wait $W1 $W2

check_eq "no finished job left in skiplock.jobs" \
	"$(q "SELECT count(*) FROM skiplock.jobs WHERE state IN ('completed', 'discarded', 'cancelled')")" 0
check_eq "every finished job moved, none twice" \
	"$(q "SELECT count(*) || ' ' || count(DISTINCT id) FROM skiplock.finished_jobs WHERE kind = 'old'")" \
	"$finished $finished"
check_eq "each keeps the expiry its finish gives it" \
	"$(q "SELECT count(*) FROM skiplock.finished_jobs WHERE kind = 'old' AND expires_at <>
	      finished_at + CASE state WHEN 'completed' THEN interval '24 hours' ELSE interval '7 days' END")" 0
live=$(q "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'live'")
[ "$live" -ge 2000 ] && pass "live jobs enqueued during the upgrade: $live" || fail "live jobs: $live"
# whatever the workers had not finished when stopped is still waiting, once
check_eq "live jobs: each completed once or still waiting, none lost" \
	"$(q "SELECT count(*) FILTER (WHERE state = 'completed' AND attempt = 1)
	           + count(*) FILTER (WHERE state = 'available' AND attempt = 0) FROM skiplock.all_jobs
	      WHERE kind = 'live'")" "$live"
[ "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'live' AND state = 'completed'")" -gt 0 ] &&
	pass "the workers completed jobs during the upgrade" || fail "no live job completed"
check_eq "the maintenance lease was released" \
	"$(q "SELECT count(*) FROM skiplock.leases WHERE name = 'skiplock.maintenance' AND expires_at > clock_timestamp()")" 0
no_leftovers
"$S" init --url "$URL" >"$TMP/again" 2>&1 && grep -q "is current: version $LATEST" "$TMP/again" &&
	pass "a second init changes nothing" || fail "second init: $(cat "$TMP/again")"
finish
