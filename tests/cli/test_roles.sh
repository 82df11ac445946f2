#!/usr/bin/env bash
# Least privilege and no secrets in output: `skiplock init --owner
# --grant-worker`, then enqueue, a worker, leases, cron and the read-only
# commands run as the worker role, which logs in with a password that is
# in the URL of every command.  The worker role cannot DROP, ALTER or
# TRUNCATE skiplock's tables, run grant_roles, create objects, or read
# another schema.  Every byte those commands print, failures included
# (wrong password, wrong database, refused connection, a URL libpq cannot
# parse), is searched for the password.
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
OWNER=$SKL_TEST_OWNER_ROLE
W=$SKL_TEST_WORKER_ROLE
PW=$SKL_TEST_WORKER_PASSWORD
if [ "$MODE" = pooled ]; then PORT=$SKL_TEST_BOUNCER_PORT; else PORT=$SKL_TEST_PGPORT; fi
WURL="postgresql://$W:$PW@$SKL_TEST_PGHOST:$PORT/$DB"
ALL=$TMP/all-output   # everything the worker-role commands print
: >"$ALL"
run() { "$@" >>"$ALL" 2>&1; }
wq() { PGPASSWORD=$PW psql -X -q -At -v ON_ERROR_STOP=1 "postgresql://$W@$SKL_TEST_PGHOST:$SKL_TEST_PGPORT/$DB" -c "$1" 2>&1; }

# --- setup: the roles must exist; say so clearly ---
expect_exit "init with an owner role that does not exist" 2 'role "no_such_role" does not exist; create it first' -- \
	"$S" init --url "$URL" --owner no_such_role
check_eq "nothing installed when a role is missing" "$(q "SELECT count(*) FROM pg_namespace WHERE nspname = 'skiplock'")" 0
out=$("$S" init --url "$URL" --owner "$OWNER" --grant-worker "$W" 2>&1)
check_eq "init --owner --grant-worker" "$(echo "$out" | tail -n 2 | tr '\n' '|')" "skiplock schema owner: $OWNER|skiplock worker role: $W|"
check_eq "schema and every table owned by the owner" \
	"$(q "SELECT count(*) FROM pg_class WHERE relnamespace = 'skiplock'::regnamespace AND relowner <> (SELECT oid FROM pg_roles WHERE rolname = '$OWNER')")" 0
"$S" init --url "$URL" --owner "$OWNER" --grant-worker "$W" >/dev/null 2>&1 && pass "init with roles again" || fail "init with roles again"
q "CREATE TABLE public.secret_table (v text); INSERT INTO public.secret_table VALUES ('x')"

# --- the worker role does its work ---
run "$S" enqueue --url "$WURL" report '{"n": 1}' && pass "enqueue as worker" || fail "enqueue as worker: $(tail -n 2 "$ALL")"
out=$("$S" enqueue --url "$WURL" --json --unique-key r1 report 2>&1; "$S" enqueue --url "$WURL" --json --unique-key r1 report 2>&1)
check_eq "enqueue --json as worker: inserted, then found" "$(echo "$out" | sed 's/"id":[0-9]*,//' | tr '\n' ' ')" \
	'{"inserted":true} {"inserted":false} '
printf '%s\n' '{"kind":"report"}' '{"kind":"report","queue":"q2"}' | run "$S" enqueue --url "$WURL" --batch - &&
	pass "batch enqueue as worker" || fail "batch enqueue as worker: $(tail -n 2 "$ALL")"
"$S" cron add --url "$WURL" every-second '@every 1s' report >"$TMP/cron.out" 2>&1
check_eq "cron add as worker: refused (an operator's action), exit 1" "$?" 1
grep -q 'permission denied' "$TMP/cron.out" && pass "cron add as worker names the missing privilege" ||
	fail "cron add as worker: $(cat "$TMP/cron.out")"
run "$S" cron add --url "$URL" every-second '@every 1s' report && pass "cron add by the admin" || fail "cron add: $(tail -n 2 "$ALL")"
"$S" worker --url "$WURL" --handler 'report=cat >/dev/null; echo "{\"ok\": true}"' --queue default --queue q2 \
	--poll 50ms --poll-max 200ms --log-level debug >>"$ALL" 2>&1 &
WPID=$!
wait_for "SELECT count(*) >= 4 FROM skiplock.all_jobs WHERE state = 'completed'" t 40 &&
	pass "worker as worker role runs jobs and cron" || fail "worker as worker role: $(q "SELECT string_agg(kind||':'||state, ' ') FROM skiplock.all_jobs")"
kill -TERM $WPID; wait $WPID
check_eq "worker exits 0" "$?" 0
run "$S" lease run --url "$WURL" nightly-report --ttl 10s -- true && pass "lease run as worker" || fail "lease run as worker: $(tail -n 2 "$ALL")"
"$S" jobs prune --older-than 1d --url "$WURL" >"$TMP/prune.out" 2>&1
check_eq "jobs prune as worker: refused (an operator's action), exit 1" "$?" 1
for c in "jobs list" "jobs show 1" "status" "lease list" "cron list" "idem prune"; do
	run "$S" $c --url "$WURL" && pass "$c as worker" || fail "$c as worker: $(tail -n 2 "$ALL")"
