-- skiplock schema step 0028: skiplock spreads its own tables over a Citus
-- cluster (skiplock init --distributed, docs/scaling.md).
--
-- Nothing changes on a plain PostgreSQL database: the layout stays 'local'
-- until skiplock.distribute() is called, by the schema's owner, on a
-- database with the citus extension.  distribute() then, once:
--
--   * drops the two notification triggers of skiplock.jobs (Citus refuses
--     to distribute a table with triggers); enqueue_many and rescue send
--     the NOTIFY themselves on this layout;
--   * makes the key of jobs (queue, id), with a plain index on id, and the
--     unique keys unique per (queue, unique_key);
--   * distributes jobs by queue, finished_jobs colocated with it, makes
--     retention, breakers and breaker_events reference tables, and sends
--     the pure functions that run inside a shard's statement to the
--     workers; every other table stays on the coordinator;
--   * records the layout in skiplock.layout.
--
-- The live path's functions keep their signatures.  Each looks at the
-- layout once and, when distributed, runs one statement per queue
-- (j.queue = a value, so that Citus sends it to one shard) with now()
-- taken into variables beforehand: Citus refuses STABLE functions with
-- column references in UPDATE, non-IMMUTABLE RETURNING expressions, FOR
-- UPDATE over several shards and joins of a reference table inside an
-- outcome.  On the local layout each runs the statements it ran before.

CREATE TABLE skiplock.layout (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),
  distributed boolean NOT NULL DEFAULT false,
  changed_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO skiplock.layout DEFAULT VALUES;

COMMENT ON TABLE skiplock.layout IS
  'One row: whether skiplock.distribute() spread jobs and finished_jobs over a Citus cluster by queue, and when.';

CREATE FUNCTION skiplock.is_distributed() RETURNS boolean
LANGUAGE sql STABLE AS $fn$
  SELECT coalesce((SELECT l.distributed FROM skiplock.layout l), false)
$fn$;

COMMENT ON FUNCTION skiplock.is_distributed() IS
  'Internal: true once skiplock.distribute() spread the jobs over a Citus cluster by queue.';

-- The error history as in step 0013, with the time given as a value:
-- IMMUTABLE, so that Citus runs it inside an UPDATE on a shard.
CREATE FUNCTION skiplock.errors_append(errors jsonb, attempt integer, err text, at jsonb)
RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $fn$
  SELECT CASE WHEN err IS NULL THEN errors
              ELSE (CASE WHEN jsonb_array_length(errors) >= 20 THEN errors - 0 ELSE errors END)
                   || jsonb_build_array(jsonb_build_object(
                        'attempt', attempt, 'at', at,
                        'error', CASE WHEN length(err) <= 8192 THEN err
                                      ELSE left(err, 8192) || format(E'\n… (%s more characters cut)',
                                                                     length(err) - 8192) END)) END
$fn$;

COMMENT ON FUNCTION skiplock.errors_append(jsonb, integer, text, jsonb) IS
  'Internal: errors_append with the time as a JSON value (to_jsonb(now()) of the caller), IMMUTABLE for statements on Citus shards.';

-- How long a finished job of a queue in a state is kept, read once per
-- queue: keep is NULL for forever; kept is false when it is not kept.
CREATE FUNCTION skiplock.keep_of(p_queue text, p_state text, OUT keep interval,
                                 OUT kept boolean)
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  SELECT r.keep INTO keep FROM skiplock.retention r
   WHERE r.state = p_state AND r.queue IN (p_queue, '*')
   ORDER BY r.queue = '*' LIMIT 1;
  kept := FOUND AND (keep IS NULL OR keep > interval '0');
END
$fn$;

COMMENT ON FUNCTION skiplock.keep_of(text, text) IS
  'Internal: the retention of a queue''s finished jobs in a state (keep NULL: forever; kept false: not kept), read before a statement on Citus.';

CREATE FUNCTION skiplock.distribute() RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  f text;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
    RAISE EXCEPTION 'distribute: the citus extension is not installed in this database'
      USING ERRCODE = '0A000',
            HINT = 'CREATE EXTENSION citus and add the worker nodes first (docs/scaling.md).';
  END IF;
  PERFORM 1 FROM skiplock.layout FOR UPDATE;
  IF skiplock.is_distributed() THEN
    RETURN false;
  END IF;
  -- reference tables after distributed ones in one transaction
  PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
  DROP TRIGGER IF EXISTS jobs_notify_available ON skiplock.jobs;
  DROP TRIGGER IF EXISTS jobs_notify_insert ON skiplock.jobs;
  ALTER TABLE skiplock.jobs DROP CONSTRAINT jobs_pkey;
  ALTER TABLE skiplock.jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (queue, id);
  CREATE INDEX jobs_id_idx ON skiplock.jobs (id);
  DROP INDEX skiplock.jobs_unique_key_idx;
  CREATE UNIQUE INDEX jobs_unique_key_idx ON skiplock.jobs (queue, unique_key)
   WHERE unique_key IS NOT NULL AND state IN ('available', 'running');
  CREATE INDEX jobs_queue_claim_idx ON skiplock.jobs (queue, priority DESC, run_at, id)
   WHERE state = 'available';
  PERFORM create_distributed_table('skiplock.jobs', 'queue');
  PERFORM create_distributed_table('skiplock.finished_jobs', 'queue',
                                   colocate_with => 'skiplock.jobs');
  PERFORM create_reference_table('skiplock.retention');
  PERFORM create_reference_table('skiplock.breakers');
  PERFORM create_reference_table('skiplock.breaker_events');
  -- the functions a statement on a shard calls
  FOREACH f IN ARRAY ARRAY['skiplock.errors_append(jsonb, integer, text, jsonb)',
                           'skiplock.backoff_delay(text, integer, bigint, bigint, bigint, '
                             'double precision)',
                           'skiplock.retry_delay_ms(integer, bigint, text, bigint, bigint, '
                             'bigint, boolean, text, bigint, bigint, double precision, '
                             'double precision)',
                           'skiplock.breaker_step(skiplock.breakers, integer, integer)'] LOOP
    PERFORM create_distributed_function(f::regprocedure);
  END LOOP;
  UPDATE skiplock.layout SET distributed = true, changed_at = now();
  RETURN true;
END
$fn$;

COMMENT ON FUNCTION skiplock.distribute() IS
  'Owner only, Citus only: distributes jobs and finished_jobs by queue (key (queue, id), unique keys per queue, no triggers), retention and breakers as reference tables; true when it did, false when already done.';

-- The claim on the distributed layout: one statement per queue.
CREATE FUNCTION skiplock.claim_by_queue(p_owner text, p_kinds text[], p_queues text[],
    p_n integer, p_lease interval, p_after_priority integer, p_after_run_at_us bigint,
    p_after_id bigint)
