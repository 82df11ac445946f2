-- skiplock schema step 0023: the outcome path as a program.
--
-- record_claim (step 0013) recorded a batch of outcomes in one statement of
-- eight unnamed sub-queries: it computed the retry decision twice per row
-- with the same twelve arguments, and counted the outcomes for the circuit
-- breakers inside the same statement.  Its signature, its rows and its
-- errors are the released SQL API and do not change here; its body now
-- reads as the lifecycle of an outcome, one named function per stage:
--
--   record_claim          check the arguments; record the outcomes; count
--                         them for the breakers; claim the next jobs
--   record_outcomes       the outcomes of one call, one statement of named
--                         stages:
--     reported              the call's arrays as rows, each with its random
--                           draw for the retry jitter
--     ended                 a success, a discard or a last attempt: the job
--                           leaves skiplock.jobs ...
--     kept                  ... into finished_jobs, with the expiry its
--                           queue's retention gives (kept 0: not kept)
--     decided               a retry's delay, decided once per row
--                           (retry_delay_ms)
--     retried               the job waits again, run_at = now() + delay
--   count_for_breakers    the ok and failed outcomes per kind, into the
--                         breakers of those kinds (breaker_step) and their
--                         transitions into breaker_events; not called at
--                         all while no breaker exists (the rows of
--                         record_outcomes then go straight out)
--   claim_pick            which jobs to claim (step 0017, unchanged)
--
-- Each stage is guarded by the claim's fencing token and state 'running',
-- so an outcome of a claim that is no longer current changes nothing and
-- returns no row, as before.

CREATE FUNCTION skiplock.record_outcomes(
  ids bigint[], fencings bigint[], outcomes text[], results jsonb[], errors text[],
  retry_after_ms bigint[], deferred boolean[], backoffs text[], backoff_bases_ms bigint[],
  backoff_caps_ms bigint[])
