#!/usr/bin/env bash
# `skiplock doctor pooler`: "direct" on the direct URL (mode direct);
# "transaction pooler" with every session feature unsafe through PgBouncer in
# transaction mode, pool 2, and "session pooler" through PgBouncer in session
# mode (mode pooled; the session pooler needs with-cluster --session-bouncer,
# which make test passes).  Afterwards no advisory lock is held and no
# backend of the pool keeps the probe's setting, LISTEN or prepared statement.
. "$(dirname "$0")/lib.sh"

S=$SKL_BIN
json_q() { printf '%s\n' "$2" | psql -X -q -At -v ON_ERROR_STOP=1 -v doc="$1" "$DIRECT_URL" 2>&1; }
SESSION_URL=""
[ -n "${SKL_TEST_SESSION_BOUNCER_PORT:-}" ] &&
	SESSION_URL="postgresql://$SKL_TEST_DBUSER@$SKL_TEST_PGHOST:$SKL_TEST_SESSION_BOUNCER_PORT/$DB"

# One backend's session state: pid|setting|prepared statements|channels.
STATE="SELECT pg_backend_pid() || '|' || coalesce(current_setting('skiplock.probe', true), '')"
STATE="$STATE || '|' || (SELECT count(*) FROM pg_prepared_statements)"
STATE="$STATE || '|' || (SELECT count(*) FROM pg_listening_channels())"
# nothing_left NAME URL: no advisory lock anywhere in the database, and two
# backends reached through URL at once (an open transaction, and a second
# connection started from inside it) hold none of the probe's state: with a
# pool of 2 those are all of the pool's backends.
nothing_left() {
	check_eq "$1: no advisory lock held" "$(q "SELECT count(*) FROM pg_locks l JOIN pg_database d
		ON d.oid = l.database WHERE l.locktype = 'advisory' AND d.datname = current_database()")" 0
	local out
	out=$(psql -X -q -At -v ON_ERROR_STOP=1 "$2" <<SQL
BEGIN;
$STATE;
\! psql -X -q -At "$2" -c "$STATE"
COMMIT;
SQL
)
	local a b
	a=$(sed -n 1p <<<"$out"); b=$(sed -n 2p <<<"$out")
	check_eq "$1: first backend has no probe state" "${a#*|}" "|0|0"
	check_eq "$1: second backend has no probe state" "${b#*|}" "|0|0"
	[ "${a%%|*}" != "${b%%|*}" ] && pass "$1: two distinct backends checked (${a%%|*}, ${b%%|*})" ||
		fail "$1: one backend checked twice: $out"
}
# verdict DOC: "verdict|unsafe features|undone|actions"
verdict() {
	json_q "$1" "SELECT d ->> 'verdict', (SELECT string_agg(u, ',') FROM json_array_elements_text(d -> 'unsafe') u),
	                    d ->> 'undone', json_array_length(d -> 'actions')
	               FROM (SELECT :'doc'::json AS d) x"
}

if [ "$MODE" = direct ]; then
	"$S" doctor pooler --url "$DIRECT_URL" --direct-url "$DIRECT_URL" >"$TMP/out"; rc=$?
	cat "$TMP/out"
	check_eq "direct: exit 0" "$rc" 0
	grep -q '^verdict: direct ' "$TMP/out" && pass "direct: verdict" || fail "direct: $(head -n 1 "$TMP/out")"
	grep -q '^unsafe on this URL: nothing' "$TMP/out" && pass "direct: nothing unsafe" || fail "direct: unsafe"
	grep -q '^direct URL: same database' "$TMP/out" && pass "direct: same database" || fail "direct: --direct-url"
	nothing_left direct "$DIRECT_URL"
else
	doc=$("$S" doctor pooler --url "$POOLED_URL" --json); rc=$?
	check_eq "transaction pooler, detected as direct from the URL: exit 1" "$rc" 1
	check_eq "transaction pooler: verdict, unsafe features, undone, one action" "$(verdict "$doc")" \
		"transaction pooler|backend,session SET,advisory lock,LISTEN/NOTIFY,prepared statement|true|1"
	check_eq "LISTEN and prepared statements: said to be used on direct connections only" \
		"$(json_q "$doc" "SELECT string_agg(f ->> 'name', ',' ORDER BY f ->> 'name') FROM json_array_elements((:'doc')::json -> 'features') f
		                  WHERE f ->> 'skiplock' LIKE '%only on a direct connection%'")" "LISTEN/NOTIFY,prepared statement"
	nothing_left "transaction pooler" "$POOLED_URL"
	"$S" doctor pooler --url "$POOLED_URL" --pooler transaction --direct-url "$DIRECT_URL" >"$TMP/out"; rc=$?
	cat "$TMP/out"
	check_eq "transaction pooler, --pooler transaction: exit 0" "$rc" 0
	grep -q '^verdict: transaction pooler' "$TMP/out" && grep -q '^direct URL: same database' "$TMP/out" &&
		pass "transaction pooler: table verdict and the same database" || fail "table: $(cat "$TMP/out")"
	nothing_left "transaction pooler again" "$POOLED_URL"
	if [ -n "$SESSION_URL" ]; then
		doc=$("$S" doctor pooler --url "$SESSION_URL" --json); rc=$?
		check_eq "session pooler: exit 0" "$rc" 0
		check_eq "session pooler: verdict, nothing unsafe, undone" "$(verdict "$doc")" "session pooler||true|0"
		nothing_left "session pooler" "$SESSION_URL"
	else
		echo "skip session pooler: the cluster runs without --session-bouncer"
	fi
	other=$(sed "s|/$DB\$|/postgres|" <<<"$DIRECT_URL")
	"$S" doctor pooler --url "$POOLED_URL" --pooler transaction --direct-url "$other" >"$TMP/out"; rc=$?
	check_eq "--direct-url to another database: exit 1" "$rc" 1
	grep -q '^direct URL: DIFFERENT database' "$TMP/out" && pass "another database is named" ||
		fail "$(cat "$TMP/out")"
fi

expect_exit "stray argument" 2 'unexpected argument "x"' -- "$S" doctor pooler --url "$URL" x
expect_exit "unreachable" 3 '' -- "$S" doctor pooler --url "postgresql://nobody@127.0.0.1:1/x" --retry-for 1s
help=$("$S" doctor pooler --help)
for section in NAME SYNOPSIS DESCRIPTION OPTIONS "EXIT STATUS" EXAMPLES; do
	grep -q "^$section" <<<"$help" || fail "doctor pooler --help lacks $section"
done
"$S" doctor --help | grep -q '^ *pooler ' && pass "doctor --help lists pooler" || fail "doctor --help"
no_leftovers
finish