RETURNS SETOF skiplock.exchange_row
LANGUAGE plpgsql AS $fn$
DECLARE
  v_kinds text[] := p_kinds;
  v_skip text[] := '{}';
  v_queues text[];
  v_q text;
  v_ids bigint[];
  v_got int := 0;
  v_m int;
  v_keyset boolean;
  v_after timestamptz;
  v_now timestamptz := now();
  v_expires timestamptz := now() + p_lease;
BEGIN
  PERFORM skiplock.check_claim_args(p_owner, p_kinds, p_n, p_lease);
  PERFORM skiplock.check_claim_names(p_kinds, p_queues);
  IF EXISTS (SELECT 1 FROM skiplock.pauses) THEN
    v_kinds := ARRAY(SELECT unnest(p_kinds) EXCEPT
                     SELECT p.kind FROM skiplock.pauses p WHERE p.queue = '*');
    v_skip := ARRAY(SELECT p.queue FROM skiplock.pauses p WHERE p.kind = '*');
  END IF;
  -- kinds whose breaker is not closed are left out (no probes yet here)
  IF EXISTS (SELECT 1 FROM skiplock.breakers b
              WHERE b.kind = ANY (v_kinds) AND b.state <> 'closed') THEN
    v_kinds := ARRAY(SELECT unnest(v_kinds) EXCEPT
                     SELECT b.kind FROM skiplock.breakers b
                      WHERE b.kind = ANY (v_kinds) AND b.state <> 'closed');
  END IF;
  IF p_queues IS NULL THEN
    -- no queue named: the queues with due work (one task per shard)
    v_queues := ARRAY(SELECT DISTINCT j.queue FROM skiplock.jobs j
                       WHERE j.state = 'available' AND j.run_at <= v_now
                         AND j.kind = ANY (v_kinds));
  ELSE
    v_queues := p_queues;
  END IF;
  -- a random order, so that no queue waits for another to be empty
  v_queues := ARRAY(SELECT DISTINCT ON (q) q FROM unnest(v_queues) q
                     WHERE q <> ALL (v_skip));
  v_queues := ARRAY(SELECT q FROM unnest(v_queues) q ORDER BY random());
  v_keyset := p_after_id IS NOT NULL AND cardinality(v_queues) = 1;
  v_after := timestamptz 'epoch' + p_after_run_at_us * interval '1 microsecond';
  FOREACH v_q IN ARRAY v_queues LOOP
    v_m := p_n - v_got;
    EXIT WHEN v_m <= 0;
    IF v_keyset THEN
      v_ids := ARRAY(
        SELECT a.id FROM (
          SELECT j.id FROM skiplock.jobs j
           WHERE j.queue = v_q AND j.state = 'available' AND j.run_at <= v_now
             AND j.kind = ANY (v_kinds)
             AND j.priority = p_after_priority AND (j.run_at, j.id) > (v_after, p_after_id)
           ORDER BY j.priority DESC, j.run_at, j.id LIMIT v_m FOR UPDATE SKIP LOCKED) a
        UNION ALL
        SELECT b.id FROM (
          SELECT j.id FROM skiplock.jobs j
           WHERE j.queue = v_q AND j.state = 'available' AND j.run_at <= v_now
             AND j.kind = ANY (v_kinds) AND j.priority < p_after_priority
           ORDER BY j.priority DESC, j.run_at, j.id LIMIT v_m FOR UPDATE SKIP LOCKED) b
        LIMIT v_m);
    ELSE
      v_ids := ARRAY(
        SELECT j.id FROM skiplock.jobs j
         WHERE j.queue = v_q AND j.state = 'available' AND j.run_at <= v_now
           AND j.kind = ANY (v_kinds)
         ORDER BY j.priority DESC, j.run_at, j.id LIMIT v_m FOR UPDATE SKIP LOCKED);
    END IF;
    CONTINUE WHEN cardinality(v_ids) = 0;
    RETURN QUERY
      UPDATE skiplock.jobs j
         SET state = 'running', attempt = j.attempt + 1, fencing = j.fencing + 1,
             lease_owner = p_owner, lease_expires_at = v_expires, attempted_at = v_now
       WHERE j.queue = v_q AND j.id = ANY (v_ids)
      RETURNING 'claimed'::text, j.id, 'running'::text, j.run_at, NULL::bigint, j.queue,
                j.kind, j.payload, j.attempt, j.max_attempts, j.fencing, j.lease_expires_at,
                coalesce(j.timeout_ms, 0), j.priority,
                (extract(epoch FROM j.run_at AT TIME ZONE 'UTC') * 1000000)::bigint;
    v_got := v_got + cardinality(v_ids);
  END LOOP;
  IF v_got = 0 AND p_n > 0 THEN
    PERFORM skiplock.worker_idle(p_owner, p_kinds, p_queues);
  END IF;
END
$fn$;

COMMENT ON FUNCTION skiplock.claim_by_queue(text, text[], text[], integer, interval, integer,
    bigint, bigint) IS
  'Internal: the claim of record_claim on the distributed layout, one locking statement per queue (queues in random order; priority holds within a queue).';

-- The outcomes on the distributed layout: one statement per queue.
CREATE FUNCTION skiplock.record_by_queue(ids bigint[], fencings bigint[], outcomes text[],
    results jsonb[], errors text[], retry_after_ms bigint[], deferred boolean[],
    backoffs text[], backoff_bases_ms bigint[], backoff_caps_ms bigint[], job_queues text[])
RETURNS TABLE(id bigint, kind text, state text, run_at timestamptz, outcome text,
              delay_ms bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_now timestamptz := now();
  v_now_utc timestamp := now() AT TIME ZONE 'UTC';
  v_at jsonb := to_jsonb(now());
  v_n int := cardinality(ids);
  v_r float8[] := ARRAY(SELECT random() FROM generate_series(1, cardinality(ids)));
  v_unknown bigint[];
  v_queues text[];
  v_q text;
  v_kc interval;
  v_kd interval;
  v_hc boolean;
  v_hd boolean;
  v_ec timestamptz;
  v_ed timestamptz;
BEGIN
  -- handles without a queue (protocol 1): found on every shard
  v_unknown := ARRAY(SELECT t.i FROM unnest(ids, job_queues) AS t(i, q) WHERE t.q IS NULL);
  v_queues := ARRAY(SELECT DISTINCT t.q FROM unnest(job_queues) AS t(q) WHERE t.q IS NOT NULL);
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
      SELECT t.*, v_n AS n
        FROM unnest(ids, fencings, outcomes, results, errors, retry_after_ms, deferred,
                    backoffs, backoff_bases_ms, backoff_caps_ms, job_queues, v_r)
             WITH ORDINALITY AS t(id, fencing, outcome, result, error, asked_ms, deferred,
                                  backoff, base_ms, cap_ms, queue, r, ord)
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
      SELECT j.id, j.fencing, v.error,
             skiplock.retry_delay_ms(j.attempt, j.last_delay_ms, j.backoff, j.backoff_base_ms,
                                     j.backoff_cap_ms, v.asked_ms, v.deferred, v.backoff,
                                     v.base_ms, v.cap_ms, v.r, (v.ord - 1 + v.r) / v.n)
               AS delay_ms, v.outcome
        FROM skiplock.jobs j JOIN reported v ON j.id = v.id AND j.fencing = v.fencing
       WHERE j.queue = v_q AND j.state = 'running' COLLATE "C"
         AND v.outcome IN ('retry', 'fail') AND j.attempt < j.max_attempts),
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

