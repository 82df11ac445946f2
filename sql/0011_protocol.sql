-- skiplock schema step 0011: the worker protocol in SQL, and least privilege.
--
-- The job lifecycle is defined here, once, for every client (the C worker,
-- the command and streaming handlers, Node, Python, Rust, psql):
--
--   claim(owner, kinds, queues, n, lease)          → the claimed jobs
--   heartbeat(ids, fencings, lease)                → per job: extended or not
--   complete(id, fencing, result)                  → 'completed' | 'fenced_out'
--   fail(id, fencing, error, retryable, retry_after) → 'available' | 'discarded' | 'fenced_out'
--   record(ids, fencings, outcomes, …)             → the accepted outcomes, batched
--   record_claim(…)                                → record, then claim, one call
--   rescue(n)                                      → expired leases given back
--   job_fence(id, fencing)                         → raises SK001 unless the claim is current
--
-- Each is one statement from the caller's side, holds no session state and
-- needs no prepared statement, so it works through a transaction pooler.
-- docs/protocol.md is the reference; sql/SCHEMA.md has the state machine.
--
-- Conventions:
--   * A stale owner's call changes nothing and says so with a result value
--     ('fenced_out', extended = false, a missing row in record's result),
--     never an error: a batch must not abort because one job was lost.
--     job_fence, which runs inside the caller's own transaction, raises
--     SK001 instead, like lease_fence: there the whole transaction must go.
--   * Bad arguments raise before anything is written: 22004 for a NULL
--     where a value is required, 2202E for arrays of different lengths,
--     22023 for a value out of range.
--   * The retry decision is made here (skiplock.retry_delay_ms): the job's
--     own backoff settings, else the caller's per-outcome policy, else full
--     jitter from 1 s capped at 1 h; a handler's own delay (Retry-After)
--     wins, plus up to 10 % jitter; a retry the caller's retry budget
--     refused ("deferred") is spread over [cap/2, cap], stratified across
--     the batch, so failures that happened together do not return together.
--
-- Least privilege (23.2 of the defects campaign): every function a worker
-- calls is SECURITY DEFINER with a fixed search_path, and grant_roles gives
-- the worker role EXECUTE on those and SELECT on what status and metrics
-- read — no INSERT, UPDATE or DELETE on any table, nothing on migrations,
-- idempotency keys or leases except through functions.
--
-- Hardening (23.1): a job's run_at is a finite time between 1970 and 2200,
-- checked by enqueue and by a CHECK constraint, so no stored value can make
-- a claim or `status` fail for everyone else.

-- ---- no job can poison the claim ----

UPDATE skiplock.jobs SET run_at = now() WHERE run_at < timestamptz '1970-01-01 00:00+00';
UPDATE skiplock.jobs SET run_at = timestamptz '2199-12-31 00:00+00'
 WHERE run_at >= timestamptz '2200-01-01 00:00+00';
UPDATE skiplock.jobs SET timeout_ms = NULL WHERE timeout_ms < 0;
UPDATE skiplock.jobs SET backoff_base_ms = NULL WHERE backoff_base_ms < 0;
UPDATE skiplock.jobs SET backoff_cap_ms = NULL WHERE backoff_cap_ms < 0;
ALTER TABLE skiplock.jobs
  ADD CONSTRAINT jobs_run_at_check
    CHECK (run_at >= timestamptz '1970-01-01 00:00+00' AND run_at < timestamptz '2200-01-01 00:00+00')
    NOT VALID,
  ADD CONSTRAINT jobs_durations_check
    CHECK (timeout_ms >= 0 AND backoff_base_ms >= 0 AND backoff_cap_ms >= 0) NOT VALID;
ALTER TABLE skiplock.jobs VALIDATE CONSTRAINT jobs_run_at_check;
ALTER TABLE skiplock.jobs VALIDATE CONSTRAINT jobs_durations_check;

-- The checks every enqueue path makes before it writes (22023).
CREATE FUNCTION skiplock.check_job_times(p_run_at timestamptz, p_delay_ms bigint)
RETURNS void
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  IF p_run_at IS NOT NULL AND NOT (p_run_at >= timestamptz '1970-01-01 00:00+00'
                                   AND p_run_at < timestamptz '2200-01-01 00:00+00') THEN
    RAISE EXCEPTION 'run_at % is out of range', p_run_at USING ERRCODE = '22023',
      DETAIL = 'A job runs at a finite time from 1970-01-01 to 2199-12-31 (UTC).';
  END IF;
  IF p_delay_ms IS NOT NULL AND (p_delay_ms < 0 OR p_delay_ms > 3153600000000) THEN
    RAISE EXCEPTION 'delay % ms is out of range', p_delay_ms USING ERRCODE = '22023',
      DETAIL = 'A delay is 0 to 100 years.';
  END IF;
END
$fn$;

CREATE OR REPLACE FUNCTION skiplock.enqueue_one(
  p_kind text, p_payload jsonb, p_queue text, p_run_at timestamptz, p_priority int,
  p_unique_key text, p_max_attempts int, p_timeout_ms int, p_backoff_base_ms int,
  p_backoff_cap_ms int)
RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  v_id bigint;
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
    SELECT j.id INTO v_id FROM skiplock.jobs j
     WHERE j.unique_key = p_unique_key AND j.state IN ('available', 'running');
    IF v_id IS NOT NULL THEN
      RETURN v_id;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'unique key "%" is contended', p_unique_key USING ERRCODE = '40001';
END
$fn$;

-- enqueue_many (step 0010) checks its run_at and delay arrays first.
ALTER FUNCTION skiplock.enqueue_many(text, text[], jsonb[], text[], timestamptz[], bigint[],
                                     int[], text[], int[], int[], int[], int[], text[])
  RENAME TO enqueue_many_unchecked;
CREATE FUNCTION skiplock.enqueue_many(
  p_token text, p_kinds text[], p_payloads jsonb[], p_queues text[],
  p_run_ats timestamptz[], p_delays_ms bigint[], p_priorities int[], p_unique_keys text[],
  p_max_attempts int[], p_timeouts int[], p_backoff_bases int[], p_backoff_caps int[],
  p_backoffs text[] DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql AS $fn$
BEGIN
  PERFORM skiplock.check_job_times(r, d)
     FROM unnest(p_run_ats, p_delays_ms) AS t(r, d)
    WHERE NOT (r >= timestamptz '1970-01-01 00:00+00' AND r < timestamptz '2200-01-01 00:00+00')
       OR d < 0 OR d > 3153600000000;
  RETURN skiplock.enqueue_many_unchecked(p_token, p_kinds, p_payloads, p_queues, p_run_ats,
           p_delays_ms, p_priorities, p_unique_keys, p_max_attempts, p_timeouts,
           p_backoff_bases, p_backoff_caps, p_backoffs);
END
$fn$;

-- The SQL enqueue takes everything the command line takes, by name.
DROP FUNCTION skiplock.enqueue(text, jsonb, text, timestamptz, int, text, int);
CREATE FUNCTION skiplock.enqueue(
  kind text,
  payload jsonb DEFAULT '{}',
  queue text DEFAULT 'default',
  run_at timestamptz DEFAULT now(),
  priority int DEFAULT 0,
  unique_key text DEFAULT NULL,
  max_attempts int DEFAULT 25,
  timeout interval DEFAULT NULL,
  backoff text DEFAULT NULL,
  backoff_base interval DEFAULT NULL,
  backoff_cap interval DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql AS $fn$
#variable_conflict use_variable
BEGIN
  RETURN (skiplock.enqueue_many(NULL, ARRAY[kind], ARRAY[payload], ARRAY[coalesce(queue, 'default')],
            ARRAY[coalesce(run_at, now())], NULL, ARRAY[priority], ARRAY[unique_key],
            ARRAY[max_attempts], ARRAY[skiplock.interval_ms(timeout, 'timeout')::int],
            ARRAY[skiplock.interval_ms(backoff_base, 'backoff_base')::int],
            ARRAY[skiplock.interval_ms(backoff_cap, 'backoff_cap')::int], ARRAY[backoff]))[1];
END
$fn$;

-- An interval as whole milliseconds, 0 to 24 days (what an int column holds).
CREATE FUNCTION skiplock.interval_ms(p interval, p_what text)
RETURNS bigint
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  v numeric;
BEGIN
  IF p IS NULL THEN
    RETURN NULL;
  END IF;
  v := round(extract(epoch FROM p) * 1000);
  IF v < 0 OR v > 2147483647 THEN
    RAISE EXCEPTION '% % is out of range', p_what, p USING ERRCODE = '22023',
      DETAIL = 'It must be from 0 to 24 days.';
  END IF;
  RETURN v::bigint;
END
$fn$;

-- ---- the retry decision ----

-- The delay before the next attempt, in ms.  Immutable: the randomness is
-- r in [0, 1), drawn once per outcome by the caller, so that one outcome's
-- run_at and last_delay_ms agree.  n is the number of attempts so far
-- minus one; prev_ms the delay before the current attempt (decorrelated
-- jitter grows from it).  Mirrors the C library's backoff.c, which the
-- library still uses for its own reconnects.
CREATE FUNCTION skiplock.backoff_delay(strategy text, n int, base_ms bigint, cap_ms bigint,
                                       prev_ms bigint, r double precision)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$
  WITH c AS (SELECT least(base_ms * power(2::numeric, least(greatest(n, 0), 62)), cap_ms)::bigint AS ceil)
  SELECT CASE
    WHEN base_ms <= 0 OR cap_ms <= 0 THEN 0
    WHEN strategy = 'equal' THEN c.ceil / 2 + floor(r * (c.ceil - c.ceil / 2 + 1))::bigint
    WHEN strategy = 'exponential' THEN c.ceil
    WHEN strategy = 'fixed' THEN least(base_ms, cap_ms)
    WHEN strategy = 'decorrelated' THEN
      least(least(base_ms, cap_ms) + floor(r * greatest(
              least(greatest(coalesce(nullif(prev_ms, 0), base_ms), 0) * 3, cap_ms)
              - least(base_ms, cap_ms) + 1, 0))::bigint, cap_ms)
    ELSE floor(r * (c.ceil + 1))::bigint
  END FROM c
$fn$;

-- The retry decision for one failed attempt of job j.  asked_ms: the
-- handler's own delay (Retry-After) or NULL; deferred: the caller's retry
-- budget refused an early retry; slot in [0, 1): this outcome's place in
-- its batch, (ordinal - 1 + r) / count, so the deferred retries of one
-- batch fall in different strata of [cap/2, cap].  The policy columns of
-- the job win over the caller's (bs, bb, bc), which win over full jitter
-- from 1 s capped at 1 h.  A handler's own delay is capped at the cap too.
-- The result is clamped to [0, 365 days].
CREATE FUNCTION skiplock.retry_delay_ms(j skiplock.jobs, asked_ms bigint, deferred boolean,
                                        bs text, bb bigint, bc bigint, r double precision,
                                        slot double precision)
RETURNS bigint
LANGUAGE sql IMMUTABLE AS $fn$
  WITH p AS (SELECT coalesce(j.backoff, bs, 'full') AS s,
                    coalesce(nullif(j.backoff_base_ms, 0), nullif(bb, 0), 1000)::bigint AS base,
                    coalesce(nullif(j.backoff_cap_ms, 0), nullif(bc, 0), 3600000)::bigint AS cap)
  SELECT least(greatest(CASE
    WHEN coalesce(deferred, false)
      THEN greatest(coalesce(asked_ms, 0), p.cap / 2 + floor((p.cap - p.cap / 2) * slot)::bigint)
    WHEN asked_ms > 0
      THEN least(asked_ms, p.cap) + floor(r * (least(asked_ms, p.cap) / 10 + 1))::bigint
    ELSE skiplock.backoff_delay(p.s, j.attempt - 1, p.base, p.cap, j.last_delay_ms, r)
  END, 0), 31536000000) FROM p
$fn$;

-- ---- claim ----

CREATE TYPE skiplock.claimed_job AS (
  id               bigint,
  queue            text,
  kind             text,
  payload          jsonb,
  attempt          int,
  max_attempts     int,
  fencing          bigint,
  lease_expires_at timestamptz,
  timeout_ms       int,          -- 0: no timeout of its own
  priority         int,
  run_at           timestamptz,
  run_at_us        bigint        -- run_at in µs since the epoch: claim(after_run_at_us)
);

CREATE FUNCTION skiplock.check_claim_args(p_owner text, p_kinds text[], p_n int,
                                          p_lease interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  IF p_owner IS NULL OR p_kinds IS NULL OR p_n IS NULL OR p_lease IS NULL THEN
    RAISE EXCEPTION 'claim: owner, kinds, n and lease must not be NULL' USING ERRCODE = '22004';
  END IF;
  IF length(p_owner) NOT BETWEEN 1 AND 256 THEN
    RAISE EXCEPTION 'claim: owner must be 1 to 256 characters' USING ERRCODE = '22023';
  END IF;
  IF cardinality(p_kinds) NOT BETWEEN 1 AND 1000 THEN
    RAISE EXCEPTION 'claim: kinds must name 1 to 1000 kinds' USING ERRCODE = '22023';
  END IF;
  IF p_n NOT BETWEEN 1 AND 1000 THEN
    RAISE EXCEPTION 'claim: n must be 1 to 1000, got %', p_n USING ERRCODE = '22023';
  END IF;
  IF p_lease < interval '100 milliseconds' OR p_lease > interval '1 day' THEN
    RAISE EXCEPTION 'claim: lease must be 100 ms to 1 day, got %', p_lease
      USING ERRCODE = '22023';
  END IF;
END
$fn$;

-- Probe jobs of kinds whose breaker may admit one now (open interval over,
-- or half-open with probes left or gone missing): one per kind, each
-- admitted by a conditional UPDATE of the breaker (fleet-wide count).
CREATE FUNCTION skiplock.claim_probes(p_kinds text[], p_queues text[], p_n int)
RETURNS bigint[]
LANGUAGE plpgsql AS $fn$
DECLARE
  v_ids bigint[];
BEGIN
  WITH pk AS (
    SELECT b.kind FROM skiplock.breakers b
     WHERE b.kind = ANY (p_kinds)
       AND ((b.state = 'open' AND b.open_until <= now())
            OR (b.state = 'half_open' AND (b.probes_left > 0
                OR b.changed_at <= now() - b.open_ms * interval '1 millisecond')))),
  p AS (
    SELECT x.id, pk.kind FROM pk CROSS JOIN LATERAL (
      SELECT j.id FROM skiplock.jobs j
       WHERE j.state = 'available' AND j.run_at <= now() AND j.kind = pk.kind
         AND (p_queues IS NULL OR j.queue = ANY (p_queues))
       ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1 FOR UPDATE SKIP LOCKED) x
    LIMIT p_n),
  probe AS (
    UPDATE skiplock.breakers b SET prev_state = b.state, state = 'half_open',
           probes_left = (CASE WHEN b.state = 'half_open' AND b.probes_left > 0
                               THEN b.probes_left ELSE b.probes END) - 1,
           probe_ok = CASE WHEN b.state = 'open' THEN 0 ELSE b.probe_ok END,
           changed_at = CASE WHEN b.state = 'half_open' AND b.probes_left > 0
                             THEN b.changed_at ELSE now() END
      FROM p WHERE b.kind = p.kind
       AND ((b.state = 'open' AND b.open_until <= now())
            OR (b.state = 'half_open' AND (b.probes_left > 0
                OR b.changed_at <= now() - b.open_ms * interval '1 millisecond')))
    RETURNING b.kind, b.prev_state, b.state),
  ev AS (
    INSERT INTO skiplock.breaker_events (kind, from_state, to_state, reason)
    SELECT kind, prev_state, state, 'open interval over: admitting probes'
      FROM probe WHERE prev_state <> state)
  SELECT coalesce(array_agg(p.id), '{}') INTO v_ids FROM p JOIN probe USING (kind);
  RETURN v_ids;
END
$fn$;

-- Claims up to n due jobs of the given kinds (and queues; NULL: all) with
-- FOR UPDATE SKIP LOCKED, in priority DESC, run_at, id order: each claim
-- adds 1 to attempt and fencing and leases the job to owner until
-- now() + lease.  Kinds whose breaker is not closed are left out, except
-- for probe jobs the breaker admits.  With after_*: only jobs after that
-- place in claim order (the worker's mark: the scan then starts there
-- instead of walking entries claimed since, which a held snapshot keeps).
CREATE FUNCTION skiplock.claim(
  owner text, kinds text[], queues text[] DEFAULT NULL, n int DEFAULT 1,
  lease interval DEFAULT '30 seconds', after_priority int DEFAULT NULL,
  after_run_at_us bigint DEFAULT NULL, after_id bigint DEFAULT NULL)
RETURNS SETOF skiplock.claimed_job
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_kinds text[] := claim.kinds;
  v_probes bigint[] := '{}';
  v_ids bigint[];
  v_m int;
  v_after timestamptz;
BEGIN
  PERFORM skiplock.check_claim_args(claim.owner, claim.kinds, claim.n, claim.lease);
  IF EXISTS (SELECT 1 FROM skiplock.breakers b
              WHERE b.kind = ANY (claim.kinds) AND b.state <> 'closed') THEN
    v_probes := skiplock.claim_probes(claim.kinds, claim.queues, claim.n);
    v_kinds := ARRAY(SELECT unnest(claim.kinds) EXCEPT
                     SELECT b.kind FROM skiplock.breakers b
                      WHERE b.kind = ANY (claim.kinds) AND b.state <> 'closed');
  END IF;
  v_m := claim.n - cardinality(v_probes);
  IF v_m <= 0 THEN
    v_ids := '{}';
  ELSIF claim.after_id IS NULL THEN
    v_ids := ARRAY(
      SELECT j.id FROM skiplock.jobs j
       WHERE j.state = 'available' AND j.run_at <= now()
         AND (claim.queues IS NULL OR j.queue = ANY (claim.queues)) AND j.kind = ANY (v_kinds)
       ORDER BY j.priority DESC, j.run_at, j.id LIMIT v_m FOR UPDATE SKIP LOCKED);
  ELSE
    v_after := timestamptz 'epoch' + claim.after_run_at_us * interval '1 microsecond';
    v_ids := ARRAY(
      SELECT a.id FROM (
        SELECT j.id FROM skiplock.jobs j
         WHERE j.state = 'available' AND j.run_at <= now()
           AND (claim.queues IS NULL OR j.queue = ANY (claim.queues)) AND j.kind = ANY (v_kinds)
           AND j.priority = claim.after_priority AND (j.run_at, j.id) > (v_after, claim.after_id)
         ORDER BY j.priority DESC, j.run_at, j.id LIMIT v_m FOR UPDATE SKIP LOCKED) a
      UNION ALL
      SELECT b.id FROM (
        SELECT j.id FROM skiplock.jobs j
         WHERE j.state = 'available' AND j.run_at <= now()
           AND (claim.queues IS NULL OR j.queue = ANY (claim.queues)) AND j.kind = ANY (v_kinds)
           AND j.priority < claim.after_priority
         ORDER BY j.priority DESC, j.run_at, j.id LIMIT v_m FOR UPDATE SKIP LOCKED) b
      LIMIT v_m);
  END IF;
  RETURN QUERY
    UPDATE skiplock.jobs j
       SET state = 'running', attempt = j.attempt + 1, fencing = j.fencing + 1,
           lease_owner = claim.owner, lease_expires_at = now() + claim.lease,
           attempted_at = now()
     WHERE j.id = ANY (v_ids || v_probes)
    RETURNING j.id, j.queue, j.kind, j.payload, j.attempt, j.max_attempts, j.fencing,
              j.lease_expires_at, coalesce(j.timeout_ms, 0), j.priority, j.run_at,
              (extract(epoch FROM j.run_at) * 1000000)::bigint;
END
$fn$;

-- ---- outcomes ----

CREATE TYPE skiplock.recorded_outcome AS (
  id     bigint,
  state  text,          -- completed, available (retried at run_at) or discarded
  run_at timestamptz,
  delay_ms bigint       -- the delay chosen for a retry, else NULL
);

-- Records outcomes in one fenced statement: for each i, job ids[i] under
-- token fencings[i] ends with outcomes[i]:
--   'ok'               completed, results[i] kept as its result
--   'retry' / 'fail'   a failed attempt: retried after the retry decision
--                      while attempts are left, else discarded
--   'discard'          discarded at once
-- errors[i] is appended to the job's error history (newest 20 kept).
-- retry_after_ms[i] is the handler's own delay; deferred[i] says the
-- caller's retry budget refused an early retry; backoffs/backoff_bases_ms/
-- backoff_caps_ms[i] are the caller's policy for that job's kind.  Every
-- array but the first three may be NULL (all defaults).  Returns one row
-- per outcome accepted; an outcome whose claim was lost (rescued, claimed
-- again, cancelled) changes nothing and has no row.  Accepted outcomes are
-- counted into the kinds' breakers (completions succeed, failed attempts
-- fail, discards are the job's own fault and not counted).
CREATE FUNCTION skiplock.record(
  ids bigint[], fencings bigint[], outcomes text[], results jsonb[] DEFAULT NULL,
  errors text[] DEFAULT NULL, retry_after_ms bigint[] DEFAULT NULL,
  deferred boolean[] DEFAULT NULL, backoffs text[] DEFAULT NULL,
  backoff_bases_ms bigint[] DEFAULT NULL, backoff_caps_ms bigint[] DEFAULT NULL)
RETURNS SETOF skiplock.recorded_outcome
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_n int := cardinality(record.ids);
BEGIN
  IF record.ids IS NULL OR record.fencings IS NULL OR record.outcomes IS NULL THEN
    RAISE EXCEPTION 'record: ids, fencings and outcomes must not be NULL' USING ERRCODE = '22004';
  END IF;
  IF EXISTS (SELECT 1 FROM unnest(ARRAY[cardinality(record.fencings),
                cardinality(record.outcomes), cardinality(record.results),
                cardinality(record.errors), cardinality(record.retry_after_ms),
                cardinality(record.deferred), cardinality(record.backoffs),
                cardinality(record.backoff_bases_ms), cardinality(record.backoff_caps_ms)]) c
              WHERE c <> v_n) THEN
    RAISE EXCEPTION 'record: every array must have one element per outcome (% ids)', v_n
      USING ERRCODE = '2202E';
  END IF;
  IF EXISTS (SELECT 1 FROM unnest(record.outcomes) o
              WHERE o IS NULL OR o NOT IN ('ok', 'retry', 'fail', 'discard'))
     OR EXISTS (SELECT 1 FROM unnest(record.backoffs) s
                 WHERE s NOT IN ('full', 'equal', 'decorrelated', 'exponential', 'fixed'))
     OR EXISTS (SELECT 1 FROM unnest(record.retry_after_ms, record.backoff_bases_ms,
                                     record.backoff_caps_ms) AS t(a, b, c)
                 WHERE a < 0 OR b < 0 OR c < 0) THEN
    RAISE EXCEPTION 'record: an outcome is ok, retry, fail or discard; a backoff is full, '
                    'equal, decorrelated, exponential or fixed; delays are not negative'
      USING ERRCODE = '22023';
  END IF;
  RETURN QUERY
  WITH v AS MATERIALIZED (
    SELECT t.*, random() AS r
      FROM unnest(record.ids, record.fencings, record.outcomes, record.results, record.errors,
                  record.retry_after_ms, record.deferred, record.backoffs,
                  record.backoff_bases_ms, record.backoff_caps_ms)
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
                    THEN now() + skiplock.retry_delay_ms(j, v.asked, v.dfr, v.bs, v.bb, v.bc,
                                                         v.r, (v.ord - 1 + v.r) / v_n)
                         * interval '1 millisecond'
                    ELSE j.run_at END,
      last_delay_ms = CASE WHEN v.o IN ('retry', 'fail') AND j.attempt < j.max_attempts
                           THEN skiplock.retry_delay_ms(j, v.asked, v.dfr, v.bs, v.bb, v.bc,
                                                        v.r, (v.ord - 1 + v.r) / v_n)
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
  SELECT d.id, d.state, d.run_at, d.delay_ms FROM done d;
END
$fn$;

-- Both in one call, as the C worker sends them: the outcomes first, then
-- the claim (which sees the breakers the outcomes changed).  Rows with
-- row_type 'recorded' are accepted outcomes (id, state, run_at, delay_ms);
-- rows with 'claimed' are claimed jobs (the claimed_job columns).
CREATE TYPE skiplock.exchange_row AS (
  row_type         text,
  id               bigint,
  state            text,
  run_at           timestamptz,
  delay_ms         bigint,
  queue            text,
  kind             text,
  payload          jsonb,
  attempt          int,
  max_attempts     int,
  fencing          bigint,
  lease_expires_at timestamptz,
  timeout_ms       int,
  priority         int,
  run_at_us        bigint
);

CREATE FUNCTION skiplock.record_claim(
  ids bigint[], fencings bigint[], outcomes text[], results jsonb[], errors text[],
  retry_after_ms bigint[], deferred boolean[], backoffs text[], backoff_bases_ms bigint[],
  backoff_caps_ms bigint[], owner text, kinds text[], queues text[], n int, lease interval,
  after_priority int DEFAULT NULL, after_run_at_us bigint DEFAULT NULL,
  after_id bigint DEFAULT NULL)
RETURNS SETOF skiplock.exchange_row
LANGUAGE plpgsql AS $fn$
BEGIN
  RETURN QUERY
    SELECT 'recorded', r.id, r.state, r.run_at, r.delay_ms, NULL::text, NULL::text,
           NULL::jsonb, NULL::int, NULL::int, NULL::bigint, NULL::timestamptz, NULL::int,
           NULL::int, NULL::bigint
      FROM skiplock.record(ids, fencings, outcomes, results, errors, retry_after_ms, deferred,
                           backoffs, backoff_bases_ms, backoff_caps_ms) r;
  RETURN QUERY
    SELECT 'claimed', c.id, 'running', c.run_at, NULL::bigint, c.queue, c.kind, c.payload,
           c.attempt, c.max_attempts, c.fencing, c.lease_expires_at, c.timeout_ms, c.priority,
           c.run_at_us
      FROM skiplock.claim(owner, kinds, queues, n, lease, after_priority, after_run_at_us,
                          after_id) c;
END
$fn$;

-- One outcome at a time, for clients that finish jobs one by one.
-- complete is idempotent for the claim that made it: a second call with
-- the same (id, fencing) after the job completed says 'completed' again.
CREATE FUNCTION skiplock.complete(id bigint, fencing bigint, result jsonb DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_state text;
BEGIN
  IF complete.id IS NULL OR complete.fencing IS NULL THEN
    RAISE EXCEPTION 'complete: id and fencing must not be NULL' USING ERRCODE = '22004';
  END IF;
  SELECT r.state INTO v_state
    FROM skiplock.record(ARRAY[complete.id], ARRAY[complete.fencing], ARRAY['ok'],
                         ARRAY[complete.result]) r;
  IF v_state IS NOT NULL THEN
    RETURN v_state;
  END IF;
  IF EXISTS (SELECT 1 FROM skiplock.jobs j WHERE j.id = complete.id
                AND j.fencing = complete.fencing AND j.state = 'completed') THEN
    RETURN 'completed';
  END IF;
  RETURN 'fenced_out';
END
$fn$;

CREATE FUNCTION skiplock.fail(id bigint, fencing bigint, error text,
                              retryable boolean DEFAULT true, retry_after interval DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql AS $fn$
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
                         ARRAY[skiplock.interval_ms(fail.retry_after, 'retry_after')]) r;
  RETURN coalesce(v_state, 'fenced_out');
END
$fn$;

-- ---- heartbeat, rescue, the effect fence ----

CREATE TYPE skiplock.heartbeat_result AS (id bigint, extended boolean);

-- Extends the leases of running claims (ids[i], fencings[i]) to
-- now() + lease.  One row per input, in input order; extended = false for
-- a claim that was lost (the caller stops that job's handler).
CREATE FUNCTION skiplock.heartbeat(ids bigint[], fencings bigint[],
                                   lease interval DEFAULT '30 seconds')
RETURNS SETOF skiplock.heartbeat_result
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
  IF heartbeat.ids IS NULL OR heartbeat.fencings IS NULL OR heartbeat.lease IS NULL THEN
    RAISE EXCEPTION 'heartbeat: ids, fencings and lease must not be NULL' USING ERRCODE = '22004';
  END IF;
  IF cardinality(heartbeat.ids) <> cardinality(heartbeat.fencings) THEN
    RAISE EXCEPTION 'heartbeat: % ids but % fencings', cardinality(heartbeat.ids),
      cardinality(heartbeat.fencings) USING ERRCODE = '2202E';
  END IF;
  IF heartbeat.lease < interval '100 milliseconds' OR heartbeat.lease > interval '1 day' THEN
    RAISE EXCEPTION 'heartbeat: lease must be 100 ms to 1 day, got %', heartbeat.lease
      USING ERRCODE = '22023';
  END IF;
  RETURN QUERY
  WITH v AS (SELECT * FROM unnest(heartbeat.ids, heartbeat.fencings) WITH ORDINALITY
                             AS v(id, fencing, ord)),
  u AS (UPDATE skiplock.jobs j SET lease_expires_at = now() + heartbeat.lease
          FROM v WHERE j.id = v.id AND j.fencing = v.fencing AND j.state = 'running' COLLATE "C"
        RETURNING j.id, v.fencing)
  SELECT v.id, u.id IS NOT NULL FROM v LEFT JOIN u ON u.id = v.id AND u.fencing = v.fencing
   ORDER BY v.ord;
END
$fn$;

CREATE TYPE skiplock.rescued_job AS (id bigint, state text, queue text, kind text);

-- Gives back up to n running jobs whose lease expired (database clock):
-- available again, or discarded when attempts are exhausted.  Rows other
-- callers hold are skipped.  Fencing is unchanged until the next claim.
CREATE FUNCTION skiplock.rescue(n int DEFAULT 1000)
RETURNS SETOF skiplock.rescued_job
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
  IF rescue.n IS NULL OR rescue.n NOT BETWEEN 1 AND 100000 THEN
    RAISE EXCEPTION 'rescue: n must be 1 to 100000' USING ERRCODE = '22023';
  END IF;
  RETURN QUERY
  WITH r AS (
    SELECT j.id FROM skiplock.jobs j
     WHERE j.state = 'running' AND j.lease_expires_at < now()
     ORDER BY j.lease_expires_at LIMIT rescue.n FOR UPDATE SKIP LOCKED)
  UPDATE skiplock.jobs j SET
    state = CASE WHEN j.attempt >= j.max_attempts THEN 'discarded' ELSE 'available' END,
    finished_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
    run_at = now(), lease_owner = NULL, lease_expires_at = NULL,
    errors = (CASE WHEN jsonb_array_length(j.errors) >= 20 THEN j.errors - 0 ELSE j.errors END)
             || jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'at', now(),
                'error', 'lease expired: ' || coalesce(j.lease_owner, '?')
                         || ' stopped renewing it'))
    FROM r WHERE j.id = r.id
  RETURNING j.id, j.state, j.queue, j.kind;
END
$fn$;

-- Inside the caller's transaction, before a handler writes its effect:
-- locks the job row FOR SHARE and raises SK001 unless (id, fencing) is the
-- job's current, running claim.  While the lock is held no rescue, cancel
-- or new claim can change the row, so an effect that passed the fence
-- commits before any later owner's (docs/queue.md, "the effect pattern").
CREATE FUNCTION skiplock.job_fence(id bigint, fencing bigint)
RETURNS void
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_fencing bigint;
  v_state text;
BEGIN
  SELECT j.fencing, j.state INTO v_fencing, v_state
    FROM skiplock.jobs j WHERE j.id = job_fence.id FOR SHARE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'job % does not exist', job_fence.id USING ERRCODE = 'SK001';
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

-- A worker's breaker settings for a kind, written at start-up.
CREATE FUNCTION skiplock.breaker_configure(kind text, failure_pct int, min_calls int,
                                           window_calls int, window_ms bigint, open_ms bigint,
                                           probes int)
RETURNS void
LANGUAGE sql AS $fn$
  INSERT INTO skiplock.breakers AS b (kind, failure_pct, min_calls, window_calls, window_ms,
                                      open_ms, probes)
  VALUES ($1, $2, $3, $4, $5, $6, $7)
  ON CONFLICT (kind) DO UPDATE SET failure_pct = $2, min_calls = $3, window_calls = $4,
                                   window_ms = $5, open_ms = $6, probes = $7
   WHERE (b.failure_pct, b.min_calls, b.window_calls, b.window_ms, b.open_ms, b.probes)
         IS DISTINCT FROM ($2, $3, $4, $5, $6, $7)
$fn$;

-- ---- leases: the migration lease belongs to the migrator ----

-- Lease names starting with 'skiplock.migrate:' are the migration leases:
-- only a member of the schema owner's role (the migrator) may take, renew,
-- release or fence them, so a worker role cannot block `migrate up`.
CREATE OR REPLACE FUNCTION skiplock.lease_check_args(p_name text, p_owner text, p_ttl interval)
RETURNS void
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  IF p_name IS NULL OR length(p_name) NOT BETWEEN 1 AND 256 THEN
    RAISE EXCEPTION 'lease name must be 1 to 256 characters' USING ERRCODE = '22023';
  END IF;
  IF p_owner IS NULL OR length(p_owner) NOT BETWEEN 1 AND 256 THEN
    RAISE EXCEPTION 'lease owner must be 1 to 256 characters' USING ERRCODE = '22023';
  END IF;
  IF p_ttl IS NULL OR p_ttl <= interval '0' OR p_ttl > interval '365 days' THEN
    RAISE EXCEPTION 'lease ttl must be positive and at most 365 days, got %',
      coalesce(p_ttl::text, 'NULL') USING ERRCODE = '22023';
  END IF;
  PERFORM skiplock.lease_check_reserved(p_name);
END
$fn$;

CREATE FUNCTION skiplock.lease_check_reserved(p_name text)
RETURNS void
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  IF p_name LIKE 'skiplock.migrate:%' AND NOT pg_has_role(session_user,
       (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'skiplock'), 'MEMBER') THEN
    RAISE EXCEPTION 'lease "%" is reserved for the migrator', p_name
      USING ERRCODE = '42501',
            HINT = 'Migration leases are taken by `skiplock migrate` as the schema owner.';
  END IF;
END
$fn$;

-- lease_fence checks the reserved names too; otherwise step 0003's.
CREATE OR REPLACE FUNCTION skiplock.lease_fence(name text, fencing bigint)
RETURNS void
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_fencing bigint;
  v_owner text;
  v_expires timestamptz;
BEGIN
  PERFORM skiplock.lease_check_reserved(lease_fence.name);
  SELECT l.fencing, l.owner, l.expires_at INTO v_fencing, v_owner, v_expires
    FROM skiplock.leases l WHERE l.name = lease_fence.name
     FOR SHARE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'lease "%" does not exist', lease_fence.name
      USING ERRCODE = 'SK001',
            DETAIL = 'A fenced write needs the token of a live lease; this transaction is aborted.';
  END IF;
  IF lease_fence.fencing IS DISTINCT FROM v_fencing THEN
    RAISE EXCEPTION 'stale fencing token % for lease "%"',
                    coalesce(lease_fence.fencing::text, 'NULL'), lease_fence.name
      USING ERRCODE = 'SK001',
            DETAIL = format('The current token is %s, held by %s. This transaction is '
                            'aborted so that a writer that lost the lease changes nothing.',
                            v_fencing, v_owner);
  END IF;
  IF v_expires <= clock_timestamp() THEN
    RAISE EXCEPTION 'lease "%" expired (token %)', lease_fence.name, v_fencing
      USING ERRCODE = 'SK001',
            DETAIL = format('It expired at %s and was not renewed. This transaction is '
                            'aborted so that a writer that lost the lease changes nothing.',
                            v_expires);
  END IF;
END
$fn$;

-- ---- least privilege ----

-- The functions a worker role may call run as their owner with a fixed
-- search_path; nothing else reaches the tables.
DO $do$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'skiplock'::regnamespace AND p.prokind = 'f'
              AND p.proname IN ('enqueue', 'enqueue_many', 'enqueue_many_unchecked',
                                'enqueue_one', 'claim', 'claim_probes', 'record',
                                'record_claim', 'complete', 'fail', 'heartbeat', 'rescue',
                                'job_fence', 'breaker_configure', 'lease_acquire',
                                'lease_renew', 'lease_release', 'lease_fence', 'idem_claim',
                                'idem_complete', 'idem_release', 'idem_prune', 'schedule_fire')
  LOOP
    EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, pg_temp', f);
  END LOOP;
END
$do$;

-- Roles granted by `skiplock init`, kept so that every later init (an
-- upgrade that adds functions) grants them again.
CREATE TABLE skiplock.granted_roles (
  role_name  text PRIMARY KEY,
  kind       text NOT NULL CHECK (kind IN ('worker', 'operator', 'reader')),
  granted_at timestamptz NOT NULL DEFAULT now()
);

-- What each kind of role may do (docs/security.md has the table):
--   reader    SELECT on the job, breaker, schedule, lease and version tables;
--             the read-only functions.
--   worker    reader + EXECUTE on the protocol, enqueue, lease, idempotency
--             and cron-tick functions.  No INSERT, UPDATE or DELETE anywhere.
--   operator  worker + INSERT, UPDATE, DELETE on jobs, schedules, breakers
--             and their events (jobs retry/cancel/prune, cron add/remove,
--             breakers open/close).  Never migrations, leases, idempotency
--             keys or schema_version.
CREATE FUNCTION skiplock.grant_role(p_role text, p_kind text) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  f regprocedure;
BEGIN
  EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA skiplock FROM %I', p_role);
  EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA skiplock FROM %I', p_role);
  EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA skiplock FROM %I', p_role);
  EXECUTE format('GRANT USAGE ON SCHEMA skiplock TO %I', p_role);
  EXECUTE format('GRANT SELECT ON skiplock.jobs, skiplock.breakers, skiplock.breaker_events, '
                 'skiplock.schedules, skiplock.leases, skiplock.schema_version TO %I', p_role);
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'skiplock'::regnamespace AND p.prokind = 'f'
              AND (p.proname IN ('installed_version', 'backoff_delay', 'retry_delay_ms',
                                 'breaker_step', 'check_job_times', 'interval_ms',
                                 'check_claim_args', 'lease_check_args', 'lease_check_reserved')
                   OR (p_kind <> 'reader' AND p.prosecdef))
  LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f, p_role);
  END LOOP;
  IF p_kind = 'operator' THEN
    EXECUTE format('GRANT INSERT, UPDATE, DELETE ON skiplock.jobs, skiplock.schedules, '
                   'skiplock.breakers, skiplock.breaker_events, skiplock.enqueue_tokens TO %I',
                   p_role);
    EXECUTE format('GRANT SELECT ON skiplock.enqueue_tokens TO %I', p_role);
    EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA skiplock TO %I', p_role);
  END IF;
  INSERT INTO skiplock.granted_roles (role_name, kind) VALUES (p_role, p_kind)
  ON CONFLICT (role_name) DO UPDATE SET kind = EXCLUDED.kind, granted_at = now();
END
$fn$;

DROP FUNCTION skiplock.grant_roles(text, text);
CREATE FUNCTION skiplock.grant_roles(p_owner text, p_worker text, p_operator text DEFAULT NULL,
                                     p_reader text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  r record;
BEGIN
  IF p_owner IS NOT NULL THEN
    EXECUTE format('ALTER SCHEMA skiplock OWNER TO %I', p_owner);
    FOR r IN
      SELECT c.oid::regclass AS obj, c.relkind FROM pg_class c
      WHERE c.relnamespace = 'skiplock'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
        AND NOT EXISTS (SELECT 1 FROM pg_depend d
                        WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                          AND d.deptype IN ('a', 'i') AND c.relkind = 'S')
    LOOP
      EXECUTE format('ALTER %s %s OWNER TO %I',
                     CASE r.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                                    WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
                     r.obj, p_owner);
    END LOOP;
    FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_proc p
             WHERE p.pronamespace = 'skiplock'::regnamespace AND p.prokind = 'f' LOOP
      EXECUTE format('ALTER FUNCTION %s OWNER TO %I', r.fn, p_owner);
    END LOOP;
    FOR r IN SELECT t.oid::regtype AS ty FROM pg_type t
             WHERE t.typnamespace = 'skiplock'::regnamespace AND t.typtype = 'c'
               AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = t.typrelid
                                                          AND c.relkind <> 'c') LOOP
      EXECUTE format('ALTER TYPE %s OWNER TO %I', r.ty, p_owner);
    END LOOP;
    -- Step 0008 gave the worker default privileges on new objects: gone.
    FOR r IN SELECT DISTINCT grantee::regrole::text AS g
               FROM pg_default_acl d, aclexplode(d.defaclacl) a
              WHERE d.defaclnamespace = 'skiplock'::regnamespace AND a.grantee <> 0 LOOP
      EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA skiplock '
                     'REVOKE ALL ON TABLES FROM %s', p_owner, r.g);
      EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA skiplock '
                     'REVOKE ALL ON SEQUENCES FROM %s', p_owner, r.g);
      EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA skiplock '
                     'REVOKE ALL ON FUNCTIONS FROM %s', p_owner, r.g);
    END LOOP;
  END IF;
  IF p_worker IS NOT NULL THEN
    PERFORM skiplock.grant_role(p_worker, 'worker');
  END IF;
  IF p_operator IS NOT NULL THEN
    PERFORM skiplock.grant_role(p_operator, 'operator');
  END IF;
  IF p_reader IS NOT NULL THEN
    PERFORM skiplock.grant_role(p_reader, 'reader');
  END IF;
  -- Every role granted before gets the functions later steps added.
  FOR r IN SELECT g.role_name, g.kind FROM skiplock.granted_roles g
            WHERE g.role_name IS DISTINCT FROM p_worker AND g.role_name IS DISTINCT FROM p_operator
              AND g.role_name IS DISTINCT FROM p_reader
              AND EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name) LOOP
    PERFORM skiplock.grant_role(r.role_name, r.kind);
  END LOOP;
