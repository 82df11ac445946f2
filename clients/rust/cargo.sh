#!/usr/bin/env bash
# cargo.sh ARGS... — runs Debian's cargo and rustc on this crate, offline
# against Debian's packaged crates (.cargo/config.toml), whatever other
# toolchain is first on PATH, with the target directory in ./target.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
for tool in cargo rustc; do
	if [ ! -x "/usr/bin/$tool" ]; then
		echo "cargo.sh: /usr/bin/$tool not found: install Debian's Rust toolchain and crates" \
			"(scripts/bootstrap --test)" >&2
		exit 1
	fi
done
export CARGO=/usr/bin/cargo RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
export CARGO_HOME="$here/target/cargo-home" CARGO_TARGET_DIR="$here/target"
cd "$here"
# the schema installer the crate embeds (include_str!), made from the tree's steps
python3 "$here/../../scripts/install-sql" clients/rust/sql/install.sql || exit 1
exec /usr/bin/cargo "$@"
