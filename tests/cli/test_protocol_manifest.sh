#!/usr/bin/env bash
# One description of the calls (clients/protocol.json): on a schema
# installed from this tree, every function the manifest lists has the
# arguments and result it says; the Node, Python and Rust clients' minimum
# schema step and transient SQLSTATE table are the manifest's; no client
# calls a skiplock.* function the manifest does not list
# (scripts/protocol-manifest --check).
. "$(dirname "$0")/lib.sh"
psql -X -q -v ON_ERROR_STOP=1 "$URL" -f "$SKL_SOURCE_DIR/sql/install.sql" >"$TMP/install.log" 2>&1 ||
	fail "sql/install.sql: $(cat "$TMP/install.log")"
while IFS= read -r line; do
	case $line in
	"FAIL "*) fail "${line#FAIL }" ;;
	protocol-manifest:*) pass "$line" ;;
	*) fail "unexpected: $line" ;;
	esac
done < <(python3 "$SKL_SOURCE_DIR/scripts/protocol-manifest" --check "$URL" 2>&1)
finish
