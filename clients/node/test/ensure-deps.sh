#!/usr/bin/env bash
# ensure-deps.sh: fails (exit 1, one line) unless node runs and pg (and
# express, a dev dependency the idempotency tests serve through) is
# installed in clients/node, running `npm ci` (from package-lock.json) once
# when either is missing.  Used by run.sh and the conformance adapter.
dir=$(cd "$(dirname "$0")/.." && pwd)
# the schema installer the package bundles, made from the tree's steps
python3 "$dir/../../scripts/install-sql" clients/node/sql/install.sql || exit 1
command -v node >/dev/null || { echo "skiplock node client: node not found (scripts/bootstrap --test installs it)" >&2; exit 1; }
have() { [ -f "$1/node_modules/pg/package.json" ] && [ -f "$1/node_modules/express/package.json" ]; }
have "$dir" && exit 0
command -v npm >/dev/null || { echo "skiplock node client: npm not found (scripts/bootstrap --test installs it)" >&2; exit 1; }
flock "$dir/package.json" bash -c "$(declare -f have)"'
	have "$1" || npm ci --prefix "$1" --no-audit --no-fund --silent >&2' bash "$dir" ||
	{ echo "skiplock node client: npm ci failed in $dir" >&2; exit 1; }
