-- skiplock schema step 0033: outcomes as one array of records (protocol 3).
--
-- record and record_claim took a batch of outcomes as eleven parallel
-- arrays, one per field.  They now also take it as one value: a JSON array
-- of objects, one per outcome, whose fields are those of the composite
-- type skiplock.outcome:
--
--   [{"queue": "mail", "id": 42, "fencing": 3, "outcome": "ok", "result": {"sent": 1}},
--    {"queue": "mail", "id": 43, "fencing": 1, "outcome": "retry", "error": "timeout",
--     "retry_after_ms": 5000}]
--
-- Every client language has a JSON encoder, and one object per outcome
-- cannot disagree in length with its neighbours the way eleven arrays
-- could.  skiplock.protocol_version() is 3.  The array forms stay, for the
-- workers of protocol 2, and now go the same way as the new ones:
--
--   record_claim (jsonb)    outcomes_read: the JSON refused with 22023 /
--                           22004 unless it is an array of at most
--                           outcomes_max() known outcomes, each with an id
--                           and a fencing token; then exchange
--   record_claim (arrays)   check_record_args, outcomes_of: the arrays as
--                           records; then exchange
--   exchange                record the outcomes (outcomes_record); count
--                           them for the breakers (count_for_breakers) and
--                           resolve what waits for the jobs they ended
--                           (deps_resolve); pick and lease the next jobs
--                           (claim_take, or claim_by_queue when distributed)
--   outcomes_record         one statement on one PostgreSQL, one per queue
--                           when distributed (outcomes_record_by_queue):
--     reported                the records as rows, each with its random draw
--     ended / kept            a success, a discard or a last attempt leaves
--                             jobs for finished_jobs, kept as its queue's
--                             retention says
--     decided                 a retry's delay (retry_delay_ms), computed
--                             once per row: the stage is a fence (OFFSET 0)
--                             that the planner does not fold into the
--                             UPDATE, where the delay is used twice (run_at
--                             and last_delay_ms); folded in, as the
--                             statements of steps 0023 to 0028 were, the
--                             decision was evaluated once per use
--     retried                 the job waits again until now() + delay
--
-- Nothing is dropped: record_outcomes and record_by_queue (the arrays'
-- statements) are left for a statement in flight as this step commits;
-- record_outcomes now calls outcomes_record.

-- The outcome record
CREATE TYPE skiplock.outcome AS (
  queue text,
  id bigint,
  fencing bigint,
  outcome text,
  result jsonb,
  error text,
  retry_after_ms bigint,
  deferred boolean,
  backoff text,
  backoff_base_ms bigint,
  backoff_cap_ms bigint
);
COMMENT ON TYPE skiplock.outcome IS
  'One outcome of a job''s attempt under its handle (queue, id, fencing), as record and record_claim take them (protocol 3: a JSON array of these objects).';
COMMENT ON COLUMN skiplock.outcome.queue IS
  'the handle: the job''s queue (NULL: the job is found by id alone, as in protocol 1)';
COMMENT ON COLUMN skiplock.outcome.id IS 'the handle: the job (required)';
COMMENT ON COLUMN skiplock.outcome.fencing IS 'the handle: the claim''s fencing token (required)';
COMMENT ON COLUMN skiplock.outcome.outcome IS
  'ok (completed), retry or fail (a failed attempt: retried while attempts are left), discard';
COMMENT ON COLUMN skiplock.outcome.result IS 'ok: kept as the job''s result';
COMMENT ON COLUMN skiplock.outcome.error IS 'into the job''s error history (the newest 20 are kept)';
COMMENT ON COLUMN skiplock.outcome.retry_after_ms IS 'the handler''s own delay; 0 or NULL for none';
COMMENT ON COLUMN skiplock.outcome.deferred IS 'the caller''s retry budget refused an early retry';
COMMENT ON COLUMN skiplock.outcome.backoff IS
  'the caller''s strategy for the job''s kind (full, equal, decorrelated, exponential, fixed), used where the job sets none';
