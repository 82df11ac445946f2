# shellcheck shell=bash
# cases_flow.sh — the conformance cases of flow control (docs/flow-control.md):
# limits on job starts and dependencies between jobs, sourced by run.sh
# after cases.sh.  The claim and the outcome statement enforce them, so
# every implementation must obey them with no code of its own; each case
# sets its limit on one of the suite's kinds and removes it at the end.

# limit_set SQL-ARGS: skiplock.limit_set(SQL-ARGS), checked.
limit_set() { q "SELECT kind FROM skiplock.limit_set($1)" >/dev/null || fail "limit_set($1)"; }
limit_remove() { q "SELECT skiplock.limit_remove('$1')" >/dev/null || fail "limit_remove($1)"; }

# The most starts among IDS in any window [s, s + PER) that opens at a
# start s (the start times are what the claims recorded: attempted_at).
most_starts_in() { # most_starts_in IDS PER
	q "WITH s AS (SELECT attempted_at AS a FROM skiplock.all_jobs WHERE id IN ($1))
	   SELECT max((SELECT count(*) FROM s s2 WHERE s2.a >= s1.a AND s2.a < s1.a + interval '$2'))
	     FROM s s1"
}

# refused_0A000 WHAT SQL: SQL fails with SQLSTATE 0A000 (feature not
# supported); its transaction is rolled back.
refused_0A000() {
	q "DO \$\$ BEGIN PERFORM $2; RAISE EXCEPTION 'accepted';
	   EXCEPTION WHEN feature_not_supported THEN NULL; END \$\$" >/dev/null &&
		pass "$1: refused (0A000)" || fail "$1: not refused with 0A000"
}

# On the distributed layout (docs/flow-control.md, "Not yet"): limits and
# dependencies are refused with 0A000 and nothing is written.
case_flow_refused() {
	section "limits and dependencies are refused on the distributed layout"
	local a
	a=$(enqueue "'conf.ok', '{}'")
	refused_0A000 "limit_set" "skiplock.limit_set('conf.ok', rate => 10)"
	refused_0A000 "enqueue_after with a parent" "skiplock.enqueue_after(ARRAY[$a], 'conf.ok')"
	refused_0A000 "enqueue_batch" "skiplock.enqueue_batch('conf.ok', ARRAY['{}'::jsonb], 'conf.ok')"
	check_eq "nothing written: no limit, no wait, one conf.ok job" \
		"$(q "SELECT (SELECT count(*) FROM skiplock.limits) || ' ' || (SELECT count(*) FROM skiplock.job_waits)
		        || ' ' || (SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'conf.ok' AND id >= $a)")" "0 0 1"
	start_worker flow-A 2
	wait_for "SELECT state FROM skiplock.all_jobs WHERE id = $a" completed 20 ||
		fail "the plain job was not completed in 20 s"
	invariants all
	stop_worker flow-A
}

# A rate of 10 starts a second on conf.ok, two instances at concurrency 4,
# 40 jobs: no window of one second ever starts more than 10, and the
# instances keep up with the limit (its windows used, not waited out).
case_rate_limit() {
	section "a rate limit holds across instances"
	local ids span
	limit_set "'conf.ok', rate => 10, per => '1 second'"
	ids=$(q "SELECT string_agg(id::text, ',') FROM conformance.enqueue('conf.ok', '{}', n => 40) id")
	start_worker rate-A 4
	start_worker rate-B 4
	wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE id IN ($ids) AND state = 'completed'" 40 30 ||
		fail "40 rate-limited jobs were not completed in 30 s: $(q "SELECT string_agg(state || ' ' || n, ', ') FROM (SELECT state, count(*) n FROM skiplock.all_jobs WHERE id IN ($ids) GROUP BY 1) s")"
	check_eq "no window of 1 s started more than 10" "$(most_starts_in "$ids" '1 second')" 10
	span=$(q "SELECT round(extract(epoch FROM max(attempted_at) - min(attempted_at))::numeric, 2)
	            FROM skiplock.all_jobs WHERE id IN ($ids)")
	echo "     40 starts over ${span} s (the limit allows them over 3 s and a little more)"
	check_eq "the starts followed the limit: 40 over 3 to 5.5 s" \
		"$(q "SELECT $span >= 3 AND $span <= 5.5")" t
	invariants all
	stop_worker rate-A
	stop_worker rate-B
	limit_remove conf.ok
}

# At most 2 running conf.sleep per key "k", two instances at concurrency 4
# (room for 8); the first, once it holds limited jobs and the second runs,
# is killed with its jobs: its slots stay taken until its leases expire,
# then its jobs run elsewhere; sampled every 0.1 s, no key ever has 3
# jobs under a live lease.
case_concurrency_key() {
	section "a concurrency limit per key holds through kill -9"
	local ids most
	limit_set "'conf.sleep', max_running => 2, key_field => 'k'"
	ids=$(q "SELECT string_agg(id::text, ',') FROM (
	           SELECT conformance.enqueue('conf.sleep', '{\"ms\": 1200, \"k\": \"a\"}', n => 5)
	           UNION ALL SELECT conformance.enqueue('conf.sleep', '{\"ms\": 1200, \"k\": \"b\"}', n => 3)) s(id)")
	sample_running "$ids" &
	local sampler=$!
	start_worker ck-A 4
	wait_for "SELECT count(*) > 0 FROM skiplock.jobs WHERE id IN ($ids) AND state = 'running'
	            AND lease_owner = 'ck-A'" t 10 || fail "ck-A claimed none of the limited jobs in 10 s"
	start_worker ck-B 4
	sleep 0.3
	kill_session KILL "${WPID[ck-A]}"
	{ wait "${WPID[ck-A]}"; } 2>/dev/null
	unset "WPID[ck-A]"
	wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE id IN ($ids) AND state = 'completed'" 8 40 ||
		fail "the 8 limited jobs were not completed in 40 s: $(q "SELECT string_agg(state || ' ' || n, ', ') FROM (SELECT state, count(*) n FROM skiplock.all_jobs WHERE id IN ($ids) GROUP BY 1) s")"
	kill "$sampler" 2>/dev/null
	wait "$sampler" 2>/dev/null
	most=$(sort -n "$TMP/running" | tail -n 1)
	echo "     $(wc -l <"$TMP/running") samples; most running under a live lease for one key: $most"
	check_eq "never more than 2 running for one key" "$(q "SELECT ${most:-99} <= 2")" t
	check_eq "the limit's room was used (2 of a key at once)" "$(q "SELECT ${most:-0} = 2")" t
	check_eq "the killed instance's jobs ran again elsewhere" \
		"$(q "SELECT count(*) > 0 FROM skiplock.all_jobs WHERE id IN ($ids) AND attempt = 2")" t
	invariants all
	stop_worker ck-B
	limit_remove conf.sleep
}

# sample_running IDS: every 0.1 s, the most jobs of one key among IDS
# running under a live lease, a line each in $TMP/running.
sample_running() {
	: >"$TMP/running"
	while :; do
		q "SELECT coalesce(max(n), 0) FROM (SELECT count(*) n FROM skiplock.jobs
		     WHERE id IN ($1) AND state = 'running' AND lease_expires_at > clock_timestamp()
		     GROUP BY payload ->> 'k') s" >>"$TMP/running" 2>/dev/null
		sleep 0.1
	done
}