COMMENT ON FUNCTION skiplock.record_by_queue(bigint[], bigint[], text[], jsonb[], text[],
    bigint[], boolean[], text[], bigint[], bigint[], text[]) IS
  'Internal: record_outcomes on the distributed layout, one statement per queue with the times and the retention read beforehand.';
-- As in step 0027, and on the distributed layout record_by_queue.
CREATE OR REPLACE FUNCTION skiplock.record_outcomes(ids bigint[], fencings bigint[], outcomes text[],
    results jsonb[], errors text[], retry_after_ms bigint[], deferred boolean[],
    backoffs text[], backoff_bases_ms bigint[], backoff_caps_ms bigint[], job_queues text[])
RETURNS TABLE(id bigint, kind text, state text, run_at timestamptz, outcome text,
              delay_ms bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
  IF skiplock.is_distributed() THEN
    RETURN QUERY SELECT * FROM skiplock.record_by_queue(ids, fencings, outcomes, results, errors,
                   retry_after_ms, deferred, backoffs, backoff_bases_ms, backoff_caps_ms,
                   job_queues);
    RETURN;
  END IF;
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
                  record_outcomes.backoff_caps_ms, record_outcomes.job_queues)
           WITH ORDINALITY AS t(id, fencing, outcome, result, error, asked_ms, deferred,
                                backoff, base_ms, cap_ms, queue, ord)),
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
    -- the rows ended leaves alone: a retry or failure with attempts left
    SELECT j.id, j.fencing, v.error,
           skiplock.retry_delay_ms(j.attempt, j.last_delay_ms, j.backoff, j.backoff_base_ms,
                                   j.backoff_cap_ms, v.asked_ms, v.deferred, v.backoff,
                                   v.base_ms, v.cap_ms, v.r, (v.ord - 1 + v.r) / v.n)
             AS delay_ms, v.outcome
      FROM skiplock.jobs j JOIN reported v ON j.id = v.id AND j.fencing = v.fencing
     WHERE j.state = 'running' COLLATE "C" AND v.outcome IN ('retry', 'fail')
       AND (v.queue IS NULL OR j.queue = v.queue)
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

-- As in step 0027, and on the distributed layout claim_by_queue.
CREATE OR REPLACE FUNCTION skiplock.record_claim(ids bigint[], fencings bigint[], outcomes text[],
    results jsonb[], errors text[], retry_after_ms bigint[], deferred boolean[],
    backoffs text[], backoff_bases_ms bigint[], backoff_caps_ms bigint[], owner text,
    kinds text[], queues text[], n integer, lease interval,
    after_priority integer DEFAULT NULL, after_run_at_us bigint DEFAULT NULL,
    after_id bigint DEFAULT NULL, job_queues text[] DEFAULT NULL)
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
                                     deferred, backoffs, backoff_bases_ms, backoff_caps_ms,
                                     job_queues);
  -- 1. the outcomes, each recorded once
  IF cardinality(record_claim.ids) > 0 AND NOT EXISTS (SELECT 1 FROM skiplock.breakers) THEN
    -- no breaker anywhere: nothing to count, the rows go straight out
    RETURN QUERY
    SELECT 'recorded'::text, o.id, o.state, o.run_at, o.delay_ms, NULL::text, NULL::text,
           NULL::jsonb, NULL::int, NULL::int, NULL::bigint, NULL::timestamptz, NULL::int,
           NULL::int, NULL::bigint
      FROM skiplock.record_outcomes(ids, fencings, outcomes, results, errors, retry_after_ms,
                                    deferred, backoffs, backoff_bases_ms, backoff_caps_ms,
                                    job_queues) o;
  ELSIF cardinality(record_claim.ids) > 0 THEN
    SELECT array_agg(o.id), array_agg(o.kind), array_agg(o.state), array_agg(o.run_at),
           array_agg(o.outcome), array_agg(o.delay_ms)
      INTO v_ids, v_kinds, v_states, v_run_at, v_outcomes, v_delays
      FROM skiplock.record_outcomes(ids, fencings, outcomes, results, errors, retry_after_ms,
                                    deferred, backoffs, backoff_bases_ms, backoff_caps_ms,
                                    job_queues) o;
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
  IF skiplock.is_distributed() THEN
    RETURN QUERY SELECT * FROM skiplock.claim_by_queue(owner, kinds, queues, n, lease,
                   after_priority, after_run_at_us, after_id);
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

-- As before, and on the distributed layout one statement per queue
-- with expired leases (found first, without a lock, on every shard), and
-- a NOTIFY when jobs became available (the trigger is gone there).
CREATE OR REPLACE FUNCTION skiplock.rescue(n integer DEFAULT 1000)
RETURNS SETOF skiplock.rescued_job
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_ids bigint[];
  v_states text[];
  v_queues text[];
  v_kinds text[];
  v_q text;
  v_now timestamptz := now();
  v_at jsonb := to_jsonb(now());
  v_i bigint[];
  v_s text[];
  v_qs text[];
  v_k text[];
