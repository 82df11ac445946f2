#!/usr/bin/env bash
# The dashboard in headless Chromium (Debian's /usr/bin/chromium, driven by
# playwright-core from npm, installed once into the build directory): the
# counts on the page equal SQL counts, the throughput sparklines count the
# finished jobs, a breaker opened with `skiplock breakers open` shows as
# open, an idle session holding an advisory lock shows as a lock-doctor
# finding, a click on retry makes a discarded job available (on the page
# and in SQL), the job page shows it, and a --read-only dashboard shows no
# action buttons.  The "what is wrong now" strip shows a stuck job (its
# lease expired an hour into its attempt), the open breaker, the lock
# finding and a worker idle while a job of another kind is due (its link
# lists that job, the Workers table shows it), and its link lists the
# stuck job; a deep link restores filters
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
# A job of a queue no worker serves; the browser run makes it stuck
# (running for an hour, its lease expired a minute ago, its worker gone)
# once the worker below has stopped, since an idle worker rescues it.
STUCK=$("$S" enqueue --url "$URL" --queue stuck hang) || fail "enqueue hang"
"$S" breakers open bad --url "$URL" >/dev/null 2>&1 || fail "breakers open"
# A worker runs while the page is open: kind flaky always fails, kind bulk
# succeeds and writes its id to a ledger (a job run twice would show), pzk
# succeeds (the browser run makes 500 of them, discarded), pzk succeeds.
# Idle, it polls every 200 ms (--poll-idle), so through the pooler too it
# claims a job soon after it is enqueued.  The browser run stops it
# (SIGTERM); the script stops it too when the browser run failed first.
"$S" worker --url "$URL" --poll 50ms --poll-max 200ms --log-level debug --concurrency 8 \
	--queue bulk --queue flaky --queue pz --backoff fixed --backoff-base 100ms --poll-idle 200ms \
	--handler 'flaky=exit 1' --handler "bulk=echo \$SKIPLOCK_JOB_ID >>$TMP/ledger" \
	--handler 'pzk=true' 2>"$TMP/w2.log" &
W2=$!
PZ=$("$S" enqueue --url "$URL" --queue pz pzk) || fail "enqueue pzk"
pz_done() { [ "$(q "SELECT state FROM skiplock.all_jobs WHERE id = $PZ")" = completed ]; }
wait_until "the first pz job" 30 pz_done ||
	echo "the worker: $(q "SELECT state FROM skiplock.all_jobs WHERE id = $PZ"); $(tail -n 20 "$TMP/w2.log")"
wait_until "the lock holder" 10 test -s "$TMP/holder.out"
HOLDER_PID=$(cut -d'|' -f1 "$TMP/holder.out")
JOB=$(q "SELECT min(id) FROM skiplock.all_jobs WHERE state = 'discarded'")
# Queue held, which no worker serves: two jobs of the open breaker's kind,
# one of a limited kind, one scheduled and its child, waiting for it.
q "SELECT skiplock.limit_set('lim', max_running => 3, rate => 50, per => '2 seconds')" >/dev/null
HELD_LATER=$(q "SELECT skiplock.enqueue('later', queue => 'held', run_at => now() + interval '1 day')")
q "SELECT skiplock.enqueue('bad', queue => 'held') FROM generate_series(1, 2);
   SELECT skiplock.enqueue('lim', queue => 'held')" >/dev/null
HELD_CHILD=$(q "SELECT skiplock.enqueue_after(ARRAY[$HELD_LATER], 'child', queue => 'held')")
export HELD_CHILD # dashboard.mjs opens its page
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
export STUCK # dashboard.mjs reads it from its environment as well as its arguments
W2_PID=$W2 SKL_URL=$URL SKL_DIRECT_URL=$DIRECT_URL SQL_ROWS=$SQL_ROWS SKL_NPM_DIR=$NPM node "$(dirname "$0")/dashboard.mjs" "http://127.0.0.1:$RW_PORT/" \
	"http://127.0.0.1:$RO_PORT/" "http://127.0.0.1:$PORT/" "$(head -n1 "$TMP/vw")" "$JOB" "$STUCK" \
	"$SHOTS" >"$TMP/obs" 2>"$TMP/node.err" || fail "browser run: $(tail -n 20 "$TMP/node.err")"
kill -TERM $RW $RO $ROLES; wait $RW $RO $ROLES
kill -TERM $W2 2>/dev/null
wait $W2
check_eq "the worker, stopped by the browser run, exits 0" $? 0
exec 7>&-
wait $HOLDER
cat "$TMP/obs"
check_eq "page counts equal SQL (before)" "$(sed -n 's/^row //p' "$TMP/obs")" "$before"
check_eq "page totals" "$(sed -n 's/^total //p' "$TMP/obs")" \
	"available=7 running=0 completed=3 discarded=3 cancelled=0"
check_eq "throughput: finished in the last hour" "$(sed -n 's/^rate //p' "$TMP/obs")" \
	"$(printf 'default bad 0 0 2 60\ndefault ok 2 2 0 60\nmail bad 0 0 1 60\npz pzk 1 1 0 60')"
