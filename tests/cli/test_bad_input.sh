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