BEGIN
  IF rescue.n IS NULL OR rescue.n NOT BETWEEN 1 AND 100000 THEN
    RAISE EXCEPTION 'rescue: n must be 1 to 100000' USING ERRCODE = '22023';
  END IF;
  IF NOT skiplock.is_distributed() THEN
    WITH r AS (
      SELECT j.id FROM skiplock.jobs j
       WHERE j.state = 'running' AND j.lease_expires_at < now()
       ORDER BY j.lease_expires_at LIMIT rescue.n FOR UPDATE SKIP LOCKED),
    u AS (
      UPDATE skiplock.jobs j SET
        state = CASE WHEN j.attempt >= j.max_attempts THEN 'discarded' ELSE 'available' END,
        finished_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
        run_at = now(), lease_owner = NULL, lease_expires_at = NULL,
        errors = skiplock.errors_append(j.errors, j.attempt, 'lease expired: '
                   || coalesce(j.lease_owner, '?') || ' stopped renewing it', now())
        FROM r WHERE j.id = r.id
      RETURNING j.id, j.state, j.queue, j.kind)
    SELECT array_agg(u.id), array_agg(u.state), array_agg(u.queue), array_agg(u.kind)
      INTO v_ids, v_states, v_queues, v_kinds FROM u;
  ELSE
    v_ids := '{}';
    v_states := '{}';
    v_queues := '{}';
    v_kinds := '{}';
    FOR v_q IN SELECT DISTINCT j.queue FROM skiplock.jobs j
                WHERE j.state = 'running' AND j.lease_expires_at < v_now LOOP
      EXIT WHEN cardinality(v_ids) >= rescue.n;
      WITH r AS (
        SELECT j.id FROM skiplock.jobs j
         WHERE j.queue = v_q AND j.state = 'running' AND j.lease_expires_at < v_now
         ORDER BY j.lease_expires_at LIMIT rescue.n - cardinality(v_ids)
           FOR UPDATE SKIP LOCKED),
      u AS (
        UPDATE skiplock.jobs j SET
          state = CASE WHEN j.attempt >= j.max_attempts THEN 'discarded' ELSE 'available' END,
          finished_at = CASE WHEN j.attempt >= j.max_attempts THEN v_now END,
          run_at = v_now, lease_owner = NULL, lease_expires_at = NULL,
          errors = skiplock.errors_append(j.errors, j.attempt, 'lease expired: '
                     || coalesce(j.lease_owner, '?') || ' stopped renewing it', v_at)
          FROM r WHERE j.queue = v_q AND j.id = r.id
        RETURNING j.id, j.state, j.queue, j.kind)
      SELECT array_agg(u.id), array_agg(u.state), array_agg(u.queue), array_agg(u.kind)
        INTO v_i, v_s, v_qs, v_k FROM u;
      v_ids := v_ids || coalesce(v_i, '{}');
      v_states := v_states || coalesce(v_s, '{}');
      v_queues := v_queues || coalesce(v_qs, '{}');
      v_kinds := v_kinds || coalesce(v_k, '{}');
    END LOOP;
    IF 'available' = ANY (v_states)
       AND coalesce(current_setting('skiplock.notify', true), '') <> 'off' THEN
      PERFORM pg_notify('skiplock_jobs', '');
    END IF;
  END IF;
  PERFORM skiplock.move_finished(ARRAY(SELECT t.i FROM unnest(v_ids, v_states) AS t(i, s)
                                        WHERE t.s = 'discarded'));
  RETURN QUERY SELECT * FROM unnest(v_ids, v_states, v_queues, v_kinds);
END
$fn$;

-- As in step 0013, in plpgsql (Citus plans no SQL function with
-- parameters over a distributed table), and on the distributed layout one
-- statement per queue with the retention read beforehand.
CREATE OR REPLACE FUNCTION skiplock.move_finished(p_ids bigint[]) RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
  v_n int := 0;
  v_m int;
  v_q text;
  v_now timestamptz := now();
  v_kc interval;
  v_kd interval;
  v_kx interval;
  v_hc boolean;
  v_hd boolean;
  v_hx boolean;
BEGIN
  IF NOT skiplock.is_distributed() THEN
    WITH m AS (
      DELETE FROM skiplock.jobs j
       WHERE j.id = ANY (p_ids) AND j.state IN ('completed', 'discarded', 'cancelled')
      RETURNING j.*),
    k AS (
      INSERT INTO skiplock.finished_jobs
      SELECT m.*, x.expires_at
        FROM m CROSS JOIN LATERAL (SELECT skiplock.keep_until(m.queue, m.state,
                                            coalesce(m.finished_at, now())) AS expires_at) x
       WHERE x.expires_at > now()
      RETURNING 1)
    SELECT count(*)::int INTO v_n FROM m;
    RETURN v_n;
  END IF;
  IF coalesce(cardinality(p_ids), 0) = 0 THEN
    RETURN 0;
  END IF;
  FOR v_q IN SELECT DISTINCT j.queue FROM skiplock.jobs j WHERE j.id = ANY (p_ids) LOOP
    SELECT k.keep, k.kept INTO v_kc, v_hc FROM skiplock.keep_of(v_q, 'completed') k;
    SELECT k.keep, k.kept INTO v_kd, v_hd FROM skiplock.keep_of(v_q, 'discarded') k;
    SELECT k.keep, k.kept INTO v_kx, v_hx FROM skiplock.keep_of(v_q, 'cancelled') k;
    WITH m AS (
      DELETE FROM skiplock.jobs j
       WHERE j.queue = v_q AND j.id = ANY (p_ids)
         AND j.state IN ('completed', 'discarded', 'cancelled')
      RETURNING j.*),
    k AS (
      INSERT INTO skiplock.finished_jobs
      SELECT m.*, e.expires_at
        FROM m
       CROSS JOIN LATERAL (
         SELECT CASE m.state WHEN 'completed' THEN v_kc WHEN 'discarded' THEN v_kd
                             ELSE v_kx END AS keep,
                CASE m.state WHEN 'completed' THEN v_hc WHEN 'discarded' THEN v_hd
                             ELSE v_hx END AS kept) r
       CROSS JOIN LATERAL (
         SELECT CASE WHEN r.keep IS NULL THEN timestamptz 'infinity'
                     ELSE ((coalesce(m.finished_at, v_now) AT TIME ZONE 'UTC') + r.keep)
                          AT TIME ZONE 'UTC' END AS expires_at) e
       WHERE r.kept AND e.expires_at > v_now
      RETURNING 1)
    SELECT count(*)::int INTO v_m FROM m;
    v_n := v_n + v_m;
  END LOOP;
  RETURN v_n;
END
$fn$;

