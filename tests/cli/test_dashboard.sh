#!/usr/bin/env bash
# `skiplock dashboard` over HTTP: a non-loopback listener is refused without
# a token file, the bearer token is required (401 without it or with a wrong
# one), POST needs the page's CSRF token (403 without it), --read-only
# refuses every action, the JSON counts equal SQL counts, and the
# throughput, breakers and lock-doctor endpoints answer; 100 idle sockets
# held open do not keep a request from answering at once, and an idle
# connection is closed after a few seconds.  Finding a job: payload
# containment, error text and time windows (lease expired, stuck), bad
# filters 400; /api/queues's oldest due age and failure rates; operator and
# viewer tokens (a viewer's POST is 403), --hide-payloads, /api/workers
# (shape, bad windows 400), /api/waits and /api/limits, /api/doctor/maintenance (its finding when
# maintenance has not run while jobs finished), and the plans of the job
# search and of the idle workers.
# shellcheck disable=SC2015  # A && pass || fail
. "$(dirname "$0")/lib.sh"
S=$SKL_BIN
"$S" init --url "$URL" >/dev/null 2>&1 || fail "init"

# start_dash NAME ARGS...: starts a dashboard in the background; sets PORT
# and PID, or fails the test when it does not print its address in time.
start_dash() {
	local name=$1 _
	shift
	"$S" dashboard --url "$URL" --log-level warning "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
	PID=$!
	for _ in $(seq 1 300); do
		PORT=$(sed -n 's|^listening on http://.*:\([0-9]*\)/$|\1|p' "$TMP/$name.out")
		[ -n "$PORT" ] && return 0
		kill -0 $PID 2>/dev/null || break
		sleep 0.1
	done
	fail "$name: dashboard did not start: $(cat "$TMP/$name.err")"
	exit 1
}
stop_dash() { kill -TERM "$PID"; wait "$PID"; check_eq "$1: exits 0 on SIGTERM" $? 0; }
# http METHOD PATH [CURL ARGS...]: prints the status code; the body is in $TMP/body.
http() {
	local m=$1 p=$2
	shift 2
	curl -s -o "$TMP/body" -w '%{http_code}' -X "$m" "$@" "http://127.0.0.1:$PORT$p"
}

# --- bad input: exit 2, one line, nothing served ---
expect_exit "non-loopback without a token file" 2 "not a loopback address.*--operator-token-file" -- \
	"$S" dashboard --url "$URL" --listen 0.0.0.0:0
expect_exit "listen without a port" 2 "--listen.*ADDR:PORT" -- \
	"$S" dashboard --url "$URL" --listen 127.0.0.1
printf 'short\n' >"$TMP/short"
expect_exit "token too short" 2 "--operator-token-file.*16 to 4096" -- \
	"$S" dashboard --url "$URL" --listen 0.0.0.0:0 --auth-token-file "$TMP/short"
expect_exit "token file missing" 2 "--operator-token-file: cannot read" -- \
	"$S" dashboard --url "$URL" --auth-token-file "$TMP/none"

expect_exit "viewer token file missing" 2 "--viewer-token-file: cannot read" -- \
	"$S" dashboard --url "$URL" --viewer-token-file "$TMP/none"
expect_exit "--stuck-after 0" 2 "--stuck-after must be longer than 0" -- \
	"$S" dashboard --url "$URL" --stuck-after 0s

# --- jobs: two available in two queues, one delayed ---
ids=$("$S" enqueue --url "$URL" --batch - <<'JOBS'
{"kind": "k", "payload": {"n": 1}}
{"kind": "k", "payload": {"n": 2}, "queue": "q2"}
{"kind": "later", "delay": "1h"}
JOBS
)
read -r d1 d2 a1 <<<"$(echo $ids)"
check_eq "three jobs enqueued" "$(q "SELECT count(*) FROM skiplock.all_jobs")" 3

# --- a token file: 401 without or with a wrong bearer token ---
printf 'tok-%s\n' "$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$TMP/token"
TOKEN=$(head -n1 "$TMP/token")
start_dash auth --listen 0.0.0.0:0 --auth-token-file "$TMP/token"
check_eq "no token: 401" "$(http GET /api/queues)" 401
check_eq "no token on the page: 401" "$(http GET /)" 401
check_eq "wrong token: 401" "$(http GET /api/queues -H "Authorization: Bearer ${TOKEN}x")" 401
check_eq "token as basic auth: 401" "$(http GET /api/queues -H "Authorization: Basic $TOKEN")" 401
check_eq "POST without a token: 401" "$(http POST "/api/jobs/$d1/retry")" 401
check_eq "right token: 200" "$(http GET /api/queues -H "Authorization: Bearer $TOKEN")" 200
# The Host rule holds with a token too (a browser holding the token must not
# be steered by a rebound name): loopback names and address literals pass.
check_eq "right token, foreign Host (DNS rebinding): 403" \
	"$(http GET /api/queues -H "Authorization: Bearer $TOKEN" -H "Host: rebind.example:$PORT")" 403
check_eq "the refusal names --allow-host" "$(jq -r .error "$TMP/body")" \
	'the Host header "rebind.example" is not accepted: name it with --allow-host'
check_eq "right token, Host localhost: 200" \
	"$(http GET /api/queues -H "Authorization: Bearer $TOKEN" -H "Host: localhost:$PORT")" 200
check_eq "right token, Host an address literal: 200" \
	"$(http GET /api/queues -H "Authorization: Bearer $TOKEN" -H "Host: 192.0.2.7:$PORT")" 200
check_eq "right token, Host an IPv6 literal: 200" \
	"$(http GET /api/queues -H "Authorization: Bearer $TOKEN" -H "Host: [2001:db8::7]:$PORT")" 200
stop_dash auth
# --allow-host NAME (repeatable) adds a name, any case, any port.
start_dash allow --listen 0.0.0.0:0 --auth-token-file "$TMP/token" --allow-host dash.example \
	--allow-host Other.Example
check_eq "--allow-host: the named host: 200" \
	"$(http GET /api/queues -H "Authorization: Bearer $TOKEN" -H "Host: DASH.example:$PORT")" 200
check_eq "--allow-host: the second name, no port: 200" \
	"$(http GET /api/queues -H "Authorization: Bearer $TOKEN" -H "Host: other.example")" 200
check_eq "--allow-host: another name: 403" \
	"$(http GET /api/queues -H "Authorization: Bearer $TOKEN" -H "Host: dash.example.evil:$PORT")" 403
check_eq "--allow-host: no Host at all: 403" \
	"$(http GET /api/queues -H "Authorization: Bearer $TOKEN" -H "Host;")" 403
stop_dash allow
expect_exit "--allow-host with a port" 2 '--allow-host: "dash.example:80" is not a host name' -- \
	"$S" dashboard --url "$URL" --allow-host dash.example:80