check_eq "breakers: forced open" "$(sed -n 's/^breaker //p' "$TMP/obs")" "bad open"
check_eq "waits: what holds each job of queue held" "$(sed -n 's/^wait held //p' "$TMP/obs")" \
	"dependency=1 scheduled=1 paused=0 breaker=2 limit=1 worker=0"
check_eq "limits: lim's use" "$(sed -n 's/^limit //p' "$TMP/obs")" "lim 0 / 3 0 / 50 per 2 s 1"
check_eq "the child's page says what it waits for" "$(sed -n 's/^child-waits //p' "$TMP/obs")" \
	"dependencies: 1 of 1 parent(s) not finished"
check_eq "lock doctor: the idle holder is a finding" "$(sed -n 's/^finding //p' "$TMP/obs")" \
	"orphan_suspect $HOLDER_PID"
check_eq "retried job available on the page" "$(sed -n "s/^retried $JOB //p" "$TMP/obs")" available
check_eq "retried job available in SQL" "$(q "SELECT state FROM skiplock.all_jobs WHERE id = $JOB")" available
check_eq "page counts equal SQL (after)" "$(sed -n 's/^after //p' "$TMP/obs")" "$(sed -n 's/^after-sql //p' "$TMP/obs")"
read -r f0 f1 points hover <<<"$(sed -n 's/^chart-failed //p' "$TMP/obs")"
[ -n "$f1" ] && [ "$f1" -ge $((f0 + 2)) ] && pass "chart: 2 new failed attempts appear ($f0 then $f1)" ||
	fail "chart: failed attempts did not appear: '$f0' then '$f1'"
check_eq "chart: 60 points, the numbers on hover" "$points $hover" "60 hover"
check_eq "bulk: the dialog states the count and the filter" "$(sed -n 's/^bulk-dialog //p' "$TMP/obs")" \
	"retry 500 job(s) matching state=discarded, kind=bulk? Jobs a worker finishes first are skipped."
check_eq "bulk: the answer" "$(sed -n 's/^bulk-answer //p' "$TMP/obs")" "retry: 500 matched, 500 retried, 0 skipped"
check_eq "bulk: the action log on the page says 500" "$(sed -n 's/^bulk-log //p' "$TMP/obs")" \
	"dashboard@127.0.0.1 | operator | $(q "SELECT session_user") | retry | {\"kind\":\"bulk\",\"state\":\"discarded\",\"up_to\":$(q "SELECT max(id) FROM skiplock.all_jobs WHERE kind = 'bulk'")} | 500 | 500"
check_eq "bulk: a filter of every job: the dialog says so, and yes waits for the box" \
	"$(sed -n 's/^every-dialog //p' "$TMP/obs") $(sed -n 's/^every-box //p' "$TMP/obs")" "true true true false"
check_eq "bulk: 500 completed in SQL, each after one more claim" \
	"$(q "SELECT count(*) || ' ' || count(*) FILTER (WHERE attempt = 2) FROM skiplock.all_jobs WHERE kind = 'bulk' AND state = 'completed'")" "500 500"
check_eq "bulk: each job ran its handler once (500 ids, none twice)" \
	"$(wc -l <"$TMP/ledger") $(sort -u "$TMP/ledger" | wc -l)" "500 500"
check_eq "bulk: the ledger is the bulk jobs" "$(sort -n "$TMP/ledger" | tr '\n' ' ')" \
	"$(q "SELECT string_agg(id::text, ' ' ORDER BY id) || ' ' FROM skiplock.all_jobs WHERE kind = 'bulk'")"
grep -q "^paused-job available 0 paused queue pz is paused (since .*, by dashboard@127.0.0.1): its jobs wait$" "$TMP/obs" &&
	pass "pause: the job waits unclaimed, the row and the strip say paused" ||
	fail "pause: $(grep '^paused-job' "$TMP/obs")"
check_eq "resume: the job is claimed and completed" "$(sed -n 's/^resumed-job //p' "$TMP/obs")" "completed 1"
check_eq "viewer: no bulk, pause, breaker or schedule button" "$(sed -n 's/^viewer-act-buttons //p' "$TMP/obs")" 0
check_eq "viewer: pause refused" "$(sed -n 's/^viewer-pause //p' "$TMP/obs")" 403
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
grep -q "^strip idle-workers 1 worker(s) idle while 1 due job(s) of queue pz wait: kinds they take: pzk; waiting: nobody$" "$TMP/obs" &&
	pass "strip: the idle worker" || fail "strip: no idle worker of queue pz: $(grep '^strip ' "$TMP/obs")"
check_eq "workers: the idle worker's row" "$(sed -n 's/^workers-row //p' "$TMP/obs")" \
	"browser-idle | pz | pzk | 1 (nobody)"
read -r idle_job idle_rest <<<"$(sed -n 's/^idle-link //p' "$TMP/obs")"
check_eq "strip: the idle worker links to the job it left behind" "$idle_rest" \
	"$idle_job #queue=pz&state=available&time=run&to=0s"
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
