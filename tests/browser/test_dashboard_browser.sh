#!/usr/bin/env bash
# The dashboard in headless Chromium (Debian's /usr/bin/chromium, driven by
# playwright-core from npm, installed once into the build directory): the
# counts on the page equal SQL counts, the throughput sparklines count the
# finished jobs, a breaker opened with `skiplock breakers open` shows as
# open, an idle session holding an advisory lock shows as a lock-doctor
# finding, a click on retry makes a discarded job available (on the page
# and in SQL), the job page shows it, and a --read-only dashboard shows no
# action buttons.  The "what is wrong now" strip shows a stuck job (its
# lease expired an hour into its attempt), the open breaker and the lock
# finding, and its link lists the stuck job; a deep link restores filters
# and the open job; picking a row stops the auto-refresh; a viewer's token
# draws no button and its POST is refused.  Screenshots at desktop width
# and at 390 px (dark) are saved under the build directory and their paths
# printed.  Exits 77 (skipped) when Chromium, node or playwright-core is
# not available.
# shellcheck disable=SC2015  # A && pass || fail
skip() { echo "SKIP: $*"; exit 77; }
[ -x /usr/bin/chromium ] || skip "/usr/bin/chromium not installed (scripts/bootstrap chromium chromium-driver)"
command -v node >/dev/null && command -v npm >/dev/null || skip "node and npm not installed"
NPM=$SKL_BUILD_DIR/npm
if [ ! -f "$NPM/node_modules/playwright-core/package.json" ]; then
	mkdir -p "$NPM"
	cp "$(dirname "$0")/package.json" "$NPM/package.json"
	flock "$NPM/.lock" sh -c '[ -f "$1/node_modules/playwright-core/package.json" ] ||
		npm install --prefix "$1" --no-audit --no-fund --silent >&2' sh "$NPM" ||
		skip "npm install playwright-core failed"
fi
. "$(dirname "$0")/../cli/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"

start_dash() { # NAME ARGS...: sets PORT and PID
	local name=$1 _
	shift
	"$S" dashboard --url "$URL" --listen 127.0.0.1:0 --log-level warning --idle-for 1s "$@" \
		>"$TMP/$name.out" 2>"$TMP/$name.err" &
	PID=$!
	for _ in $(seq 1 300); do
		PORT=$(sed -n 's|^listening on http://.*:\([0-9]*\)/$|\1|p' "$TMP/$name.out")
		[ -n "$PORT" ] && return 0
		sleep 0.1
	done
	fail "$name: dashboard did not start: $(cat "$TMP/$name.err")"
	exit 1
}

# Jobs: three discarded by a failing handler (two queues), two completed,
# one delayed.
"$S" enqueue --url "$URL" --batch - >/dev/null <<'JOBS' || fail "enqueue"
{"kind": "bad", "payload": {"n": 1}, "max_attempts": 1}
{"kind": "bad", "payload": {"n": 2}, "max_attempts": 1}
{"kind": "bad", "payload": {"n": 3}, "max_attempts": 1, "queue": "mail"}
{"kind": "ok", "payload": {"n": 1}}
{"kind": "ok", "payload": {"n": 2}}
{"kind": "later", "delay": "1h", "queue": "mail"}
JOBS
# An idle session holding a session advisory lock: an orphan suspect for
# the lock doctor once idle for --idle-for (1s below).  Direct in both
# modes: through a transaction pooler the lock would outlive psql.
mkfifo "$TMP/holder.in"
psql "$DIRECT_URL" -X -qAt -v ON_ERROR_STOP=1 <"$TMP/holder.in" >"$TMP/holder.out" 2>&1 &
HOLDER=$!
exec 7>"$TMP/holder.in"
echo "SELECT pg_backend_pid(), pg_advisory_lock(74205);" >&7
"$S" worker --url "$URL" --poll 50ms --poll-max 200ms --log-level error --queue default \
	--queue mail --handler 'bad=echo broken >&2; exit 1' --handler 'ok=cat >/dev/null' \
	2>"$TMP/w.log" &
W=$!
for _ in $(seq 1 300); do
	[ "$(q "SELECT count(*) FROM skiplock.all_jobs WHERE state IN ('discarded', 'completed')")" = 5 ] && break
	sleep 0.1
done
kill -TERM $W; wait $W
# A stuck job: running for an hour, its lease expired a minute ago (its
# worker gone), in a queue no worker serves.
STUCK=$("$S" enqueue --url "$URL" --queue stuck hang) || fail "enqueue hang"
q "UPDATE skiplock.jobs SET state = 'running', attempt = 1, fencing = fencing + 1,
   lease_owner = 'gone', attempted_at = now() - interval '1 hour',
   lease_expires_at = now() - interval '1 minute' WHERE id = $STUCK" >/dev/null
"$S" breakers open bad --url "$URL" >/dev/null 2>&1 || fail "breakers open"
wait_until "the lock holder" 10 test -s "$TMP/holder.out"
HOLDER_PID=$(cut -d'|' -f1 "$TMP/holder.out")
JOB=$(q "SELECT min(id) FROM skiplock.all_jobs WHERE state = 'discarded'")
SQL_ROWS="SELECT queue || ' ' || kind || ' ' || count(*) FILTER (WHERE state = 'available') || ' ' ||
  count(*) FILTER (WHERE state = 'running') || ' ' || count(*) FILTER (WHERE state = 'completed') ||
  ' ' || count(*) FILTER (WHERE state = 'discarded') || ' ' ||
  count(*) FILTER (WHERE state = 'cancelled') FROM skiplock.all_jobs GROUP BY queue, kind ORDER BY queue, kind"