END
$fn$;

-- Functions run only for those granted them: nothing for PUBLIC.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;
-- Roles that step 0008 granted (plain DML everywhere) lose it now; they
-- get their grants back as workers when init runs with --grant-worker,
-- or at once here when they are recognisable as 0008's worker grants.
DO $do$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT DISTINCT grantee FROM information_schema.role_table_grants
            WHERE table_schema = 'skiplock' AND table_name = 'jobs'
              AND privilege_type = 'UPDATE'
              AND grantee NOT IN (SELECT rolname FROM pg_roles WHERE rolsuper)
              AND grantee <> (SELECT nspowner::regrole::text FROM pg_namespace
                               WHERE nspname = 'skiplock') LOOP
    PERFORM skiplock.grant_role(r.grantee, 'worker');
  END LOOP;
END
$do$;

COMMENT ON FUNCTION skiplock.claim(text, text[], text[], int, interval, int, bigint, bigint) IS
  'claim up to n due jobs of the kinds (and queues) for owner under a lease; SKIP LOCKED';
COMMENT ON FUNCTION skiplock.record(bigint[], bigint[], text[], jsonb[], text[], bigint[],
                                    boolean[], text[], bigint[], bigint[]) IS
  'fenced outcomes, batched: one row per accepted outcome; the retry decision is made here';
