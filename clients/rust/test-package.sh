#!/usr/bin/env bash
# test-package.sh — the crate as a team uses it (CTest: client.rust.pack).
#
# scripts/dist rust packs the crate (`cargo package`); the .crate is
# unpacked outside the tree and a new cargo project depends on it by path,
# offline: Cargo's configuration is a fresh CARGO_HOME whose config.toml is
# the one the guide gives (Debian's crates in /usr/share/cargo/registry,
# net.offline), and PATH has Debian's toolchain and no skiplock binary.
# On an empty database directly and another through PgBouncer
# (transaction mode), its program (`cargo run`; tests/cli/first_job/main.rs,
# what bench/first-job times) installs the schema with skiplock::init (one
# row per step), enqueues a job in its transaction and a worker completes
# it with its result; no idle-in-transaction session is left.  The
# unpacked crate's own command, `cargo run --example init`, installs the
# schema too, and the .crate holds the tree's sql/install.sql.
#
# Packing does not build the crate (--no-verify): this test's build of the
# unpacked crate is that check.  The builds share the target directory of
# client.rust.build (fixture rust_build) and its profile, so the
# dependencies Debian packages are compiled once, not per run.
HERE=$(cd "$(dirname "$0")" && pwd)
set -- direct
. "${SKL_SOURCE_DIR:?run under CTest}/tests/cli/lib.sh"
. "$SKL_SOURCE_DIR/tests/cli/package_lib.sh"
APP=$TMP/first-job

if "$SKL_SOURCE_DIR/scripts/dist" --out "$TMP/dist" --no-verify rust >"$TMP/dist.log" 2>&1; then
	pass "scripts/dist rust: $(xargs -n 1 basename <"$TMP/dist.log" | xargs)"
else
	fail "scripts/dist rust: $(tail -n 20 "$TMP/dist.log")"
	finish
	exit
fi
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$HERE/Cargo.toml" | head -n 1)
mkdir "$TMP/crate"
tar -xzf "$TMP/dist/skiplock-$version.crate" -C "$TMP/crate"
CRATE=$TMP/crate/skiplock-$version
installer_steps "$CRATE/sql/install.sql"

fj_cargo_home "$TMP/cargo-home"
fj_rust_app "$APP" "$CRATE"

# cargo_in DIR ARGS...: Debian's cargo in DIR, as the new project's user runs
# it, with the target directory of client.rust.build
cargo_in() { CARGO_TARGET_DIR="$HERE/target" fj_cargo "$TMP/cargo-home" "$@"; }

if cargo_in "$APP" build --release --quiet >"$TMP/build.log" 2>&1; then
	pass "cargo build of a new project depending on the unpacked crate, offline"
else
	fail "cargo build: $(tail -n 30 "$TMP/build.log")"
fi
target direct
check_init "the unpacked crate's cargo run --example init [direct]" "$TMP/init.out" \
	cargo_in "$CRATE" run --release --quiet --example init -- --url "$url"
for mode in direct pooled; do
	target "$mode"
	DATABASE_URL=$url check_init "the project's cargo run [$mode]" "$TMP/run.out" \
		cargo_in "$APP" run --release --quiet
	grep -qx "schema at step $NEWEST" "$TMP/run.out" && grep -q '^job [0-9]* handled$' "$TMP/run.out" &&
		pass "the project's program [$mode]: skiplock::init, then the job handled" ||
		fail "the project's program [$mode]: $(cat "$TMP/run.out")"
	check_eq "the project's program [$mode]: the job completed with its result" \
		"$(qdb "$db" "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'greet' AND state = 'completed'
			AND result = '{\"greeted\": \"a new user\"}'")" 1
	no_idle_in_tx "[$mode]"
done
MODE="direct and pooled"
finish