before=$(q "$SQL_ROWS")

start_dash rw
RW=$PID RW_PORT=$PORT
start_dash ro --read-only
RO=$PID RO_PORT=$PORT
printf 'op-%s\n' "$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$TMP/op"
printf 'vw-%s\n' "$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$TMP/vw"
start_dash roles --operator-token-file "$TMP/op" --viewer-token-file "$TMP/vw"
ROLES=$PID
# Screenshots are kept for review in the build directory, never committed.
SHOTS=$SKL_BUILD_DIR/dashboard-screenshots-$MODE
rm -rf "$SHOTS"
mkdir -p "$SHOTS"
SKL_NPM_DIR=$NPM node "$(dirname "$0")/dashboard.mjs" "http://127.0.0.1:$RW_PORT/" \
	"http://127.0.0.1:$RO_PORT/" "http://127.0.0.1:$PORT/" "$(head -n1 "$TMP/vw")" "$JOB" "$STUCK" \
	"$SHOTS" >"$TMP/obs" 2>"$TMP/node.err" || fail "browser run: $(tail -n 20 "$TMP/node.err")"
kill -TERM $RW $RO $ROLES; wait $RW $RO $ROLES
exec 7>&-
wait $HOLDER
cat "$TMP/obs"
check_eq "page counts equal SQL (before)" "$(sed -n 's/^row //p' "$TMP/obs")" "$before"
check_eq "page totals" "$(sed -n 's/^total //p' "$TMP/obs")" \
	"available=1 running=1 completed=2 discarded=3 cancelled=0"
check_eq "throughput: finished in the last hour" "$(sed -n 's/^rate //p' "$TMP/obs")" \
	"$(printf 'default bad 0 0 2 60\ndefault ok 2 2 0 60\nmail bad 0 0 1 60')"
check_eq "breakers: forced open" "$(sed -n 's/^breaker //p' "$TMP/obs")" "bad open"
check_eq "lock doctor: the idle holder is a finding" "$(sed -n 's/^finding //p' "$TMP/obs")" \
	"orphan_suspect $HOLDER_PID"
check_eq "retried job available on the page" "$(sed -n "s/^retried $JOB //p" "$TMP/obs")" available
check_eq "retried job available in SQL" "$(q "SELECT state FROM skiplock.all_jobs WHERE id = $JOB")" available
check_eq "page counts equal SQL (after)" "$(sed -n 's/^after //p' "$TMP/obs")" "$(q "$SQL_ROWS")"
check_eq "job page state" "$(sed -n 's/^job-page //p' "$TMP/obs")" available
check_eq "read-only: no action buttons" "$(sed -n 's/^ro-buttons //p' "$TMP/obs")" 0
check_eq "read-only: marked" "$(sed -n 's/^ro-mode //p' "$TMP/obs")" read-only
check_eq "strip: red" "$(sed -n 's/^strip-state //p' "$TMP/obs")" bad
grep -q "^strip lease-expired 1 running job(s) whose lease expired" "$TMP/obs" &&
	pass "strip: the expired lease" || fail "strip: no expired lease"
grep -q "^strip stuck 1 job(s) running for more than 15 min" "$TMP/obs" &&
	pass "strip: the stuck job" || fail "strip: no stuck job"
grep -q "^strip breaker breaker bad is open" "$TMP/obs" && pass "strip: the open breaker" ||
	fail "strip: no open breaker"
grep -q "^strip locks 1 lock-doctor finding" "$TMP/obs" && pass "strip: the lock finding" ||
	fail "strip: no lock finding"
check_eq "strip: the expired lease links to the stuck job" "$(sed -n 's/^strip-link //p' "$TMP/obs")" \
	"$STUCK #state=running&time=lease&to=0s"
MAIL_DISCARDED=$(q "SELECT string_agg(id::text, ',' ORDER BY id DESC) FROM skiplock.all_jobs
  WHERE state = 'discarded' AND queue = 'mail'")
check_eq "deep link: filters, open job and list restored" "$(sed -n 's/^deep-link //p' "$TMP/obs")" \
	"discarded mail $JOB $MAIL_DISCARDED"
check_eq "refresh control: on, stops while a row is picked, paused" \
	"$(sed -n 's/^auto-refresh //p' "$TMP/obs" | tr '\n' ' ')" "start on picked off unpicked on paused off "
check_eq "viewer: role on the page" "$(sed -n 's/^viewer-role //p' "$TMP/obs")" "viewer viewer"
check_eq "viewer: no action buttons" "$(sed -n 's/^viewer-buttons //p' "$TMP/obs")" 0
check_eq "viewer: POST refused" "$(sed -n 's/^viewer-post //p' "$TMP/obs")" 403
check_eq "phone: nothing wider than 390 px" "$(sed -n 's/^phone-width //p' "$TMP/obs")" 390
for f in desktop phone; do
	[ -s "$SHOTS/$f.png" ] && pass "screenshot: $SHOTS/$f.png ($(stat -c %s "$SHOTS/$f.png") bytes)" ||
		fail "no $f screenshot"
done
no_leftovers
finish
