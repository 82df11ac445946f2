#!/usr/bin/env bash
# `skiplock worker --webhook`: bad input (a URL that is not http(s) with a
# host, an unset secret variable, a per-kind option for an unknown kind) is
# exit 2 with one line naming the problem and nothing written; --help
# documents the webhook protocol.  Delivery itself is tested by
# integ.test_webhook and examples/outbox.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
"$S" enqueue --url "$URL" hook '{"a": 1}' >/dev/null || fail "enqueue"
W=(worker --url "$URL")
unset SKL_NO_SUCH_SECRET_VAR
expect_exit "ftp URL" 2 'webhook hook: .*scheme must be http or https' -- "$S" "${W[@]}" --webhook 'hook=ftp://example.com/x'
expect_exit "URL without a scheme" 2 'webhook hook: .*must start with http:// or https://' -- "$S" "${W[@]}" --webhook 'hook=example.com/x'
expect_exit "URL without a host" 2 'webhook hook: .*no host' -- "$S" "${W[@]}" --webhook 'hook=http:///x'
expect_exit "empty URL" 2 'webhook hook: .*empty' -- "$S" "${W[@]}" --webhook 'hook='
expect_exit "unset secret variable" 2 'SKL_NO_SUCH_SECRET_VAR.*not set' -- "$S" "${W[@]}" --webhook 'hook=http://127.0.0.1/' --webhook-secret-env SKL_NO_SUCH_SECRET_VAR
expect_exit "negative webhook timeout" 2 'webhook-timeout' -- "$S" "${W[@]}" --webhook 'hook=http://127.0.0.1/' --webhook-timeout=-1s
expect_exit "timeout for an unknown kind" 2 '"other" is not a --webhook kind' -- "$S" "${W[@]}" --webhook 'hook=http://127.0.0.1/' --webhook-timeout other=1s
expect_exit "webhook and handler for one kind" 2 'already has a handler' -- "$S" "${W[@]}" --handler 'hook=true' --webhook 'hook=http://127.0.0.1/'
expect_exit "webhook options without a webhook" 2 'need a --webhook' -- "$S" "${W[@]}" --handler 'hook=true' --webhook-timeout 1s
check_eq "nothing was claimed or written" "$(q "SELECT state || ' ' || attempt FROM skiplock.all_jobs")" "available 0"
"$S" worker --help >"$TMP/help" 2>&1
grep -q 'Idempotency-Key: skiplock-<job id>' "$TMP/help" && grep -q -- '--webhook KIND=URL' "$TMP/help" &&
	grep -q 'Retry-After' "$TMP/help" && pass "--help documents webhooks" || fail "--help: $(cat "$TMP/help")"
finish