COMMENT ON COLUMN skiplock.outcome.backoff_base_ms IS 'the caller''s backoff base, used where the job sets none';
COMMENT ON COLUMN skiplock.outcome.backoff_cap_ms IS 'the caller''s backoff cap, used where the job sets none';

CREATE FUNCTION skiplock.outcomes_max() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$ SELECT 10000 $fn$;
COMMENT ON FUNCTION skiplock.outcomes_max() IS
  'the most outcomes one call of record or record_claim takes as JSON (10,000: more than a worker holds at once), the one definition of the limit';

-- The JSON of the calls, read into records, or an error that names what
-- is wrong (22023, or 22004 for a missing value) and writes nothing.
CREATE FUNCTION skiplock.outcomes_read(outcomes jsonb) RETURNS skiplock.outcome[]
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  v_fields CONSTANT text[] := ARRAY['queue', 'id', 'fencing', 'outcome', 'result', 'error',
    'retry_after_ms', 'deferred', 'backoff', 'backoff_base_ms', 'backoff_cap_ms'];
  v skiplock.outcome[];
  v_bad jsonb;
BEGIN
  IF outcomes IS NULL THEN
    RAISE EXCEPTION 'record: outcomes must not be NULL' USING ERRCODE = '22004';
  END IF;
  IF jsonb_typeof(outcomes) <> 'array' THEN
    RAISE EXCEPTION 'record: outcomes must be a JSON array of objects, not a JSON %',
      jsonb_typeof(outcomes) USING ERRCODE = '22023';
  END IF;
  IF jsonb_array_length(outcomes) > skiplock.outcomes_max() THEN
    RAISE EXCEPTION 'record: at most % outcomes per call, got %', skiplock.outcomes_max(),
      jsonb_array_length(outcomes) USING ERRCODE = '22023';
  END IF;
  -- an element that is not an object, or has a field no outcome has
  SELECT e INTO v_bad FROM jsonb_array_elements(outcomes) e
   WHERE jsonb_typeof(e) <> 'object' OR e - v_fields <> '{}'::jsonb LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'record: every outcome is a JSON object of the fields %, got %',
      array_to_string(v_fields, ', '), left(v_bad::text, 200) USING ERRCODE = '22023';
  END IF;
  v := ARRAY(SELECT o FROM jsonb_populate_recordset(NULL::skiplock.outcome, outcomes) o);
  IF EXISTS (SELECT 1 FROM unnest(v) o WHERE o.id IS NULL OR o.fencing IS NULL) THEN
    RAISE EXCEPTION 'record: every outcome needs an id and a fencing token'
      USING ERRCODE = '22004';
  END IF;
  IF EXISTS (SELECT 1 FROM unnest(v) o
              WHERE o.outcome IS NULL OR o.outcome NOT IN ('ok', 'retry', 'fail', 'discard')
                 OR o.backoff NOT IN ('full', 'equal', 'decorrelated', 'exponential', 'fixed')
                 OR o.retry_after_ms < 0 OR o.backoff_base_ms < 0 OR o.backoff_cap_ms < 0) THEN
    RAISE EXCEPTION 'record: an outcome is ok, retry, fail or discard; a backoff is full, '
                    'equal, decorrelated, exponential or fixed; delays are not negative'
      USING ERRCODE = '22023';
  END IF;
  RETURN v;
END
$fn$;
COMMENT ON FUNCTION skiplock.outcomes_read(jsonb) IS
  'Internal: the outcomes of a call (a JSON array of skiplock.outcome objects) as records; refuses (22023, 22004) what is not an array of at most outcomes_max() valid outcomes.';

-- The parallel arrays of protocol 2 as records (checked by
-- check_record_args first; an array left NULL gives NULL fields).
CREATE FUNCTION skiplock.outcomes_of(ids bigint[], fencings bigint[], outcomes text[],
    results jsonb[], errors text[], retry_after_ms bigint[], deferred boolean[],
    backoffs text[], backoff_bases_ms bigint[], backoff_caps_ms bigint[], job_queues text[])