# --- loopback: the page, CSRF, counts ---
start_dash rw --listen 127.0.0.1:0
check_eq "page: 200" "$(http GET /)" 200
CSRF=$(sed -n 's|.*name="csrf-token" content="\([0-9a-f]*\)".*|\1|p' "$TMP/body")
check_eq "page carries a 64-hex CSRF token" "${#CSRF}" 64
grep -q 'data-read-only="false"' "$TMP/body" && pass "page: actions enabled" || fail "page: read-only flag"
check_eq "script: 200" "$(http GET /app.js)" 200
check_eq "unknown page: 404" "$(http GET /nope)" 404
check_eq "foreign Host (DNS rebinding): 403" "$(http GET /api/queues -H "Host: rebind.example:$PORT")" 403
check_eq "Host localhost: 200" "$(http GET /api/queues -H "Host: localhost:$PORT")" 200
check_eq "bad state filter: 400" "$(http GET '/api/jobs?state=lost')" 400
check_eq "jobs filtered by queue" "$(http GET '/api/jobs?queue=q2')" 200
check_eq "one job in q2" "$(grep -o '"queue":"q2"' "$TMP/body" | wc -l)" 1
check_eq "queues: 200" "$(http GET /api/queues)" 200
got=$(printf '%s\n' "SELECT string_agg(format('%s/%s %s %s %s', e->>'queue', e->>'kind', e->>'available', e->>'discarded', e->>'completed'), ', ' ORDER BY e->>'queue', e->>'kind') FROM jsonb_array_elements(:'doc'::jsonb) e" |
	psql -X -q -At -v ON_ERROR_STOP=1 -v doc="$(cat "$TMP/body")" "$DIRECT_URL")
want=$(q "SELECT string_agg(x, ', ' ORDER BY queue, kind) FROM (SELECT queue, kind, format('%s/%s %s %s %s', queue, kind, count(*) FILTER (WHERE state = 'available'), count(*) FILTER (WHERE state = 'discarded'), count(*) FILTER (WHERE state = 'completed')) x FROM skiplock.all_jobs GROUP BY queue, kind) t")
check_eq "queue counts equal SQL" "$got" "$want"
check_eq "one job: 200" "$(http GET "/api/jobs/$d1")" 200
grep -q '"payload":{"n":1}' "$TMP/body" && pass "one job carries its payload" || fail "job page: $(cat "$TMP/body")"
check_eq "no such job: 404" "$(http GET /api/jobs/999999)" 404
check_eq "POST without CSRF: 403" "$(http POST "/api/jobs/$d1/cancel")" 403
# The right token with its last digit changed (never the same token).
WRONG=${CSRF%?}$([ "${CSRF: -1}" = 0 ] && echo 1 || echo 0)
check_eq "POST with a wrong CSRF: 403" "$(http POST "/api/jobs/$d1/cancel" -H "X-CSRF-Token: $WRONG")" 403
check_eq "job still available" "$(q "SELECT state FROM skiplock.all_jobs WHERE id = $d1")" available
check_eq "cancel with CSRF: 200" "$(http POST "/api/jobs/$d1/cancel" -H "X-CSRF-Token: $CSRF")" 200
check_eq "job cancelled" "$(q "SELECT state FROM skiplock.all_jobs WHERE id = $d1")" cancelled
check_eq "retry with CSRF: 200" "$(http POST "/api/jobs/$d1/retry" -H "X-CSRF-Token: $CSRF")" 200
check_eq "retried job available" "$(q "SELECT state FROM skiplock.all_jobs WHERE id = $d1")" available
check_eq "cancel with CSRF: 200" "$(http POST "/api/jobs/$a1/cancel" -H "X-CSRF-Token: $CSRF")" 200
check_eq "cancelled job" "$(q "SELECT state FROM skiplock.all_jobs WHERE id = $a1")" cancelled
check_eq "cancel a cancelled job: 409" "$(http POST "/api/jobs/$a1/cancel" -H "X-CSRF-Token: $CSRF")" 409
check_eq "409 says the job's state" "$(jq -r .error "$TMP/body")" "job $a1 is cancelled: not cancelled"
check_eq "one job's actions are logged, with the job's id" \
	"$(q "SELECT string_agg(action || ' ' || (target->'ids')::text || ' ' || changed || ' ' || role, ', ' ORDER BY id)
	        FROM skiplock.actions WHERE role = 'operator'")" \
	"cancel [$d1] 1 operator, retry [$d1] 1 operator, cancel [$a1] 1 operator, cancel [$a1] 0 operator"
check_eq "throughput: 200" "$(http GET /api/throughput)" 200
check_eq "throughput: 60 one-minute buckets" "$(jq -c '[.bucket_ms, (.queues | map(.completed | length) | unique)]' "$TMP/body")" '[60000,[60]]'
"$S" breakers open slow --url "$URL" >/dev/null 2>&1 || fail "breakers open"
check_eq "breakers: 200" "$(http GET /api/breakers)" 200
check_eq "breakers: as breakers --json" "$(jq -c 'map({kind, state})' "$TMP/body")" \
	"$("$S" breakers --json --url "$URL" | jq -c 'map({kind, state})')"
"$S" breakers close slow --url "$URL" >/dev/null 2>&1 || fail "breakers close"
check_eq "doctor locks: 200" "$(http GET /api/doctor/locks)" 200
check_eq "doctor locks: a report, no action" "$(jq -c '[.findings, .actions]' "$TMP/body")" '[[],[]]'
"$S" retention maintain --url "$URL" >/dev/null 2>&1 || fail "retention maintain"
check_eq "doctor maintenance: 200" "$(http GET /api/doctor/maintenance)" 200
check_eq "doctor maintenance: ran, nothing to do" "$(jq -c '[.installed, .overdue, .findings, .expected_ms]' "$TMP/body")" \
	'[true,false,[],180000]'
# maintenance last ran 10 minutes ago while jobs finished since: the strip's item
last=$(q "SELECT last_run_at FROM skiplock.maintenance")
q "UPDATE skiplock.maintenance SET last_run_at = now() - interval '10 minutes'" >/dev/null
check_eq "doctor maintenance when it has not run: 200" "$(http GET /api/doctor/maintenance)" 200
check_eq "doctor maintenance: the finding" \
	"$(jq -c '[.overdue, .needs_action, (.findings | map(.kind)), (.findings[0].message | test("^maintenance has not run for 10m"))]' "$TMP/body")" \
	'[true,true,["maintenance_overdue"],true]'
q "UPDATE skiplock.maintenance SET last_run_at = '$last'" >/dev/null
check_eq "GET on an action: 404" "$(http GET "/api/jobs/$d2/retry")" 404
check_eq "DELETE: 405" "$(http DELETE "/api/jobs/$d2")" 405

