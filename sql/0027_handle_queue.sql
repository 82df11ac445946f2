-- skiplock schema step 0027: the job handle carries the job's queue
-- (protocol 2).
--
-- A claimed job is addressed by (id, fencing) in protocol 1.  On a
-- database where jobs are spread by queue (Citus, docs/scaling.md) a call
-- that knows only the id must look for the job on every shard; with the
-- queue it goes to one.  So every call that takes a handle takes the
-- job's queue too, as it came back from the claim:
--
--   heartbeat(ids, fencings, lease, job_queues)
--   complete(id, fencing, result, queue)
--   fail(id, fencing, error, retryable, retry_after, queue)
--   record(ids, fencings, outcomes, ..., backoff_caps_ms, job_queues)
--   record_claim(..., after_id, job_queues)
--   job_fence(id, fencing, queue), job_complete(id, fencing, result, queue)
--
-- The queue is the last argument and defaults to NULL, so a protocol-1
-- call (positional, without it) still resolves to the same function and
-- does what it did: on one PostgreSQL primary the old signatures keep
-- working for the release after this one.  A queue that is not the
-- job's makes the handle stale, like a wrong token: 'fenced_out', lost,
-- or SK001.  protocol_version() says which protocol the schema speaks.
--
-- Each function is created again with the new argument list; the old
-- one is renamed NAME_p1, not dropped, so that a statement in flight while
-- this step commits (a worker of the release before, mid-claim) still
-- finds the function it resolved; nothing calls them after that.
-- grant_role gives the new ones to the roles at the end.

CREATE FUNCTION skiplock.protocol_version() RETURNS integer
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT 2 $fn$;

COMMENT ON FUNCTION skiplock.protocol_version() IS
  'The worker protocol the schema speaks: 2, the job handle is (queue, id, fencing).';

ALTER FUNCTION skiplock.check_record_args(bigint[], bigint[], text[], jsonb[], text[], bigint[],
                                         boolean[], text[], bigint[], bigint[]) RENAME TO check_record_args_p1;

-- As in step 0023, and job_queues NULL or one per outcome.
CREATE FUNCTION skiplock.check_record_args(ids bigint[], fencings bigint[], outcomes text[],
    results jsonb[], errors text[], retry_after_ms bigint[], deferred boolean[],
    backoffs text[], backoff_bases_ms bigint[], backoff_caps_ms bigint[], job_queues text[])
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
                cardinality(backoff_caps_ms), cardinality(job_queues)]) c
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

ALTER FUNCTION skiplock.record_outcomes(bigint[], bigint[], text[], jsonb[], text[], bigint[],
                                       boolean[], text[], bigint[], bigint[]) RENAME TO record_outcomes_p1;

-- As in step 0026's tree, and each outcome's job found under its queue
-- when the caller gave one.
CREATE FUNCTION skiplock.record_outcomes(ids bigint[], fencings bigint[], outcomes text[],
    results jsonb[], errors text[], retry_after_ms bigint[], deferred boolean[],
    backoffs text[], backoff_bases_ms bigint[], backoff_caps_ms bigint[], job_queues text[])
