# shellcheck shell=bash
# cases.sh — the conformance cases, sourced by run.sh.  Each case starts
# its own worker instances, waits with a bound, asserts what is particular
# to it, runs check.sql's invariants and stops its workers (exit 0 each).

# Two instances share 200 jobs: every one completed, and took effect, once.
case_all_done_once() {
	section "all jobs done once"
	q "SELECT count(*) FROM generate_series(1, 200) g, conformance.enqueue('conf.ok',
	     jsonb_build_object('n', g, 'text', 'it''s \"quoted\", \\ back-slashed and ü'))" >/dev/null
	start_worker all-A
	start_worker all-B
	wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'conf.ok' AND state = 'completed'" 200 40 ||
		fail "200 conf.ok jobs were not completed in 40 s: $(q "SELECT string_agg(state || ' ' || n, ', ') FROM (SELECT state, count(*) n FROM skiplock.all_jobs WHERE kind = 'conf.ok' GROUP BY 1) s")"
	echo "     jobs per instance: $(q "SELECT string_agg(owner || ' ' || n, ', ') FROM (SELECT owner, count(*) n FROM conformance.ledger GROUP BY 1 ORDER BY 1) s")"
	invariants all
	stop_worker all-A
	stop_worker all-B
}

# ok completes with its result; retry waits its backoff between attempts
# and completes; fail is discarded after max_attempts with every error
# kept; discard is discarded at once.
case_outcomes() {
	section "outcome mapping"
	local ok retry failing discard
	ok=$(enqueue "'conf.ok', '{\"outcome\": true}'")
	if ! retry=$(enqueue_cli conf.retry '{"until": 3}' --max-attempts 5 --backoff fixed --backoff-base 1s --backoff-cap 1s) ||
		! failing=$(enqueue_cli conf.fail '{}' --max-attempts 3 --backoff fixed --backoff-base 200ms --backoff-cap 200ms) ||
		! discard=$(enqueue_cli conf.discard '{}' --max-attempts 5); then
		fail "skiplock enqueue of the outcome jobs"
		return
	fi
	start_worker outcomes-A
	wait_for "SELECT state || ' ' || attempt || ' ' || jsonb_array_length(errors) || ' ' || (run_at > now())
	            FROM skiplock.all_jobs WHERE id = $retry" "available 1 1 true" 10 ||
		fail "conf.retry was not seen available with a delay after its first failure: $(job "$retry" "state || ' ' || attempt || ' ' || run_at")"
	wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE id IN ($ok, $retry, $failing, $discard)
	            AND state IN ('completed', 'discarded')" 4 20 || fail "outcome jobs did not finish in 20 s"
	check_eq "ok: completed at attempt 1 with its result, no error" \
		"$(job "$ok" "state || ' ' || attempt || ' ' || result::text || ' ' || errors::text")" \
		'completed 1 {"kind": "conf.ok", "attempt": 1} []'
	check_eq "retry: completed at attempt 3 after two recorded errors" \
		"$(job "$retry" "state || ' ' || attempt || ' ' || jsonb_array_length(errors) || ' ' || (errors->0->>'error' LIKE '%conf.retry attempt 1%') || (errors->1->>'error' LIKE '%conf.retry attempt 2%')")" \
		"completed 3 2 truetrue"
	check_eq "retry: the next attempt waited its fixed 1 s backoff" \
		"$(job "$retry" "((errors->1->>'at')::timestamptz - (errors->0->>'at')::timestamptz) >= interval '1 s'")" t
	check_eq "fail: discarded after max_attempts (3), each attempt's error kept" \
		"$(job "$failing" "state || ' ' || attempt || ' ' || jsonb_array_length(errors) || ' ' || (SELECT bool_and(errors->(n - 1)->>'error' LIKE '%conf.fail attempt ' || n || '%') FROM generate_series(1, 3) n)")" \
		"discarded 3 3 true"
	check_eq "discard: discarded at once, attempt 1, its error kept" \
		"$(job "$discard" "state || ' ' || attempt || ' ' || jsonb_array_length(errors) || ' ' || (errors->0->>'error' LIKE '%conf.discard attempt 1%')")" \
		"discarded 1 1 true"
	invariants all
	stop_worker outcomes-A
}

