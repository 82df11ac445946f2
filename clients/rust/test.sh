#!/usr/bin/env bash
# test.sh direct|pooled — the Rust client's own tests (cargo test) against
# the harness's PostgreSQL, directly or through PgBouncer in transaction
# mode, in a fresh database with the schema installed by the crate's own
# command (examples/init.rs, skiplock::init) through the URL under test.
# Runs under CTest and tests/harness/with-cluster (client.rust.MODE).
# Fails, never skips, when Debian's Rust toolchain is missing.
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../tests/cli/lib.sh"
"$here/cargo.sh" run --release --quiet --example init -- --url "$URL" >/dev/null ||
	{ echo "the crate's init failed" >&2; exit 1; }
SKIPLOCK_TEST_URL=$URL SKIPLOCK_TEST_DIRECT_URL=$DIRECT_URL SKIPLOCK_TEST_MODE=$MODE \
	"$here/cargo.sh" test --release --no-fail-fast -- --test-threads=2
