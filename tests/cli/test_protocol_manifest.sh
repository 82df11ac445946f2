#!/usr/bin/env bash
# One description of the calls (clients/protocol.json): on a schema
# installed from this tree, every function the manifest lists has the
# arguments and result it says; the Node, Python and Rust clients' minimum
# schema step and transient SQLSTATE table are the manifest's; no client
# calls a skiplock.* function the manifest does not list, and every call
# names its arguments (scripts/protocol-manifest --check).  Then, on a
# copy of the clients' sources with calls that pass arguments by position
# or by a name the function lacks, the check names each of them.
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

# A copy of the parts of the tree the check reads, with bad calls added.
copy=$TMP/tree
mkdir -p "$copy/scripts" "$copy/clients/node" "$copy/clients/python/src" "$copy/clients/rust"
cp "$SKL_SOURCE_DIR/scripts/protocol-manifest" "$copy/scripts/"
cp "$SKL_SOURCE_DIR/clients/protocol.json" "$copy/clients/"
cp -r "$SKL_SOURCE_DIR/clients/node/src" "$copy/clients/node/"
cp -r "$SKL_SOURCE_DIR/clients/python/src/skiplock" "$copy/clients/python/src/"
cp -r "$SKL_SOURCE_DIR/clients/rust/src" "$copy/clients/rust/"
cat >>"$copy/clients/node/src/lease.js" <<'JS'
const BAD_1 = 'SELECT skiplock.lease_fence($1, ' +
  'fencing => $2)';
// SELECT skiplock.rescue(1000) in a comment is no call
JS
cat >>"$copy/clients/python/src/skiplock/_keeper.py" <<'PY'
_BAD_2 = ("SELECT skiplock.rescue("
          "%s::int)")
_BAD_3 = "SELECT skiplock.rescue(count => 1)"
PY
cat >>"$copy/clients/rust/src/lease.rs" <<'RS'
fn bad_4(n: u32) -> String { format!("SELECT id FROM skiplock.rescue({})", n) }
const BAD_5: &str = "SELECT skiplock.complete(id => 1, \
                     fencing => 2, NULL)";
RS
want="FAIL node: clients/node/src/lease.js:N: skiplock.lease_fence gets '\$1' by position: name it (name => value)
FAIL python: clients/python/src/skiplock/_keeper.py:N: skiplock.rescue gets '%s::int' by position: name it (name => value)
FAIL python: clients/python/src/skiplock/_keeper.py:N: skiplock.rescue gets ['count']: no version of it in clients/protocol.json has them all
FAIL rust: clients/rust/src/lease.rs:N: skiplock.rescue gets '{}' by position: name it (name => value)
FAIL rust: clients/rust/src/lease.rs:N: skiplock.complete gets 'NULL' by position: name it (name => value)"
out=$(python3 "$copy/scripts/protocol-manifest" --check "$URL" 2>&1)
rc=$?
got=$(echo "$out" | grep '^FAIL' | sed -E 's/:[0-9]+: /:N: /')
if [ "$rc" = 1 ] && [ "$got" = "$want" ]; then
	pass "calls with arguments by position or unknown names, in a copy of the sources: each named"
else
	fail "calls with arguments by position, in a copy of the sources: exit $rc, output: $out"
fi
finish