# A job that runs three leases long is never rescued while its worker
# heartbeats (a second instance would rescue it otherwise).
case_heartbeat() {
	section "heartbeats keep a long job alive"
	local id bad=0 samples=0 row
	id=$(enqueue "'conf.sleep', '{\"ms\": $((3 * LEASE * 1000))}'")
	start_worker beat-A 2
	start_worker beat-B 2
	wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $id" running 10 || fail "conf.sleep was not claimed in 10 s"
	sleep 0.5
	invariants sessions # nothing held while the handler runs
	while row=$(job "$id" "state || ' ' || attempt || ' ' || fencing || ' ' || (lease_expires_at > now())") &&
		[ "${row%% *}" = running ]; do
		samples=$((samples + 1))
		[ "$row" = "running 1 1 true" ] || { bad=$((bad + 1)); echo "     sample $samples: $row"; break; }
		[ "$samples" -ge 200 ] && break
		sleep 0.2
	done
	check_eq "the lease stayed ahead of now and the job kept attempt 1 ($samples samples)" "$bad" 0
	wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $id" completed 10 || fail "conf.sleep did not complete"
	check_eq "completed at attempt 1 with fencing 1, no error" \
		"$(job "$id" "state || ' ' || attempt || ' ' || fencing || ' ' || jsonb_array_length(errors)")" "completed 1 1 0"
	invariants all
	stop_worker beat-A
	stop_worker beat-B
}

# kill -9 of an instance mid-job: after the lease expires, another instance
# rescues the job and completes it; the dead one left no effect.
case_kill() {
	section "kill -9 mid-job"
	local id expiry
	id=$(enqueue "'conf.hang', '{\"ms\": 60000}'")
	start_worker kill-A 2
	wait_for "SELECT state || ' ' || attempt FROM skiplock.all_jobs WHERE id = $id" "running 1" 10 ||
		fail "conf.hang was not claimed in 10 s"
	sleep 0.3
	kill_session KILL "${WPID[kill-A]}"
	{ wait "${WPID[kill-A]}"; } 2>/dev/null
	unset "WPID[kill-A]"
	expiry=$(job "$id" "lease_expires_at")
	start_worker kill-B 2
	wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $id" completed $((LEASE + 10)) ||
		fail "the killed instance's job was not completed: $(job "$id" "state || ' ' || attempt || ' ' || lease_owner")"
	check_eq "completed by the other instance at attempt 2, fencing 2" \
		"$(job "$id" "state || ' ' || attempt || ' ' || fencing || ' ' || (SELECT string_agg(owner, ',') FROM conformance.ledger WHERE job_id = $id)")" \
		"completed 2 2 kill-B"
	check_eq "not claimed again before the lease expired" "$(job "$id" "attempted_at >= '$expiry'")" t
	invariants all
	stop_worker kill-B
}

# SIGSTOP past the lease, the jobs are rescued and completed elsewhere,
# then SIGCONT: the woken handlers try a stale effect (conf.sleep, which the
# fence must refuse) and a stale completion without an effect (conf.hang's
# first attempt); whatever the woken instance does changes neither the jobs
# nor the ledger.
case_stop() {
	section "SIGSTOP past the lease, then SIGCONT"
	local ids
	ids=$(q "SELECT string_agg(id::text, ',') FROM (SELECT conformance.enqueue('conf.hang', '{\"ms\": 2500}')
	         UNION ALL SELECT conformance.enqueue('conf.sleep', '{\"ms\": 2500}')) s(id)")
	start_worker stop-A 2
	wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE id IN ($ids) AND state = 'running' AND attempt = 1" 2 10 ||
		fail "the two jobs were not claimed in 10 s"
	sleep 0.5
	kill_session STOP "${WPID[stop-A]}"
	start_worker stop-B 2
	wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE id IN ($ids) AND state = 'completed'" 2 $((LEASE + 12)) ||
		fail "the frozen instance's jobs were not completed by the other"
	check_eq "completed by the other instance at attempt 2, fencing 2" \
		"$(q "WITH l AS (SELECT job_id, string_agg(owner, ',') AS owners FROM conformance.ledger
		              WHERE job_id IN ($ids) GROUP BY job_id)
		      SELECT string_agg(state || ' ' || attempt || ' ' || fencing || ' ' || l.owners, '; ')
		        FROM skiplock.all_jobs j JOIN l ON l.job_id = j.id WHERE j.id IN ($ids)")" \
		"completed 2 2 stop-B; completed 2 2 stop-B"
	q "CREATE TABLE conformance.jobs_before AS SELECT * FROM skiplock.all_jobs WHERE id IN ($ids);
	   CREATE TABLE conformance.ledger_before AS TABLE conformance.ledger"
	kill_session CONT "${WPID[stop-A]}"
	sleep 2 # the woken handlers finish and their instance reports them
	stop_worker stop-A
	check_eq "the woken instance changed neither the jobs nor the ledger" "$(changes_since_before)" ""
	invariants all
	stop_worker stop-B
}