# --- 100 idle connections neither lock others out nor stay for long ---
held=()
for _ in $(seq 1 100); do
	exec {fd}<>"/dev/tcp/127.0.0.1/$PORT" || break
	held+=("$fd")
done
check_eq "100 idle sockets held open" "${#held[@]}" 100
t0=$(date +%s%N)
code=$(curl -s -m 2 -o "$TMP/body" -w '%{http_code}' "http://127.0.0.1:$PORT/api/queues")
ms=$((($(date +%s%N) - t0) / 1000000))
check_eq "a request beside 100 idle sockets answers 200 within 2 s (took $ms ms)" "$code" 200
# The server drops an idle connection after its timeout (5 s): EOF, not a wait.
timeout 10 cat <&"${held[0]}" >/dev/null
check_eq "an idle connection is closed by the server within 10 s" "$?" 0
for fd in "${held[@]}"; do exec {fd}>&-; done
stop_dash rw

# --- slow clients (slowloris) cannot keep an authorised request out: 300
# connections from this address send their headers a byte at a time (and
# reopen when closed) for 8 s, beyond the 5 s idle timeout; a request with
# the token, once a second, answers 200 within 3 s every time ---
start_dash slow --listen 127.0.0.1:0 --operator-token-file "$TMP/token"
timeout 60 python3 "$(dirname "$0")/slow_clients.py" many "$PORT" 300 8 "$TOKEN" >"$TMP/slow.out" 2>&1
probes=$(grep -c '^ok \|^fail ' "$TMP/slow.out")
slowest=$(awk '$1 == "ok" && $3 > m {m = $3} END {print m + 0}' "$TMP/slow.out")
check_eq "beside 300 slow connections ($(grep '^slow opened' "$TMP/slow.out")), every authorised request is answered 200 (slowest $slowest ms)" \
	"$(grep -v '^ok 200 \|^slow opened ' "$TMP/slow.out" | head -c 300)$([ "$probes" -ge 5 ] || echo "only $probes probes")" ""
[ "$slowest" -lt 3000 ] && pass "each within 3 s" || fail "slowest authorised request took $slowest ms"
# One connection that never finishes its headers is closed by the header
# deadline (10 s), however often it sends a byte.
check_eq "a connection sending its headers a byte at a time is closed within 15 s" \
	"$(timeout 40 python3 "$(dirname "$0")/slow_clients.py" one "$PORT" 20 | sed 's/^closed \([0-9]\|1[0-5]\)$/closed in time/')" \
	"closed in time"
stop_dash slow

# --- --read-only: actions refused even with the right CSRF token ---
start_dash ro --listen 127.0.0.1:0 --read-only
http GET / >/dev/null
grep -q 'data-read-only="true"' "$TMP/body" && pass "read-only page" || fail "read-only flag missing"
CSRF=$(sed -n 's|.*name="csrf-token" content="\([0-9a-f]*\)".*|\1|p' "$TMP/body")
check_eq "read-only cancel: 403" "$(http POST "/api/jobs/$d2/cancel" -H "X-CSRF-Token: $CSRF")" 403
check_eq "read-only: job still available" "$(q "SELECT state FROM skiplock.all_jobs WHERE id = $d2")" available
check_eq "read-only reads: 200" "$(http GET /api/leases)" 200
stop_dash ro

# --- find the job: payload, error text, time window; bad filters are 400 ---
q "UPDATE skiplock.jobs SET errors = jsonb_build_array(jsonb_build_object('attempt', 1,
   'at', now(), 'error', 'smtp: Broken pipe')) WHERE id = $d1" >/dev/null
# d2 stuck: running for an hour, its lease expired a minute ago.
q "UPDATE skiplock.jobs SET state = 'running', attempt = 1, fencing = fencing + 1,
   lease_owner = 'gone', attempted_at = now() - interval '1 hour',
   lease_expires_at = now() - interval '1 minute' WHERE id = $d2" >/dev/null
start_dash find --listen 127.0.0.1:0
ids() { jq -r 'map(.id) | join(" ")' "$TMP/body"; }
check_eq "payload contains: 200" "$(http GET '/api/jobs' -G --data-urlencode 'payload={"n": 1}')" 200
check_eq "payload contains {\"n\": 1}: d1" "$(ids)" "$d1"
check_eq "payload not JSON: 400" "$(http GET '/api/jobs' -G --data-urlencode 'payload={"n": ')" 400
grep -q 'payload filter is not JSON' "$TMP/body" && pass "payload error names the filter" ||
	fail "payload error: $(cat "$TMP/body")"
check_eq "error text, any case: 200" "$(http GET '/api/jobs?error=BROKEN%20pipe')" 200
check_eq "error text finds d1" "$(ids)" "$d1"
check_eq "created in the last hour: 200" "$(http GET '/api/jobs?time=created&from=1h')" 200
check_eq "created in the last hour: all three" "$(jq length "$TMP/body")" 3
check_eq "created before an hour ago: 200" "$(http GET '/api/jobs?time=created&to=1h')" 200
check_eq "created before an hour ago: none" "$(jq length "$TMP/body")" 0
check_eq "created since a timestamp" "$(http GET '/api/jobs?time=created&from=2020-01-01T00:00:00Z&to=2199-12-31')" 200
check_eq "created since a timestamp: all three" "$(jq length "$TMP/body")" 3
check_eq "lease expired: 200" "$(http GET '/api/jobs?state=running&time=lease&to=0s')" 200
check_eq "lease expired: d2" "$(ids)" "$d2"
check_eq "running for over 15 min: 200" "$(http GET '/api/jobs?state=running&time=attempted&to=15m')" 200
check_eq "running for over 15 min: d2" "$(ids)" "$d2"
check_eq "month 13: 400" "$(http GET '/api/jobs?time=created&from=2026-13-01T00:00Z')" 400
check_eq "February 30: 400" "$(http GET '/api/jobs?time=run&to=2026-02-30')" 400
check_eq "a word for a time: 400" "$(http GET '/api/jobs?time=created&from=yesterday')" 400
check_eq "a bound without a time field: 400" "$(http GET '/api/jobs?from=1h')" 400
check_eq "unknown time field: 400" "$(http GET '/api/jobs?time=born&from=1h')" 400
check_eq "filters keep the Host rule: 403" \
	"$(http GET '/api/jobs?error=x' -H "Host: rebind.example:$PORT")" 403
