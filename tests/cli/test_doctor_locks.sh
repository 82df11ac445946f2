#!/usr/bin/env bash
# `skiplock doctor locks`: the hung-deploy incident reproduced — a session
# advisory lock on sqlx's migration key for this database, taken through
# PgBouncer (transaction mode, pool 2) and left on the pooled backend — is
# named, flagged as an orphan suspect (exit 1), freed by
# --terminate-idle-orphans so that a waiting pg_advisory_lock on the key
# succeeds, and the database is clean afterwards (exit 0).  Then: an idle
# transaction holding a table lock that DDL waits on is reported (holder and
# blocker) and never terminated; a role without pg_signal_backend is told so
# and terminates nothing; a role without pg_read_all_stats, to which the
# orphan is hidden, exits 4 (could not look), not 0; the JSON document; bad
# input.  Bounded waits only.
. "$(dirname "$0")/lib.sh"

doctor() { "$SKL_BIN" doctor locks --url "$URL" "$@"; }
has() { grep -q -- "$2" "$1"; }
# Views over the whole cluster, narrowed to this test's database: other
# tests run beside this one.
THIS_DB="database = (SELECT oid FROM pg_database WHERE datname = current_database())"
waiting() { [ "$(q "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database WHERE d.datname = current_database() AND l.locktype = '$1' AND NOT l.granted")" -ge 1 ]; }
# flagged FILE: doctor locks --idle-for 1s exits 1 with an orphan suspect.
flagged() { doctor --idle-for 1s >"$1" 2>&1; [ $? = 1 ] && has "$1" "orphan suspect"; }

# sqlx's key for this database, computed apart from skiplock: CRC-32 from
# gzip's trailer, times 0x3d32ad9e (the product fits in 63 bits).
crc=$(printf %s "$DB" | gzip -c | tail -c 8 | od -An -tu4 -N4 | tr -d ' ')
KEY=$((0x3d32ad9e * crc))

# --- the incident --------------------------------------------------------
# Through PgBouncer: take the session lock and leave. The backend goes back
# to the pool with the lock held.
psql -X -q -At -v ON_ERROR_STOP=1 "$POOLED_URL" -c "SELECT pg_advisory_lock($KEY)" >/dev/null
check_eq "the lock stays on a pooled backend after the client left" \
	"$(q "SELECT count(*) FROM pg_locks WHERE $THIS_DB AND locktype = 'advisory' AND granted AND objid = ($KEY & 4294967295)::oid")" 1
# The next migrator waits on it.
psql -X -q -At -v ON_ERROR_STOP=1 "$DIRECT_URL" -c "SET application_name = 'next-boot'" \
	-c "SELECT pg_advisory_lock($KEY)" -c "SELECT pg_advisory_unlock($KEY)" >/dev/null &
waiter=$!
wait_until "the waiter to queue" 15 waiting advisory
wait_until "doctor locks to flag the orphan" 15 flagged "$TMP/report"
has "$TMP/report" "sqlx migrations" && pass "named as sqlx's migration lock" ||
	fail "sqlx's key not named: $(cat "$TMP/report")"
has "$TMP/report" "orphan suspect" && pass "flagged as an orphan suspect" || fail "no orphan suspect"
grep -q "$KEY" "$TMP/report" && pass "the key is printed" || fail "key $KEY missing"
kill -0 "$waiter" 2>/dev/null && pass "the waiter is still blocked" || fail "the waiter finished early"

doctor --idle-for 1s --json >"$TMP/report.json"
check_eq "--json exits 1 too" "$?" 1
has "$TMP/report.json" '"kind": "orphan_suspect"' && has "$TMP/report.json" '"name": "sqlx migrations"' &&
	has "$TMP/report.json" "\"key\": $KEY" && has "$TMP/report.json" '"needs_action": true' &&
	pass "JSON names the key and the finding" || fail "JSON: $(head -c 600 "$TMP/report.json")"

doctor --idle-for 1s --terminate-idle-orphans >"$TMP/act" 2>&1
check_eq "--terminate-idle-orphans frees it (exit 0: nothing left to act on)" "$?" 0
grep -qE "pid [0-9]+: (terminated|released)" "$TMP/act" && pass "says what it did: $(grep -E 'pid [0-9]+:' "$TMP/act")" ||
	fail "no action line: $(cat "$TMP/act")"
