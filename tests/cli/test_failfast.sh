#!/usr/bin/env bash
# What retrying cannot fix fails at once: no such database or role, a wrong
# or missing password, a TLS mode the server refuses, skiplock's schema
# missing or older than the binary.  Each exits 1 well within the default
# --retry-for (30s) with one line that says what to fix.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
W=$SKL_TEST_WORKER_ROLE
PW=$SKL_TEST_WORKER_PASSWORD
H=$SKL_TEST_PGHOST
if [ "$MODE" = pooled ]; then PORT=$SKL_TEST_BOUNCER_PORT; else PORT=$SKL_TEST_PGPORT; fi
export PGPASSFILE=$TMP/no-pgpass
unset PGPASSWORD

# fast NAME PATTERN -- CMD...: exit 1, one line matching PATTERN, in under 5 s.
fast() {
	local name=$1 pattern=$2 start took
	shift 3
	start=$(date +%s%N)
	expect_exit "$name" 1 "$pattern" -- "$@"
	took=$((($(date +%s%N) - start) / 1000000))
	if [ "$took" -lt 5000 ]; then pass "$name: at once ($took ms)"; else fail "$name: took $took ms"; fi
}

# --- connections the server refuses (PgBouncer 1.18 reports its own
# refusals as 08P01, the class of a lost connection: direct only) ---
if [ "$MODE" = direct ]; then
	fast "missing database" 'database "no_such_db_[0-9]+" does not exist \(SQLSTATE 3D000\); check the database name' -- \
		"$S" status --url "postgresql://$SKL_TEST_DBUSER@$H:$PORT/no_such_db_$$"
	fast "missing role" 'role "no_such_role" does not exist \(SQLSTATE 28000\); check the user name' -- \
		"$S" enqueue --url "postgresql://no_such_role@$H:$PORT/$DB" k
	fast "wrong password" 'password authentication failed for user "'"$W"'" \(SQLSTATE 28P01\); check the password' -- \
		"$S" cron list --url "postgresql://$W:$PW-wrong@$H:$PORT/$DB"
	grep -q -- "$PW" "$TMP/err" && fail "the password is printed" || pass "the password is not printed"
	fast "no password" 'the server asks for a password: give it in the URL, PGPASSWORD' -- \
		"$S" jobs list --url "postgresql://$W@$H:$PORT/$DB"
fi
fast "TLS demanded, server without TLS" 'SSL was required; the TLS that sslmode demands failed' -- \
	"$S" status --url "postgresql://$SKL_TEST_DBUSER@$H:$PORT/$DB?sslmode=require"

# --- skiplock's schema missing ---
for c in "status" "enqueue k" "cron list" "jobs list" "lease list" "breakers"; do
	fast "$c without the schema" "skiplock's schema is not installed in this database: run \`skiplock init\`" -- \
		"$S" $c --url "$URL"
done
start=$(date +%s%N)
"$S" worker --url "$URL" --handler 'k=cat >/dev/null' --poll 50ms >"$TMP/wout" 2>"$TMP/werr"
rc=$?
took=$((($(date +%s%N) - start) / 1000000))
check_eq "worker without the schema: exit 1" "$rc" 1
[ "$took" -lt 5000 ] && pass "worker without the schema exits at once ($took ms)" || fail "worker took $took ms"
grep -q "skiplock's schema is not installed in this database: run \`skiplock init\`" "$TMP/werr" &&
	pass "worker says run skiplock init" || fail "worker: $(cat "$TMP/werr")"
grep -q "does not exist" "$TMP/werr" && fail "worker logs a missing relation: $(cat "$TMP/werr")" ||
	pass "worker logs no missing relation"
check_eq "nothing was written" "$(q "SELECT count(*) FROM pg_namespace WHERE nspname = 'skiplock'")" 0

# --- skiplock's schema older than the binary ---
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"
"$S" status --url "$URL" >/dev/null && pass "status after init" || fail "status after init"
q "DELETE FROM skiplock.schema_version WHERE version = (SELECT max(version) FROM skiplock.schema_version)"
OLD=$(q "SELECT max(version) FROM skiplock.schema_version")
for c in "status" "enqueue k" "cron list"; do
	fast "$c with an old schema" "schema is at version $OLD, older than version [0-9]+ this build needs: run \`skiplock init\`" -- \
		"$S" $c --url "$URL"
done
check_eq "an old schema: nothing enqueued" "$(q "SELECT count(*) FROM skiplock.all_jobs")" 0
"$S" worker --url "$URL" --handler 'k=cat >/dev/null' >"$TMP/wout" 2>"$TMP/werr"
check_eq "worker with an old schema: exit 1" "$?" 1
grep -q "run \`skiplock init\`" "$TMP/werr" && pass "worker with an old schema says run skiplock init" ||
	fail "worker with an old schema: $(cat "$TMP/werr")"
finish
