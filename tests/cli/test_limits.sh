#!/usr/bin/env bash
# Limits on job starts (sql/0029_limits.sql, docs/flow-control.md), with
# real workers in two languages and their default settings:
# - a rate of 20 starts a second on one kind, two C workers and two Node
#   workers: no window of 1 s ever starts more than 20 (from the start
#   times the claims recorded), the workers keep up (>= 18 a second), and
#   both languages ran jobs;
# - at most 3 running for a kind, sampled while C workers run it, and an
#   unlimited kind claimed alongside meanwhile;
# - bad input to limit_set: its SQLSTATE, and nothing written.
# The per-key limit through kill -9, in every language, is the conformance
# suite's (tests/conformance/cases_flow.sh).
. "$(dirname "$0")/lib.sh"
SRC=$SKL_SOURCE_DIR

"$SKL_BIN" init --url "$URL" >"$TMP/init.log" 2>&1 || { fail "init: $(cat "$TMP/init.log")"; finish; }

# bad input: SQLSTATE 22023 each time, nothing written
sqlstate() { psql -X -q -At "$URL" -v VERBOSITY=verbose -c "SELECT skiplock.limit_set($1)" 2>&1 |
	sed -n 's/^ERROR:  \([0-9A-Z]\{5\}\):.*/\1/p' | head -n 1; }
for bad in "NULL, max_running => 1" "'', max_running => 1" "repeat('k', 129), max_running => 1" \
	"'k'" "'k', max_running => 0" "'k', max_running => 1000001" "'k', rate => 0" \
	"'k', rate => 5, per => '0 s'" "'k', rate => 5, per => '2 days'" "'k', rate => 5, per => '1.5 ms'" \
	"'k', per => '1 s'" "'k', max_running => 1, key_field => ''" "'k', max_running => 1, actor => ''"; do
	check_eq "limit_set($bad) refused with 22023" "$(sqlstate "$bad")" 22023
done
check_eq "nothing written by the refused calls" \
	"$(q "SELECT (SELECT count(*) FROM skiplock.limits) + (SELECT count(*) FROM skiplock.actions)")" 0

