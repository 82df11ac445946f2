#!/usr/bin/env bash
# The dashboard in headless Chromium (Debian's /usr/bin/chromium, driven by
# playwright-core from npm, installed once into the build directory): the
# counts on the page equal SQL counts, the throughput sparklines count the
# finished jobs, a breaker opened with `skiplock breakers open` shows as
# open, an idle session holding an advisory lock shows as a lock-doctor
# finding, a click on retry makes a discarded job available (on the page
# and in SQL), the job page shows it, and a --read-only dashboard shows no
# action buttons.  A screenshot is saved
# under the build directory.  Exits 77 (skipped) when Chromium, node or
# playwright-core is not available.
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
	[ "$(q "SELECT count(*) FROM skiplock.jobs WHERE state IN ('discarded', 'completed')")" = 5 ] && break
	sleep 0.1
done
kill -TERM $W; wait $W
"$S" breakers open bad --url "$URL" >/dev/null 2>&1 || fail "breakers open"
wait_until "the lock holder" 10 test -s "$TMP/holder.out"
HOLDER_PID=$(cut -d'|' -f1 "$TMP/holder.out")
JOB=$(q "SELECT min(id) FROM skiplock.jobs WHERE state = 'discarded'")
SQL_ROWS="SELECT queue || ' ' || kind || ' ' || count(*) FILTER (WHERE state = 'available') || ' ' ||
  count(*) FILTER (WHERE state = 'running') || ' ' || count(*) FILTER (WHERE state = 'completed') ||
  ' ' || count(*) FILTER (WHERE state = 'discarded') || ' ' ||
  count(*) FILTER (WHERE state = 'cancelled') FROM skiplock.jobs GROUP BY queue, kind ORDER BY queue, kind"
before=$(q "$SQL_ROWS")

start_dash rw
RW=$PID RW_PORT=$PORT
start_dash ro --read-only
RO=$PID
SHOT=$SKL_BUILD_DIR/dashboard-$MODE.png
rm -f "$SHOT"
SKL_NPM_DIR=$NPM node "$(dirname "$0")/dashboard.mjs" "http://127.0.0.1:$RW_PORT/" \
	"http://127.0.0.1:$PORT/" "$JOB" "$SHOT" >"$TMP/obs" 2>"$TMP/node.err" ||
	fail "browser run: $(tail -n 20 "$TMP/node.err")"
kill -TERM $RW $RO; wait $RW $RO
exec 7>&-
wait $HOLDER
cat "$TMP/obs"
check_eq "page counts equal SQL (before)" "$(sed -n 's/^row //p' "$TMP/obs")" "$before"
check_eq "page totals" "$(sed -n 's/^total //p' "$TMP/obs")" \
	"available=1 running=0 completed=2 discarded=3 cancelled=0"
check_eq "throughput: finished in the last hour" "$(sed -n 's/^rate //p' "$TMP/obs")" \
	"$(printf 'default bad 0 0 2 60\ndefault ok 2 2 0 60\nmail bad 0 0 1 60')"
check_eq "breakers: forced open" "$(sed -n 's/^breaker //p' "$TMP/obs")" "bad open"
check_eq "lock doctor: the idle holder is a finding" "$(sed -n 's/^finding //p' "$TMP/obs")" \
	"orphan_suspect $HOLDER_PID"
check_eq "retried job available on the page" "$(sed -n "s/^retried $JOB //p" "$TMP/obs")" available
check_eq "retried job available in SQL" "$(q "SELECT state FROM skiplock.jobs WHERE id = $JOB")" available
check_eq "page counts equal SQL (after)" "$(sed -n 's/^after //p' "$TMP/obs")" "$(q "$SQL_ROWS")"
check_eq "job page state" "$(sed -n 's/^job-page //p' "$TMP/obs")" available
check_eq "read-only: no action buttons" "$(sed -n 's/^ro-buttons //p' "$TMP/obs")" 0
check_eq "read-only: marked" "$(sed -n 's/^ro-mode //p' "$TMP/obs")" read-only
[ -s "$SHOT" ] && pass "screenshot saved: $SHOT ($(stat -c %s "$SHOT") bytes)" || fail "no screenshot"
no_leftovers
finish