check_eq "queues: 200" "$(http GET /api/queues)" 200
check_eq "queues: lease expired, oldest due age, failure rates (5 and 60 min)" \
	"$(jq -c 'map(select(.kind == "k")) | map([.queue, .lease_expired, (.oldest_due_age_ms | type),
	  .recent_errors_5m, .failure_rate_5m, .recent_errors_60m, .failure_rate_60m])' "$TMP/body")" \
	'[["default",0,"number",1,1,1,1],["q2",1,"null",0,null,0,null]]'
stop_dash find

# --- charts: one queue and kind over time; bad range or name 400 ---
# Kind ch: 3 jobs completed 10 minutes ago after waits of 1, 2 and 3 s, one
# discarded 30 minutes ago after 2 failed attempts (its last claim waited a
# minute), one failed attempt of a
# live job 5 minutes ago, and a completion 2 hours ago (outside 1 h).
q "INSERT INTO skiplock.finished_jobs (kind, state, attempt, run_at, attempted_at, finished_at, errors,
                                     expires_at)
   SELECT 'ch', 'completed', 1, now() - interval '10 minutes' - w * interval '1 second',
          now() - interval '10 minutes', now() - interval '10 minutes', '[]'::jsonb, 'infinity'::timestamptz
     FROM generate_series(1, 3) w
   UNION ALL
   SELECT 'ch', 'discarded', 2, now() - interval '31 minutes', now() - interval '30 minutes',
          now() - interval '30 minutes', jsonb_build_array(
            jsonb_build_object('attempt', 1, 'at', now() - interval '31 minutes', 'error', 'x'),
            jsonb_build_object('attempt', 2, 'at', now() - interval '30 minutes', 'error', 'y')),
          'infinity'
   UNION ALL
   SELECT 'ch', 'completed', 1, now() - interval '2 hours', now() - interval '2 hours',
          now() - interval '2 hours', '[]', 'infinity'" >/dev/null
q "INSERT INTO skiplock.jobs (kind, attempt, run_at, errors) VALUES ('ch', 1, now() + interval '1 hour',
   jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now() - interval '5 minutes', 'error', 'z')))" >/dev/null
start_dash chart --listen 127.0.0.1:0
SUMS='[(.completed, .failed, .discarded, .claims | add), (.wait_p50_ms, .wait_p95_ms | map(select(. != null)))]'
check_eq "chart: 200" "$(http GET '/api/chart?kind=ch')" 200
check_eq "chart, 1 h: 60 one-minute buckets" "$(jq -c '[.range, .bucket_ms, (.completed, .failed, .wait_p50_ms | length)]' "$TMP/body")" \
	'["1h",60000,60,60,60]'
check_eq "chart, 1 h: 3 completed, 3 failed attempts, 1 discarded, 4 claims; waits p50 1 min, 2 s; p95 1 min, 2.9 s" \
	"$(jq -c "$SUMS" "$TMP/body")" '[3,3,1,4,[60000,2000],[60000,2900]]'
check_eq "chart, 1 h: the failures 31, 30 and 5 minutes ago" \
	"$(jq -c '[.failed | to_entries[] | select(.value > 0) | .key]' "$TMP/body")" '[28,29,54]'
check_eq "chart, 24 h: 200" "$(http GET '/api/chart?kind=ch&range=24h')" 200
check_eq "chart, 24 h: 96 buckets of 15 min, the old completion too" \
	"$(jq -c '[.bucket_ms, (.completed | length), (.completed | add)]' "$TMP/body")" '[900000,96,4]'
check_eq "chart, 7 d: 84 buckets of 2 h" "$(http GET '/api/chart?range=7d&queue=default&kind=ch')" 200
check_eq "chart, 7 d: shape" "$(jq -c '[.bucket_ms, (.completed | length), .queue, .kind]' "$TMP/body")" \
	'[7200000,84,"default","ch"]'
check_eq "chart of another queue: 200" "$(http GET '/api/chart?queue=q2&kind=ch')" 200
check_eq "chart of another queue: nothing" "$(jq -c "$SUMS" "$TMP/body")" '[0,0,0,0,[],[]]'
check_eq "chart, range 2h: 400" "$(http GET '/api/chart?range=2h')" 400
check_eq "chart, range 2h: says which" "$(jq -r .error "$TMP/body")" "range must be 1h, 6h, 24h or 7d"
check_eq "chart, a 129-byte kind: 400" "$(http GET "/api/chart?kind=$(printf 'k%.0s' $(seq 129))")" 400
check_eq "chart keeps the Host rule: 403" "$(http GET '/api/chart' -H "Host: rebind.example:$PORT")" 403
stop_dash chart
q "DELETE FROM skiplock.finished_jobs WHERE kind = 'ch'; DELETE FROM skiplock.jobs WHERE kind = 'ch'" >/dev/null

# --- acting on the fleet: count, bulk, pause, breakers, schedules, the log ---
ba=$("$S" enqueue --url "$URL" --queue bulkq bk '{"b": 1}')
bb=$("$S" enqueue --url "$URL" --queue bulkq bk '{"b": 2}')
bc=$("$S" enqueue --url "$URL" --queue bulkq bk '{"b": 3}')
first_act=$(q "SELECT coalesce(max(id), 0) FROM skiplock.actions")
start_dash act --listen 127.0.0.1:0
http GET / >/dev/null
CSRF=$(sed -n 's|.*name="csrf-token" content="\([0-9a-f]*\)".*|\1|p' "$TMP/body")
P=(-H "X-CSRF-Token: $CSRF")
check_eq "count: 200" "$(http GET '/api/jobs/count?queue=bulkq&state=available')" 200
check_eq "count: as SQL" "$(jq .count "$TMP/body")" \
	"$(q "SELECT count(*) FROM skiplock.all_jobs WHERE queue = 'bulkq' AND state = 'available'")"
check_eq "count, bad state: 400" "$(http GET '/api/jobs/count?state=lost')" 400
check_eq "count, a word for a time: 400" "$(http GET '/api/jobs/count?time=created&from=yesterday')" 400
check_eq "count keeps the Host rule: 403" "$(http GET '/api/jobs/count' -H "Host: rebind.example:$PORT")" 403
check_eq "bulk without CSRF: 403" "$(http POST '/api/bulk/cancel?queue=bulkq')" 403
check_eq "bulk, no filter and no ids: 400" "$(http POST '/api/bulk/cancel' "${P[@]}")" 400
check_eq "bulk, bad filter: 400" "$(http POST '/api/bulk/cancel?time=born&from=1h' "${P[@]}")" 400
check_eq "bulk, bad ids: 400" "$(http POST '/api/bulk/cancel?ids=1,x' "${P[@]}")" 400
check_eq "bulk, unknown action: 404" "$(http POST '/api/bulk/explode?queue=bulkq' "${P[@]}")" 404
check_eq "refused bulk actions changed nothing" \
	"$(q "SELECT string_agg(state, ',') FROM skiplock.all_jobs WHERE queue = 'bulkq'")" "available,available,available"
