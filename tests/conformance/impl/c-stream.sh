#!/usr/bin/env bash
# Conformance adapter: `skiplock worker` with one streaming handler per
# conf.* kind, all six the same Python script (c-stream-handler.py), up to
# CONFORMANCE_CONCURRENCY jobs in flight on its process.  See ../README.md.
set -eu
: "${SKL_BIN:?}" "${DATABASE_URL:?}" "${CONFORMANCE_OWNER:?}"
here=$(cd "$(dirname "$0")" && pwd)
py=${SKL_PYTHON:-/usr/bin/python3}
"$py" -c 'import psycopg' 2>/dev/null || {
	echo "c-stream.sh: $py cannot import psycopg; install python3-psycopg (scripts/bootstrap --test)" >&2
	exit 1
}
conc=${CONFORMANCE_CONCURRENCY:-4}
args=()
for kind in conf.ok conf.retry conf.fail conf.discard conf.sleep conf.hang; do
	args+=("--stream=$kind=exec $(printf '%q %q' "$py" "$here/c-stream-handler.py")")
done
# The handler records its fenced effect in the database: it gets the URL.
# Poll and rescue often enough for the suite's time bounds; no cron.
exec "$SKL_BIN" worker --url "$DATABASE_URL" --owner "$CONFORMANCE_OWNER" --handler-env DATABASE_URL \
	--concurrency "$conc" --stream-inflight "$conc" --lease "${CONFORMANCE_LEASE:-2s}" \
	--poll 50ms --poll-max 200ms --rescue-every 250ms --shutdown-timeout 20s --no-cron \
	"${args[@]}"