RETURNS TABLE (id bigint, kind text, state text, run_at timestamptz, outcome text,
               delay_ms bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
  -- (plpgsql, not sql: its plan is prepared once per session)
  RETURN QUERY
  WITH reported AS MATERIALIZED (
    -- ord and n place each row's jitter in its own slot of the batch, so
    -- that a batch of retries spreads out instead of returning together
    SELECT t.*, random() AS r, cardinality(record_outcomes.ids) AS n
      FROM unnest(record_outcomes.ids, record_outcomes.fencings, record_outcomes.outcomes,
                  record_outcomes.results, record_outcomes.errors,
                  record_outcomes.retry_after_ms, record_outcomes.deferred,
                  record_outcomes.backoffs, record_outcomes.backoff_bases_ms,
                  record_outcomes.backoff_caps_ms)
           WITH ORDINALITY AS t(id, fencing, outcome, result, error, asked_ms, deferred,
                                backoff, base_ms, cap_ms, ord)),
  ended AS (
    DELETE FROM skiplock.jobs j USING reported v
     WHERE j.id = v.id AND j.fencing = v.fencing AND j.state = 'running' COLLATE "C"
       AND (v.outcome IN ('ok', 'discard') OR j.attempt >= j.max_attempts)
    RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.run_at, j.attempt,
              j.max_attempts, j.fencing, j.unique_key, j.timeout_ms, j.backoff_base_ms,
              j.backoff_cap_ms, j.errors, j.created_at, j.attempted_at, j.backoff,
              j.last_delay_ms,
              CASE WHEN v.outcome = 'ok' THEN 'completed' ELSE 'discarded' END AS state,
              v.outcome, v.result, v.error),
  kept AS (
    INSERT INTO skiplock.finished_jobs (id, queue, kind, payload, state, priority, run_at,
                attempt, max_attempts, fencing, unique_key, timeout_ms, backoff_base_ms,
                backoff_cap_ms, errors, result, created_at, attempted_at, finished_at, backoff,
                last_delay_ms, expires_at)
    SELECT f.id, f.queue, f.kind, f.payload, f.state, f.priority, f.run_at, f.attempt,
           f.max_attempts, f.fencing, f.unique_key, f.timeout_ms, f.backoff_base_ms,
           f.backoff_cap_ms, skiplock.errors_append(f.errors, f.attempt, f.error, now()),
           CASE WHEN f.outcome = 'ok' THEN f.result END, f.created_at, f.attempted_at, now(),
           f.backoff, f.last_delay_ms,
           CASE WHEN k.keep IS NULL THEN timestamptz 'infinity' ELSE now() + k.keep END
      FROM ended f
      -- the queue's own retention for this state, else the default ('*')
      JOIN skiplock.retention rd ON rd.queue = '*' AND rd.state = f.state
      LEFT JOIN skiplock.retention rq ON rq.queue = f.queue AND rq.state = f.state
     CROSS JOIN LATERAL (SELECT CASE WHEN rq.queue IS NULL THEN rd.keep ELSE rq.keep END
                                AS keep) k
     WHERE k.keep IS NULL OR k.keep > interval '0'),
  decided AS (
    -- the rows ended leaves alone: a retry or failure with attempts left
    SELECT j.id, j.fencing, v.error,
           skiplock.retry_delay_ms(j.attempt, j.last_delay_ms, j.backoff, j.backoff_base_ms,
                                   j.backoff_cap_ms, v.asked_ms, v.deferred, v.backoff,
                                   v.base_ms, v.cap_ms, v.r, (v.ord - 1 + v.r) / v.n)
             AS delay_ms, v.outcome
      FROM skiplock.jobs j JOIN reported v ON j.id = v.id AND j.fencing = v.fencing
     WHERE j.state = 'running' COLLATE "C" AND v.outcome IN ('retry', 'fail')
       AND j.attempt < j.max_attempts),
  retried AS (
    UPDATE skiplock.jobs j SET
      state = 'available',
      errors = skiplock.errors_append(j.errors, j.attempt, d.error, now()),
      run_at = now() + d.delay_ms * interval '1 millisecond',
      last_delay_ms = d.delay_ms,
      lease_owner = NULL, lease_expires_at = NULL
      FROM decided d
     WHERE j.id = d.id AND j.fencing = d.fencing AND j.state = 'running' COLLATE "C"
    RETURNING j.id, j.kind, j.state, j.run_at, d.outcome, j.last_delay_ms AS delay_ms)
  SELECT r.id, r.kind, r.state, r.run_at, r.outcome, r.delay_ms FROM retried r
  UNION ALL
  SELECT e.id, e.kind, e.state, e.run_at, e.outcome, NULL::bigint FROM ended e;
END
$fn$;

CREATE FUNCTION skiplock.count_for_breakers(kinds text[], outcomes text[])
RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM skiplock.breakers b WHERE b.kind = ANY (count_for_breakers.kinds))
  THEN
    RETURN;
  END IF;
  WITH tally AS (
    SELECT t.kind, (count(*) FILTER (WHERE t.outcome = 'ok'))::int AS ok,
           (count(*) FILTER (WHERE t.outcome IN ('retry', 'fail')))::int AS bad
      FROM unnest(count_for_breakers.kinds, count_for_breakers.outcomes) AS t(kind, outcome)
     GROUP BY t.kind),
  stepped AS (
    UPDATE skiplock.breakers b
       SET (state, prev_state, calls, failures, window_started_at, probe_ok, open_until,
            changed_at) = (SELECT x.state, x.prev_state, x.calls, x.failures,
                                  x.window_started_at, x.probe_ok, x.open_until, x.changed_at
                             FROM skiplock.breaker_step(b, t.ok, t.bad) x)
      FROM tally t WHERE b.kind = t.kind AND (t.ok > 0 OR t.bad > 0)
    RETURNING b.kind, b.prev_state, b.state, b.calls, b.failures)
  INSERT INTO skiplock.breaker_events (kind, from_state, to_state, reason)
  SELECT s.kind, s.prev_state, s.state,
         CASE WHEN s.state = 'closed' THEN 'probes succeeded'
              WHEN s.prev_state = 'half_open' THEN 'a probe failed'
              ELSE format('%s of %s calls failed', s.failures, s.calls) END
    FROM stepped s WHERE s.prev_state <> s.state;
END
$fn$;

-- As in step 0013: the same arguments, rows and errors.
CREATE OR REPLACE FUNCTION skiplock.record_claim(
  ids bigint[], fencings bigint[], outcomes text[], results jsonb[], errors text[],
  retry_after_ms bigint[], deferred boolean[], backoffs text[], backoff_bases_ms bigint[],
  backoff_caps_ms bigint[], owner text, kinds text[], queues text[], n int, lease interval,
  after_priority int DEFAULT NULL, after_run_at_us bigint DEFAULT NULL,
  after_id bigint DEFAULT NULL)