wait_exit "$waiter" 20
check_eq "the waiting pg_advisory_lock then succeeds" "$RC" 0
doctor --idle-for 1s >"$TMP/after"
check_eq "doctor locks exits 0 afterwards" "$?" 0
has "$TMP/after" "No findings" && pass "no findings afterwards" || fail "after: $(cat "$TMP/after")"

# --- an idle transaction that DDL waits on -------------------------------
q "CREATE TABLE accounts (id int)" >/dev/null
mkfifo "$TMP/holder"
psql -X -q -At -v ON_ERROR_STOP=1 "$DIRECT_URL" <"$TMP/holder" >/dev/null &
holder=$!
exec 3>"$TMP/holder"
echo "SET application_name = 'forgot-to-commit'; BEGIN; LOCK accounts IN SHARE MODE;" >&3
holder_pid() { q "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'forgot-to-commit' AND state = 'idle in transaction'"; }
has_holder() { [ -n "$(holder_pid)" ]; }
wait_until "the holder's transaction" 10 has_holder
hpid=$(holder_pid)
psql -X -q -At "$DIRECT_URL" -c "SET lock_timeout = '30s'" -c "ALTER TABLE accounts ADD COLUMN n int" >/dev/null 2>&1 &
ddl=$!
wait_until "the DDL to queue" 15 waiting relation
wait_until "the findings" 15 sh -c "'$SKL_BIN' doctor locks --url '$URL' --idle-for 1s --terminate-idle-orphans >'$TMP/iit' 2>&1; [ \$? = 1 ] && grep -q blocker '$TMP/iit'"
grep -q "idle in transaction.*pid $hpid .*forgot-to-commit.*accounts (ShareLock)" "$TMP/iit" &&
	pass "idle in transaction: pid $hpid, its application and the lock it holds named" ||
	fail "no idle-in-transaction finding for $hpid: $(cat "$TMP/iit")"
grep -q "blocker.*pid $hpid " "$TMP/iit" &&
	pass "and as the DDL's blocker" || fail "no blocker finding: $(cat "$TMP/iit")"
! grep -q "Actions:" "$TMP/iit" && pass "an idle transaction is not an orphan: nothing done" ||
	fail "acted on it: $(cat "$TMP/iit")"
check_eq "the holder is alive" "$(q "SELECT count(*) FROM pg_stat_activity WHERE pid = $hpid")" 1
echo "ROLLBACK;" >&3
exec 3>&-
wait_exit "$holder" 10
wait_exit "$ddl" 20
check_eq "the DDL ran once the holder rolled back" "$RC" 0

