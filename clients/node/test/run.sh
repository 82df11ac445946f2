#!/usr/bin/env bash
# run.sh direct|pooled — the Node client's own tests (node --test) against
# the harness's PostgreSQL, directly or through PgBouncer in transaction
# mode (pool 2), on a fresh database with the schema from the package's own
# `npx skiplock init` (bin/skiplock.js: no C binary).
# Runs under CTest and tests/harness/with-cluster.  Fails (never skips)
# when Node.js or npm is missing; installs pg from package-lock.json first
# when node_modules is missing.
HERE=$(cd "$(dirname "$0")/.." && pwd)
bash "$HERE/test/ensure-deps.sh" || exit 1
. "${SKL_SOURCE_DIR:?run under CTest}/tests/cli/lib.sh"
node "$HERE/bin/skiplock.js" init --url "$URL" >"$TMP/init.log" 2>&1 || { cat "$TMP/init.log"; exit 1; }
cd "$HERE" || exit 1
SKL_TEST_URL=$URL SKL_TEST_DIRECT_URL=$DIRECT_URL SKL_TEST_MODE=$MODE \
	node --test --test-concurrency=1 test/*.test.js