check_eq "bulk cancel of one picked job: 200" "$(http POST "/api/bulk/cancel?ids=$ba" "${P[@]}")" 200
check_eq "bulk cancel of ids: counts" "$(jq -c '[.action, .matched, .changed, .skipped]' "$TMP/body")" '["cancel",1,1,0]'
check_eq "bulk discard by filter: 200" "$(http POST '/api/bulk/discard?queue=bulkq&state=available' "${P[@]}")" 200
check_eq "bulk discard by filter: counts" "$(jq -c '[.matched, .changed, .skipped]' "$TMP/body")" '[2,2,0]'
check_eq "bulk retry by filter: 200" "$(http POST '/api/bulk/retry?queue=bulkq&kind=bk' "${P[@]}")" 200
check_eq "bulk retry by filter: counts" "$(jq -c '[.matched, .changed]' "$TMP/body")" '[3,3]'
check_eq "bulk retry: all available again" \
	"$(q "SELECT string_agg(state, ',') FROM skiplock.all_jobs WHERE id IN ($ba, $bb, $bc)")" "available,available,available"
check_eq "pause, neither queue nor kind: 400" "$(http POST '/api/pause' "${P[@]}")" 400
check_eq "pause, both: 400" "$(http POST '/api/pause?queue=a&kind=b' "${P[@]}")" 400
check_eq "pause without CSRF: 403" "$(http POST '/api/pause?queue=bulkq')" 403
check_eq "pause queue bulkq: 200" "$(http POST '/api/pause?queue=bulkq' "${P[@]}")" 200
check_eq "pause: changed" "$(jq -c .changed "$TMP/body")" true
check_eq "pauses: 200" "$(http GET /api/pauses)" 200
check_eq "pauses: bulkq, by the dashboard" "$(jq -c 'map([.queue, .kind, .paused_by, .role])' "$TMP/body")" \
	'[["bulkq","*","dashboard@127.0.0.1","operator"]]'
check_eq "resume queue bulkq: 200" "$(http POST '/api/resume?queue=bulkq' "${P[@]}")" 200
check_eq "breaker open: 200" "$(http POST '/api/breakers/open?kind=bk' "${P[@]}")" 200
check_eq "breaker open: open" "$("$S" breakers --json --url "$URL" | jq -r 'map(select(.kind == "bk"))[0].state')" open
check_eq "breaker close: 200" "$(http POST '/api/breakers/close?kind=bk' "${P[@]}")" 200
check_eq "breaker without a kind: 400" "$(http POST '/api/breakers/open' "${P[@]}")" 400
"$S" cron add --url "$URL" nightly '0 3 * * *' bk '{"n": 0}' >/dev/null 2>&1 || fail "cron add"
check_eq "schedule pause: 200" "$(http POST '/api/schedules/pause?name=nightly' "${P[@]}")" 200
check_eq "schedule resume: 200" "$(http POST '/api/schedules/resume?name=nightly' "${P[@]}")" 200
check_eq "schedule run now: 200" "$(http POST '/api/schedules/run?name=nightly' "${P[@]}")" 200
check_eq "schedule run now: the job" "$(q "SELECT kind || ' ' || state FROM skiplock.jobs WHERE id = $(jq .job_id "$TMP/body")")" \
	"bk available"
check_eq "no such schedule: 404" "$(http POST '/api/schedules/run?name=none' "${P[@]}")" 404
check_eq "actions, limit 0: 400" "$(http GET '/api/actions?limit=0')" 400
check_eq "actions: 200" "$(http GET '/api/actions?limit=20')" 200
# (the earlier `skiplock breakers open|close` are logged too, role cli)
check_eq "actions: each logged, newest first, by the dashboard as operator" \
	"$(jq -c --argjson first "$first_act" 'map(select(.role != "cli" and .id > $first)) | map([.action, .matched, .changed, .actor, .role]) | map(join(" "))' "$TMP/body")" \
	'["schedule_run 1 1 dashboard@127.0.0.1 operator","schedule_resume 1 1 dashboard@127.0.0.1 operator","schedule_pause 1 1 dashboard@127.0.0.1 operator","breaker_close 1 1 dashboard@127.0.0.1 operator","breaker_open 1 1 dashboard@127.0.0.1 operator","resume 1 1 dashboard@127.0.0.1 operator","pause 1 1 dashboard@127.0.0.1 operator","retry 3 3 dashboard@127.0.0.1 operator","discard 2 2 dashboard@127.0.0.1 operator","cancel 1 1 dashboard@127.0.0.1 operator"]'

# --- the count's mark: a bulk action acts on at most what was counted ---
mk=$(for i in 1 2 3; do "$S" enqueue --url "$URL" --queue markq mk "{\"i\": $i}"; done | tr '\n' ' ')
check_eq "count of markq: 200" "$(http GET '/api/jobs/count?queue=markq')" 200
MARK=$(jq .mark "$TMP/body")
check_eq "the count carries its mark: the highest id counted, and whether it is every job" \
	"$(jq -c '[.count, .all]' "$TMP/body") $MARK" "[3,false] $(q "SELECT max(id) FROM skiplock.jobs WHERE queue = 'markq'")"
for i in 4 5; do "$S" enqueue --url "$URL" --queue markq mk "{\"i\": $i}"; done >/dev/null
check_eq "cancel with the count's mark: 200" \
	"$(http POST "/api/bulk/cancel?queue=markq&mark=$MARK&expect=3" "${P[@]}")" 200
check_eq "cancel with the mark: 3 matched and cancelled, 2 newer left alone" \
	"$(jq -c '[.matched, .changed, .skipped, .newer, .mark]' "$TMP/body")" "[3,3,0,2,$MARK]"
check_eq "the jobs counted are cancelled, the newer ones untouched" \
	"$(q "SELECT string_agg(state, ' ' ORDER BY id) FROM skiplock.all_jobs WHERE queue = 'markq'")" \
	"cancelled cancelled cancelled available available"
# A job up to the mark that entered the filter after the count: the set
# changed, so the action is refused and nothing changes.
http GET '/api/jobs/count?queue=markq&state=available' >/dev/null
MARK=$(jq .mark "$TMP/body") N=$(jq .count "$TMP/body")
check_eq "count of the available markq jobs" "$N" 2
"$S" jobs retry --url "$URL" "${mk%% *}" >/dev/null || fail "retry one markq job"
check_eq "more jobs up to the mark than counted: 409" \
	"$(http POST "/api/bulk/discard?queue=markq&state=available&mark=$MARK&expect=$N" "${P[@]}")" 409
check_eq "409 says the set changed" "$(jq -r .error "$TMP/body")" \
	"the jobs matching changed since the count: 3 match up to job $MARK, 2 were counted; count again"
