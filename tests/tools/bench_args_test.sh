#!/usr/bin/env bash
# The benchmark step scripts (bench/fleet, bench/backlog, bench/soak),
# bench/run's options for them, and bench/first-job: --help prints the
# usage and exits 0; bad input exits 2 with one line on stderr naming the
# option, before anything starts (no cluster, no build, no results).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
FAILS=0
CHECKS=0
pass() { echo "ok   $1"; }
fail() { FAILS=$((FAILS + 1)); echo "FAIL $1"; }
usage_ok() { # script
	CHECKS=$((CHECKS + 1))
	local out rc=0
	out=$("$ROOT/bench/$1" --help 2>&1) || rc=$?
	if [ $rc -eq 0 ] && [[ $out == "bench/$1 ["* ]] && grep -q -- '--quick' <<<"$out"; then pass "$1 --help"
	else fail "$1 --help: exit $rc, '${out%%$'\n'*}'"; fi
}
bad() { # script pattern args...
	CHECKS=$((CHECKS + 1))
	local s=$1 pat=$2 out rc=0
	shift 2
	out=$(cd "$TMP" && "$ROOT/bench/$s" "$@" 2>&1 >/dev/null) || rc=$?
	if [ $rc -ne 2 ]; then fail "$s $*: exit $rc (want 2): $out"
	elif [ "$(wc -l <<<"$out")" -ne 1 ]; then fail "$s $*: more than one line: $out"
	elif ! grep -qE -- "$pat" <<<"$out"; then fail "$s $*: '$out' does not say /$pat/"
	elif [ -n "$(ls -A "$TMP")" ]; then fail "$s $*: wrote $(ls -A "$TMP")"
	else pass "$s $* -> $out"; fi
}
TMP=$(mktemp -d)
FAKE=$(mktemp -d) # a cluster directory with an env.sh, for the checks after it
touch "$FAKE/env.sh"
trap 'rm -rf "$TMP" "$FAKE"' EXIT
for s in fleet backlog soak; do
	usage_ok "$s"
	bad "$s" "unknown option --bogus" --bogus
	bad "$s" "--reps needs a value" --reps
	bad "$s" "--reps needs a whole number" --reps 0
	bad "$s" "no env.sh" --cluster "$TMP/none"
	bad "$s" "needs --bin" --cluster "$FAKE" --reps 1
done
bad fleet "--procs needs a whole number" --procs 2x
bad fleet "--pool needs a value" --pool
bad fleet "--sleep-ms needs a whole number" --sleep-ms -1
bad backlog "--sizes needs a comma-separated list" --sizes 10,,20
bad backlog "--txns must be at least --clients" --clients 8 --txns 4
bad backlog "smallest size \\(2000\\) must hold the jobs of every run" --sizes 2000,5000 --reps 3
bad soak "--minutes needs a whole number" --minutes 0
bad soak "--retain needs a duration" --retain 5
bad soak "--live-table needs schema.table" --live-table jobs
bad soak "--interval must not exceed" --minutes 1 --interval 120
CHECKS=$((CHECKS + 1))
out=$("$ROOT/bench/first-job" --help 2>&1) && [[ $out == "bench/first-job ["* ]] && grep -q -- '--url URL' <<<"$out" &&
	pass "first-job --help" || fail "first-job --help: '${out%%$'\n'*}'"
bad first-job "unknown argument --bogus" --bogus
bad first-job "unknown argument ruby" ruby
bad first-job "--reps needs a value" --reps
bad first-job "--reps needs a whole number" --reps 0
bad first-job "--url needs postgresql://" --url "host=db dbname=app"
bad first-job "--results needs a value" node --results
CHECKS=$((CHECKS + 1))
out=$("$ROOT/bench/run" --help 2>&1)
if grep -q -- '--soak ARGS' <<<"$out" && grep -q 'fleet, backlog, cron, baseline, soak' <<<"$out"; then pass "bench/run --help names the steps"
else fail "bench/run --help does not name fleet, backlog, cron and soak"; fi
echo "$CHECKS checks, $FAILS failed"
[ $FAILS -eq 0 ]