# A diamond, A -> B, C -> D (A conf.sleep of 3 s, B and C of 300 ms, D
# conf.ok); the instance running A is killed in A's sleep, before its
# effect; another instance rescues A and runs the rest, with a batch of
# 20 conf.ok jobs and a conf.ok callback enqueued meanwhile: D takes effect
# once, after B's and C's effects; the callback once, after every child's, with the children's
# outcomes counted in its payload.
case_dependencies() {
	section "dependencies: a diamond and a batch through kill -9"
	local a b c d ids cb
	a=$(enqueue "'conf.sleep', '{\"ms\": 3000}'")
	b=$(q "SELECT skiplock.enqueue_after(ARRAY[$a], 'conf.sleep', '{\"ms\": 300}')")
	c=$(q "SELECT skiplock.enqueue_after(ARRAY[$a], 'conf.sleep', '{\"ms\": 300}')")
	d=$(q "SELECT skiplock.enqueue_after(ARRAY[$b, $c], 'conf.ok', '{}')")
	q "INSERT INTO conformance.enqueued SELECT id, kind FROM skiplock.all_jobs
	    WHERE id IN ($b, $c, $d)" >/dev/null
	check_eq "D waits for its two parents" "$(q "SELECT skiplock.job_waits_for($d)")" \
		"dependencies: 2 of 2 parent(s) not finished"
	start_worker deps-A 2
	wait_for "SELECT count(*) > 0 FROM skiplock.jobs WHERE id IN ($a, $b, $c) AND state = 'running'
	            AND lease_owner = 'deps-A'" t 10 || fail "deps-A ran none of the diamond in 10 s"
	kill_session KILL "${WPID[deps-A]}"
	{ wait "${WPID[deps-A]}"; } 2>/dev/null
	unset "WPID[deps-A]"
	# the batch after the kill: a conf.ok the killed instance had made its
	# effect for, but not recorded, would take effect twice (the effect and
	# the outcome are two transactions in this suite)
	ids=$(q "SELECT array_to_string(skiplock.enqueue_batch('conf.ok', array_fill('{}'::jsonb, ARRAY[20]),
	           'conf.ok', '{\"callback\": true}'), ',')")
	cb=${ids##*,}
	q "INSERT INTO conformance.enqueued SELECT id, kind FROM skiplock.all_jobs WHERE id IN ($ids)" >/dev/null
	start_worker deps-B 2
	wait_for "SELECT count(*) FROM skiplock.all_jobs WHERE id IN ($a, $b, $c, $d, $ids)
	            AND state = 'completed'" 25 $((LEASE + 25)) ||
		fail "the diamond and the batch did not complete: $(q "SELECT string_agg(id || ' ' || state, ', ') FROM skiplock.all_jobs WHERE id IN ($a, $b, $c, $d, $cb)")"
	check_eq "D took effect once, after B's and C's effects" \
		"$(q "SELECT count(*) = 1 AND min(l.at) > (SELECT max(p.at) FROM conformance.ledger p WHERE p.job_id IN ($b, $c))
		        FROM conformance.ledger l WHERE l.job_id = $d")" t
	check_eq "B and C after A" \
		"$(q "SELECT min(l.at) > (SELECT max(p.at) FROM conformance.ledger p WHERE p.job_id = $a)
		        FROM conformance.ledger l WHERE l.job_id IN ($b, $c)")" t
	check_eq "the callback took effect once, after every child's" \
		"$(q "SELECT count(*) = 1 AND min(l.at) > (SELECT max(p.at) FROM conformance.ledger p
		                                           WHERE p.job_id IN ($ids) AND p.job_id <> $cb)
		        FROM conformance.ledger l WHERE l.job_id = $cb")" t
	check_eq "the callback's payload counts the batch" \
		"$(q "SELECT payload -> 'batch' FROM skiplock.all_jobs WHERE id = $cb")" \
		'{"size": 20, "cancelled": 0, "completed": 20, "discarded": 0}'
	check_eq "nothing left waiting" "$(q "SELECT count(*) FROM skiplock.job_waits")" 0
	invariants all
	stop_worker deps-B
}