check_eq "the refused action changed nothing" \
	"$(q "SELECT string_agg(state, ' ' ORDER BY id) FROM skiplock.all_jobs WHERE queue = 'markq'")" \
	"available cancelled cancelled available available"
check_eq "mark without expect: 400" "$(http POST "/api/bulk/discard?queue=markq&mark=$MARK" "${P[@]}")" 400
check_eq "expect 0: 400" "$(http POST "/api/bulk/discard?queue=markq&mark=$MARK&expect=0" "${P[@]}")" 400

# --- a filter that matches every job must be named so: all=1 ---
for f in '' 'time=created' 'payload=%7B%7D' 'payload=%5B%5D' 'time=finished&payload=%7B%20%7D'; do
	check_eq "bulk retry ?$f: 400" "$(http POST "/api/bulk/retry?$f" "${P[@]}")" 400
	jq -r .error "$TMP/body" | grep -q '^the filter matches every job (.*): add all=1 to act on every job$' &&
		pass "?$f: the refusal says why ($(jq -r .error "$TMP/body"))" || fail "?$f: $(cat "$TMP/body")"
done
check_eq "the count of such a filter says so: 200" "$(http GET '/api/jobs/count?time=created')" 200
ALL=$(jq .count "$TMP/body") MARK=$(jq .mark "$TMP/body")
check_eq "the count of every job, all: true" "$(jq -c '[.count, .all]' "$TMP/body")" \
	"[$(q "SELECT count(*) FROM skiplock.all_jobs"),true]"
check_eq "with all=1 it acts: 200" \
	"$(http POST "/api/bulk/retry?time=created&all=1&mark=$MARK&expect=$ALL" "${P[@]}")" 200
check_eq "with all=1: every job matched" "$(jq .matched "$TMP/body")" "$ALL"
check_eq "with all=1: logged with all" \
	"$(q "SELECT target::text FROM skiplock.actions ORDER BY id DESC LIMIT 1")" \
	"{\"all\": true, \"up_to\": $MARK, \"time_field\": \"created\"}"
check_eq "a narrowing term beside an empty one needs no all=1: 200" \
	"$(http POST '/api/bulk/cancel?queue=markq&payload=%7B%7D&state=available' "${P[@]}")" 200
stop_dash act
q "DELETE FROM skiplock.jobs WHERE kind = 'bk'; DELETE FROM skiplock.finished_jobs WHERE kind = 'bk'" >/dev/null
"$S" cron remove --url "$URL" nightly >/dev/null 2>&1 || fail "cron remove"

# --- roles: an operator token acts, a viewer token only reads ---
printf 'op-%s\n' "$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$TMP/op"
printf 'vw-%s\n' "$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" >"$TMP/vw"
OP=$(head -n1 "$TMP/op") VW=$(head -n1 "$TMP/vw")
expect_exit "the same token for both roles" 2 "--viewer-token-file: the viewer token must differ" -- \
	"$S" dashboard --url "$URL" --operator-token-file "$TMP/op" --viewer-token-file "$TMP/op"
start_dash roles --listen 0.0.0.0:0 --operator-token-file "$TMP/op" --viewer-token-file "$TMP/vw" \
	--hide-payloads
check_eq "viewer page: 200" "$(http GET / -H "Authorization: Bearer $VW")" 200
grep -q 'data-role="viewer"' "$TMP/body" && pass "viewer page knows its role" || fail "viewer role"
CSRF=$(sed -n 's|.*name="csrf-token" content="\([0-9a-f]*\)".*|\1|p' "$TMP/body")
check_eq "operator page: 200" "$(http GET / -H "Authorization: Bearer $OP")" 200
grep -q 'data-role="operator"' "$TMP/body" && pass "operator page knows its role" || fail "operator role"
check_eq "no token: 401" "$(http GET /api/queues)" 401
check_eq "viewer reads: 200" "$(http GET /api/queues -H "Authorization: Bearer $VW")" 200
check_eq "viewer cancel with CSRF: 403" "$(http POST "/api/jobs/$d1/cancel" -H "Authorization: Bearer $VW" \
	-H "X-CSRF-Token: $CSRF")" 403
grep -q 'a viewer cannot act' "$TMP/body" && pass "viewer refusal says why" || fail "viewer: $(cat "$TMP/body")"
check_eq "viewer: job still available" "$(q "SELECT state FROM skiplock.all_jobs WHERE id = $d1")" available
n0=$(q "SELECT count(*) FROM skiplock.actions")
for a in "bulk/retry?ids=$d1" "pause?queue=default" "resume?queue=default" "breakers/open?kind=k" \
	"schedules/run?name=none"; do
	check_eq "viewer POST /api/$a with CSRF: 403" "$(http POST "/api/$a" -H "Authorization: Bearer $VW" \
		-H "X-CSRF-Token: $CSRF")" 403
done
check_eq "viewer reads the action log: 200" "$(http GET /api/actions -H "Authorization: Bearer $VW")" 200
check_eq "viewer reads a count: 200" "$(http GET /api/jobs/count?state=available -H "Authorization: Bearer $VW")" 200
check_eq "viewer's refused actions logged nothing" "$(q "SELECT count(*) FROM skiplock.actions")" "$n0"
check_eq "operator without CSRF: 403" "$(http POST "/api/jobs/$d1/cancel" -H "Authorization: Bearer $OP")" 403
check_eq "operator cancel: 200" "$(http POST "/api/jobs/$d1/cancel" -H "Authorization: Bearer $OP" \
	-H "X-CSRF-Token: $CSRF")" 200
check_eq "operator retry: 200" "$(http POST "/api/jobs/$d1/retry" -H "Authorization: Bearer $OP" \
	-H "X-CSRF-Token: $CSRF")" 200
# --- --hide-payloads: not sent unless an operator asks ---
check_eq "hidden payload: 200" "$(http GET "/api/jobs/$d1" -H "Authorization: Bearer $OP")" 200
check_eq "hidden payload: null and marked" "$(jq -c '[.payload, .payload_hidden]' "$TMP/body")" '[null,true]'
check_eq "operator asks for it: 200" "$(http GET "/api/jobs/$d1?payload=show" -H "Authorization: Bearer $OP")" 200
check_eq "operator sees it" "$(jq -c '[.payload, .payload_hidden]' "$TMP/body")" '[{"n":1},false]'
check_eq "viewer asks for it: 403" "$(http GET "/api/jobs/$d1?payload=show" -H "Authorization: Bearer $VW")" 403
check_eq "viewer filters on payloads: 403" "$(http GET '/api/jobs?payload=%7B%7D' -H "Authorization: Bearer $VW")" 403
check_eq "payload=bogus: 400" "$(http GET "/api/jobs/$d1?payload=bogus" -H "Authorization: Bearer $OP")" 400
stop_dash roles
# A viewer token alone, from the environment (SKIPLOCK_<OPTION>): all read-only.
SKIPLOCK_VIEWER_TOKEN_FILE=$TMP/vw start_dash viewer --listen 0.0.0.0:0
check_eq "viewer only, from the environment: reads" "$(http GET /api/leases -H "Authorization: Bearer $VW")" 200
check_eq "viewer only: the page's payload" "$(http GET "/api/jobs/$d1" -H "Authorization: Bearer $VW")" 200
check_eq "viewer only, payloads not hidden: sent" "$(jq -c .payload "$TMP/body")" '{"n":1}'
check_eq "viewer only: POST 403" "$(http POST "/api/jobs/$d1/cancel" -H "Authorization: Bearer $VW" \
	-H "X-CSRF-Token: $CSRF")" 403
