#!/usr/bin/env bash
# `skiplock dashboard` over HTTP: a non-loopback listener is refused without
# a token file, the bearer token is required (401 without it or with a wrong
# one), POST needs the page's CSRF token (403 without it), --read-only
# refuses every action, the JSON counts equal SQL counts, and the
# throughput, breakers and lock-doctor endpoints answer; 100 idle sockets
# held open do not keep a request from answering at once, and an idle
# connection is closed after a few seconds.
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
expect_exit "non-loopback without a token file" 2 "not a loopback address.*--auth-token-file" -- \
	"$S" dashboard --url "$URL" --listen 0.0.0.0:0
expect_exit "listen without a port" 2 "--listen.*ADDR:PORT" -- \
	"$S" dashboard --url "$URL" --listen 127.0.0.1
printf 'short\n' >"$TMP/short"
expect_exit "token too short" 2 "--auth-token-file.*16 to 4096" -- \
	"$S" dashboard --url "$URL" --listen 0.0.0.0:0 --auth-token-file "$TMP/short"
expect_exit "token file missing" 2 "--auth-token-file: cannot read" -- \
	"$S" dashboard --url "$URL" --auth-token-file "$TMP/none"

# --- jobs: two available in two queues, one delayed ---
ids=$("$S" enqueue --url "$URL" --batch - <<'JOBS'
{"kind": "k", "payload": {"n": 1}}
{"kind": "k", "payload": {"n": 2}, "queue": "q2"}
{"kind": "later", "delay": "1h"}
JOBS
)
read -r d1 d2 a1 <<<"$(echo $ids)"
check_eq "three jobs enqueued" "$(q "SELECT count(*) FROM skiplock.jobs")" 3

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
stop_dash auth

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
want=$(q "SELECT string_agg(x, ', ' ORDER BY queue, kind) FROM (SELECT queue, kind, format('%s/%s %s %s %s', queue, kind, count(*) FILTER (WHERE state = 'available'), count(*) FILTER (WHERE state = 'discarded'), count(*) FILTER (WHERE state = 'completed')) x FROM skiplock.jobs GROUP BY queue, kind) t")
check_eq "queue counts equal SQL" "$got" "$want"
check_eq "one job: 200" "$(http GET "/api/jobs/$d1")" 200
grep -q '"payload":{"n":1}' "$TMP/body" && pass "one job carries its payload" || fail "job page: $(cat "$TMP/body")"
check_eq "no such job: 404" "$(http GET /api/jobs/999999)" 404
check_eq "POST without CSRF: 403" "$(http POST "/api/jobs/$d1/cancel")" 403
# The right token with its last digit changed (never the same token).
WRONG=${CSRF%?}$([ "${CSRF: -1}" = 0 ] && echo 1 || echo 0)
check_eq "POST with a wrong CSRF: 403" "$(http POST "/api/jobs/$d1/cancel" -H "X-CSRF-Token: $WRONG")" 403
check_eq "job still available" "$(q "SELECT state FROM skiplock.jobs WHERE id = $d1")" available
check_eq "cancel with CSRF: 200" "$(http POST "/api/jobs/$d1/cancel" -H "X-CSRF-Token: $CSRF")" 200
check_eq "job cancelled" "$(q "SELECT state FROM skiplock.jobs WHERE id = $d1")" cancelled
check_eq "retry with CSRF: 200" "$(http POST "/api/jobs/$d1/retry" -H "X-CSRF-Token: $CSRF")" 200
check_eq "retried job available" "$(q "SELECT state FROM skiplock.jobs WHERE id = $d1")" available
check_eq "cancel with CSRF: 200" "$(http POST "/api/jobs/$a1/cancel" -H "X-CSRF-Token: $CSRF")" 200
check_eq "cancelled job" "$(q "SELECT state FROM skiplock.jobs WHERE id = $a1")" cancelled
check_eq "cancel a cancelled job: 409" "$(http POST "/api/jobs/$a1/cancel" -H "X-CSRF-Token: $CSRF")" 409
check_eq "throughput: 200" "$(http GET /api/throughput)" 200
check_eq "throughput: 60 one-minute buckets" "$(jq -c '[.bucket_ms, (.queues | map(.completed | length) | unique)]' "$TMP/body")" '[60000,[60]]'
"$S" breakers open slow --url "$URL" >/dev/null 2>&1 || fail "breakers open"
check_eq "breakers: 200" "$(http GET /api/breakers)" 200
check_eq "breakers: as breakers --json" "$(jq -c 'map({kind, state})' "$TMP/body")" \
	"$("$S" breakers --json --url "$URL" | jq -c 'map({kind, state})')"
"$S" breakers close slow --url "$URL" >/dev/null 2>&1 || fail "breakers close"
check_eq "doctor locks: 200" "$(http GET /api/doctor/locks)" 200
check_eq "doctor locks: a report, no action" "$(jq -c '[.findings, .actions]' "$TMP/body")" '[[],[]]'
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

# --- --read-only: actions refused even with the right CSRF token ---
start_dash ro --listen 127.0.0.1:0 --read-only
http GET / >/dev/null
grep -q 'data-read-only="true"' "$TMP/body" && pass "read-only page" || fail "read-only flag missing"
CSRF=$(sed -n 's|.*name="csrf-token" content="\([0-9a-f]*\)".*|\1|p' "$TMP/body")
check_eq "read-only cancel: 403" "$(http POST "/api/jobs/$d2/cancel" -H "X-CSRF-Token: $CSRF")" 403
check_eq "read-only: job still available" "$(q "SELECT state FROM skiplock.jobs WHERE id = $d2")" available
check_eq "read-only reads: 200" "$(http GET /api/leases)" 200
stop_dash ro
no_leftovers
finish