done
HK=$(wq "SELECT holder FROM skiplock.idem_claim('k1', 'h1')")
check_eq "idempotency keys as worker: a holder token" "${#HK}" 64
check_eq "idempotency keys as worker: completed with it" \
	"$(wq "SELECT 'done' FROM (SELECT skiplock.idem_complete('k1', 201, '{}', '$HK')) c")" "done"
case $(wq "SELECT skiplock.idem_complete('k1', 201, '{}')") in
*"claimed with a holder token"*) pass "worker cannot complete an idempotency key without its holder" ;;
*) fail "idem_complete without a holder as worker" ;;
esac

# --- ... and nothing more ---
denied() { # name SQL
	local out
	out=$(wq "$2")
	case $out in *"permission denied"* | *"must be owner"*) pass "worker cannot $1" ;; *) fail "worker can $1: $out" ;; esac
}
denied "DROP a table" "DROP TABLE skiplock.jobs"
denied "set the retention" "SELECT skiplock.retention_set('*', NULL, '0')"
denied "cancel a job through job_cancel" "SELECT skiplock.job_cancel(1)"
# the operator's fleet-wide actions and their log (sql/0014_control.sql)
denied "pause a queue" "SELECT skiplock.pause('default', NULL, 'w', 'cli')"
denied "resume a kind" "SELECT skiplock.resume(NULL, 'report', 'w', 'cli')"
denied "discard a job through job_discard" "SELECT skiplock.job_discard(1)"
denied "act on jobs in bulk" "SELECT * FROM skiplock.jobs_act(1, '{1}')"
denied "write the action log through its function" "SELECT skiplock.action_record('w', 'cli', 'pause', '{}', 1, 1)"
denied "write the action log" "INSERT INTO skiplock.actions (actor, role, action, target) VALUES ('w', 'x', 'pause', '{}')"
denied "forge the action log" "UPDATE skiplock.actions SET actor = 'someone'"
denied "read the action log" "SELECT * FROM skiplock.actions"
denied "pause directly" "INSERT INTO skiplock.pauses (queue, kind, paused_by, role) VALUES ('default', '*', 'w', 'x')"
denied "run a schedule now" "SELECT skiplock.schedule_run_now('every-second', 'w', 'cli')"
denied "pause a schedule with the log" "SELECT skiplock.schedule_set_paused('every-second', true, 'w', 'cli')"
denied "force a breaker with the log" "SELECT skiplock.breaker_set('report', true, 'w', 'cli')"
denied "delete finished jobs" "DELETE FROM skiplock.finished_jobs"
denied "ALTER a table" "ALTER TABLE skiplock.jobs ADD COLUMN x int"
denied "TRUNCATE a table" "TRUNCATE skiplock.leases"
denied "DROP a function" "DROP FUNCTION skiplock.installed_version()"
denied "create in the schema" "CREATE TABLE skiplock.mine (x int)"
denied "run grant_roles" "SELECT skiplock.grant_roles('$W', '$W')"
denied "write schema_version" "DELETE FROM skiplock.schema_version"
denied "read another schema's table" "SELECT * FROM public.secret_table"
denied "install the schema" "DROP SCHEMA skiplock CASCADE"
# what fencing protects (the defects campaign's list), and the migrations
J=$(q "SELECT skiplock.enqueue('forge')")
denied "set a job's fencing and state" "UPDATE skiplock.jobs SET fencing = 99, state = 'available' WHERE id = $J"
denied "delete a job" "DELETE FROM skiplock.jobs WHERE id = $J"
denied "rewind a lease token" "UPDATE skiplock.leases SET fencing = 1"
denied "block migrations with an endless lease" "UPDATE skiplock.leases SET expires_at = 'infinity'"
denied "read stored idempotency responses" "SELECT * FROM skiplock.idempotency_keys"
denied "forge an idempotency response" "UPDATE skiplock.idempotency_keys SET response_code = 200"
denied "lock the jobs table exclusively" "BEGIN; LOCK TABLE skiplock.jobs IN ACCESS EXCLUSIVE MODE"
denied "enqueue around the functions" "INSERT INTO skiplock.jobs (kind) VALUES ('x')"
mkdir -p "$TMP/mig"
printf 'CREATE TABLE payout (id int);\n' >"$TMP/mig/0001_payout.sql"
"$S" migrate up --url "$DIRECT_URL" --dir "$TMP/mig" >/dev/null 2>&1 || fail "migrate up as admin"
"$S" init --url "$URL" --owner "$OWNER" --grant-worker "$W" >/dev/null 2>&1 || fail "init --grant-worker again"
denied "delete a migration record" "DELETE FROM skiplock.migrations"
denied "read the migration history" "SELECT * FROM skiplock.migrations"
out=$(wq "SELECT skiplock.lease_acquire('skiplock.migrate:skiplock.migrations', 'w', '300 days')")
case $out in *"reserved for the migrator"*) pass "worker cannot take the migration lease" ;; *) fail "worker took the migration lease: $out" ;; esac
# The maintenance lease is reserved too: a worker taking it for a year
# would switch maintenance off (docs/retention.md); maintenance itself
# takes it for 15 seconds through maintenance_acquire.
out=$(PGPASSWORD=$PW psql -X -q -At -v VERBOSITY=verbose "postgresql://$W@$SKL_TEST_PGHOST:$SKL_TEST_PGPORT/$DB" \
	-c "SELECT skiplock.lease_acquire('skiplock.maintenance', 'w', '365 days')" 2>&1)