RETURNS SETOF skiplock.exchange_row
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_ids bigint[];
  v_kinds text[];
  v_states text[];
  v_run_at timestamptz[];
  v_outcomes text[];
  v_delays bigint[];
BEGIN
  PERFORM skiplock.check_record_args(ids, fencings, outcomes, results, errors, retry_after_ms,
                                     deferred, backoffs, backoff_bases_ms, backoff_caps_ms);
  -- 1. the outcomes, each recorded once
  IF cardinality(record_claim.ids) > 0 AND NOT EXISTS (SELECT 1 FROM skiplock.breakers) THEN
    -- no breaker anywhere: nothing to count, the rows go straight out
    RETURN QUERY
    SELECT 'recorded'::text, o.id, o.state, o.run_at, o.delay_ms, NULL::text, NULL::text,
           NULL::jsonb, NULL::int, NULL::int, NULL::bigint, NULL::timestamptz, NULL::int,
           NULL::int, NULL::bigint
      FROM skiplock.record_outcomes(ids, fencings, outcomes, results, errors, retry_after_ms,
                                    deferred, backoffs, backoff_bases_ms, backoff_caps_ms) o;
  ELSIF cardinality(record_claim.ids) > 0 THEN
    SELECT array_agg(o.id), array_agg(o.kind), array_agg(o.state), array_agg(o.run_at),
           array_agg(o.outcome), array_agg(o.delay_ms)
      INTO v_ids, v_kinds, v_states, v_run_at, v_outcomes, v_delays
      FROM skiplock.record_outcomes(ids, fencings, outcomes, results, errors, retry_after_ms,
                                    deferred, backoffs, backoff_bases_ms, backoff_caps_ms) o;
    -- 2. what they say about each kind's downstream, for its breaker
    PERFORM skiplock.count_for_breakers(v_kinds, v_outcomes);
    RETURN QUERY
    SELECT 'recorded'::text, r.id, r.state, r.run_at, r.delay_ms, NULL::text, NULL::text,
           NULL::jsonb, NULL::int, NULL::int, NULL::bigint, NULL::timestamptz, NULL::int,
           NULL::int, NULL::bigint
      FROM unnest(v_ids, v_states, v_run_at, v_delays) AS r(id, state, run_at, delay_ms);
  END IF;
  IF record_claim.n = 0 THEN
    RETURN;
  END IF;
  -- 3. the next jobs: picked (pauses, breakers, keyset), then leased
  v_ids := skiplock.claim_pick(owner, kinds, queues, n, lease, after_priority,
                               after_run_at_us, after_id);
  RETURN QUERY
    UPDATE skiplock.jobs j
       SET state = 'running', attempt = j.attempt + 1, fencing = j.fencing + 1,
           lease_owner = record_claim.owner, lease_expires_at = now() + record_claim.lease,
           attempted_at = now()
     WHERE j.id = ANY (v_ids)
    RETURNING 'claimed'::text, j.id, 'running'::text, j.run_at, NULL::bigint, j.queue, j.kind,
              j.payload, j.attempt, j.max_attempts, j.fencing, j.lease_expires_at,
              coalesce(j.timeout_ms, 0), j.priority,
              (extract(epoch FROM j.run_at) * 1000000)::bigint;
END
$fn$;

COMMENT ON FUNCTION skiplock.record_outcomes(bigint[], bigint[], text[], jsonb[], text[],
                                             bigint[], boolean[], text[], bigint[], bigint[]) IS
  'Internal: record a batch of outcomes (ended, kept, decided, retried), each guarded by its fencing token; one row per outcome recorded.';
COMMENT ON FUNCTION skiplock.count_for_breakers(text[], text[]) IS
  'Internal: count recorded outcomes per kind into the circuit breakers of those kinds, with their transitions.';
COMMENT ON FUNCTION skiplock.record_claim(bigint[], bigint[], text[], jsonb[], text[], bigint[],
                                          boolean[], text[], bigint[], bigint[], text, text[],
                                          text[], int, interval, int, bigint, bigint) IS
  'record outcomes, then claim, in one call: rows tagged recorded / claimed; n = 0 records only';

-- New functions are executable by PUBLIC until revoked.  These two are
-- internal: record_claim (SECURITY DEFINER) calls them as the owner.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;
SELECT skiplock.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);
