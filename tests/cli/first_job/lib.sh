# shellcheck shell=bash
# tests/cli/first_job/lib.sh — a client's artefact (scripts/dist, as
# `make dist` builds it) installed into an app outside the tree, offline,
# the way docs/clients/*.md say, and the app that runs a first job.
# Sourced by the package tests (tests/cli/package_lib.sh) and by
# bench/first-job; it defines functions only.
#
#   fj_node_deps DIR          pg and its dependencies as tarballs in DIR,
#                             packed from clients/node/node_modules (what a
#                             registry mirror would serve)
#   fj_npm_offline CACHE      exports npm's settings for an offline
#                             install with the empty cache CACHE
#   fj_node_app APP TGZ DIR   npm install of the tarball TGZ and the
#                             tarballs in DIR into APP, with app.mjs
#   fj_python_app VENV APP ARTEFACT [PIP-OPTION...]
#                             a fresh virtual environment VENV (Debian's
#                             psycopg through --system-site-packages) with
#                             ARTEFACT installed by pip --no-index
#                             --no-deps, and APP with app.py
#   fj_cargo_home DIR         a CARGO_HOME whose config.toml takes the
#                             crates from Debian's registry, offline
#   fj_rust_app APP CRATE     a new cargo project APP depending on the
#                             unpacked crate CRATE by path (src/main.rs)
#   fj_cargo CARGO_HOME DIR ARGS...
#                             Debian's cargo in DIR with CARGO_HOME and
#                             PATH=/usr/bin:/bin (and CARGO_TARGET_DIR when
#                             set)
#
# The apps (this directory: app.mjs, app.py, main.rs) read DATABASE_URL,
# enqueue one job of kind greet in their own transaction, run a worker
# until it has handled it, stop the worker (which records the outcome:
# the job completes with {"greeted": "a new user"}) and print
# "job ID handled".  main.rs also installs the schema (skiplock::init,
# printing "schema at step N"): `first-job init` only that, `first-job job`
# only the job.
FJ_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
FJ_ROOT=$(cd "$FJ_DIR/../../.." && pwd -P)
FJ_PY=${SKL_PYTHON:-/usr/bin/python3}

fj_node_deps() {
	mkdir -p "$1"
	(cd "$FJ_ROOT/clients/node" && npm ls --omit=dev --all --parseable | tail -n +2 |
		xargs npm pack --silent --pack-destination "$1") >/dev/null
}

fj_npm_offline() {
	export npm_config_cache=$1 npm_config_offline=true npm_config_audit=false \
		npm_config_fund=false npm_config_update_notifier=false
}

fj_node_app() {
	local app=$1 tgz=$2 deps=$3
	mkdir -p "$app"
	[ -f "$app/package.json" ] || echo '{ "name": "first-job", "private": true }' >"$app/package.json"
	cp "$FJ_DIR/app.mjs" "$app/"
	(cd "$app" && npm install --silent "$tgz" "$deps"/*.tgz)
}

fj_python_app() {
	local venv=$1 app=$2
	shift 2
	mkdir -p "$app"
	cp "$FJ_DIR/app.py" "$app/"
	(cd "$app" && env PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
		PIP_NO_INPUT=1 "$FJ_PY" -m venv --system-site-packages "$venv" &&
		"$venv/bin/python" -m pip install --quiet --no-index --no-deps "$@")
}

fj_cargo_home() {
	mkdir -p "$1"
	cp "$FJ_ROOT/clients/rust/.cargo/config.toml" "$1/config.toml"
}

fj_rust_app() {
	local app=$1 crate=$2
	mkdir -p "$app/src"
	cat >"$app/Cargo.toml" <<TOML
[package]
name = "first-job"
version = "0.1.0"
edition = "2021"

[dependencies]
skiplock = { path = "$crate" }
serde_json = "1"
tokio = { version = "1", features = ["rt-multi-thread", "macros", "sync", "time"] }
tokio-postgres = "0.7"
TOML
	cp "$FJ_DIR/main.rs" "$app/src/main.rs"
}

fj_cargo() {
	local home=$1 dir=$2
	shift 2
	(cd "$dir" && env PATH=/usr/bin:/bin CARGO_HOME="$home" ${CARGO_TARGET_DIR:+CARGO_TARGET_DIR="$CARGO_TARGET_DIR"} \
		CARGO=/usr/bin/cargo RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc /usr/bin/cargo "$@")
}
