#!/usr/bin/env bash
# `skiplock lease`: bad usage exits 2 with one line naming the problem, and
# neither runs the command nor writes anything; without the schema, run
# exits 1 and says so; help texts.
. "$(dirname "$0")/lib.sh"

RAN="$TMP/ran"
lr() { "$SKL_BIN" lease run "$@"; }

expect_exit "schema not installed" 1 "skiplock's schema is not installed in this database: run \`skiplock init\`" -- lr job --url "$URL" --ttl 5s -- touch "$RAN"
"$SKL_BIN" init --url "$URL" >/dev/null || fail "init"

expect_exit "--ttl missing" 2 '--ttl is required' -- lr job --url "$URL" -- touch "$RAN"
expect_exit "--ttl zero" 2 '--ttl must be from 1s to 24 days, got "0"' -- \
	lr job --url "$URL" --ttl 0 -- touch "$RAN"
expect_exit "--ttl 0s" 2 '--ttl must be from 1s' -- lr job --url "$URL" --ttl 0s -- touch "$RAN"
expect_exit "--ttl unparseable" 2 '--ttl: invalid duration "soon"' -- \
	lr job --url "$URL" --ttl soon -- touch "$RAN"
expect_exit "--ttl negative" 2 '--ttl: invalid duration "-5s"' -- \
	lr job --url "$URL" --ttl -5s -- touch "$RAN"
expect_exit "--ttl below 1s" 2 '--ttl must be from 1s' -- lr job --url "$URL" --ttl 200ms -- touch "$RAN"
expect_exit "--ttl without a value" 2 'option "--ttl" needs a value' -- lr job --url "$URL" --ttl
expect_exit "empty name" 2 'lease name must be 1 to 256 characters' -- \
	lr "" --url "$URL" --ttl 5s -- touch "$RAN"
expect_exit "no name" 2 'missing lease name' -- lr --url "$URL" --ttl 5s -- touch "$RAN"
expect_exit "no command" 2 'no command: give it after --' -- lr job --url "$URL" --ttl 5s
expect_exit "nothing after --" 2 'no command: give it after --' -- lr job --url "$URL" --ttl 5s --
expect_exit "command without --" 2 'unexpected argument "touch" \(put the command after --\)' -- \
	lr job --url "$URL" --ttl 5s touch "$RAN"
expect_exit "empty --owner" 2 '--owner must be 1 to 256' -- \
	lr job --url "$URL" --ttl 5s --owner "" -- touch "$RAN"
expect_exit "--kill-grace over ttl/4" 2 '--kill-grace must be positive and at most a quarter' -- \
	lr job --url "$URL" --ttl 4s --kill-grace 2s -- touch "$RAN"
expect_exit "bad --wait-for" 2 '--wait-for: invalid duration' -- \
	lr job --url "$URL" --ttl 4s --wait-for later -- touch "$RAN"
expect_exit "unknown option" 2 'unknown option "--bogus"' -- lr job --url "$URL" --bogus --ttl 5s -- touch "$RAN"
expect_exit "no subcommand" 2 'missing subcommand' -- "$SKL_BIN" lease
expect_exit "unknown subcommand" 2 'unknown subcommand "grab"' -- "$SKL_BIN" lease grab
expect_exit "list: stray argument" 2 'unexpected argument "x"' -- "$SKL_BIN" lease list --url "$URL" x

[ ! -e "$RAN" ] && pass "the command never ran" || fail "the command ran"
check_eq "no lease was written" "$(q "SELECT count(*) FROM skiplock.leases WHERE name <> 'skiplock.maintenance'")" 0

# options of the command are its own, after --
out=$(lr job --url "$URL" --ttl 5s -- sh -c 'echo "$0 $1"' --ttl -x)
check_eq "arguments after -- belong to the command" "$out" "--ttl -x"

"$SKL_BIN" lease --help | grep -q 'skiplock lease run NAME --ttl DUR' && pass "lease --help" || fail "lease --help"
help=$(lr --help)
for section in NAME SYNOPSIS DESCRIPTION OPTIONS ENVIRONMENT "EXIT STATUS" EXAMPLES; do
	grep -q "^$section" <<<"$help" || fail "lease run --help lacks $section"
done
pass "lease run --help has its man-page sections"
"$SKL_BIN" lease list --help | grep -q '^EXIT STATUS' && pass "lease list --help" || fail "lease list --help"
"$SKL_BIN" --help | grep -q '^  lease ' && pass "lease is listed in skiplock --help" || fail "skiplock --help"
no_leftovers
finish
