#!/usr/bin/env bash
# `skiplock migrate` against other sessions: a session idle in transaction
# holding a lock on a table a file alters makes migrate exit 1 naming its
# pid and application_name, and --terminate-idle-holders ends it and
# applies every file; an active blocker is never terminated; 4 concurrent
# migrators with a CREATE INDEX CONCURRENTLY file apply each file once and
# all exit 0; a migrator killed mid-file is taken over after its lease
# expires, nothing applied twice.  Every wait is bounded.
. "$(dirname "$0")/lib.sh"

unset DIRECT_DATABASE_URL DATABASE_URL
if [ "$MODE" = pooled ]; then DIRECT=(--direct-url "$DIRECT_URL"); else DIRECT=(); fi
mig() { "$SKL_BIN" migrate up --url "$URL" "${DIRECT[@]}" "$@"; }
applied() { q "SELECT coalesce(string_agg(version::text, ',' ORDER BY version), '') FROM ${1:-skiplock.migrations}"; }
run() { local n=$1; shift; "$@" >"$TMP/$n.out" 2>"$TMP/$n.err"; RC=$?; }
has() { # DESCRIPTION FILE PATTERN
	if grep -qE -- "$3" "$2"; then pass "$1"; else fail "$1: /$3/ not in: $(head -c 800 "$2")"; fi
}
pid_of() { q "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = '$1' AND state = '$2'"; }
has_session() { [ -n "$(pid_of "$1" "$2")" ]; }
column_exists() { q "SELECT count(*) FROM information_schema.columns WHERE table_name = '$1' AND column_name = '$2'"; }

# --- an idle-in-transaction blocker -------------------------------------
D=$TMP/block
mkdir -p "$D"
echo 'CREATE TABLE tb (id int); INSERT INTO tb VALUES (1);' >"$D/0001_tb.sql"
run base mig --dir "$D"
check_eq "base applied" "$RC $(applied)" "0 1"
# A client that read tb in a transaction and went idle: psql waits on stdin.
mkfifo "$TMP/idle.in"
PGAPPNAME=idle_holder psql -X -q "$DIRECT_URL" <"$TMP/idle.in" >/dev/null 2>&1 &
exec 7>"$TMP/idle.in"
echo 'BEGIN; SELECT count(*) FROM tb;' >&7
wait_until "the holder is idle in transaction" 20 has_session idle_holder 'idle in transaction'
BPID=$(pid_of idle_holder 'idle in transaction')
echo 'ALTER TABLE tb ADD COLUMN z int;' >"$D/0002_alter.sql"
echo 'ALTER TABLE tb ADD COLUMN w int;' >"$D/0003_alter.sql"
run blocked mig --dir "$D" --lock-timeout 1s --max-wait 5s
check_eq "blocked by an idle transaction: exit 1" "$RC" 1
has "the error names the blocker's pid and application_name" "$TMP/blocked.err" \
	"0002_alter.sql: still blocked after [0-9]+ ms by pid $BPID \(application_name \"idle_holder\", idle in transaction"
has "each timed-out wait is logged with the blocker" "$TMP/blocked.err" \
	"warning: 0002_alter.sql: rolled back after a lock wait timed out; blocked by pid $BPID"
check_eq "nothing applied, no partial change" "$(applied) $(column_exists tb z)" "1 0"
run terminate mig --dir "$D" --lock-timeout 1s --max-wait 20s --terminate-idle-holders --idle-for 1s
check_eq "--terminate-idle-holders: exit 0, every file applied" "$RC $(applied)" "0 1,2,3"
has "it logs the termination" "$TMP/terminate.err" "terminated blocking pid $BPID \(application_name \"idle_holder\""
check_eq "the blocker is gone" "$(q "SELECT count(*) FROM pg_stat_activity WHERE pid = $BPID")" 0
exec 7>&-
wait