case $out in *42501*"reserved for skiplock's maintenance"*) pass "worker cannot take the maintenance lease (42501)" ;;
	*) fail "worker took the maintenance lease: $out" ;; esac
for call in "lease_renew('skiplock.maintenance', 'w', 1, '1 h')" \
	"lease_fence('skiplock.maintenance', 1)"; do
	case $(wq "SELECT skiplock.$call") in *"reserved for skiplock's maintenance"*) pass "worker refused: $call" ;;
		*) fail "worker allowed: $call" ;; esac
done
run "$S" lease run --url "$WURL" skiplock.maintenance --ttl 1h -- true
check_eq "lease run skiplock.maintenance as worker: refused, exit 1" "$?" 1
check_eq "the maintenance lease was not taken for long" \
	"$(q "SELECT count(*) FROM skiplock.leases WHERE name = 'skiplock.maintenance' AND expires_at > now() + interval '1 minute'")" 0
run "$S" retention maintain --url "$WURL" && pass "retention maintain as worker" || fail "retention maintain as worker: $(tail -n 2 "$ALL")"
check_eq "the worker's maintenance ran" "$(q "SELECT last_owner LIKE 'skiplock retention %' FROM skiplock.maintenance")" t
out=$(wq "SELECT * FROM skiplock.claim('w', '{forge}')")
case $out in *"$J"*) pass "worker claims through the function" ;; *) fail "claim as worker: $out" ;; esac
run "$S" init --url "$WURL" --grant-worker "$W"; check_eq "init --grant-worker as the worker: refused, exit 1" "$?" 1

# --- failures as the worker: the password never shows ---
run "$S" status --url "postgresql://$W:$PW@$SKL_TEST_PGHOST:$PORT/no_such_db_$$" --retry-for 1s
check_eq "wrong database fails" "$?" "$([ "$MODE" = pooled ] && echo 3 || echo 1)"
run "$S" status --url "postgresql://$W:$PW-wrong@$SKL_TEST_PGHOST:$SKL_TEST_PGPORT/$DB" --retry-for 1s
check_eq "wrong password fails at once (direct)" "$?" 1
grep -q 'password authentication failed' "$ALL" && pass "wrong password is named" || fail "no 'password authentication failed' in output"
"$SKL_CUTPROXY" --listen 127.0.0.1:0 --upstream "$SKL_TEST_PGHOST:$PORT" --control "$TMP/cut.sock" \
	--ttl 120 --port-file "$TMP/cut.port" >"$TMP/cut.out" 2>&1 &
CUT=$!
for _ in $(seq 1 100); do [ -s "$TMP/cut.port" ] && break; sleep 0.1; done
CPORT=$(cat "$TMP/cut.port" 2>/dev/null)
if [ -n "$CPORT" ] && "$SKL_CUTPROXY" ctl "$TMP/cut.sock" mode refuse >/dev/null; then
	run "$S" enqueue --url "postgresql://$W:$PW@127.0.0.1:$CPORT/$DB" k --retry-for 1s --connect-timeout 1s
	check_eq "refused connection fails with exit 3" "$?" 3
else
	fail "cutproxy did not start: $(cat "$TMP/cut.err")"
fi
kill $CUT 2>/dev/null; wait $CUT 2>/dev/null
run "$S" status --url "postgresql://$W:$PW@127.0.0.1:1/$DB" --retry-for 1s --connect-timeout 1s
check_eq "unreachable port fails with exit 3" "$?" 3
run "$S" status --url "postgresql://$W:$PW%zz@127.0.0.1:1/$DB"
check_eq "bad percent-encoding in the password: exit 2" "$?" 2
run "$S" status --url "host=127.0.0.1 port=1 user=$W password='$PW x' dbname=$DB" --retry-for 1s --connect-timeout 1s
if [ "$MODE" = direct ]; then
	for c in init enqueue worker cron jobs status lease idem; do run "$S" $c --help; done
	run "$S" --help
fi
lines=$(wc -l <"$ALL")
if grep -qF -- "$PW" "$ALL"; then
	fail "the password shows in output: $(grep -F -- "$PW" "$ALL" | head -n 3)"
else
	pass "the password shows nowhere in $lines lines of output"
fi
grep -q '\*\*\*' "$ALL" && pass "URLs in messages are redacted" || fail "no redacted URL in the failures' messages"
no_leftovers
finish