# --- privileges (roles cannot log in through the test PgBouncer) ----------
if [ "$MODE" = direct ]; then
	app="dl_app_$$" doc="dl_doc_$$" blind="dl_blind_$$"
	admin -c "CREATE ROLE $app LOGIN; CREATE ROLE $doc LOGIN IN ROLE pg_read_all_stats; CREATE ROLE $blind LOGIN" >/dev/null
	trap 'cleanup; admin -c "DROP ROLE IF EXISTS $app; DROP ROLE IF EXISTS $doc; DROP ROLE IF EXISTS $blind" >/dev/null 2>&1' EXIT
	APP_URL="postgresql://$app@$SKL_TEST_PGHOST:$SKL_TEST_PGPORT/$DB"
	DOC_URL="postgresql://$doc@$SKL_TEST_PGHOST:$SKL_TEST_PGPORT/$DB"
	mkfifo "$TMP/app"
	psql -X -q -At "$APP_URL" <"$TMP/app" >/dev/null &
	apid=$!
	exec 4>"$TMP/app"
	echo "SELECT pg_advisory_lock(72707369);" >&4
	wait_until "the app's lock" 10 sh -c "[ \"\$(psql -X -At '$DIRECT_URL' -c \"SELECT count(*) FROM pg_locks WHERE $THIS_DB AND locktype = 'advisory' AND objid = 72707369 AND granted\")\" = 1 ]"
	doc_flags() { "$SKL_BIN" doctor locks --url "$DOC_URL" --idle-for 1s >/dev/null 2>&1; [ $? = 1 ]; }
	wait_until "the orphan to age" 15 doc_flags
	# A role without pg_read_all_stats cannot see that the session is idle:
	# the orphan is hidden, and the run must not pass for clean.
	BLIND_URL="postgresql://$blind@$SKL_TEST_PGHOST:$SKL_TEST_PGPORT/$DB"
	for flag in "" --terminate-idle-orphans; do
		"$SKL_BIN" doctor locks --url "$BLIND_URL" --idle-for 1s $flag >"$TMP/b.out" 2>"$TMP/b.err"
		check_eq "without pg_read_all_stats ${flag:-(report)}: exit 4 (could not look)" "$?" 4
		grep -q "GRANT pg_read_all_stats TO \"$blind\"" "$TMP/b.err" && pass "says the privilege is missing" ||
			fail "no pg_read_all_stats message: $(cat "$TMP/b.err")"
	done
	"$SKL_BIN" doctor locks --url "$BLIND_URL" --idle-for 1s --json >"$TMP/b.json" 2>/dev/null
	check_eq "--json: exit 4, hidden_sessions" "$? $(jq -c '[.hidden_sessions, .needs_action]' "$TMP/b.json")" "4 [true,false]"
	check_eq "the hidden orphan's lock is untouched" "$(q "SELECT count(*) FROM pg_locks WHERE $THIS_DB AND locktype = 'advisory' AND objid = 72707369 AND granted")" 1
	"$SKL_BIN" doctor locks --url "$DOC_URL" --idle-for 1s --terminate-idle-orphans >"$TMP/p.out" 2>"$TMP/p.err"
	check_eq "without pg_signal_backend: exit 1" "$?" 1
	grep -q "GRANT pg_signal_backend TO \"$doc\"" "$TMP/p.err" && pass "says the privilege is missing: $(cat "$TMP/p.err")" ||
		fail "no privilege message: $(cat "$TMP/p.err")"
	grep -q "Prisma migrations" "$TMP/p.out" && pass "Prisma's key named" || fail "Prisma: $(cat "$TMP/p.out")"
	check_eq "the lock is still held" "$(q "SELECT count(*) FROM pg_locks WHERE $THIS_DB AND locktype = 'advisory' AND objid = 72707369 AND granted")" 1
	admin -c "GRANT pg_signal_backend TO $doc" >/dev/null
	"$SKL_BIN" doctor locks --url "$DOC_URL" --idle-for 1s --terminate-idle-orphans >"$TMP/p.out" 2>"$TMP/p.err"
	check_eq "with pg_signal_backend: terminated, exit 0" "$?" 0
	grep -q "terminated" "$TMP/p.out" && pass "terminated" || fail "not terminated: $(cat "$TMP/p.out" "$TMP/p.err")"
	exec 4>&-
	wait_exit "$apid" 10
fi

# --- bad input and an unreachable database (the same in both modes: run
# once, in the mode without the privilege checks, to keep both modes short)
if [ "$MODE" = pooled ]; then
	expect_exit "bad --idle-for" 2 'idle-for' -- doctor --idle-for soon
	expect_exit "zero --idle-for" 2 'idle-for' -- doctor --idle-for 0s
	expect_exit "unknown option" 2 'unknown option' -- doctor --kill-everything
	expect_exit "extra argument" 2 'unexpected argument' -- doctor now
	expect_exit "no subcommand" 2 'missing subcommand' -- "$SKL_BIN" doctor
	expect_exit "unknown subcommand" 2 'unknown subcommand "lcks"' -- "$SKL_BIN" doctor lcks
	"$SKL_BIN" doctor --help | grep -q "locks" && pass "doctor --help lists locks" || fail "doctor --help"
	"$SKL_BIN" doctor locks --help | grep -q "terminate-idle-orphans" && pass "doctor locks --help" || fail "locks --help"
	"$SKL_BIN" doctor locks --url "postgresql://nobody@127.0.0.1:1/x" --retry-for 1s >/dev/null 2>&1
	check_eq "unreachable: exit 3" "$?" 3
	expect_exit "doctor all refuses a one-diagnosis option" 2 'idle-for belongs to one diagnosis' -- \
		"$SKL_BIN" doctor all --url "$URL" --idle-for 1s
fi

# --- doctor all: each diagnosis in turn; the pooled URL is not declared
# as pooled here, so the pooler probe's finding makes it exit 1 there
"$SKL_BIN" doctor all --url "$URL" --direct-url "$DIRECT_URL" >"$TMP/all.out" 2>"$TMP/all.err"
rc=$?
want=0; [ "$MODE" = pooled ] && want=1
check_eq "doctor all: the highest exit status" "$rc" "$want"
check_eq "doctor all: locks, pooler, indexes and maintenance in turn" \
	"$(grep '^== skiplock doctor' "$TMP/all.out" | tr '\n' ' ')" \
	"== skiplock doctor locks == skiplock doctor pooler == skiplock doctor indexes == skiplock doctor maintenance "

no_leftovers
finish