# --- an active blocker is never terminated --------------------------------
PGAPPNAME=active_holder psql -X -q "$DIRECT_URL" -c 'SELECT count(*) FROM tb, pg_sleep(60)' >/dev/null 2>&1 &
holder=$!
wait_until "the active holder runs" 20 has_session active_holder active
APID=$(pid_of active_holder active)
echo 'ALTER TABLE tb ADD COLUMN v int;' >"$D/0004_alter.sql"
run active mig --dir "$D" --lock-timeout 1s --max-wait 3s --terminate-idle-holders --idle-for 0s
check_eq "blocked by an active query: exit 1" "$RC" 1
has "the error names the active blocker" "$TMP/active.err" "0004_alter.sql: still blocked after [0-9]+ ms by pid $APID \(application_name \"active_holder\", active"
check_eq "the active blocker was not terminated" "$(pid_of active_holder active)" "$APID"
check_eq "0004 not applied" "$(applied) $(column_exists tb v)" "1,2,3 0"
q "SELECT pg_cancel_backend($APID)" >/dev/null
wait_exit "$holder" 20

# --- 4 concurrent migrators, one file CREATE INDEX CONCURRENTLY -------------
D=$TMP/conc
mkdir -p "$D"
echo 'CREATE TABLE tc (id int, n int); SELECT pg_sleep(0.5);' >"$D/0001_tc.sql"
printf -- '-- skiplock:no-transaction\nCREATE INDEX CONCURRENTLY tc_n ON tc (n);\n' >"$D/0002_tc_index.sql"
echo 'INSERT INTO tc SELECT g, g FROM generate_series(1, 1000) g;' >"$D/0003_fill.sql"
echo 'ALTER TABLE tc ADD COLUMN note text;' >"$D/0004_note.sql"
pids=()
for i in 1 2 3 4; do
	mig --dir "$D" --table conc_migrations --max-wait 60s >"$TMP/conc.$i.out" 2>"$TMP/conc.$i.err" &
	pids+=($!)
done
zero=0
for p in "${pids[@]}"; do wait_exit "$p" 90; [ "$RC" = 0 ] && zero=$((zero + 1)); done
check_eq "4 concurrent migrators all exit 0" "$zero" 4
check_eq "each file applied exactly once" \
	"$(applied conc_migrations) $(cat "$TMP"/conc.*.out | grep -c '^applied ') $(q 'SELECT count(*) FROM tc')" "1,2,3,4 4 1000"
check_eq "the concurrent index is valid" \
	"$(q "SELECT indisvalid FROM pg_index WHERE indexrelid = 'tc_n'::regclass")" t

# --- a migrator killed mid-file --------------------------------------------
D=$TMP/kill
mkdir -p "$D"
echo 'CREATE TABLE tk (id int PRIMARY KEY); CREATE TABLE slow (s float); INSERT INTO slow VALUES (60); INSERT INTO tk VALUES (1);' >"$D/0001_tk.sql"
echo 'INSERT INTO tk VALUES (2); SELECT pg_sleep(s) FROM slow;' >"$D/0002_slow.sql"
# Not through the mig function: $! must be skiplock itself.
"$SKL_BIN" migrate up --url "$URL" "${DIRECT[@]}" --dir "$D" --table kill_migrations --lease-ttl 3s \
	>"$TMP/killed.out" 2>"$TMP/killed.err" &
victim=$!
in_sleep() { [ "$(q "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'SELECT pg_sleep(s)%' AND state = 'active'")" = 1 ]; }
wait_until "the migrator is inside 0002" 30 in_sleep
kill -KILL "$victim"
wait "$victim" 2>/dev/null
check_eq "the victim applied 0001 only" "$(applied kill_migrations)" 1
check_eq "the killed migrator held the lease (token 1)" \
	"$(q "SELECT fencing FROM skiplock.leases WHERE name = 'skiplock.migrate:kill_migrations'")" 1
q 'UPDATE slow SET s = 0' >/dev/null
run takeover mig --dir "$D" --table kill_migrations --lease-ttl 3s --max-wait 30s
check_eq "the next run takes over and finishes" "$RC $(applied kill_migrations)" "0 1,2"
check_eq "nothing applied twice" "$(q "SELECT string_agg(id::text, ',' ORDER BY id) FROM tk")" "1,2"
check_eq "it took the lease with the next token" \
	"$(q "SELECT fencing FROM skiplock.leases WHERE name = 'skiplock.migrate:kill_migrations'")" 2

no_leftovers
finish
