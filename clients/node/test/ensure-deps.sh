#!/usr/bin/env bash
# ensure-deps.sh: fails (exit 1, one line) unless node runs and pg is
# installed in clients/node, running `npm ci` (from package-lock.json) once
# when node_modules is missing.  Used by run.sh and the conformance adapter.
dir=$(cd "$(dirname "$0")/.." && pwd)
command -v node >/dev/null || { echo "skiplock node client: node not found (scripts/bootstrap --test installs it)" >&2; exit 1; }
[ -f "$dir/node_modules/pg/package.json" ] && exit 0
command -v npm >/dev/null || { echo "skiplock node client: npm not found (scripts/bootstrap --test installs it)" >&2; exit 1; }
flock "$dir/package.json" sh -c '[ -f "$1/node_modules/pg/package.json" ] ||
	npm ci --prefix "$1" --no-audit --no-fund --silent >&2' sh "$dir" ||
	{ echo "skiplock node client: npm ci failed in $dir" >&2; exit 1; }