# What differs between conformance.jobs_before / ledger_before and now (the
# jobs copied to a local table first: on the distributed layout a row of a
# local table does not join a distributed one).
changes_since_before() {
	q "CREATE TEMP TABLE jobs_now AS
	     SELECT * FROM skiplock.all_jobs WHERE id IN (SELECT id FROM conformance.jobs_before);
	   SELECT concat_ws('; ',
	     (SELECT string_agg(format('job %s %s: %s -> %s', b.id, k, to_jsonb(b)->k, to_jsonb(j)->k), '; ')
	        FROM conformance.jobs_before b JOIN jobs_now j USING (id), jsonb_object_keys(to_jsonb(b)) k
	       WHERE to_jsonb(b)->k IS DISTINCT FROM to_jsonb(j)->k),
	     (SELECT string_agg(format('new ledger row: job %s fencing %s by %s', job_id, fencing, owner), '; ')
	        FROM (TABLE conformance.ledger EXCEPT ALL TABLE conformance.ledger_before) n),
	     (SELECT string_agg(format('ledger row gone: job %s fencing %s', job_id, fencing), '; ')
	        FROM (TABLE conformance.ledger_before EXCEPT ALL TABLE conformance.ledger) g))"
}

# SIGTERM: running jobs finish, the worker exits 0, and a job enqueued after
# the signal is not claimed.
case_drain() {
	section "SIGTERM drains"
	local ids late
	ids=$(enqueue "'conf.sleep', '{\"ms\": 2000}', n => 2")
	start_worker drain-A 4
	wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE id IN (${ids// /,}) AND state = 'running'" 2 10 ||
		fail "conf.sleep jobs were not claimed in 10 s"
	sleep 0.3
	kill -TERM "${WPID[drain-A]}"
	sleep 0.2
	late=$(enqueue "'conf.ok', '{\"late\": true}', n => 3")
	wait_exit "${WPID[drain-A]}" 25
	check_eq "exit 0 after draining" "$RC" 0
	kill_session KILL "${WPID[drain-A]}"
	unset "WPID[drain-A]"
	check_eq "the running jobs completed at attempt 1" \
		"$(q "SELECT string_agg(state || ' ' || attempt, ',') FROM skiplock.all_jobs WHERE id IN (${ids// /,})")" "completed 1,completed 1"
	check_eq "no job claimed after the signal" \
		"$(q "SELECT string_agg(state || ' ' || attempt, ',') FROM skiplock.all_jobs WHERE id IN (${late// /,})")" "available 0,available 0,available 0"
	start_worker drain-B 4
	wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE id IN (${late// /,}) AND state = 'completed'" 3 10 ||
		fail "the late jobs were not completed by a new instance"
	invariants all
	stop_worker drain-B
}

# startup_fails WHAT URL PATTERN: an instance started on URL exits non-zero
# within 8 s (the contract is start() within 5 s; the rest is the
# process's own start), and its output matches PATTERN (case-insensitive).
startup_fails() {
	local what=$1 url=$2 pattern=$3 t0 ms rc
	t0=$(date +%s%N)
	env -u DIRECT_DATABASE_URL DATABASE_URL="$url" CONFORMANCE_MODE="$MODE" \
		CONFORMANCE_OWNER=startup CONFORMANCE_CONCURRENCY=1 CONFORMANCE_LEASE="${LEASE}s" \
		timeout 30 setsid "$IMPL" >"$TMP/startup.log" 2>&1
	rc=$?
	ms=$((($(date +%s%N) - t0) / 1000000))
	if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$ms" -lt 8000 ]; then
		pass "start on $what: exit $rc after $ms ms"
	else
		fail "start on $what: exit $rc after $ms ms (want a failure within 8 s): $(tail -n 5 "$TMP/startup.log")"
	fi
	grep -qi -- "$pattern" "$TMP/startup.log" && pass "start on $what says /$pattern/" ||
		fail "start on $what does not say /$pattern/: $(tail -n 5 "$TMP/startup.log")"
}

# Every implementation's start fails fast, and says why, on a database it
# cannot work with: unreachable, missing, or without skiplock's schema.
case_startup() {
	section "start-up failures"
	local base=${URL%/*} bare="${DB}_bare"
	startup_fails "an unreachable server" "postgresql://nobody@127.0.0.1:1/nothing" "refused"
	startup_fails "a missing database" "$base/${DB}_missing" "${DB}_missing"
	admin -c "CREATE DATABASE \"$bare\"" >/dev/null || fail "create $bare"
	startup_fails "a database without the schema" "$base/$bare" "init"
	admin -c "DROP DATABASE IF EXISTS \"$bare\" WITH (FORCE)" >/dev/null
}