bash "$SRC/clients/node/test/ensure-deps.sh" >/dev/null 2>&1 || fail "the Node client's dependencies"
pids=()
start_c() { # start_c NAME KIND: its pid appended to pids
	"$SKL_BIN" worker --url "$URL" --handler "$2=true" --owner "$1" >"$TMP/$1.log" 2>&1 &
	pids+=($!)
}
start_node() { # start_node NAME KIND
	DATABASE_URL=$URL LIMITS_OWNER=$1 LIMITS_KINDS=$2 node "$SRC/tests/cli/limits/node_worker.mjs" \
		>"$TMP/$1.log" 2>&1 &
	pids+=($!)
}
show_logs() { local f; for f in "$TMP"/*.log; do echo "=== $(basename "$f")"; tail -n 15 "$f"; done; }
stop_all() { # stop_all PID...: SIGTERM, each must exit 0
	local pid rc
	for pid in "$@"; do kill -TERM "$pid" 2>/dev/null; done
	for pid in "$@"; do
		wait "$pid"; rc=$?
		[ "$rc" = 0 ] || fail "worker $pid exited $rc after SIGTERM"
	done
}

# 1. 20 a second, four workers in two languages, 200 jobs
q "SELECT skiplock.limit_set('lim.rate', rate => 20, per => '1 second')" >/dev/null
q "SELECT skiplock.enqueue('lim.rate', jsonb_build_object('n', g)) FROM generate_series(1, 200) g" >/dev/null
start_c rate-c1 lim.rate
start_c rate-c2 lim.rate
start_node rate-n1 lim.rate
start_node rate-n2 lim.rate
wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'lim.rate' AND state = 'completed'" 200 60 ||
	fail "200 jobs at 20/s were not completed in 60 s: $(q "SELECT string_agg(state || ' ' || n, ', ') FROM (SELECT state, count(*) n FROM skiplock.all_jobs WHERE kind = 'lim.rate' GROUP BY 1) s")"
stop_all "${pids[@]}"
most=$(q "WITH s AS (SELECT attempted_at AS a FROM skiplock.all_jobs WHERE kind = 'lim.rate')
          SELECT max((SELECT count(*) FROM s s2 WHERE s2.a >= s1.a AND s2.a < s1.a + interval '1 s'))
            FROM s s1")
check_eq "no window of 1 s started more than 20" "$most" 20
rate=$(q "SELECT round((count(*) - 20) / extract(epoch FROM max(attempted_at) - min(attempted_at)), 1)
            FROM skiplock.all_jobs WHERE kind = 'lim.rate'")
echo "     200 jobs at a limit of 20/s: $rate starts a second after the first window"
check_eq "the workers kept up with the limit (>= 18 a second)" "$(q "SELECT $rate >= 18")" t
check_eq "both languages ran jobs (Node's results name their worker)" \
	"$(q "SELECT count(*) FILTER (WHERE result ? 'by') > 0 AND count(*) FILTER (WHERE NOT coalesce(result ? 'by', false)) > 0
	      FROM skiplock.all_jobs WHERE kind = 'lim.rate'")" t
check_eq "every start within its attempt 1 (a held-back job uses no attempt)" \
	"$(q "SELECT max(attempt) FROM skiplock.all_jobs WHERE kind = 'lim.rate'")" 1

# 2. at most 3 running (jobs of 300 ms), two C workers at concurrency 8,
# and jobs of an unlimited kind claimed alongside
q "SELECT skiplock.limit_set('lim.max', max_running => 3)" >/dev/null
q "SELECT skiplock.enqueue('lim.max', '{}') FROM generate_series(1, 30) g;
   SELECT skiplock.enqueue('lim.free', '{}') FROM generate_series(1, 30) g" >/dev/null
pids=()
for n in 1 2; do
	"$SKL_BIN" worker --url "$URL" --handler 'lim.max=sleep 0.3' --handler 'lim.free=sleep 0.3' \
		--owner "max-c$n" >"$TMP/max-c$n.log" 2>&1 &
	pids+=($!)
done
: >"$TMP/running"
for _ in $(seq 1 300); do
	q "SELECT count(*) FILTER (WHERE kind = 'lim.max') || ' ' || count(*) FILTER (WHERE kind = 'lim.free')
	     FROM skiplock.jobs WHERE state = 'running' AND lease_expires_at > clock_timestamp()" >>"$TMP/running"
	[ "$(q "SELECT count(*) FROM skiplock.jobs WHERE kind IN ('lim.max', 'lim.free')")" = 0 ] && break
	sleep 0.1
done
stop_all "${pids[@]}"
check_eq "all 60 jobs completed" \
	"$(q "SELECT count(*) FROM skiplock.all_jobs WHERE kind IN ('lim.max', 'lim.free') AND state = 'completed'")" 60
check_eq "never more than 3 of the limited kind running ($(wc -l <"$TMP/running") samples)" \
	"$(awk '$1 > m { m = $1 } END { print m + 0 }' "$TMP/running")" 3
check_eq "more than 3 of the unlimited kind ran at once meanwhile" \
	"$(awk '$2 > m { m = $2 } END { print (m > 3) }' "$TMP/running")" 1

check_eq "limits_status reports both limits" \
	"$(q "SELECT string_agg(kind || ' ' || coalesce(max_running::text, '-') || ' ' || coalesce(rate::text, '-') || ' ' || coalesce(per_ms::text, '-'), ', ') FROM skiplock.limits_status()")" \
	"lim.max 3 - -, lim.rate - 20 1000"
check_eq "limit_remove removes and reports it" \
	"$(q "SELECT skiplock.limit_remove('lim.rate') || ' ' || skiplock.limit_remove('lim.rate')")" "true false"
[ "$FAILS" = 0 ] || show_logs
finish