stop_dash viewer

# --- /api/workers: a claim (any client; raw SQL here) of kind nobody in
# queue wq took nothing while a job of kind wk was due there ---
q "SELECT skiplock.enqueue('wk', '{}', 'wq', now() - interval '1 minute')" >/dev/null
q "SELECT count(*) FROM skiplock.claim('dash-w', '{nobody}', '{wq}')" >/dev/null
start_dash workers --listen 127.0.0.1:0
check_eq "workers: 200" "$(http GET /api/workers)" 200
check_eq "workers: the idle worker, its queues and kinds, the job it left behind" \
	"$(jq -c 'map(select(.owner == "dash-w")) | map([.kinds, .queues, .waiting, .waiting_kinds, .idle, (.empty_at | test("^[0-9-]{10}T[0-9:.]{12}Z$")), (.empty_age_ms >= 0), (.first_seen_at | type)])' "$TMP/body")" \
	'[[["nobody"],["wq"],1,["wk"],true,true,true,"string"]]'
check_eq "workers?idle=1&seen=1h: only idle ones" "$(http GET '/api/workers?idle=1&seen=1h')" 200
check_eq "workers?idle=1: dash-w among them, all idle" \
	"$(jq -c '[(map(.owner) | index("dash-w") != null), all(.idle)]' "$TMP/body")" '[true,true]'
check_eq "workers?seen=0s: 400" "$(http GET '/api/workers?seen=0s')" 400
check_eq "workers?seen=2d: 400" "$(http GET '/api/workers?seen=2d')" 400
check_eq "workers?seen=soon: 400" "$(http GET '/api/workers?seen=soon')" 400
check_eq "workers?idle=yes: 400" "$(http GET '/api/workers?idle=yes')" 400
check_eq "workers keeps the Host rule: 403" "$(http GET '/api/workers' -H "Host: rebind.example:$PORT")" 403
# --- /api/waits and /api/limits: wq's due job waits for a worker, then
# for a limit on its kind ---
check_eq "waits: 200" "$(http GET /api/waits)" 200
check_eq "waits: wq's job waits for a worker" \
	"$(jq -c 'map(select(.queue == "wq")) | map([.reason, .jobs])' "$TMP/body")" '[["worker",1]]'
q "SELECT skiplock.limit_set('wk', max_running => 2)" >/dev/null
check_eq "waits, with a limit on wk: 200" "$(http GET /api/waits)" 200
check_eq "waits: wq's job is held by the limit" \
	"$(jq -c 'map(select(.queue == "wq")) | map([.reason, .jobs])' "$TMP/body")" '[["limit",1]]'
check_eq "limits: 200" "$(http GET /api/limits)" 200
check_eq "limits: wk's, in use" \
	"$(jq -c 'map([.kind, .max_running, .running, .rate, .waiting])' "$TMP/body")" '[["wk",2,0,null,1]]'
q "SELECT skiplock.limit_remove('wk')" >/dev/null
stop_dash workers

# --- the plans of the job search on 20000 jobs (the shape of list_sql in
# src/lib/queue/inspect.c, with the values the dashboard's links send) ---
q "INSERT INTO skiplock.finished_jobs (id, kind, state, payload, attempt, finished_at, errors,
                                     created_at, expires_at)
   SELECT nextval('skiplock.jobs_id_seq'), 'p' || (i % 5), CASE WHEN i % 3 = 0 THEN 'discarded' ELSE 'completed' END,
          jsonb_build_object('user', i % 100), 1, now() - (20000 - i) * interval '1 second',
          CASE WHEN i % 3 = 0 THEN '[{\"attempt\": 1, \"error\": \"timeout\"}]'::jsonb ELSE '[]' END,
          now() - (20000 - i) * interval '1 second', 'infinity'
     FROM generate_series(1, 20000) i" >/dev/null
q "INSERT INTO skiplock.jobs (kind, run_at) SELECT 'later', now() + interval '1 day'
   FROM generate_series(1, 20000)" >/dev/null # live jobs: the claim's table is not empty either
q "ANALYZE skiplock.jobs; ANALYZE skiplock.finished_jobs" >/dev/null
TIME_OF="CASE \$7::text WHEN 'created' THEN j.created_at WHEN 'run' THEN j.run_at
  WHEN 'attempted' THEN j.attempted_at WHEN 'finished' THEN j.finished_at
  WHEN 'lease' THEN j.lease_expires_at END"
