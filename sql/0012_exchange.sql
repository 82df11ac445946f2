-- skiplock schema step 0012: a worker's turn in one function, without layers.
--
-- Step 0011 built record_claim on record and claim: each ran its statement
-- into its own result (RETURN QUERY), record_claim copied both into its
-- result, and the caller's statement scanned that once more; the three
-- functions each set search_path on entry.  At a drain of 30,000 jobs/s
-- those copies cost about 3.7 µs of backend time per job, and the retry
-- decision took the whole job row (23 columns, payload included) as its
-- argument, which the outcome UPDATE then built for every row it changed,
-- retried or not.
--
-- Here the statements are written once, in record_claim, which runs them
-- itself: the outcomes' UPDATE, then (n > 0) the claim's UPDATE of the ids
-- claim_pick chose.  record is record_claim with n = 0, claim is
-- record_claim with no outcomes: same arguments, same results, same errors
-- as in step 0011.  retry_delay_ms takes the job's columns it reads.
--
-- CREATE OR REPLACE keeps each function's owner and grants; the attributes
-- step 0011 set with ALTER FUNCTION (SECURITY DEFINER, search_path) are
-- restated, since CREATE OR REPLACE resets them.

-- ---- the retry decision, over the columns it reads ----

-- As step 0011's retry_delay_ms(j skiplock.jobs, …), with j's attempt,
-- last_delay_ms, backoff, backoff_base_ms and backoff_cap_ms as arguments.
CREATE FUNCTION skiplock.retry_delay_ms(attempt int, last_delay_ms bigint, job_backoff text,
                                        job_base_ms bigint, job_cap_ms bigint, asked_ms bigint,
                                        deferred boolean, bs text, bb bigint, bc bigint,
                                        r double precision, slot double precision)
RETURNS bigint
LANGUAGE sql IMMUTABLE AS $fn$
  WITH p AS (SELECT coalesce(job_backoff, bs, 'full') AS s,
                    coalesce(nullif(job_base_ms, 0), nullif(bb, 0), 1000)::bigint AS base,
                    coalesce(nullif(job_cap_ms, 0), nullif(bc, 0), 3600000)::bigint AS cap)
  SELECT least(greatest(CASE
    WHEN coalesce(deferred, false)
      THEN greatest(coalesce(asked_ms, 0), p.cap / 2 + floor((p.cap - p.cap / 2) * slot)::bigint)
    WHEN asked_ms > 0
      THEN least(asked_ms, p.cap) + floor(r * (least(asked_ms, p.cap) / 10 + 1))::bigint
    ELSE skiplock.backoff_delay(p.s, attempt - 1, p.base, p.cap, last_delay_ms, r)
  END, 0), 31536000000) FROM p
$fn$;

-- ---- argument checks ----

