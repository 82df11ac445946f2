#!/usr/bin/env bash
# Conformance adapter: the Rust client's example worker
# (clients/rust/examples/conformance.rs).  CTest builds it first (fixture
# client.rust.build); run alone, the adapter builds it when it is missing.
set -eu
: "${DATABASE_URL:?}" "${CONFORMANCE_OWNER:?}"
crate=$(cd "$(dirname "$0")/../../../clients/rust" && pwd)
bin=$crate/target/release/examples/conformance
[ -x "$bin" ] || "$crate/cargo.sh" build --release --example conformance >&2
exec "$bin"