RETURNS skiplock.outcome[]
LANGUAGE sql IMMUTABLE AS $fn$
  SELECT ARRAY(SELECT ROW(t.queue, t.id, t.fencing, t.outcome, t.result, t.error, t.asked,
                          t.deferred, t.backoff, t.base, t.cap)::skiplock.outcome
                 FROM unnest(ids, fencings, outcomes, results, errors, retry_after_ms,
                             deferred, backoffs, backoff_bases_ms, backoff_caps_ms, job_queues)
                      WITH ORDINALITY AS t(id, fencing, outcome, result, error, asked,
                                           deferred, backoff, base, cap, queue, ord)
                ORDER BY t.ord)
$fn$;
COMMENT ON FUNCTION skiplock.outcomes_of(bigint[], bigint[], text[], jsonb[], text[], bigint[],
                                         boolean[], text[], bigint[], bigint[], text[]) IS
  'Internal: the eleven parallel arrays of record (protocol 2) as outcome records, in order.';

-- Records a batch of outcomes on one PostgreSQL: one statement of the
-- stages of the header, each guarded by the claim's token, its queue and
-- state 'running', so a stale outcome changes nothing and returns no row.
CREATE FUNCTION skiplock.outcomes_record(p_outcomes skiplock.outcome[])
RETURNS TABLE(id bigint, kind text, state text, run_at timestamptz, outcome text,
              delay_ms bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
  IF skiplock.is_distributed() THEN
    RETURN QUERY SELECT * FROM skiplock.outcomes_record_by_queue(p_outcomes);
    RETURN;
  END IF;
  RETURN QUERY
  WITH reported AS MATERIALIZED (
    -- ord and n place each row's jitter in its own slot of the batch, so
    -- that a batch of retries spreads out instead of returning together
    SELECT t.*, random() AS r, cardinality(p_outcomes) AS n
      FROM unnest(p_outcomes) WITH ORDINALITY
           AS t(queue, id, fencing, outcome, result, error, asked_ms, deferred, backoff,
                base_ms, cap_ms, ord)),
  ended AS (
    DELETE FROM skiplock.jobs j USING reported v
     WHERE j.id = v.id AND j.fencing = v.fencing AND j.state = 'running' COLLATE "C"
       AND (v.queue IS NULL OR j.queue = v.queue)
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
    -- a retry or failure with attempts left; OFFSET 0: evaluated here,
    -- once per row, not once per use in retried
    SELECT j.id, j.fencing, v.error,
           skiplock.retry_delay_ms(j.attempt, j.last_delay_ms, j.backoff, j.backoff_base_ms,
                                   j.backoff_cap_ms, v.asked_ms, v.deferred, v.backoff,
                                   v.base_ms, v.cap_ms, v.r, (v.ord - 1 + v.r) / v.n)
             AS delay_ms, v.outcome
      FROM skiplock.jobs j JOIN reported v ON j.id = v.id AND j.fencing = v.fencing
     WHERE j.state = 'running' COLLATE "C" AND v.outcome IN ('retry', 'fail')
       AND (v.queue IS NULL OR j.queue = v.queue)
       AND j.attempt < j.max_attempts
    OFFSET 0),
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
COMMENT ON FUNCTION skiplock.outcomes_record(skiplock.outcome[]) IS
  'Internal: records a batch of outcome records (ended, kept, decided once per row, retried), each guarded by its handle; one row per outcome recorded.';

-- outcomes_record on the distributed layout: one statement per queue (a
-- filter j.queue = value, which Citus sends to one shard), with the time,
-- the random draws and the queue's retention read beforehand.
CREATE FUNCTION skiplock.outcomes_record_by_queue(p_outcomes skiplock.outcome[])
RETURNS TABLE(id bigint, kind text, state text, run_at timestamptz, outcome text,
              delay_ms bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_now timestamptz := now();
  v_now_utc timestamp := now() AT TIME ZONE 'UTC';
  v_at jsonb := to_jsonb(now());
  v_n int := cardinality(p_outcomes);
  v_r float8[] := ARRAY(SELECT random() FROM generate_series(1, cardinality(p_outcomes)));
  v_queues text[];
  v_unknown bigint[];
  v_q text;
  v_kc interval;
  v_kd interval;
  v_hc boolean;
  v_hd boolean;
  v_ec timestamptz;
  v_ed timestamptz;
BEGIN
  -- each queue named, and the queues of the handles without one (found
  -- by id on every shard)
  v_queues := ARRAY(SELECT DISTINCT o.queue FROM unnest(p_outcomes) o WHERE o.queue IS NOT NULL);
  v_unknown := ARRAY(SELECT o.id FROM unnest(p_outcomes) o WHERE o.queue IS NULL);
  IF cardinality(v_unknown) > 0 THEN
    v_queues := v_queues || ARRAY(SELECT DISTINCT j.queue FROM skiplock.jobs j
                                   WHERE j.id = ANY (v_unknown));
  END IF;
  FOR v_q IN SELECT DISTINCT q FROM unnest(v_queues) q LOOP
    SELECT k.keep, k.kept INTO v_kc, v_hc FROM skiplock.keep_of(v_q, 'completed') k;
    SELECT k.keep, k.kept INTO v_kd, v_hd FROM skiplock.keep_of(v_q, 'discarded') k;
    v_ec := CASE WHEN v_kc IS NULL THEN timestamptz 'infinity' ELSE v_now + v_kc END;
    v_ed := CASE WHEN v_kd IS NULL THEN timestamptz 'infinity' ELSE v_now + v_kd END;
    RETURN QUERY
    WITH reported AS MATERIALIZED (
      SELECT t.queue, t.id, t.fencing, t.outcome, t.result, t.error, t.asked_ms, t.deferred,
             t.backoff, t.base_ms, t.cap_ms, t.ord, v_r[t.ord] AS r, v_n AS n
        FROM unnest(p_outcomes) WITH ORDINALITY
             AS t(queue, id, fencing, outcome, result, error, asked_ms, deferred, backoff,
                  base_ms, cap_ms, ord)
       WHERE t.queue IS NULL OR t.queue = v_q),
    ended AS (
      DELETE FROM skiplock.jobs j USING reported v
       WHERE j.queue = v_q AND j.id = v.id AND j.fencing = v.fencing
         AND j.state = 'running' COLLATE "C"
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
                  backoff_cap_ms, errors, result, created_at, attempted_at, finished_at,
                  backoff, last_delay_ms, expires_at)
      SELECT f.id, f.queue, f.kind, f.payload, f.state, f.priority, f.run_at, f.attempt,
             f.max_attempts, f.fencing, f.unique_key, f.timeout_ms, f.backoff_base_ms,
             f.backoff_cap_ms, skiplock.errors_append(f.errors, f.attempt, f.error, v_at),
             CASE WHEN f.outcome = 'ok' THEN f.result END, f.created_at, f.attempted_at, v_now,
             f.backoff, f.last_delay_ms,
             CASE WHEN f.state = 'completed' THEN v_ec ELSE v_ed END
        FROM ended f
       WHERE CASE WHEN f.state = 'completed' THEN v_hc ELSE v_hd END),
    decided AS (
      -- OFFSET 0: the delay evaluated once per row (header)
      SELECT j.id, j.fencing, v.error,
             skiplock.retry_delay_ms(j.attempt, j.last_delay_ms, j.backoff, j.backoff_base_ms,
                                     j.backoff_cap_ms, v.asked_ms, v.deferred, v.backoff,
                                     v.base_ms, v.cap_ms, v.r, (v.ord - 1 + v.r) / v.n)
               AS delay_ms, v.outcome
        FROM skiplock.jobs j JOIN reported v ON j.id = v.id AND j.fencing = v.fencing
       WHERE j.queue = v_q AND j.state = 'running' COLLATE "C"
         AND v.outcome IN ('retry', 'fail') AND j.attempt < j.max_attempts
      OFFSET 0),
    retried AS (
      UPDATE skiplock.jobs j SET
        state = 'available',
        errors = skiplock.errors_append(j.errors, j.attempt, d.error, v_at),
        run_at = (v_now_utc + d.delay_ms * interval '1 millisecond') AT TIME ZONE 'UTC',
        last_delay_ms = d.delay_ms,
        lease_owner = NULL, lease_expires_at = NULL
        FROM decided d
       WHERE j.queue = v_q AND j.id = d.id AND j.fencing = d.fencing
         AND j.state = 'running' COLLATE "C"
      RETURNING j.id, j.kind, j.state, j.run_at, d.outcome, j.last_delay_ms AS delay_ms)
    SELECT r.id, r.kind, r.state, r.run_at, r.outcome, r.delay_ms FROM retried r
    UNION ALL
    SELECT e.id, e.kind, e.state, e.run_at, e.outcome, NULL::bigint FROM ended e;
  END LOOP;
END
$fn$;
COMMENT ON FUNCTION skiplock.outcomes_record_by_queue(skiplock.outcome[]) IS
  'Internal: outcomes_record on the distributed layout, one statement per queue with the times, the random draws and the retention read beforehand.';

-- The outcomes' consequences beyond their jobs: each kind's breaker
-- counts them, and the jobs that wait for a job they ended may go on.
-- Returns the recorded rows.
CREATE FUNCTION skiplock.outcomes_settle(p_outcomes skiplock.outcome[])
RETURNS TABLE(id bigint, state text, run_at timestamptz, delay_ms bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_parents bigint[] := ARRAY(SELECT o.id FROM unnest(p_outcomes) o);
  v_ids bigint[];
  v_kinds text[];
  v_states text[];
  v_run_at timestamptz[];
  v_outcomes text[];
  v_delays bigint[];
BEGIN
  IF NOT EXISTS (SELECT 1 FROM skiplock.breakers)
     AND NOT EXISTS (SELECT 1 FROM skiplock.job_deps d WHERE d.parent_id = ANY (v_parents)) THEN
    -- no breaker anywhere, no job of the batch that another waits for:
    -- the rows go straight out
    RETURN QUERY SELECT o.id, o.state, o.run_at, o.delay_ms
                   FROM skiplock.outcomes_record(p_outcomes) o;
    RETURN;
  END IF;
  SELECT array_agg(o.id), array_agg(o.kind), array_agg(o.state), array_agg(o.run_at),
         array_agg(o.outcome), array_agg(o.delay_ms)
    INTO v_ids, v_kinds, v_states, v_run_at, v_outcomes, v_delays
    FROM skiplock.outcomes_record(p_outcomes) o;
  PERFORM skiplock.count_for_breakers(v_kinds, v_outcomes);
  IF EXISTS (SELECT 1 FROM skiplock.job_deps d WHERE d.parent_id = ANY (v_parents)) THEN
    PERFORM skiplock.deps_resolve(
      ARRAY(SELECT r.id FROM unnest(v_ids, v_states) r(id, s) WHERE r.s <> 'available'),
      ARRAY(SELECT r.s FROM unnest(v_ids, v_states) r(id, s) WHERE r.s <> 'available'));
  END IF;
  RETURN QUERY SELECT r.id, r.state, r.run_at, r.delay_ms
                 FROM unnest(v_ids, v_states, v_run_at, v_delays) AS r(id, state, run_at, delay_ms);
END
$fn$;
COMMENT ON FUNCTION skiplock.outcomes_settle(skiplock.outcome[]) IS
  'Internal: records outcome records (outcomes_record), counts them for the breakers and resolves what waits for the jobs they ended; one row per outcome recorded.';

-- One turn of a worker, whichever form its outcomes came in: record them,
-- then pick and lease the next jobs.
CREATE FUNCTION skiplock.exchange(p_outcomes skiplock.outcome[], p_owner text, p_kinds text[],
    p_queues text[], p_n integer, p_lease interval, p_after_priority integer,
    p_after_run_at_us bigint, p_after_id bigint, p_wait_hints boolean)
RETURNS SETOF skiplock.exchange_row
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_kinds text[];
  v_ids bigint[];
  v_at timestamptz;
  v_wait timestamptz;
BEGIN
  -- 1. the outcomes, each recorded once
  IF cardinality(p_outcomes) > 0 THEN
    RETURN QUERY
    SELECT 'recorded'::text, o.id, o.state, o.run_at, o.delay_ms, NULL::text, NULL::text,
           NULL::jsonb, NULL::int, NULL::int, NULL::bigint, NULL::timestamptz, NULL::int,
           NULL::int, NULL::bigint
      FROM skiplock.outcomes_settle(p_outcomes) o;
  END IF;
  IF p_n = 0 THEN
    RETURN;
  END IF;
  -- 2. the next jobs: picked (pauses, breakers, limits, keyset), then leased
  IF skiplock.is_distributed() THEN
    v_kinds := ARRAY(SELECT unnest(p_kinds) EXCEPT SELECT x.kind FROM skiplock.limits x);
    IF cardinality(v_kinds) > 0 OR cardinality(p_kinds) = 0 THEN
      RETURN QUERY SELECT * FROM skiplock.claim_by_queue(p_owner, v_kinds, p_queues, p_n,
                     p_lease, p_after_priority, p_after_run_at_us, p_after_id);
    END IF;
    RETURN;
  END IF;
  SELECT p.ids, p.started_at, p.wait_until INTO v_ids, v_at, v_wait
    FROM skiplock.claim_take(p_owner, p_kinds, p_queues, p_n, p_lease, p_after_priority,
                             p_after_run_at_us, p_after_id) p;
  IF p_wait_hints AND v_wait IS NOT NULL THEN
    RETURN NEXT ROW('wait', NULL, NULL, v_wait,
                    greatest(0, ceil(extract(epoch FROM v_wait - clock_timestamp()) * 1000))::bigint,
                    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::skiplock.exchange_row;
  END IF;
  RETURN QUERY
    UPDATE skiplock.jobs j
       SET state = 'running', attempt = j.attempt + 1, fencing = j.fencing + 1,
           lease_owner = p_owner, lease_expires_at = now() + p_lease, attempted_at = v_at
     WHERE j.id = ANY (v_ids)
    RETURNING 'claimed'::text, j.id, 'running'::text, j.run_at, NULL::bigint, j.queue, j.kind,
              j.payload, j.attempt, j.max_attempts, j.fencing, j.lease_expires_at,
              coalesce(j.timeout_ms, 0), j.priority,
              (extract(epoch FROM j.run_at) * 1000000)::bigint;
END
$fn$;
COMMENT ON FUNCTION skiplock.exchange(skiplock.outcome[], text, text[], text[], integer, interval,
                                      integer, bigint, bigint, boolean) IS
  'Internal: the body of record_claim in both its forms: records the outcome records (outcomes_settle), then claims n jobs (claim_take, or claim_by_queue when distributed).';

-- Protocol 3: the outcomes as one JSON array of skiplock.outcome objects.
CREATE FUNCTION skiplock.record_claim(outcomes jsonb, owner text, kinds text[], queues text[],
    n integer, lease interval, after_priority integer DEFAULT NULL,
    after_run_at_us bigint DEFAULT NULL, after_id bigint DEFAULT NULL,
    wait_hints boolean DEFAULT false)
RETURNS SETOF skiplock.exchange_row
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN QUERY SELECT * FROM skiplock.exchange(skiplock.outcomes_read(outcomes), owner, kinds,
                 queues, n, lease, after_priority, after_run_at_us, after_id, wait_hints);
END
$fn$;
COMMENT ON FUNCTION skiplock.record_claim(jsonb, text, text[], text[], integer, interval, integer,
                                          bigint, bigint, boolean) IS
  'record outcomes, then claim, in one call (protocol 3): outcomes is a JSON array of skiplock.outcome objects; rows tagged recorded / claimed (and, with wait_hints, wait: when a limit may next have room); n = 0 records only';

CREATE FUNCTION skiplock.record(outcomes jsonb) RETURNS SETOF skiplock.recorded_outcome
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN QUERY
    SELECT x.id, x.state, x.run_at, x.delay_ms
      FROM skiplock.exchange(skiplock.outcomes_read(outcomes), NULL, NULL, NULL, 0, NULL, NULL,
                             NULL, NULL, false) x;
END
$fn$;
COMMENT ON FUNCTION skiplock.record(jsonb) IS
  'Records a batch of outcomes (protocol 3: a JSON array of skiplock.outcome objects), each fenced by its handle; one row per outcome accepted.';

-- Protocol 2's arrays, kept for one release: checked as before, then the
-- same body as protocol 3's.
CREATE OR REPLACE FUNCTION skiplock.record_claim(ids bigint[], fencings bigint[], outcomes text[],
    results jsonb[], errors text[], retry_after_ms bigint[], deferred boolean[],
    backoffs text[], backoff_bases_ms bigint[], backoff_caps_ms bigint[], owner text,
    kinds text[], queues text[], n integer, lease interval, after_priority integer,
    after_run_at_us bigint, after_id bigint, job_queues text[], wait_hints boolean)
RETURNS SETOF skiplock.exchange_row
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  PERFORM skiplock.check_record_args(ids, fencings, outcomes, results, errors, retry_after_ms,
                                     deferred, backoffs, backoff_bases_ms, backoff_caps_ms,
                                     job_queues);
  RETURN QUERY SELECT * FROM skiplock.exchange(
    skiplock.outcomes_of(ids, fencings, outcomes, results, errors, retry_after_ms, deferred,
                         backoffs, backoff_bases_ms, backoff_caps_ms, job_queues),
    owner, kinds, queues, n, lease, after_priority, after_run_at_us, after_id, wait_hints);
END
$fn$;
COMMENT ON FUNCTION skiplock.record_claim(bigint[], bigint[], text[], jsonb[], text[], bigint[],
    boolean[], text[], bigint[], bigint[], text, text[], text[], integer, interval, integer,
    bigint, bigint, text[], boolean) IS
  'record outcomes, then claim, in one call (protocol 2: the outcomes as eleven parallel arrays; kept for one release, protocol 3 takes them as JSON): rows tagged recorded / claimed / wait; n = 0 records only';

-- The arrays' statement of steps 0027 and 0028, for record_outcomes_p1.
CREATE OR REPLACE FUNCTION skiplock.record_outcomes(ids bigint[], fencings bigint[],
    outcomes text[], results jsonb[], errors text[], retry_after_ms bigint[],
    deferred boolean[], backoffs text[], backoff_bases_ms bigint[], backoff_caps_ms bigint[],
    job_queues text[])
RETURNS TABLE(id bigint, kind text, state text, run_at timestamptz, outcome text,
              delay_ms bigint)
LANGUAGE plpgsql AS $fn$
BEGIN
  RETURN QUERY SELECT * FROM skiplock.outcomes_record(skiplock.outcomes_of(ids, fencings,
                 outcomes, results, errors, retry_after_ms, deferred, backoffs,
                 backoff_bases_ms, backoff_caps_ms, job_queues));
END
$fn$;

CREATE OR REPLACE FUNCTION skiplock.protocol_version() RETURNS integer
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$ SELECT 3 $fn$;
COMMENT ON FUNCTION skiplock.protocol_version() IS
  'The worker protocol the schema speaks: 3, record and record_claim take the outcomes as one JSON array of skiplock.outcome objects (the job handle is (queue, id, fencing) since 2).';

-- Every role may read the bound, as it reads payload_max.
INSERT INTO skiplock.every_role_functions (name) VALUES ('outcomes_max');

-- New functions are executable by PUBLIC until revoked; grant_role gives
-- the workers the new record and record_claim (SECURITY DEFINER) again.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;
SELECT skiplock.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);
