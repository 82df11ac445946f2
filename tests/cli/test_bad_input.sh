#!/usr/bin/env bash
# Bad usage and bad input: exit 2 and one line naming the problem; an
# unreachable database: exit 3 within the retry bound, one line.
. "$(dirname "$0")/lib.sh"

expect_exit "unknown option" 2 'unknown option "--bogus"' -- "$SKL_BIN" init --url "$URL" --bogus
expect_exit "unknown --pooler value" 2 'unknown pooler mode "sideways"' -- \
	"$SKL_BIN" init --url "$URL" --pooler sideways
expect_exit "unparseable URL" 2 'invalid connection string' -- \
	"$SKL_BIN" init --url 'postgresql://[::1'
expect_exit "bad port in URL" 2 'invalid connection string.*port' -- \
	"$SKL_BIN" init --url 'postgresql://localhost:12x/db'
expect_exit "bad duration" 2 'retry-for.*"soon"' -- "$SKL_BIN" init --url "$URL" --retry-for soon
expect_exit "missing option value" 2 'needs a value' -- "$SKL_BIN" init --url
expect_exit "stray argument" 2 'unexpected argument "extra"' -- "$SKL_BIN" init --url "$URL" extra
expect_exit "unknown command" 2 'unknown command "frobnicate"' -- "$SKL_BIN" frobnicate

# One wording for a missing or unknown subcommand, in every command that has
# them, and "did you mean" over the subcommand and option tables.
for cmd in "cron:add, apply, list, remove, pause, resume, run or tick" \
	"jobs:list, show, retry, cancel, discard, prune or actions" "idem:prune" "lease:run or list" \
	"migrate:up, status or verify" "doctor:locks, pooler, indexes, maintenance or all" "queue:pause, resume or paused"; do
	c=${cmd%%:*} subs=${cmd#*:}
	expect_exit "$c: missing subcommand" 2 "^skiplock $c: missing subcommand \\(expected $subs\\)\$" \
		-- "$SKL_BIN" "$c"
	expect_exit "$c: unknown subcommand" 2 \
		"^skiplock $c: unknown subcommand \"zzzz\" \\(expected $subs\\)\$" -- "$SKL_BIN" "$c" zzzz
done
expect_exit "breakers: unknown subcommand" 2 \
	'^skiplock breakers: unknown subcommand "zzzz" \(expected list, open or close\)$' -- \
	"$SKL_BIN" breakers zzzz --url "$URL"
mean() { # NAME WANT-TYPED WANT-SUGGESTED SEE ARGS...
	expect_exit "$1" 2 "unknown $2 \\(did you mean \"$3\"\\? see skiplock${4:+ $4} --help\\)\$" -- "${@:5}"
}
mean "cron: did you mean" 'subcommand "ad"' add cron "$SKL_BIN" cron ad
mean "jobs: a swap" 'subcommand "lsit"' list jobs "$SKL_BIN" jobs lsit
mean "idem: did you mean" 'subcommand "prnue"' prune idem "$SKL_BIN" idem prnue
mean "lease: did you mean" 'subcommand "lst"' list lease "$SKL_BIN" lease lst
mean "migrate: did you mean" 'subcommand "stauts"' status migrate "$SKL_BIN" migrate stauts
mean "doctor: did you mean" 'subcommand "lcks"' locks doctor "$SKL_BIN" doctor lcks
mean "breakers: did you mean" 'subcommand "clsoe"' close breakers "$SKL_BIN" breakers clsoe x \
	--url "$URL"
mean "a command: did you mean" 'command "enqeue"' enqueue "" "$SKL_BIN" enqeue
mean "an option: did you mean" 'option "--jsno"' --json "jobs list" "$SKL_BIN" jobs list --jsno
mean "a common option: did you mean" 'option "--retry-fro=5s"' --retry-for init \
	"$SKL_BIN" init --url "$URL" --retry-fro=5s
mean "an option of a subcommand" 'option "--dry-rn"' --dry-run "cron apply" \
	"$SKL_BIN" cron apply --dry-rn f.json
expect_exit "no guess when nothing is close" 2 '^skiplock jobs list: unknown option "--colour" \(see skiplock jobs list --help\)$' -- \
	"$SKL_BIN" jobs list --colour

start=$(date +%s%N)
expect_exit "unreachable database" 3 'could not connect' -- \
	"$SKL_BIN" init --url "postgresql://nobody@127.0.0.1:1/none" --retry-for 2s
took=$((($(date +%s%N) - start) / 1000000))
if [ "$took" -ge 1900 ] && [ "$took" -lt 10000 ]; then pass "unreachable gives up within its bound ($took ms)"; else fail "unreachable took $took ms for --retry-for 2s"; fi
expect_exit "password is not printed" 3 'postgresql://nobody:\*\*\*@' -- \
	"$SKL_BIN" init --url "postgresql://nobody:hunter2@127.0.0.1:1/none" --retry-for 200ms

check_eq "nothing was written" "$(q "SELECT count(*) FROM pg_namespace WHERE nspname = 'skiplock'")" 0

"$SKL_BIN" --help | grep -q "Usage: skiplock COMMAND" && pass "--help" || fail "--help"
"$SKL_BIN" init --help | grep -q "Exit status" && pass "init --help" || fail "init --help"
"$SKL_BIN" --version | grep -qE '^skiplock [0-9]+\.[0-9]+\.[0-9]+' && pass "--version" || fail "--version"
finish