COMMENT ON FUNCTION skiplock.record_claim(bigint[], bigint[], text[], jsonb[], text[], bigint[],
                                          boolean[], text[], bigint[], bigint[], text, text[],
                                          text[], int, interval, int, bigint, bigint) IS
  'record outcomes, then claim, in one call: rows tagged recorded / claimed';
COMMENT ON FUNCTION skiplock.complete(bigint, bigint, jsonb) IS
  'fenced completion: completed (also on a repeat by the same claim) or fenced_out';
COMMENT ON FUNCTION skiplock.fail(bigint, bigint, text, boolean, interval) IS
  'fenced failed attempt: available (retry at run_at), discarded, or fenced_out';
COMMENT ON FUNCTION skiplock.heartbeat(bigint[], bigint[], interval) IS
  'extend running claims; extended = false for a claim that was lost';
COMMENT ON FUNCTION skiplock.rescue(int) IS
  'give back up to n running jobs whose lease expired';
COMMENT ON FUNCTION skiplock.job_fence(bigint, bigint) IS
  'in the caller''s transaction: lock the job FOR SHARE, raise SK001 unless the claim is current';
COMMENT ON FUNCTION skiplock.retry_delay_ms(skiplock.jobs, bigint, boolean, text, bigint, bigint,
                                            double precision, double precision) IS
  'the retry decision: delay in ms before the next attempt of a failed job';
COMMENT ON FUNCTION skiplock.enqueue(text, jsonb, text, timestamptz, int, text, int, interval,
                                     text, interval, interval) IS
  'enqueue one job in the caller''s transaction; the holder''s id when unique_key is taken';
