#!/usr/bin/env bash
# Conformance adapter: `skiplock worker` with command handlers, one shell
# script (c-command-handler.sh) per conf.* kind.  See ../README.md.
set -eu
: "${SKL_BIN:?}" "${DATABASE_URL:?}" "${CONFORMANCE_OWNER:?}"
here=$(cd "$(dirname "$0")" && pwd)
handler() { printf -- '--handler=%s=exec %q %q' "$1" "$here/c-command-handler.sh" "$1"; }
args=()
for kind in conf.ok conf.retry conf.fail conf.discard conf.sleep conf.hang; do
	args+=("$(handler "$kind")")
done
# The handler records its fenced effect in the database: it gets the URL.
# Poll and rescue often enough for the suite's time bounds; no cron unless
# CONFORMANCE_CRON=1 (cron_languages.sh).
cron=(--no-cron)
[ "${CONFORMANCE_CRON:-0}" = 1 ] && cron=()
exec "$SKL_BIN" worker --url "$DATABASE_URL" --owner "$CONFORMANCE_OWNER" --handler-env DATABASE_URL \
	--concurrency "${CONFORMANCE_CONCURRENCY:-4}" --lease "${CONFORMANCE_LEASE:-2s}" \
	--poll 50ms --poll-max 200ms --rescue-every 250ms --shutdown-timeout 20s "${cron[@]}" \
	"${args[@]}"
