-- skiplock schema step 0036: record_rows and record_claim_rows, record and
-- record_claim with the outcomes as an array of skiplock.outcome records
-- (protocol 4), for a worker that can write the array's text itself, as
-- the C worker does.
--
-- Protocol 3's JSON array costs the server more than the records do: for
-- a batch of 448 outcomes, about 1.5 ms to parse the JSON text, make the
-- records and refuse unknown fields, against about 0.3 ms to read the same
-- outcomes as skiplock.outcome[] (docs/performance.md).  The fastest drain
-- records 448 outcomes and claims 448 jobs per call in about 15 ms of the
-- backend's time, so the JSON cost that drain about 7 %.  The records need
-- no field check (their fields are the type's); the rest of the checks are
-- those of the JSON form, in one place (outcomes_check).
--
--   record_rows(outcome_rows skiplock.outcome[])
--   record_claim_rows(outcome_rows skiplock.outcome[], owner, kinds,
--                     queues, n, lease, after_priority, after_run_at_us,
--                     after_id, wait_hints)
--
-- Names of their own, not overloads of record and record_claim: an untyped
-- literal, skiplock.record('[...]') in psql, would no longer know which to
-- call.  The JSON forms stay protocol 3's, for the clients, which encode
-- them with their language's JSON encoder.

-- The checks of a batch of outcome records: refused whole (22004, 22023)
-- or given back as they are.
CREATE FUNCTION skiplock_internal.outcomes_check(p_outcomes skiplock.outcome[])
RETURNS skiplock.outcome[]
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  v_unhandled bigint;
  v_bad bigint;
BEGIN
  IF p_outcomes IS NULL THEN
    RAISE EXCEPTION 'record: outcomes must not be NULL' USING ERRCODE = '22004';
  END IF;
  IF cardinality(p_outcomes) > skiplock.outcomes_max() THEN
    RAISE EXCEPTION 'record: at most % outcomes per call, got %', skiplock.outcomes_max(),
      cardinality(p_outcomes) USING ERRCODE = '22023';
  END IF;
  SELECT count(*) FILTER (WHERE o.id IS NULL OR o.fencing IS NULL),
         count(*) FILTER (WHERE o.outcome IS NULL
                             OR o.outcome NOT IN ('ok', 'retry', 'fail', 'discard')
                             OR o.backoff NOT IN ('full', 'equal', 'decorrelated',
                                                  'exponential', 'fixed')
                             OR o.retry_after_ms < 0 OR o.backoff_base_ms < 0
                             OR o.backoff_cap_ms < 0)
    INTO v_unhandled, v_bad FROM unnest(p_outcomes) o;
  IF v_unhandled > 0 THEN
    RAISE EXCEPTION 'record: every outcome needs an id and a fencing token'
      USING ERRCODE = '22004';
  END IF;
  IF v_bad > 0 THEN
    RAISE EXCEPTION 'record: an outcome is ok, retry, fail or discard; a backoff is full, '
                    'equal, decorrelated, exponential or fixed; delays are not negative'
      USING ERRCODE = '22023';
  END IF;
  RETURN p_outcomes;
END
$fn$;
COMMENT ON FUNCTION skiplock_internal.outcomes_check(skiplock.outcome[]) IS
  'Internal: refuses (22004, 22023) a batch of outcome records that is NULL, longer than outcomes_max(), or has an outcome without id or fencing token, an unknown outcome or backoff, or a negative delay; else returns it.';

-- The JSON form: the JSON's own checks, then the records' (outcomes_check).
CREATE OR REPLACE FUNCTION skiplock_internal.outcomes_read(outcomes jsonb)
RETURNS skiplock.outcome[]
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  v_fields CONSTANT text[] := ARRAY['queue', 'id', 'fencing', 'outcome', 'result', 'error',
    'retry_after_ms', 'deferred', 'backoff', 'backoff_base_ms', 'backoff_cap_ms'];
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
  RETURN skiplock_internal.outcomes_check(
    ARRAY(SELECT o FROM jsonb_populate_recordset(NULL::skiplock.outcome, outcomes) o));
END
$fn$;

CREATE FUNCTION skiplock.record_claim_rows(outcome_rows skiplock.outcome[], owner text,
    kinds text[], queues text[], n integer, lease interval, after_priority integer DEFAULT NULL,
    after_run_at_us bigint DEFAULT NULL, after_id bigint DEFAULT NULL,
    wait_hints boolean DEFAULT false)
RETURNS SETOF skiplock.exchange_row
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN QUERY SELECT * FROM skiplock_internal.exchange(
    skiplock_internal.outcomes_check(outcome_rows), owner, kinds, queues, n, lease,
    after_priority, after_run_at_us, after_id, wait_hints);
END
$fn$;
COMMENT ON FUNCTION skiplock.record_claim_rows(skiplock.outcome[], text, text[], text[], integer,
                                               interval, integer, bigint, bigint, boolean) IS
  'record outcomes, then claim, in one call (protocol 4): outcome_rows is an array of skiplock.outcome records; otherwise as record_claim (outcomes jsonb)';

CREATE FUNCTION skiplock.record_rows(outcome_rows skiplock.outcome[])
RETURNS SETOF skiplock.recorded_outcome
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN QUERY
    SELECT x.id, x.state, x.run_at, x.delay_ms
      FROM skiplock_internal.exchange(skiplock_internal.outcomes_check(outcome_rows), NULL,
                                      NULL, NULL, 0, NULL, NULL, NULL, NULL, false) x;
END
$fn$;
COMMENT ON FUNCTION skiplock.record_rows(skiplock.outcome[]) IS
  'Records a batch of outcomes (protocol 4: an array of skiplock.outcome records), each fenced by its handle; one row per outcome accepted.';

CREATE OR REPLACE FUNCTION skiplock.protocol_version() RETURNS integer
LANGUAGE sql IMMUTABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$ SELECT 4 $fn$;
COMMENT ON FUNCTION skiplock.protocol_version() IS
  'The worker protocol the schema speaks: 4, record_rows and record_claim_rows take the outcomes as an array of skiplock.outcome records, record and record_claim as a JSON array of skiplock.outcome objects (since 3); the job handle is (queue, id, fencing) since 2.';

-- New functions are executable by PUBLIC until revoked; grant_role gives
-- the workers record_rows and record_claim_rows (SECURITY DEFINER).
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock, skiplock_internal FROM PUBLIC;
SELECT skiplock_internal.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);
