#!/usr/bin/env bash
# Conformance adapter: the Node client's worker (clients/node) with the six
# conf.* handlers of ../README.md (clients/node/examples/conformance-worker.js).
# Fails when Node.js or the client's dependency (pg) cannot be had.
set -eu
: "${DATABASE_URL:?}" "${CONFORMANCE_OWNER:?}"
client=$(cd "$(dirname "$0")/../../../clients/node" && pwd)
bash "$client/test/ensure-deps.sh" || exit 1
exec node "$client/examples/conformance-worker.js"
