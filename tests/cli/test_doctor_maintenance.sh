#!/usr/bin/env bash
# `skiplock doctor maintenance`: nothing to check without skiplock's
# schema (exit 0); after init (which runs maintenance) and jobs, no
# finding; maintenance that last ran 10 minutes ago while a job finished
# since, or that never ran, is a finding (exit 1, text and JSON), also
# under `doctor all`; an idle fleet's old last run is not; a lease held
# for a year by a role allowed to take it is named in the finding.
# shellcheck disable=SC2015  # A && pass || fail
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
doc() { "$S" doctor maintenance --url "$URL" "$@" >"$TMP/out" 2>"$TMP/err"; }

expect_exit "unknown option" 2 "unrecognized option|unknown option" -- "$S" doctor maintenance --url "$URL" --bogus
doc; check_eq "no skiplock schema: exit 0" "$?" 0
check_eq "no skiplock schema: says so" "$(cat "$TMP/out")" \
	"skiplock's schema is not installed in this database: no maintenance to check"
doc --json; check_eq "no skiplock schema: JSON" "$(jq -c '[.installed, .needs_action]' "$TMP/out")" '[false,false]'

"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
complete_one() {
	q "SELECT skiplock.enqueue('k')" >/dev/null
	psql -X -q -At "$URL" -c "SELECT skiplock.complete(id, fencing) FROM skiplock.claim('t', ARRAY['k'])" >/dev/null
}
complete_one
doc; check_eq "after init and a job: exit 0" "$?" 0
grep -q "^no findings" "$TMP/out" && pass "no findings" || fail "findings: $(cat "$TMP/out")"

# maintenance stopped 10 minutes ago; a job finished since
q "UPDATE skiplock.maintenance SET last_run_at = now() - interval '10 minutes'" >/dev/null
complete_one
doc; check_eq "not run for 10 minutes while jobs ran: exit 1" "$?" 1
grep -q "^finding:   maintenance has not run for 10m.* while jobs ran (the last finished .* ago); busy workers offer it every 1m00s$" "$TMP/out" &&
	pass "the finding in words" || fail "finding: $(cat "$TMP/out")"
doc --json; check_eq "--json: exit 1" "$?" 1
check_eq "--json: the finding" \
	"$(jq -c '[.installed, .overdue, .needs_action, (.findings | map(.kind)), .expected_ms, (.last_run_age_ms >= 600000)]' "$TMP/out")" \
	'[true,true,true,["maintenance_overdue"],180000,true]'
"$S" doctor all --url "$URL" --json >"$TMP/all" 2>&1
check_eq "doctor all: exit 1 (the highest)" "$?" 1
check_eq "doctor all: the maintenance document" "$(jq -s -c 'map(select(has("overdue"))) | map(.overdue)' "$TMP/all")" '[true]'

# an idle fleet: the last job finished long after nothing but before the
# last run's three minutes passed
q "UPDATE skiplock.finished_jobs SET finished_at = now() - interval '9 minutes'" >/dev/null
doc; check_eq "idle since shortly after the last run: exit 0" "$?" 0

# never ran, jobs finished
q "UPDATE skiplock.maintenance SET last_run_at = NULL" >/dev/null
doc; check_eq "never ran while jobs did: exit 1" "$?" 1
grep -q "^finding:   maintenance has never run, and jobs ran" "$TMP/out" && pass "never ran, in words" ||
	fail "finding: $(cat "$TMP/out")"

# the schema owner (here the test's superuser) may still take the lease for
# a year: maintenance does not run, and the finding names the holder
q "SELECT skiplock.lease_acquire('skiplock.maintenance', 'rogue', '365 days')" >/dev/null
"$S" retention maintain --url "$URL" >"$TMP/m" 2>&1
check_eq "maintenance cannot run meanwhile" "$(cat "$TMP/m")" "another holder of the lease skiplock.maintenance is doing it"
complete_one
doc; check_eq "lease held for a year: exit 1" "$?" 1
grep -q "its lease skiplock.maintenance is held by rogue for 36[45]d" "$TMP/out" && pass "the holder is named" ||
	fail "finding: $(cat "$TMP/out")"
finish