-- As in step 0027; on the distributed layout a handle without a queue is
-- looked up first without a lock, then locked under its queue.
CREATE OR REPLACE FUNCTION skiplock.job_fence(id bigint, fencing bigint, queue text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_fencing bigint;
  v_state text;
  v_queue text := job_fence.queue;
BEGIN
  IF NOT skiplock.is_distributed() THEN
    SELECT j.fencing, j.state INTO v_fencing, v_state
      FROM skiplock.jobs j
     WHERE j.id = job_fence.id AND (job_fence.queue IS NULL OR j.queue = job_fence.queue)
       FOR SHARE;
  ELSE
    IF v_queue IS NULL THEN
      SELECT j.queue INTO v_queue FROM skiplock.jobs j WHERE j.id = job_fence.id;
    END IF;
    SELECT j.fencing, j.state INTO v_fencing, v_state
      FROM skiplock.jobs j
     WHERE j.queue = v_queue AND j.id = job_fence.id
       FOR SHARE;
  END IF;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'job % does not exist%', job_fence.id,
                    coalesce(format(' in queue %L', job_fence.queue), '')
      USING ERRCODE = 'SK001';
  END IF;
  IF v_fencing IS DISTINCT FROM job_fence.fencing OR v_state <> 'running' THEN
    RAISE EXCEPTION 'stale claim of job % (token %)', job_fence.id,
                    coalesce(job_fence.fencing::text, 'NULL')
      USING ERRCODE = 'SK001',
            DETAIL = format('The job is %s under token %s. This transaction is aborted so '
                            'that an owner that lost the job changes nothing.',
                            v_state, v_fencing);
  END IF;
END
$fn$;

-- As in step 0027, with the queue looked up first on the distributed layout.
CREATE OR REPLACE FUNCTION skiplock.job_complete(id bigint, fencing bigint,
                                                 result jsonb DEFAULT NULL,
                                                 queue text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_fencing bigint;
  v_state text;
  v_queue text := job_complete.queue;
BEGIN
  IF job_complete.id IS NULL OR job_complete.fencing IS NULL THEN
    RAISE EXCEPTION 'job_complete: id and fencing must not be NULL' USING ERRCODE = '22004';
  END IF;
  IF NOT skiplock.is_distributed() THEN
    SELECT j.fencing, j.state INTO v_fencing, v_state
      FROM skiplock.jobs j
     WHERE j.id = job_complete.id
       AND (job_complete.queue IS NULL OR j.queue = job_complete.queue)
       FOR UPDATE;
  ELSE
    IF v_queue IS NULL THEN
      SELECT j.queue INTO v_queue FROM skiplock.jobs j WHERE j.id = job_complete.id;
    END IF;
    SELECT j.fencing, j.state INTO v_fencing, v_state
      FROM skiplock.jobs j
     WHERE j.queue = v_queue AND j.id = job_complete.id
       FOR UPDATE;
  END IF;
  IF NOT FOUND THEN
    IF EXISTS (SELECT 1 FROM skiplock.finished_jobs f
                WHERE f.id = job_complete.id AND f.fencing = job_complete.fencing
                  AND (job_complete.queue IS NULL OR f.queue = job_complete.queue)
                  AND f.state = 'completed') THEN
      RAISE EXCEPTION 'job % was already completed under token %', job_complete.id,
                      job_complete.fencing
        USING ERRCODE = 'SK001',
              DETAIL = 'An earlier transaction of this claim committed its completion; this '
                       'one is aborted so that its effect is not applied twice.';
    END IF;
    RAISE EXCEPTION 'job % does not exist%', job_complete.id,
                    coalesce(format(' in queue %L', job_complete.queue), '')
      USING ERRCODE = 'SK001';
  END IF;
  IF v_fencing <> job_complete.fencing OR v_state <> 'running' THEN
    RAISE EXCEPTION 'stale claim of job % (token %)', job_complete.id, job_complete.fencing
      USING ERRCODE = 'SK001',
            DETAIL = format('The job is %s under token %s. This transaction is aborted so '
                            'that an owner that lost the job changes nothing.',
                            v_state, v_fencing);
  END IF;
  PERFORM 1 FROM skiplock.record(ARRAY[job_complete.id], ARRAY[job_complete.fencing],
                                 ARRAY['ok'], ARRAY[job_complete.result],
                                 job_queues => ARRAY[coalesce(v_queue, job_complete.queue)]);
END
$fn$;

-- As before, and on the distributed layout a NOTIFY of its own: the
-- trigger jobs_notify_insert is gone there.
CREATE OR REPLACE FUNCTION skiplock.enqueue_many(p_token text, p_kinds text[], p_payloads jsonb[],
    p_queues text[], p_run_ats timestamptz[], p_delays_ms bigint[], p_priorities integer[],
    p_unique_keys text[], p_max_attempts integer[], p_timeouts integer[],
    p_backoff_bases integer[], p_backoff_caps integer[], p_backoffs text[] DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_ids bigint[];
BEGIN
  PERFORM skiplock.check_job_times(r, d)
     FROM unnest(p_run_ats, p_delays_ms) AS t(r, d)
    WHERE NOT (r >= timestamptz '1970-01-01 00:00+00' AND r < timestamptz '2200-01-01 00:00+00')
       OR d < 0 OR d > 3153600000000;
  PERFORM skiplock.check_job_input(p_kinds, p_queues, p_payloads);
  v_ids := skiplock.enqueue_many_unchecked(p_token, p_kinds, p_payloads, p_queues, p_run_ats,
             p_delays_ms, p_priorities, p_unique_keys, p_max_attempts, p_timeouts,
             p_backoff_bases, p_backoff_caps, p_backoffs);
  IF skiplock.is_distributed()
     AND coalesce(current_setting('skiplock.notify', true), '') <> 'off' THEN
    PERFORM pg_notify('skiplock_jobs', '');
  END IF;
  RETURN v_ids;
END
$fn$;

-- As before, and on the distributed layout the holder
-- of a unique key looked for in the job's own queue (keys are per queue).
CREATE OR REPLACE FUNCTION skiplock.enqueue_one(p_kind text, p_payload jsonb, p_queue text,
    p_run_at timestamptz, p_priority integer, p_unique_key text, p_max_attempts integer,
    p_timeout_ms integer, p_backoff_base_ms integer, p_backoff_cap_ms integer)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_id bigint;
  v_dist boolean := skiplock.is_distributed();
BEGIN
  IF p_kind IS NULL OR length(p_kind) NOT BETWEEN 1 AND 128 THEN
    RAISE EXCEPTION 'job kind must be 1 to 128 characters' USING ERRCODE = '22023';
  END IF;
  IF p_queue IS NULL OR length(p_queue) NOT BETWEEN 1 AND 128 THEN
    RAISE EXCEPTION 'queue name must be 1 to 128 characters' USING ERRCODE = '22023';
  END IF;
  IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
    RAISE EXCEPTION 'max_attempts must be at least 1' USING ERRCODE = '22023';
  END IF;
  PERFORM skiplock.check_job_times(p_run_at, NULL);
  FOR i IN 1..10 LOOP
    INSERT INTO skiplock.jobs AS j (kind, payload, queue, run_at, priority, unique_key,
                                    max_attempts, timeout_ms, backoff_base_ms, backoff_cap_ms)
    VALUES (p_kind, coalesce(p_payload, '{}'), p_queue, coalesce(p_run_at, now()),
            coalesce(p_priority, 0), p_unique_key, p_max_attempts, p_timeout_ms,
            p_backoff_base_ms, p_backoff_cap_ms)
    ON CONFLICT DO NOTHING
    RETURNING j.id INTO v_id;
    IF v_id IS NOT NULL THEN
      RETURN v_id;
    END IF;
    IF v_dist THEN
      SELECT j.id INTO v_id FROM skiplock.jobs j
       WHERE j.queue = p_queue AND j.unique_key = p_unique_key
         AND j.state IN ('available', 'running');
    ELSE
      SELECT j.id INTO v_id FROM skiplock.jobs j
       WHERE j.unique_key = p_unique_key AND j.state IN ('available', 'running');
    END IF;
    IF v_id IS NOT NULL THEN
      RETURN v_id;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'unique key "%" is contended', p_unique_key USING ERRCODE = '40001';
END
$fn$;

-- The heartbeat on the distributed layout: per queue, lock the running
-- rows without waiting, then extend those whose token matches.
CREATE FUNCTION skiplock.heartbeat_by_queue(ids bigint[], fencings bigint[], lease interval,
                                            job_queues text[])
RETURNS SETOF skiplock.heartbeat_result
LANGUAGE plpgsql AS $fn$
DECLARE
  v_expires timestamptz := now() + lease;
  v_keys text[] := ARRAY(SELECT t.i || ':' || t.f FROM unnest(ids, fencings) AS t(i, f));
  v_unknown bigint[];
  v_queues text[];
  v_q text;
  v_locked bigint[];
  v_done text[] := '{}';
  v_running text[];
BEGIN
  v_unknown := ARRAY(SELECT t.i FROM unnest(ids, job_queues) AS t(i, q) WHERE t.q IS NULL);
  v_queues := ARRAY(SELECT DISTINCT t.q FROM unnest(job_queues) AS t(q) WHERE t.q IS NOT NULL);
  IF cardinality(v_unknown) > 0 THEN
    v_queues := v_queues || ARRAY(SELECT DISTINCT j.queue FROM skiplock.jobs j
                                   WHERE j.id = ANY (v_unknown));
  END IF;
  FOR v_q IN SELECT DISTINCT q FROM unnest(v_queues) q LOOP
    v_locked := ARRAY(SELECT t.i FROM unnest(ids, job_queues) AS t(i, q)
                       WHERE t.q IS NULL OR t.q = v_q);
    v_locked := ARRAY(
      SELECT j.id FROM skiplock.jobs j
       WHERE j.queue = v_q AND j.state = 'running' COLLATE "C" AND j.id = ANY (v_locked)
         FOR NO KEY UPDATE SKIP LOCKED);
    CONTINUE WHEN cardinality(v_locked) = 0;
    WITH u AS (
      UPDATE skiplock.jobs j SET lease_expires_at = v_expires
       WHERE j.queue = v_q AND j.id = ANY (v_locked)
         AND (j.id::text || ':' || j.fencing::text) = ANY (v_keys)
      RETURNING j.id::text || ':' || j.fencing::text AS k)
    SELECT v_done || coalesce(array_agg(u.k), '{}') INTO v_done FROM u;
  END LOOP;
  IF cardinality(v_done) < cardinality(ids) THEN
    -- a new statement: of the rest, those still running are held (locked)
    v_running := ARRAY(SELECT j.id::text || ':' || j.fencing::text FROM skiplock.jobs j
                        WHERE j.id = ANY (ids) AND j.state = 'running' COLLATE "C");
  END IF;
  RETURN QUERY
  SELECT t.i, t.k = ANY (v_done) OR t.k = ANY (coalesce(v_running, '{}')),
         NOT t.k = ANY (v_done) AND t.k = ANY (coalesce(v_running, '{}'))
    FROM unnest(ids, v_keys) WITH ORDINALITY AS t(i, k, ord)
   ORDER BY t.ord;
END
$fn$;

COMMENT ON FUNCTION skiplock.heartbeat_by_queue(bigint[], bigint[], interval, text[]) IS
  'Internal: heartbeat on the distributed layout, one locking statement per queue, never waiting.';

-- As in step 0027, and on the distributed layout heartbeat_by_queue.
CREATE OR REPLACE FUNCTION skiplock.heartbeat(ids bigint[], fencings bigint[],
                                   lease interval DEFAULT '30 seconds',
                                   job_queues text[] DEFAULT NULL)
RETURNS SETOF skiplock.heartbeat_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_extended boolean[];
BEGIN
  IF heartbeat.ids IS NULL OR heartbeat.fencings IS NULL OR heartbeat.lease IS NULL THEN
    RAISE EXCEPTION 'heartbeat: ids, fencings and lease must not be NULL' USING ERRCODE = '22004';
  END IF;
  IF cardinality(heartbeat.ids) <> cardinality(heartbeat.fencings)
     OR cardinality(heartbeat.ids) <> coalesce(cardinality(heartbeat.job_queues),
                                               cardinality(heartbeat.ids)) THEN
    RAISE EXCEPTION 'heartbeat: % ids but % fencings and % queues', cardinality(heartbeat.ids),
      cardinality(heartbeat.fencings), coalesce(cardinality(heartbeat.job_queues)::text, 'no')
      USING ERRCODE = '2202E';
  END IF;
  IF heartbeat.lease < interval '100 milliseconds' OR heartbeat.lease > interval '1 day' THEN
    RAISE EXCEPTION 'heartbeat: lease must be 100 ms to 1 day, got %', heartbeat.lease
      USING ERRCODE = '22023';
  END IF;
  IF skiplock.is_distributed() THEN
    RETURN QUERY SELECT * FROM skiplock.heartbeat_by_queue(ids, fencings, lease, job_queues);
    RETURN;
  END IF;
  -- Never waits: a row another transaction holds is skipped here.
  WITH v AS (SELECT * FROM unnest(heartbeat.ids, heartbeat.fencings, heartbeat.job_queues)
                           WITH ORDINALITY AS v(id, fencing, queue, ord)),
  l AS (SELECT j.id FROM skiplock.jobs j, (SELECT DISTINCT v.id, v.fencing, v.queue FROM v) d
         WHERE j.id = d.id AND j.fencing = d.fencing AND j.state = 'running' COLLATE "C"
           AND (d.queue IS NULL OR j.queue = d.queue)
           FOR NO KEY UPDATE OF j SKIP LOCKED),
  u AS (UPDATE skiplock.jobs j SET lease_expires_at = now() + heartbeat.lease
          FROM l WHERE j.id = l.id
        RETURNING j.id, j.fencing, j.queue)
  SELECT array_agg(u.id IS NOT NULL ORDER BY v.ord) INTO v_extended
    FROM v LEFT JOIN u ON u.id = v.id AND u.fencing = v.fencing
                      AND (v.queue IS NULL OR u.queue = v.queue);
  IF false <> ALL (v_extended) THEN
    RETURN QUERY SELECT v.id, true, false FROM unnest(heartbeat.ids) WITH ORDINALITY AS v(id, ord)
                  ORDER BY v.ord;
    RETURN;
  END IF;
  -- A new statement, a newer snapshot: of the claims not extended, those
  -- still current are held by a transaction (locked), the rest are lost.
  RETURN QUERY
  SELECT x.id, x.ok OR x.held, x.held
    FROM (SELECT v.id, v.ord, v.ok,
                 CASE WHEN v.ok THEN false ELSE EXISTS (
                   SELECT 1 FROM skiplock.jobs j WHERE j.id = v.id AND j.fencing = v.fencing
                      AND j.state = 'running' COLLATE "C"
                      AND (v.queue IS NULL OR j.queue = v.queue)) END AS held
            FROM unnest(heartbeat.ids, heartbeat.fencings, v_extended, heartbeat.job_queues)
                   WITH ORDINALITY AS v(id, fencing, ok, queue, ord) OFFSET 0) x
   ORDER BY x.ord;
END
$fn$;

-- As in step 0018, and on the distributed layout without FOR UPDATE over
-- every shard (move_finished deletes only rows still finished).
CREATE OR REPLACE FUNCTION skiplock.finished_act_legacy(p_batch integer) RETURNS bigint
LANGUAGE plpgsql AS $fn$
BEGIN
  IF EXISTS (SELECT 1 FROM skiplock.finished_area) THEN
    RETURN 0;
  END IF;
  IF skiplock.is_distributed() THEN
    RETURN skiplock.move_finished(ARRAY(
      SELECT j.id FROM skiplock.jobs j WHERE j.state IN ('completed', 'discarded', 'cancelled')
       ORDER BY j.finished_at LIMIT p_batch));
  END IF;
  RETURN skiplock.move_finished(ARRAY(
    SELECT j.id FROM skiplock.jobs j WHERE j.state IN ('completed', 'discarded', 'cancelled')
     ORDER BY j.finished_at LIMIT p_batch FOR UPDATE SKIP LOCKED));
END
$fn$;

-- As in step 0018, and on the distributed layout without ctid (Citus
-- plans no modification by ctid): the rows' ids first, then the delete.
CREATE OR REPLACE FUNCTION skiplock.finished_act_purge(p_batch integer) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_n bigint;
  v_ids bigint[];
BEGIN
  IF skiplock.is_distributed() THEN
    v_ids := ARRAY(SELECT x.id FROM skiplock.finished_jobs_default x
                    WHERE x.expires_at <= v_now LIMIT p_batch);
    DELETE FROM skiplock.finished_jobs_default d
     WHERE d.id = ANY (v_ids) AND d.expires_at <= v_now;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
  END IF;
  DELETE FROM skiplock.finished_jobs_default d WHERE d.ctid = ANY (ARRAY(
    SELECT x.ctid FROM skiplock.finished_jobs_default x WHERE x.expires_at <= v_now
     LIMIT p_batch));
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END
$fn$;

-- As in step 0018, and on the distributed layout without ctid.
CREATE OR REPLACE FUNCTION skiplock.finished_act_fill(p_batch integer) RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  t record;
  v_n bigint;
  v_ids bigint[];
BEGIN
  IF skiplock.is_distributed() THEN
    -- the local table and the distributed partition in separate statements
    FOR t IN SELECT s.name, s.lo, s.hi FROM skiplock.finished_tables s
              WHERE s.state = 'standalone' AND s.hi > clock_timestamp()
                AND EXISTS (SELECT 1 FROM skiplock.finished_area a
                             WHERE a.lo <= s.lo AND a.hi >= s.hi)
              ORDER BY s.lo LOOP
      v_ids := ARRAY(SELECT x.id FROM skiplock.finished_jobs_default x
                      WHERE x.expires_at >= t.lo AND x.expires_at < t.hi LIMIT p_batch);
      EXIT WHEN cardinality(v_ids) > 0;
    END LOOP;
    IF coalesce(cardinality(v_ids), 0) = 0 THEN
      RETURN 0;
    END IF;
    EXECUTE format('WITH m AS (DELETE FROM skiplock.finished_jobs_default d'
                   ' WHERE d.id = ANY ($3) AND d.expires_at >= $1 AND d.expires_at < $2'
                   ' RETURNING d.*) INSERT INTO skiplock.%I SELECT * FROM m', t.name)
      USING t.lo, t.hi, v_ids;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
  END IF;
  SELECT s.name, s.lo, s.hi INTO t FROM skiplock.finished_tables s
   WHERE s.state = 'standalone' AND s.hi > clock_timestamp()
     AND EXISTS (SELECT 1 FROM skiplock.finished_jobs_default d
                  WHERE d.expires_at >= s.lo AND d.expires_at < s.hi)
     AND EXISTS (SELECT 1 FROM skiplock.finished_area a WHERE a.lo <= s.lo AND a.hi >= s.hi)
   ORDER BY s.lo LIMIT 1;
  IF NOT FOUND THEN
    RETURN 0;
  END IF;
  EXECUTE format('WITH m AS (DELETE FROM skiplock.finished_jobs_default d WHERE d.ctid = ANY (ARRAY('
                 '  SELECT x.ctid FROM skiplock.finished_jobs_default x'
                 '   WHERE x.expires_at >= $1 AND x.expires_at < $2 LIMIT $3)) RETURNING d.*) '
                 'INSERT INTO skiplock.%I SELECT * FROM m', t.name) USING t.lo, t.hi, p_batch;
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END
$fn$;

-- As in step 0013, with changed_at taken from the row inserted (the same
-- now()): Citus wants IMMUTABLE functions in DO UPDATE SET of a reference
-- table.
CREATE OR REPLACE FUNCTION skiplock.retention_set(queue text, state text, keep interval,
                                                  forever boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  IF retention_set.queue IS NULL OR length(retention_set.queue) NOT BETWEEN 1 AND 128 THEN
    RAISE EXCEPTION 'retention_set: queue must be 1 to 128 characters (''*'': every queue)'
      USING ERRCODE = '22023';
  END IF;
  IF retention_set.state IS NOT NULL
     AND retention_set.state NOT IN ('completed', 'discarded', 'cancelled') THEN
    RAISE EXCEPTION 'retention_set: state is completed, discarded or cancelled, got %',
      retention_set.state USING ERRCODE = '22023';
  END IF;
  IF forever IS DISTINCT FROM true AND (keep IS NULL OR keep < interval '0'
                                        OR keep > interval '100 years') THEN
    RAISE EXCEPTION 'retention_set: keep must be from 0 to 100 years, or forever'
      USING ERRCODE = '22023';
  END IF;
  INSERT INTO skiplock.retention AS r (queue, state, keep, changed_at)
  SELECT retention_set.queue, s, CASE WHEN forever THEN NULL ELSE keep END, now()
    FROM unnest(CASE WHEN retention_set.state IS NULL
                     THEN ARRAY['completed', 'discarded', 'cancelled']
                     ELSE ARRAY[retention_set.state] END) AS s
  ON CONFLICT ON CONSTRAINT retention_pkey
  DO UPDATE SET keep = EXCLUDED.keep, changed_at = EXCLUDED.changed_at;
  PERFORM skiplock.finished_area_check_now();
END
$fn$;

-- As in step 0013, and on the distributed layout the ids selected first
-- and without FOR UPDATE over every shard (the DELETE checks the state).
CREATE OR REPLACE FUNCTION skiplock.jobs_prune(older_than interval, n integer DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_a bigint;
  v_b bigint;
  v_cut timestamptz := now() - older_than;
  v_ids bigint[];
BEGIN
  IF older_than IS NULL OR older_than < interval '0' OR n IS NULL OR n NOT BETWEEN 1 AND 1000000 THEN
    RAISE EXCEPTION 'jobs_prune: older_than must be >= 0 and n 1 to 1000000'
      USING ERRCODE = '22023';
  END IF;
  IF skiplock.is_distributed() THEN
    v_ids := ARRAY(SELECT x.id FROM skiplock.finished_jobs x WHERE x.finished_at < v_cut
                    ORDER BY x.finished_at LIMIT n);
    DELETE FROM skiplock.finished_jobs f WHERE f.id = ANY (v_ids) AND f.finished_at < v_cut;
    GET DIAGNOSTICS v_a = ROW_COUNT;
    v_ids := ARRAY(SELECT x.id FROM skiplock.jobs x
                    WHERE x.state IN ('completed', 'discarded', 'cancelled')
                      AND x.finished_at < v_cut
                    ORDER BY x.finished_at LIMIT greatest(n - v_a, 0));
    DELETE FROM skiplock.jobs j WHERE j.id = ANY (v_ids)
       AND j.state IN ('completed', 'discarded', 'cancelled') AND j.finished_at < v_cut;
    GET DIAGNOSTICS v_b = ROW_COUNT;
    RETURN v_a + v_b;
  END IF;
  DELETE FROM skiplock.finished_jobs f WHERE f.id IN (
    SELECT x.id FROM skiplock.finished_jobs x WHERE x.finished_at < now() - older_than
     ORDER BY x.finished_at LIMIT n);
  GET DIAGNOSTICS v_a = ROW_COUNT;
  DELETE FROM skiplock.jobs j WHERE j.id IN (
    SELECT x.id FROM skiplock.jobs x
     WHERE x.state IN ('completed', 'discarded', 'cancelled')
       AND x.finished_at < now() - older_than
     ORDER BY x.finished_at LIMIT greatest(n - v_a, 0) FOR UPDATE SKIP LOCKED);
  GET DIAGNOSTICS v_b = ROW_COUNT;
  RETURN v_a + v_b;
END
$fn$;

-- As in step 0018, with EXISTS (SELECT 1 FROM …): Citus wants a target
-- list in a query on a distributed partition (the answer is the same).
CREATE OR REPLACE FUNCTION skiplock.finished_act_reshape() RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  v_w interval := skiplock.partition_width();
  v_small boolean := skiplock.finished_default_small();
  p record;
  v_empty boolean;
BEGIN
  FOR p IN SELECT x.name, x.lo, x.hi FROM skiplock.finished_partitions x
            WHERE x.hi > clock_timestamp() AND x.hi - x.lo > v_w
              AND (EXISTS (SELECT 1 FROM skiplock.finished_area a
                            WHERE a.lo <= x.lo AND a.hi >= x.hi)
                   OR (v_small AND NOT EXISTS (SELECT 1 FROM skiplock.finished_area a
                                                WHERE a.lo < x.hi AND a.hi > x.lo)))
            ORDER BY x.lo DESC LIMIT 20 LOOP
    EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM skiplock.%I)', p.name) INTO v_empty;
    CONTINUE WHEN NOT v_empty;
    LOCK TABLE skiplock.finished_jobs IN ACCESS EXCLUSIVE MODE;
    EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM skiplock.%I)', p.name) INTO v_empty;
    CONTINUE WHEN NOT v_empty;
    EXECUTE format('ALTER TABLE skiplock.finished_jobs DETACH PARTITION skiplock.%I', p.name);
    DELETE FROM skiplock.finished_partitions x WHERE x.name = p.name;
    INSERT INTO skiplock.finished_tables (name, lo, hi, state)
    VALUES (p.name, p.lo, p.hi, 'detached');
    RETURN 1;
  END LOOP;
  RETURN 0;
END
$fn$;

CREATE OR REPLACE FUNCTION skiplock.finished_slot_work(p_kind text, p_name text, p_lo timestamp with time zone, p_hi timestamp with time zone) RETURNS boolean
LANGUAGE plpgsql AS $fn$
DECLARE
  v_empty boolean;
BEGIN
  IF p_kind <> 'partition' THEN
    RETURN true;
  END IF;
  IF p_hi <= clock_timestamp() OR p_hi - p_lo <= skiplock.partition_width() THEN
    RETURN false;
  END IF;
  EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM skiplock.%I)', p_name) INTO v_empty;
  RETURN v_empty;
END
$fn$;

-- As before, and on the distributed layout each breaker stepped in its
-- own statements (locked, breaker_step here, written back as values):
-- Citus cannot call breaker_step on a shard of the reference table with
-- the shard's row type.
CREATE OR REPLACE FUNCTION skiplock.count_for_breakers(kinds text[], outcomes text[])
RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  v_t record;
  v_b skiplock.breakers;
  v_n skiplock.breakers;
BEGIN
  IF skiplock.is_distributed() THEN
    IF NOT EXISTS (SELECT 1 FROM skiplock.breakers x WHERE x.kind = ANY (count_for_breakers.kinds))
    THEN
      RETURN;
    END IF;
    FOR v_t IN SELECT u.kind, (count(*) FILTER (WHERE u.outcome = 'ok'))::int AS ok,
                    (count(*) FILTER (WHERE u.outcome IN ('retry', 'fail')))::int AS bad
               FROM unnest(count_for_breakers.kinds, count_for_breakers.outcomes)
                    AS u(kind, outcome)
              GROUP BY u.kind ORDER BY u.kind LOOP
      CONTINUE WHEN v_t.ok = 0 AND v_t.bad = 0;
      SELECT * INTO v_b FROM skiplock.breakers x WHERE x.kind = v_t.kind FOR UPDATE;
      CONTINUE WHEN NOT FOUND;
      v_n := skiplock.breaker_step(v_b, v_t.ok, v_t.bad);
      UPDATE skiplock.breakers x
         SET state = v_n.state, prev_state = v_n.prev_state, calls = v_n.calls,
             failures = v_n.failures, window_started_at = v_n.window_started_at,
             probe_ok = v_n.probe_ok, open_until = v_n.open_until, changed_at = v_n.changed_at
       WHERE x.kind = v_t.kind;
      IF v_n.prev_state <> v_n.state THEN
        INSERT INTO skiplock.breaker_events (kind, from_state, to_state, reason)
        VALUES (v_t.kind, v_n.prev_state, v_n.state,
                CASE WHEN v_n.state = 'closed' THEN 'probes succeeded'
                     WHEN v_n.prev_state = 'half_open' THEN 'a probe failed'
                     ELSE format('%s of %s calls failed', v_n.failures, v_n.calls) END);
      END IF;
    END LOOP;
    RETURN;
  END IF;
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

COMMENT ON FUNCTION skiplock.rescue(integer) IS
  'give back up to n running jobs whose lease expired (per queue on the distributed layout)';
COMMENT ON FUNCTION skiplock.move_finished(bigint[]) IS
  'Internal: moves finished jobs by id from jobs to finished_jobs, kept until their retention; returns how many left jobs.';

-- New functions are executable by PUBLIC until revoked; grant_role gives
-- the new SECURITY DEFINER ones to the worker and operator roles again.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;
SELECT skiplock.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);