-- record's checks: NULL where required (22004), arrays of different
-- lengths (2202E), an unknown outcome or backoff or a negative delay (22023).
CREATE FUNCTION skiplock.check_record_args(
  ids bigint[], fencings bigint[], outcomes text[], results jsonb[], errors text[],
  retry_after_ms bigint[], deferred boolean[], backoffs text[], backoff_bases_ms bigint[],
  backoff_caps_ms bigint[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  v_n int := cardinality(ids);
BEGIN
  IF ids IS NULL OR fencings IS NULL OR outcomes IS NULL THEN
    RAISE EXCEPTION 'record: ids, fencings and outcomes must not be NULL' USING ERRCODE = '22004';
  END IF;
  IF EXISTS (SELECT 1 FROM unnest(ARRAY[cardinality(fencings), cardinality(outcomes),
                cardinality(results), cardinality(errors), cardinality(retry_after_ms),
                cardinality(deferred), cardinality(backoffs), cardinality(backoff_bases_ms),
                cardinality(backoff_caps_ms)]) c
              WHERE c <> v_n) THEN
    RAISE EXCEPTION 'record: every array must have one element per outcome (% ids)', v_n
      USING ERRCODE = '2202E';
  END IF;
  IF EXISTS (SELECT 1 FROM unnest(outcomes) o
              WHERE o IS NULL OR o NOT IN ('ok', 'retry', 'fail', 'discard'))
     OR EXISTS (SELECT 1 FROM unnest(backoffs) s
                 WHERE s NOT IN ('full', 'equal', 'decorrelated', 'exponential', 'fixed'))
     OR EXISTS (SELECT 1 FROM unnest(retry_after_ms, backoff_bases_ms, backoff_caps_ms)
                                AS t(a, b, c)
                 WHERE a < 0 OR b < 0 OR c < 0) THEN
    RAISE EXCEPTION 'record: an outcome is ok, retry, fail or discard; a backoff is full, '
                    'equal, decorrelated, exponential or fixed; delays are not negative'
      USING ERRCODE = '22023';
  END IF;
END
$fn$;

-- ---- the claim's choice ----

-- The ids a claim takes, locked FOR UPDATE SKIP LOCKED: probe jobs the
-- kinds' breakers admit, then due jobs of the kinds whose breaker is
-- closed, in claim order (after the mark, when one is given).  The ids
-- come back as an array, which the caller's UPDATE matches with = ANY: an
-- array is computed once, so the claim can never take more than n
-- (a locking sub-select on the inner side of a join may run again).
CREATE FUNCTION skiplock.claim_pick(
  p_owner text, p_kinds text[], p_queues text[], p_n int, p_lease interval,
  p_after_priority int, p_after_run_at_us bigint, p_after_id bigint)
RETURNS bigint[]
LANGUAGE plpgsql AS $fn$
DECLARE
  v_kinds text[] := p_kinds;
  v_probes bigint[] := '{}';
  v_m int;
  v_after timestamptz;
BEGIN
  PERFORM skiplock.check_claim_args(p_owner, p_kinds, p_n, p_lease);
  IF EXISTS (SELECT 1 FROM skiplock.breakers b
              WHERE b.kind = ANY (p_kinds) AND b.state <> 'closed') THEN
    v_probes := skiplock.claim_probes(p_kinds, p_queues, p_n);
    v_kinds := ARRAY(SELECT unnest(p_kinds) EXCEPT
                     SELECT b.kind FROM skiplock.breakers b
                      WHERE b.kind = ANY (p_kinds) AND b.state <> 'closed');
  END IF;
  v_m := p_n - cardinality(v_probes);
  IF v_m <= 0 THEN
    RETURN v_probes;
  ELSIF p_after_id IS NULL THEN
    RETURN v_probes || ARRAY(
      SELECT j.id FROM skiplock.jobs j
       WHERE j.state = 'available' AND j.run_at <= now()
         AND (p_queues IS NULL OR j.queue = ANY (p_queues)) AND j.kind = ANY (v_kinds)
       ORDER BY j.priority DESC, j.run_at, j.id LIMIT v_m FOR UPDATE SKIP LOCKED);
  END IF;
  v_after := timestamptz 'epoch' + p_after_run_at_us * interval '1 microsecond';
  RETURN v_probes || ARRAY(
    SELECT a.id FROM (
      SELECT j.id FROM skiplock.jobs j
       WHERE j.state = 'available' AND j.run_at <= now()
         AND (p_queues IS NULL OR j.queue = ANY (p_queues)) AND j.kind = ANY (v_kinds)
         AND j.priority = p_after_priority AND (j.run_at, j.id) > (v_after, p_after_id)
       ORDER BY j.priority DESC, j.run_at, j.id LIMIT v_m FOR UPDATE SKIP LOCKED) a
    UNION ALL
    SELECT b.id FROM (
      SELECT j.id FROM skiplock.jobs j
       WHERE j.state = 'available' AND j.run_at <= now()
         AND (p_queues IS NULL OR j.queue = ANY (p_queues)) AND j.kind = ANY (v_kinds)
         AND j.priority < p_after_priority
       ORDER BY j.priority DESC, j.run_at, j.id LIMIT v_m FOR UPDATE SKIP LOCKED) b
    LIMIT v_m);
END
$fn$;

-- ---- the turn: outcomes, then the claim ----

-- As in step 0011: the outcomes first (rows 'recorded': id, state, run_at,
-- delay_ms), then the claim, which sees the breakers the outcomes changed
-- (rows 'claimed': the claimed_job columns).  New: n = 0 records only
-- (owner, kinds and lease are then not looked at), and empty outcome
-- arrays claim only.
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
  v_n int := cardinality(record_claim.ids);
  v_ids bigint[];
BEGIN
  PERFORM skiplock.check_record_args(ids, fencings, outcomes, results, errors, retry_after_ms,
                                     deferred, backoffs, backoff_bases_ms, backoff_caps_ms);
  IF v_n > 0 THEN
    RETURN QUERY
    WITH v AS MATERIALIZED (
      SELECT t.*, random() AS r
        FROM unnest(record_claim.ids, record_claim.fencings, record_claim.outcomes,
                    record_claim.results, record_claim.errors, record_claim.retry_after_ms,
                    record_claim.deferred, record_claim.backoffs, record_claim.backoff_bases_ms,
                    record_claim.backoff_caps_ms)
             WITH ORDINALITY AS t(id, fencing, o, res, err, asked, dfr, bs, bb, bc, ord)),
    done AS (
      UPDATE skiplock.jobs j SET
        state = CASE WHEN v.o = 'ok' THEN 'completed'
                     WHEN v.o = 'discard' OR j.attempt >= j.max_attempts THEN 'discarded'
                     ELSE 'available' END,
        result = CASE WHEN v.o = 'ok' THEN v.res ELSE j.result END,
        errors = CASE WHEN v.err IS NULL THEN j.errors
                      ELSE (CASE WHEN jsonb_array_length(j.errors) >= 20 THEN j.errors - 0
                                 ELSE j.errors END)
                           || jsonb_build_array(jsonb_build_object('attempt', j.attempt,
                                                'at', now(), 'error', v.err)) END,
        run_at = CASE WHEN v.o IN ('retry', 'fail') AND j.attempt < j.max_attempts
                      THEN now() + skiplock.retry_delay_ms(j.attempt, j.last_delay_ms,
                             j.backoff, j.backoff_base_ms, j.backoff_cap_ms, v.asked, v.dfr,
                             v.bs, v.bb, v.bc, v.r, (v.ord - 1 + v.r) / v_n)
                           * interval '1 millisecond'
                      ELSE j.run_at END,
        last_delay_ms = CASE WHEN v.o IN ('retry', 'fail') AND j.attempt < j.max_attempts
                             THEN skiplock.retry_delay_ms(j.attempt, j.last_delay_ms,
                                    j.backoff, j.backoff_base_ms, j.backoff_cap_ms, v.asked,
                                    v.dfr, v.bs, v.bb, v.bc, v.r, (v.ord - 1 + v.r) / v_n)
                             ELSE j.last_delay_ms END,
        finished_at = CASE WHEN v.o IN ('ok', 'discard') OR j.attempt >= j.max_attempts
                           THEN now() END,
        lease_owner = NULL, lease_expires_at = NULL
        FROM v
       WHERE j.id = v.id AND j.fencing = v.fencing AND j.state = 'running' COLLATE "C"
      RETURNING j.id, j.kind, j.state, j.run_at, v.o,
                CASE WHEN j.state = 'available' THEN j.last_delay_ms END AS delay_ms),
    tally AS (
      SELECT kind, (count(*) FILTER (WHERE o = 'ok'))::int AS ok,
             (count(*) FILTER (WHERE o IN ('retry', 'fail')))::int AS bad
        FROM done GROUP BY kind),
    brk AS (
      UPDATE skiplock.breakers b
         SET (state, prev_state, calls, failures, window_started_at, probe_ok, open_until,
              changed_at) = (SELECT x.state, x.prev_state, x.calls, x.failures,
                                    x.window_started_at, x.probe_ok, x.open_until, x.changed_at
                               FROM skiplock.breaker_step(b, t.ok, t.bad) x)
        FROM tally t WHERE b.kind = t.kind AND (t.ok > 0 OR t.bad > 0)
      RETURNING b.kind, b.prev_state, b.state, b.calls, b.failures),
    brk_ev AS (
      INSERT INTO skiplock.breaker_events (kind, from_state, to_state, reason)
      SELECT kind, prev_state, state, CASE WHEN state = 'closed' THEN 'probes succeeded'
             WHEN prev_state = 'half_open' THEN 'a probe failed'
             ELSE format('%s of %s calls failed', failures, calls) END
        FROM brk WHERE prev_state <> state)
    SELECT 'recorded'::text, x.id, x.state, x.run_at, x.delay_ms, NULL::text, NULL::text,
           NULL::jsonb, NULL::int, NULL::int, NULL::bigint, NULL::timestamptz, NULL::int,
           NULL::int, NULL::bigint
      FROM done x;
  END IF;
  IF record_claim.n = 0 THEN
    RETURN;
  END IF;
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

-- ---- record and claim, on the one definition ----

CREATE OR REPLACE FUNCTION skiplock.record(
  ids bigint[], fencings bigint[], outcomes text[], results jsonb[] DEFAULT NULL,
  errors text[] DEFAULT NULL, retry_after_ms bigint[] DEFAULT NULL,
  deferred boolean[] DEFAULT NULL, backoffs text[] DEFAULT NULL,
  backoff_bases_ms bigint[] DEFAULT NULL, backoff_caps_ms bigint[] DEFAULT NULL)
RETURNS SETOF skiplock.recorded_outcome
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN QUERY
    SELECT x.id, x.state, x.run_at, x.delay_ms
      FROM skiplock.record_claim(ids, fencings, outcomes, results, errors, retry_after_ms,
                                 deferred, backoffs, backoff_bases_ms, backoff_caps_ms,
                                 NULL, NULL, NULL, 0, NULL) x;
END
$fn$;

CREATE OR REPLACE FUNCTION skiplock.claim(
  owner text, kinds text[], queues text[] DEFAULT NULL, n int DEFAULT 1,
  lease interval DEFAULT '30 seconds', after_priority int DEFAULT NULL,
  after_run_at_us bigint DEFAULT NULL, after_id bigint DEFAULT NULL)
RETURNS SETOF skiplock.claimed_job
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  PERFORM skiplock.check_claim_args(owner, kinds, n, lease);
  RETURN QUERY
    SELECT x.id, x.queue, x.kind, x.payload, x.attempt, x.max_attempts, x.fencing,
           x.lease_expires_at, x.timeout_ms, x.priority, x.run_at, x.run_at_us
      FROM skiplock.record_claim('{}', '{}', '{}', NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                 owner, kinds, queues, n, lease, after_priority,
                                 after_run_at_us, after_id) x;
END
$fn$;

DROP FUNCTION skiplock.retry_delay_ms(skiplock.jobs, bigint, boolean, text, bigint, bigint,
                                      double precision, double precision);

-- New functions run only for those granted them; granted roles get them.
REVOKE EXECUTE ON FUNCTION
  skiplock.retry_delay_ms(int, bigint, text, bigint, bigint, bigint, boolean, text, bigint,
                          bigint, double precision, double precision),
  skiplock.check_record_args(bigint[], bigint[], text[], jsonb[], text[], bigint[], boolean[],
                             text[], bigint[], bigint[]),
  skiplock.claim_pick(text, text[], text[], int, interval, int, bigint, bigint)
  FROM PUBLIC;
SELECT skiplock.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);

COMMENT ON FUNCTION skiplock.retry_delay_ms(int, bigint, text, bigint, bigint, bigint, boolean,
                                            text, bigint, bigint, double precision,
                                            double precision) IS
  'the retry decision: delay in ms before the next attempt of a failed job';
COMMENT ON FUNCTION skiplock.claim_pick(text, text[], text[], int, interval, int, bigint,
                                        bigint) IS
  'the ids a claim takes (probes, then due jobs), locked SKIP LOCKED; record_claim updates them';
COMMENT ON FUNCTION skiplock.record_claim(bigint[], bigint[], text[], jsonb[], text[], bigint[],
                                          boolean[], text[], bigint[], bigint[], text, text[],
                                          text[], int, interval, int, bigint, bigint) IS
  'record outcomes, then claim, in one call: rows tagged recorded / claimed; n = 0 records only';
