# shellcheck shell=bash
# cases_limits.sh — the conformance cases of the limits on job starts
# (docs/flow-control.md), sourced by run.sh after cases.sh.  The claim
# enforces a limit, so every implementation must obey it with no code of
# its own; each case sets a limit on one of the suite's kinds and removes
# it at the end.

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
# (room for 8), and one of them killed with its jobs: the dead instance's
# slots stay taken until its leases expire, then its jobs run elsewhere;
# sampled every 0.1 s, no key ever has 3 jobs under a live lease.
case_concurrency_key() {
	section "a concurrency limit per key holds through kill -9"
	local ids most
	limit_set "'conf.sleep', max_running => 2, key_field => 'k'"
	ids=$(q "SELECT string_agg(id::text, ',') FROM (
	           SELECT conformance.enqueue('conf.sleep', '{\"ms\": 1200, \"k\": \"a\"}', n => 5)
	           UNION ALL SELECT conformance.enqueue('conf.sleep', '{\"ms\": 1200, \"k\": \"b\"}', n => 3)) s(id)")
	start_worker ck-A 4
	start_worker ck-B 4
	sample_running "$ids" &
	local sampler=$!
	wait_for "SELECT count(*) > 0 FROM skiplock.jobs WHERE id IN ($ids) AND state = 'running'
	            AND lease_owner = 'ck-A'" t 10 || fail "ck-A claimed none of the limited jobs in 10 s"
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
