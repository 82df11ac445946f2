#!/usr/bin/env bash
# test.sh direct|pooled — the Rust client's own tests (cargo test) against
# the harness's PostgreSQL, directly or through PgBouncer in transaction
# mode, in a fresh database with the schema installed by `skiplock init`.
# Runs under CTest and tests/harness/with-cluster (client.rust.MODE).
# Fails, never skips, when Debian's Rust toolchain is missing.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../tests/cli/lib.sh"
"$SKL_BIN" init --url "$DIRECT_URL" >/dev/null || { echo "skiplock init failed" >&2; exit 1; }
SKIPLOCK_TEST_URL=$URL SKIPLOCK_TEST_DIRECT_URL=$DIRECT_URL SKIPLOCK_TEST_MODE=$MODE \
	"$here/cargo.sh" test --release --no-fail-fast -- --test-threads=2