RETURNS TABLE(id bigint, kind text, state text, run_at timestamptz, outcome text,
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

ALTER FUNCTION skiplock.record(bigint[], bigint[], text[], jsonb[], text[], bigint[], boolean[],
                              text[], bigint[], bigint[]) RENAME TO record_p1;
ALTER FUNCTION skiplock.record_claim(bigint[], bigint[], text[], jsonb[], text[], bigint[],
                                    boolean[], text[], bigint[], bigint[], text, text[], text[],
                                    integer, interval, integer, bigint, bigint) RENAME TO record_claim_p1;

-- As in step 0023, with the handles' queues passed on to record_outcomes.
CREATE FUNCTION skiplock.record_claim(ids bigint[], fencings bigint[], outcomes text[],
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

CREATE FUNCTION skiplock.record(ids bigint[], fencings bigint[], outcomes text[],
    results jsonb[] DEFAULT NULL, errors text[] DEFAULT NULL,
    retry_after_ms bigint[] DEFAULT NULL, deferred boolean[] DEFAULT NULL,
    backoffs text[] DEFAULT NULL, backoff_bases_ms bigint[] DEFAULT NULL,
    backoff_caps_ms bigint[] DEFAULT NULL, job_queues text[] DEFAULT NULL)
RETURNS SETOF skiplock.recorded_outcome
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN QUERY
    SELECT x.id, x.state, x.run_at, x.delay_ms
      FROM skiplock.record_claim(ids, fencings, outcomes, results, errors, retry_after_ms,
                                 deferred, backoffs, backoff_bases_ms, backoff_caps_ms,
                                 NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL, job_queues) x;
END
$fn$;

ALTER FUNCTION skiplock.complete(bigint, bigint, jsonb) RENAME TO complete_p1;

CREATE FUNCTION skiplock.complete(id bigint, fencing bigint, result jsonb DEFAULT NULL,
                                  queue text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_state text;
BEGIN
  IF complete.id IS NULL OR complete.fencing IS NULL THEN
    RAISE EXCEPTION 'complete: id and fencing must not be NULL' USING ERRCODE = '22004';
  END IF;
  SELECT r.state INTO v_state
    FROM skiplock.record(ARRAY[complete.id], ARRAY[complete.fencing], ARRAY['ok'],
                         ARRAY[complete.result], job_queues => ARRAY[complete.queue]) r;
  IF v_state IS NOT NULL THEN
    RETURN v_state;
  END IF;
  IF EXISTS (SELECT 1 FROM skiplock.all_jobs j WHERE j.id = complete.id
                AND j.fencing = complete.fencing AND j.state = 'completed'
                AND (complete.queue IS NULL OR j.queue = complete.queue)) THEN
    RETURN 'completed';
  END IF;
  RETURN 'fenced_out';
END
$fn$;

ALTER FUNCTION skiplock.fail(bigint, bigint, text, boolean, interval) RENAME TO fail_p1;

CREATE FUNCTION skiplock.fail(id bigint, fencing bigint, error text,
                              retryable boolean DEFAULT true, retry_after interval DEFAULT NULL,
                              queue text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_state text;
BEGIN
  IF fail.id IS NULL OR fail.fencing IS NULL OR fail.retryable IS NULL THEN
    RAISE EXCEPTION 'fail: id, fencing and retryable must not be NULL' USING ERRCODE = '22004';
  END IF;
  SELECT r.state INTO v_state
    FROM skiplock.record(ARRAY[fail.id], ARRAY[fail.fencing],
                         ARRAY[CASE WHEN fail.retryable THEN 'retry' ELSE 'discard' END],
                         NULL, ARRAY[fail.error],
                         ARRAY[skiplock.interval_ms(fail.retry_after, 'retry_after')],
                         job_queues => ARRAY[fail.queue]) r;
  RETURN coalesce(v_state, 'fenced_out');
END
$fn$;

ALTER FUNCTION skiplock.heartbeat(bigint[], bigint[], interval) RENAME TO heartbeat_p1;

-- As in step 0020, with each claim found under its queue when given.
CREATE FUNCTION skiplock.heartbeat(ids bigint[], fencings bigint[],
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

ALTER FUNCTION skiplock.job_fence(bigint, bigint) RENAME TO job_fence_p1;

-- As in step 0019, with the job found under its queue when given.
CREATE FUNCTION skiplock.job_fence(id bigint, fencing bigint, queue text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_fencing bigint;
  v_state text;
BEGIN
  SELECT j.fencing, j.state INTO v_fencing, v_state
    FROM skiplock.jobs j
   WHERE j.id = job_fence.id AND (job_fence.queue IS NULL OR j.queue = job_fence.queue)
     FOR SHARE;
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

ALTER FUNCTION skiplock.job_complete(bigint, bigint, jsonb) RENAME TO job_complete_p1;

-- As in step 0019, with the job found under its queue when given.
CREATE FUNCTION skiplock.job_complete(id bigint, fencing bigint, result jsonb DEFAULT NULL,
                                      queue text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_fencing bigint;
  v_state text;
BEGIN
  IF job_complete.id IS NULL OR job_complete.fencing IS NULL THEN
    RAISE EXCEPTION 'job_complete: id and fencing must not be NULL' USING ERRCODE = '22004';
  END IF;
  SELECT j.fencing, j.state INTO v_fencing, v_state
    FROM skiplock.jobs j
   WHERE j.id = job_complete.id
     AND (job_complete.queue IS NULL OR j.queue = job_complete.queue)
     FOR UPDATE;
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
                                 job_queues => ARRAY[job_complete.queue]);
END
$fn$;

COMMENT ON FUNCTION skiplock.check_record_args(bigint[], bigint[], text[], jsonb[], text[],
    bigint[], boolean[], text[], bigint[], bigint[], text[]) IS
  'Internal: refuses a batch of outcomes whose arrays disagree in length or hold an unknown outcome or backoff.';
COMMENT ON FUNCTION skiplock.record_outcomes(bigint[], bigint[], text[], jsonb[], text[],
    bigint[], boolean[], text[], bigint[], bigint[], text[]) IS
  'Internal: record a batch of outcomes (ended, kept, decided, retried), each guarded by its fencing token and queue; one row per outcome recorded.';
COMMENT ON FUNCTION skiplock.record_claim(bigint[], bigint[], text[], jsonb[], text[], bigint[],
    boolean[], text[], bigint[], bigint[], text, text[], text[], integer, interval, integer,
    bigint, bigint, text[]) IS
  'record outcomes, then claim, in one call: rows tagged recorded / claimed; n = 0 records only; job_queues: the handles'' queues (protocol 2)';
COMMENT ON FUNCTION skiplock.record(bigint[], bigint[], text[], jsonb[], text[], bigint[],
    boolean[], text[], bigint[], bigint[], text[]) IS
  'Records a batch of outcomes, each fenced by its token (and queue, protocol 2); one row per outcome accepted.';
COMMENT ON FUNCTION skiplock.complete(bigint, bigint, jsonb, text) IS
  'Completes a running job under its claim (id, fencing, and queue in protocol 2): completed or fenced_out.';
COMMENT ON FUNCTION skiplock.fail(bigint, bigint, text, boolean, interval, text) IS
  'Records a failed attempt under its claim (and queue, protocol 2): available (retried), discarded or fenced_out.';
COMMENT ON FUNCTION skiplock.heartbeat(bigint[], bigint[], interval, text[]) IS
  'Extends running claims (found under their queues in protocol 2) without waiting; one row per claim: extended, locked.';
COMMENT ON FUNCTION skiplock.job_fence(bigint, bigint, text) IS
  'In an effect''s transaction: holds the job''s row and raises SK001 unless the claim (and queue) is current.';
COMMENT ON FUNCTION skiplock.job_complete(bigint, bigint, jsonb, text) IS
  'In an effect''s transaction: raises SK001 unless the claim (and queue) is current, then completes the job there.';

-- The renamed functions of protocol 1 now call the new ones: a statement
-- that resolved one before this step committed runs it after (its old
-- body named itself, which no longer resolves once renamed).  They stay
-- plpgsql, the language such a statement has already looked up.  Only such
-- statements call them; a later release drops them.
CREATE OR REPLACE FUNCTION skiplock.check_record_args_p1(ids bigint[], fencings bigint[], outcomes text[], results jsonb[], errors text[], retry_after_ms bigint[], deferred boolean[], backoffs text[], backoff_bases_ms bigint[], backoff_caps_ms bigint[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$ BEGIN PERFORM skiplock.check_record_args($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL); END $fn$;
COMMENT ON FUNCTION skiplock.check_record_args_p1(bigint[], bigint[], text[], jsonb[], text[], bigint[], boolean[], text[], bigint[], bigint[]) IS 'Internal: protocol 1''s check_record_args, renamed by step 0027 for the statements in flight as it committed; calls the new one.';
CREATE OR REPLACE FUNCTION skiplock.record_outcomes_p1(ids bigint[], fencings bigint[], outcomes text[], results jsonb[], errors text[], retry_after_ms bigint[], deferred boolean[], backoffs text[], backoff_bases_ms bigint[], backoff_caps_ms bigint[])
RETURNS TABLE(id bigint, kind text, state text, run_at timestamp with time zone, outcome text, delay_ms bigint)
LANGUAGE plpgsql VOLATILE AS $fn$ BEGIN RETURN QUERY SELECT * FROM skiplock.record_outcomes($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL); END $fn$;
COMMENT ON FUNCTION skiplock.record_outcomes_p1(bigint[], bigint[], text[], jsonb[], text[], bigint[], boolean[], text[], bigint[], bigint[]) IS 'Internal: protocol 1''s record_outcomes, renamed by step 0027 for the statements in flight as it committed; calls the new one.';
CREATE OR REPLACE FUNCTION skiplock.record_p1(ids bigint[], fencings bigint[], outcomes text[], results jsonb[] DEFAULT NULL, errors text[] DEFAULT NULL, retry_after_ms bigint[] DEFAULT NULL, deferred boolean[] DEFAULT NULL, backoffs text[] DEFAULT NULL, backoff_bases_ms bigint[] DEFAULT NULL, backoff_caps_ms bigint[] DEFAULT NULL)
RETURNS SETOF skiplock.recorded_outcome
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$ BEGIN RETURN QUERY SELECT * FROM skiplock.record($1, $2, $3, $4, $5, $6, $7, $8, $9, $10); END $fn$;
COMMENT ON FUNCTION skiplock.record_p1(bigint[], bigint[], text[], jsonb[], text[], bigint[], boolean[], text[], bigint[], bigint[]) IS 'Internal: protocol 1''s record, renamed by step 0027 for the statements in flight as it committed; calls the new one.';
CREATE OR REPLACE FUNCTION skiplock.record_claim_p1(ids bigint[], fencings bigint[], outcomes text[], results jsonb[], errors text[], retry_after_ms bigint[], deferred boolean[], backoffs text[], backoff_bases_ms bigint[], backoff_caps_ms bigint[], owner text, kinds text[], queues text[], n integer, lease interval, after_priority integer DEFAULT NULL, after_run_at_us bigint DEFAULT NULL, after_id bigint DEFAULT NULL)
RETURNS SETOF skiplock.exchange_row
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$ BEGIN RETURN QUERY SELECT * FROM skiplock.record_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18); END $fn$;
COMMENT ON FUNCTION skiplock.record_claim_p1(bigint[], bigint[], text[], jsonb[], text[], bigint[], boolean[], text[], bigint[], bigint[], text, text[], text[], integer, interval, integer, bigint, bigint) IS 'Internal: protocol 1''s record_claim, renamed by step 0027 for the statements in flight as it committed; calls the new one.';
CREATE OR REPLACE FUNCTION skiplock.complete_p1(id bigint, fencing bigint, result jsonb DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$ BEGIN RETURN (SELECT skiplock.complete($1, $2, $3)); END $fn$;
COMMENT ON FUNCTION skiplock.complete_p1(bigint, bigint, jsonb) IS 'Internal: protocol 1''s complete, renamed by step 0027 for the statements in flight as it committed; calls the new one.';
CREATE OR REPLACE FUNCTION skiplock.fail_p1(id bigint, fencing bigint, error text, retryable boolean DEFAULT true, retry_after interval DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$ BEGIN RETURN (SELECT skiplock.fail($1, $2, $3, $4, $5)); END $fn$;
COMMENT ON FUNCTION skiplock.fail_p1(bigint, bigint, text, boolean, interval) IS 'Internal: protocol 1''s fail, renamed by step 0027 for the statements in flight as it committed; calls the new one.';
CREATE OR REPLACE FUNCTION skiplock.heartbeat_p1(ids bigint[], fencings bigint[], lease interval DEFAULT '00:00:30')
RETURNS SETOF skiplock.heartbeat_result
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$ BEGIN RETURN QUERY SELECT * FROM skiplock.heartbeat($1, $2, $3); END $fn$;
COMMENT ON FUNCTION skiplock.heartbeat_p1(bigint[], bigint[], interval) IS 'Internal: protocol 1''s heartbeat, renamed by step 0027 for the statements in flight as it committed; calls the new one.';
CREATE OR REPLACE FUNCTION skiplock.job_fence_p1(id bigint, fencing bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$ BEGIN PERFORM skiplock.job_fence($1, $2); END $fn$;
COMMENT ON FUNCTION skiplock.job_fence_p1(bigint, bigint) IS 'Internal: protocol 1''s job_fence, renamed by step 0027 for the statements in flight as it committed; calls the new one.';
CREATE OR REPLACE FUNCTION skiplock.job_complete_p1(id bigint, fencing bigint, result jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$ BEGIN PERFORM skiplock.job_complete($1, $2, $3); END $fn$;
COMMENT ON FUNCTION skiplock.job_complete_p1(bigint, bigint, jsonb) IS 'Internal: protocol 1''s job_complete, renamed by step 0027 for the statements in flight as it committed; calls the new one.';

-- New functions are executable by PUBLIC until revoked; grant_role gives
-- the new SECURITY DEFINER ones to the worker and operator roles again.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;
SELECT skiplock.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);