FIND="PREPARE find(text, text, text, int, text, text, text, text, bigint, text, bigint) AS
SELECT j.id FROM skiplock.all_jobs j
 WHERE (\$1::text IS NULL OR j.queue = \$1) AND (\$2::text IS NULL OR j.kind = \$2)
   AND (\$3::text IS NULL OR j.state = \$3) AND (\$5::jsonb IS NULL OR j.payload @> \$5::jsonb)
   AND (\$6::text IS NULL OR EXISTS (SELECT FROM jsonb_array_elements(j.errors) x(v)
        WHERE strpos(lower(coalesce(x.v ->> 'error', x.v #>> '{}')), lower(\$6)) > 0))
   AND (\$8::text IS NULL AND \$9::bigint IS NULL OR $TIME_OF >=
        coalesce(\$8::timestamptz, now() - \$9::bigint * interval '1 millisecond'))
   AND (\$10::text IS NULL AND \$11::bigint IS NULL OR $TIME_OF <
        coalesce(\$10::timestamptz, now() - \$11::bigint * interval '1 millisecond'))
 ORDER BY j.id DESC LIMIT \$4"
plan_check() { # NAME INDEX ARGS
	local plan
	plan=$(printf '%s;\nEXPLAIN EXECUTE find(%s);\n' "$FIND" "$3" | psql -X -q -At "$DIRECT_URL")
	# the 20000 finished jobs are in the forever partition; the others are empty
	if grep -q "$2" <<<"$plan" && ! grep -qE "Seq Scan on (jobs|finished_jobs_forever)( |$)" <<<"$plan"; then
		pass "plan: $1 reads $2"
	else
		fail "plan: $1 does not read $2 alone: $plan"
	fi
}
plan_check "error text" finished_jobs_forever_id_idx "NULL, NULL, NULL, 100, NULL, 'timeout', NULL, NULL, NULL, NULL, NULL"
plan_check "created in the last hour" finished_jobs_forever_id_idx \
	"NULL, NULL, NULL, 100, NULL, NULL, 'created', NULL, 3600000, NULL, NULL"
plan_check "a common payload" finished_jobs_forever_id_idx "NULL, NULL, NULL, 100, '{}', NULL, NULL, NULL, NULL, NULL, NULL"
plan_check "lease expired" jobs_rescue_idx \
	"NULL, NULL, 'running', 100, NULL, NULL, 'lease', NULL, NULL, NULL, 0"
plan_check "discarded in the last 5 minutes" finished_jobs_forever_finished_at_idx \
	"NULL, NULL, 'discarded', 100, NULL, NULL, 'finished', NULL, 300000, NULL, NULL"
# /api/workers's statement (skiplock.idle_workers, src/lib/queue/workers.c)
# beside the 20000 live jobs: the statements inside the function, as
# auto_explain logs them, read dash-w's queue through its index.
plan=$(psql -X -q "$DIRECT_URL" -c "LOAD 'auto_explain'" -c BEGIN \
	-c "SET LOCAL auto_explain.log_min_duration = 0" -c "SET LOCAL auto_explain.log_nested_statements = on" \
	-c "SET LOCAL client_min_messages = log" -c "SELECT count(*) FROM skiplock.idle_workers()" -c ROLLBACK 2>&1)
grep -q "Index Scan using jobs_queue_kind_state_idx" <<<"$plan" && ! grep -q "Seq Scan on jobs " <<<"$plan" &&
	pass "plan: idle workers read the queue's index" || fail "plan: idle workers: $plan"
# The chart's statement (chart_sql in src/lib/queue/chart.c) over those
# 20000 finished jobs (5.5 hours of them): the last hour is a range of their
# finished_at index, never a scan of the partition; the live jobs are read
# whole (they may hold any error).  A range that covers most of the table
# (6 h here) reads it whole, as it should.
SINCE="(now() - \$1::int * \$2::bigint * interval '1 millisecond')"
PAIR() { echo "(\$3::text IS NULL OR $1.queue = \$3) AND (\$4::text IS NULL OR $1.kind = \$4)"; }
CHART="PREPARE chart(int, bigint, text, text) AS
WITH j AS (
  SELECT f.state, f.finished_at, f.attempted_at, f.run_at, f.errors
    FROM skiplock.finished_jobs f WHERE f.finished_at >= $SINCE AND $(PAIR f)
  UNION ALL
  SELECT l.state, l.finished_at, l.attempted_at, l.run_at, l.errors
    FROM skiplock.jobs l
   WHERE (l.state IN ('available', 'running') OR l.finished_at >= $SINCE) AND $(PAIR l)),
 e AS (
  SELECT j.state AS what, j.finished_at AS at, NULL::float8 AS wait_ms FROM j
   WHERE j.state IN ('completed', 'discarded')
  UNION ALL
  SELECT 'failed', CASE WHEN (x.v ->> 'at') ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9:.]+([+-][0-9:]+|Z)?\$'
                   THEN (x.v ->> 'at')::timestamptz END, NULL FROM j,
         jsonb_array_elements(CASE WHEN jsonb_typeof(j.errors) = 'array' THEN j.errors ELSE '[]' END) x(v)
  UNION ALL
  SELECT 'claimed', j.attempted_at, extract(epoch FROM j.attempted_at - j.run_at) * 1000
    FROM j WHERE j.state IN ('running', 'completed', 'discarded') AND j.attempted_at >= j.run_at),
 g AS (
  SELECT least(floor(extract(epoch FROM e.at - $SINCE) * 1000 / \$2::bigint)::int, \$1::int - 1) AS b,
         count(*) FILTER (WHERE e.what = 'completed') AS completed,
         count(*) FILTER (WHERE e.what = 'failed') AS failed,
         count(*) FILTER (WHERE e.what = 'discarded') AS discarded,
         count(*) FILTER (WHERE e.what = 'claimed') AS claims,
         round(percentile_cont(0.5) WITHIN GROUP (ORDER BY e.wait_ms)) AS p50,
         round(percentile_cont(0.95) WITHIN GROUP (ORDER BY e.wait_ms)) AS p95
    FROM e WHERE e.at >= $SINCE GROUP BY 1)
 SELECT s.b, coalesce(g.completed, 0), coalesce(g.failed, 0), coalesce(g.discarded, 0),
        coalesce(g.claims, 0), coalesce(g.p50, -1)::bigint, coalesce(g.p95, -1)::bigint,
        to_char($SINCE AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')
   FROM generate_series(0, \$1::int - 1) s(b) LEFT JOIN g ON g.b = s.b ORDER BY s.b"
chart_plan() { # NAME ARGS
	local plan
	plan=$(printf '%s;\nEXPLAIN EXECUTE chart(%s);\n' "$CHART" "$2" | psql -X -q -At "$DIRECT_URL")
	if grep -q finished_jobs_forever_finished_at_idx <<<"$plan" &&
		! grep -qE "Seq Scan on finished_jobs_forever( |$)" <<<"$plan"; then
		pass "plan: the chart, $1, reads a range of finished_at"
	else
		fail "plan: the chart, $1, does not read a range of finished_at: $plan"
	fi
}
chart_plan "1 h, every queue and kind" "60, 60000, NULL, NULL"
chart_plan "1 h, one kind" "60, 60000, NULL, 'p1'"
chart_plan "1 h, one queue and kind" "60, 60000, 'default', 'p1'"
# The statement above is the library's: the dashboard answers the same.
start_dash plans --listen 127.0.0.1:0
check_eq "chart over 20000 jobs: 200" "$(http GET '/api/chart?kind=p1&range=6h')" 200
check_eq "chart over 20000 jobs: as the statement" "$(jq -c '[(.completed, .failed, .discarded | add)]' "$TMP/body")" \
	"$(printf '%s;\nCREATE TEMP TABLE x(b, c, f, d, n, p, q, s) AS EXECUTE chart(72, 300000, NULL, %s);\nSELECT format($$[%%s,%%s,%%s]$$, sum(c), sum(f), sum(d)) FROM x;\n' \
	  "$CHART" "'p1'" | psql -X -q -At "$DIRECT_URL" 2>&1)"
stop_dash plans
no_leftovers
finish
