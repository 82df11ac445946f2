#!/bin/sh
# archive.sh — a command handler in shell: the payload on stdin, the job in
# SKIPLOCK_* variables, the outcome in the exit status.
#
#   skiplock worker --handler 'archive=examples/handlers/archive.sh'
#
# Appends the payload to $ARCHIVE_DIR/<job id>.json and prints a JSON result.
# exit 65 (discard) when ARCHIVE_DIR is not a directory: retrying cannot help.
set -eu
dir=${ARCHIVE_DIR:-}
if [ ! -d "$dir" ]; then
	echo "ARCHIVE_DIR is not a directory: '$dir'" >&2
	exit 65
fi
cat >"$dir/$SKIPLOCK_JOB_ID.json"
bytes=$(wc -c <"$dir/$SKIPLOCK_JOB_ID.json")
printf '{"archived": %d, "bytes": %d, "fencing": %d}\n' "$SKIPLOCK_JOB_ID" "$bytes" "$SKIPLOCK_FENCING"
