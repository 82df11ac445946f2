#!/usr/bin/env bash
# test_upgrade_release.sh MODE — the newest release (sql/RELEASES) upgrades
# to the tree in place, under load:
#   - the release's steps are installed as released (each file's SHA-256 is
#     the one sql/RELEASES pins), the way that release's `skiplock init` did;
#   - the database is filled through the release's SQL API: jobs waiting,
#     delayed, finished and discarded, a schedule, a held lease, a completed
#     idempotency key;
#   - workers speaking the release's SQL protocol (claim, complete) and a
#     producer keep running while the tree's `skiplock init` upgrades it;
#   - nothing is lost or done twice, the lease and the key keep working, no
#     lock or transaction is left behind, and the upgraded schema is the one
#     a fresh install of the tree gives (scripts/schema-dump --print).
# Run under CTest (release.upgrade.direct|pooled), like the tests in tests/cli.
. "$(dirname "$0")/../cli/lib.sh"
S=$SKL_BIN
ROOT=$(cd "$(dirname "$0")/../.." && pwd -P)
LATEST=$(ls "$ROOT/sql" | sed -n 's/^0*\([0-9][0-9]*\)_.*\.sql$/\1/p' | sort -n | tail -1)

# ---- the newest release, as released ----
release=$(sed -n 's/^release \([0-9.]*\)$/\1/p' "$ROOT/sql/RELEASES" | tail -1)
mapfile -t steps < <(awk -v r="$release" '$1 == "release" { on = ($2 == r); next }
	on && $2 ~ /^sql\// { print $1, $2 }' "$ROOT/sql/RELEASES")
[ ${#steps[@]} -gt 0 ] || { fail "no steps listed for release $release"; finish; }
q "CREATE SCHEMA skiplock; CREATE TABLE skiplock.schema_version (version int PRIMARY KEY,
   name text NOT NULL, checksum text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
for line in "${steps[@]}"; do
	sum=${line%% *} f=$ROOT/${line#* }
	step=$(basename "$f" .sql)
	[ "$(sha256sum "$f" | cut -d' ' -f1)" = "$sum" ] || { fail "$step is not as released"; finish; }
	psql -X -q -v ON_ERROR_STOP=1 "$DIRECT_URL" -f "$f" >/dev/null 2>"$TMP/step" ||
		{ fail "step $step: $(head -c 300 "$TMP/step")"; finish; }
	q "INSERT INTO skiplock.schema_version (version, name, checksum)
	   VALUES ($((10#${step%%_*})), '$step', '$sum')" >/dev/null
done
last=$(q "SELECT max(version) FROM skiplock.schema_version")
pass "release $release installed as released: ${#steps[@]} steps, up to $last"
[ "$last" -lt "$LATEST" ] || { pass "the tree has no step after release $release: nothing to upgrade"; finish; }

# ---- filled through the release's SQL API ----
q "SELECT count(skiplock.enqueue('live', jsonb_build_object('i', i))) FROM generate_series(1, 3000) i" >/dev/null
q "SELECT count(skiplock.enqueue('later', '{}', run_at => now() + interval '1 day')) FROM generate_series(1, 500)" >/dev/null
q "SELECT count(skiplock.enqueue('done')) FROM generate_series(1, 200)" >/dev/null
q "SELECT count(skiplock.complete(id, fencing)) FROM skiplock.claim('filler', ARRAY['done'], NULL, 200)" >/dev/null
q "SELECT count(skiplock.enqueue('doomed', max_attempts => 1)) FROM generate_series(1, 50)" >/dev/null
q "SELECT count(skiplock.fail(id, fencing, 'boom')) FROM skiplock.claim('filler', ARRAY['doomed'], NULL, 50)" >/dev/null
q "INSERT INTO skiplock.schedules (name, expression, zone, kind, next_fire)
   VALUES ('nightly', '0 3 * * *', 'Europe/Berlin', 'reconcile', now() + interval '6 hours')" >/dev/null
schedule_before=$(q "SELECT name, expression, zone, kind, next_fire FROM skiplock.schedules")
token=$(q "SELECT skiplock.lease_acquire('report', 'replica-1', interval '10 minutes')")
q "SELECT outcome FROM skiplock.idem_claim('charge-1', 'h1')" >"$TMP/idem" &&
	q "SELECT skiplock.idem_complete('charge-1', 201, '{\"charged\": 42}')" >/dev/null ||
	fail "the release's idempotency calls: $(cat "$TMP/idem")"
check_eq "filled: states before the upgrade" \
	"$(q "SELECT string_agg(kind || ':' || state || ':' || n, ' ' ORDER BY kind) FROM (
	      SELECT kind, state, count(*) n FROM skiplock.all_jobs GROUP BY 1, 2) x")" \
	"done:completed:200 doomed:discarded:50 later:available:500 live:available:3000"
[ -n "$token" ] && pass "lease held under the release (token $token)" || fail "lease_acquire"

# ---- the release's protocol keeps working while the tree upgrades it ----
worker() { # NAME: claims and completes live jobs with the release's calls until stopped
	while [ ! -e "$TMP/stop" ]; do
		psql -X -q -At "$URL" -c "SELECT count(skiplock.complete(id, fencing))
		  FROM skiplock.claim('$1', ARRAY['live'], NULL, 20)" >>"$TMP/$1.log" 2>&1
	done
}
producer() { # 2,000 more live jobs during the upgrade
	local i=0
	while [ ! -e "$TMP/stop" ] && [ $i -lt 40 ]; do
		psql -X -q -At "$URL" -c "SELECT count(skiplock.enqueue('live')) FROM generate_series(1, 50)" \
			>/dev/null 2>>"$TMP/producer.log" && i=$((i + 1))
		sleep 0.05
	done
}
worker w1 & W1=$!
worker w2 & W2=$!
producer & P=$!
sleep 0.3
"$S" init --url "$URL" >"$TMP/init.out" 2>"$TMP/init.err"
check_eq "the tree's init upgrades the release (exit 0)" "$?" 0
grep -q "installed: version $LATEST" "$TMP/init.out" && pass "init reports version $LATEST" ||
	fail "init: $(head -c 400 "$TMP/init.out" "$TMP/init.err")"
wait $P
wait_for "SELECT count(*) FROM skiplock.jobs WHERE kind = 'live' AND state = 'available'" 0 60 ||
	fail "the workers did not drain the live jobs after the upgrade"
touch "$TMP/stop"
wait $W1 $W2
errors=$(grep -h "ERROR" "$TMP/w1.log" "$TMP/w2.log" "$TMP/producer.log" 2>/dev/null | sort | uniq -c | head -3)
check_eq "the release's claim, complete and enqueue never failed during the upgrade" "$errors" ""

# ---- nothing lost, nothing twice, the rest as it was ----
check_eq "live: 5,000 jobs, each completed once" \
	"$(q "SELECT count(*) || ' ' || count(*) FILTER (WHERE state = 'completed' AND attempt = 1)
	      FROM skiplock.all_jobs WHERE kind = 'live'")" "5000 5000"
check_eq "the other jobs kept their states" \
	"$(q "SELECT string_agg(kind || ':' || state || ':' || n, ' ' ORDER BY kind) FROM (
	      SELECT kind, state, count(*) n FROM skiplock.all_jobs WHERE kind <> 'live' GROUP BY 1, 2) x")" \
	"done:completed:200 doomed:discarded:50 later:available:500"
check_eq "the delayed jobs still wait for their time" \
	"$(q "SELECT count(*) FROM skiplock.jobs WHERE kind = 'later' AND run_at > now() + interval '23 hours'")" 500
check_eq "the discarded jobs kept their error" \
	"$(q "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'doomed' AND errors::text LIKE '%boom%'")" 50
check_eq "the schedule is unchanged" "$(q "SELECT name, expression, zone, kind, next_fire FROM skiplock.schedules")" \
	"$schedule_before"
check_eq "the lease is renewed with the release's token" \
	"$(q "SELECT skiplock.lease_renew('report', 'replica-1', $token, interval '10 minutes')")" t
check_eq "the lease's fence passes with that token" \
	"$(q "SELECT 'passed' FROM (SELECT skiplock.lease_fence('report', $token)) f")" passed
q "SELECT skiplock.lease_fence('report', $((token + 1)))" >/dev/null 2>&1 &&
	fail "the fence passed a token the lease never gave" || pass "the fence refuses another token"
check_eq "the completed idempotency key replays its response" \
	"$(q "SELECT outcome || ' ' || response_code || ' ' || response_body FROM skiplock.idem_claim('charge-1', 'h1')")" \
	'replay 201 {"charged": 42}'
no_leftovers

# ---- the upgraded schema is a fresh install's ----
FRESH="${DB}_fresh"
admin -c "CREATE DATABASE \"$FRESH\"" >/dev/null
FRESH_URL="postgresql://$SKL_TEST_DBUSER@$SKL_TEST_PGHOST:$SKL_TEST_PGPORT/$FRESH"
"$S" init --url "$FRESH_URL" >/dev/null 2>"$TMP/fresh.err" || fail "fresh init: $(cat "$TMP/fresh.err")"
"$ROOT/scripts/schema-dump" --print "$FRESH_URL" >"$TMP/fresh.sql"
"$ROOT/scripts/schema-dump" --print "$DIRECT_URL" >"$TMP/upgraded.sql"
admin -c "DROP DATABASE IF EXISTS \"$FRESH\" WITH (FORCE)" >/dev/null
[ -s "$TMP/fresh.sql" ] && diff -u "$TMP/fresh.sql" "$TMP/upgraded.sql" >"$TMP/schema.diff" &&
	pass "the upgraded schema equals a fresh install's ($(wc -l <"$TMP/fresh.sql") lines)" ||
	fail "the upgraded schema differs from a fresh install's: $(head -c 1500 "$TMP/schema.diff")"
"$S" init --url "$URL" >"$TMP/again" 2>&1 && grep -q "is current: version $LATEST" "$TMP/again" &&
	pass "a second init changes nothing" || fail "second init: $(cat "$TMP/again")"
finish
