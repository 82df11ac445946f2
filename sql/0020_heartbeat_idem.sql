-- skiplock schema step 0020: a heartbeat that never waits for a row lock,
-- and idempotency claims with a holder token.
--
-- The heartbeat.  job_fence locks a job's row FOR SHARE for the whole of
-- the caller's effect transaction, and the heartbeat's UPDATE needs FOR NO
-- KEY UPDATE on the same row, which FOR SHARE blocks.  A worker sends one
-- heartbeat for all its claims, so one slow effect held the whole batch:
-- the statement waited (or timed out), no lease was extended, and the
-- worker's other jobs expired, were rescued and ran again.  Two ways out:
--
--   * job_fence could take FOR KEY SHARE, which does not conflict with an
--     UPDATE that leaves the key alone.  But neither do the UPDATEs that
--     end or move a claim: cancel, discard, retry, complete, record and
--     the rescue's UPDATE all take FOR NO KEY UPDATE, so they would pass
--     the fence and commit while the effect it guards is still open, and
--     the fence would promise nothing.  Rejected.
--   * The heartbeat locks its rows itself first, FOR NO KEY UPDATE SKIP
--     LOCKED, and updates only those it got.  It never waits, so one
--     locked row costs the batch nothing.  Taken.
--
-- A row the heartbeat could not lock is not reported lost: a second
-- statement (a newer snapshot) reads it, and while the claim is still
-- current (same fencing token, running) the answer is extended = true,
-- locked = true: still yours, lease not moved.  While a transaction holds
-- the row no rescue (SKIP LOCKED), claim or cancel can take the job, so
-- stopping its handler would be wrong; the usual holder is the owner's own
-- job_fence.  The holder may also be a rescue or an operator's cancel about
-- to end the claim: then the next heartbeat says lost, as it would have
-- one heartbeat later anyway.  job_fence is unchanged: its FOR SHARE still
-- keeps rescue, cancel and any new claim out until the effect commits.
--
-- heartbeat_result gains the column `locked`; the function keeps its
-- signature, `extended = false` still means lost, and a client that reads
-- only id and extended (every client before this step) stays correct.
--
-- Idempotency keys.  idem_complete took only the key, so any caller that
-- knew a key in progress could store a response for it: a forged replay
-- for every retry until the key expired.  Now idem_claim returns, with
-- `acquired`, a holder token: 64 hex digits from the server's strong
-- random source (gen_random_uuid, twice, through SHA-256).  The table
-- keeps only its SHA-256 (`holder_hash`; the table is readable by no role
-- but the owner anyway).  idem_complete(key, code, body, holder) and
-- idem_release(key, holder) are new overloads that act only for that
-- holder: a wrong token is SK002 (as a key not in progress), a NULL or
-- empty one 22023.  A takeover after the recovery window draws a new token,
-- so the holder that was taken over can no longer complete: the first
-- holder is fenced out whichever of the two finishes first.
--
-- The old calls.  idem_claim keeps its arguments and gains the fourth
-- result column `holder` (dropped and created again: a function's result
-- columns cannot change in place).  idem_complete(key, code, body) and
-- idem_release(key) remain, but act only on a claim without a holder: one
-- made before this step, so that a request in flight while `skiplock init`
-- runs can still finish.  For a claim made since, they raise 42501 naming
-- the new call.  So the migration is: first deploy the applications that
-- use idempotency keys with a library or client of this version (the C
-- library reads `holder` when the answer has it and uses the old calls
-- when it does not, so it works before and after this step), then run
-- `skiplock init`.  An application still on the old calls after the step
-- gets 42501 from idem_complete: its effect may have happened and its key
-- stays in progress until the recovery window lets a retry take it over.

-- ---- the heartbeat ----

ALTER TYPE skiplock.heartbeat_result ADD ATTRIBUTE locked boolean;

CREATE OR REPLACE FUNCTION skiplock.heartbeat(ids bigint[], fencings bigint[],
                                              lease interval DEFAULT '30 seconds')
RETURNS SETOF skiplock.heartbeat_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_extended boolean[];
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
  -- Never waits: a row another transaction holds is skipped here.
  WITH v AS (SELECT * FROM unnest(heartbeat.ids, heartbeat.fencings) WITH ORDINALITY
                             AS v(id, fencing, ord)),
  l AS (SELECT j.id FROM skiplock.jobs j, (SELECT DISTINCT v.id, v.fencing FROM v) d
         WHERE j.id = d.id AND j.fencing = d.fencing AND j.state = 'running' COLLATE "C"
           FOR NO KEY UPDATE OF j SKIP LOCKED),
  u AS (UPDATE skiplock.jobs j SET lease_expires_at = now() + heartbeat.lease
          FROM l WHERE j.id = l.id
        RETURNING j.id, j.fencing)
  SELECT array_agg(u.id IS NOT NULL ORDER BY v.ord) INTO v_extended
    FROM v LEFT JOIN u ON u.id = v.id AND u.fencing = v.fencing;
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
                      AND j.state = 'running' COLLATE "C") END AS held
            FROM unnest(heartbeat.ids, heartbeat.fencings, v_extended) WITH ORDINALITY
                   AS v(id, fencing, ok, ord) OFFSET 0) x
   ORDER BY x.ord;
END
$fn$;

-- ---- idempotency keys: the holder token ----

ALTER TABLE skiplock.idempotency_keys ADD COLUMN holder_hash bytea;

DROP FUNCTION skiplock.idem_claim(text, text, interval, interval);

-- As in step 0005, and an acquired claim (a new key, an expired one, or a
-- takeover) stores the SHA-256 of a new holder token and returns the token.
CREATE FUNCTION skiplock.idem_claim(key text, request_hash text,
                                    ttl interval DEFAULT '24 hours',
                                    recovery interval DEFAULT '60 seconds')
RETURNS TABLE (outcome text, response_code int, response_body jsonb, holder text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
  k skiplock.idempotency_keys;
  v_holder text;
BEGIN
  IF key IS NULL OR octet_length(key) NOT BETWEEN 1 AND 255 THEN
    RAISE EXCEPTION 'idempotency key must be 1 to 255 bytes' USING ERRCODE = '22023';
  END IF;
  IF request_hash IS NULL OR octet_length(request_hash) NOT BETWEEN 1 AND 255 THEN
    RAISE EXCEPTION 'request hash must be 1 to 255 bytes' USING ERRCODE = '22023';
  END IF;
  IF ttl IS NULL OR ttl <= interval '0' OR recovery IS NULL OR recovery <= interval '0' THEN
    RAISE EXCEPTION 'ttl and recovery window must be positive' USING ERRCODE = '22023';
  END IF;
  v_holder := encode(sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text,
                                       'UTF8')), 'hex');
  -- A few rounds: the key may be released or pruned between the insert
  -- that did not take it and the read of the row that holds it.
  FOR round IN 1..5 LOOP
    INSERT INTO skiplock.idempotency_keys AS t (key, request_hash, locked_until, expires_at,
                                                holder_hash)
    VALUES (key, request_hash, clock_timestamp() + recovery, clock_timestamp() + ttl,
            sha256(convert_to(v_holder, 'UTF8')))
    ON CONFLICT ON CONSTRAINT idempotency_keys_pkey DO UPDATE
       SET request_hash = excluded.request_hash, state = 'in_progress',
           response_code = NULL, response_body = NULL, holder_hash = excluded.holder_hash,
           claims = CASE WHEN t.expires_at <= clock_timestamp() THEN 1 ELSE t.claims + 1 END,
           locked_until = clock_timestamp() + recovery,
           created_at = CASE WHEN t.expires_at <= clock_timestamp()
                             THEN clock_timestamp() ELSE t.created_at END,
           completed_at = NULL,
           expires_at = CASE WHEN t.expires_at <= clock_timestamp()
                             THEN clock_timestamp() + ttl ELSE t.expires_at END
     WHERE t.expires_at <= clock_timestamp()
        OR (t.state = 'in_progress' AND t.locked_until <= clock_timestamp()
            AND t.request_hash = excluded.request_hash)
    RETURNING t.* INTO k;
    IF FOUND THEN
      RETURN QUERY SELECT 'acquired'::text, NULL::int, NULL::jsonb, v_holder;
      RETURN;
    END IF;
    -- A new statement: its snapshot sees the row the insert collided with.
    SELECT * INTO k FROM skiplock.idempotency_keys t
     WHERE t.key = key AND t.expires_at > clock_timestamp()
       AND (t.state = 'completed' OR t.locked_until > clock_timestamp()
            OR t.request_hash <> request_hash);
    IF FOUND THEN
      IF k.request_hash <> request_hash THEN
        RETURN QUERY SELECT 'conflict'::text, NULL::int, NULL::jsonb, NULL::text;
      ELSIF k.state = 'completed' THEN
        RETURN QUERY SELECT 'replay'::text, k.response_code, k.response_body, NULL::text;
      ELSE
        RETURN QUERY SELECT 'in_progress'::text, NULL::int, NULL::jsonb, NULL::text;
      END IF;
      RETURN;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'idempotency key "%" is contended', key USING ERRCODE = '40001';
END
$fn$;

-- The holder token checked before anything is read: 22023 when missing.
CREATE FUNCTION skiplock.idem_holder_hash(p_holder text) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  IF p_holder IS NULL OR octet_length(p_holder) NOT BETWEEN 1 AND 255 THEN
    RAISE EXCEPTION 'holder token must be 1 to 255 bytes, got %',
      coalesce(octet_length(p_holder)::text, 'NULL') USING ERRCODE = '22023',
      HINT = 'Pass the holder that skiplock.idem_claim returned with "acquired".';
  END IF;
  RETURN sha256(convert_to(p_holder, 'UTF8'));
END
$fn$;

-- Stores the response of the claim that `holder` acquired.  A repeat by
-- the same holder with the same response is a no-op (a retry after a
-- lost answer); anything else is SK002, the stored row unchanged.
CREATE FUNCTION skiplock.idem_complete(key text, response_code int, response_body jsonb,
                                       holder text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
  v_hash bytea := skiplock.idem_holder_hash(holder);
BEGIN
  IF response_code IS NULL THEN
    RAISE EXCEPTION 'response code must not be null' USING ERRCODE = '22023';
  END IF;
  UPDATE skiplock.idempotency_keys t
     SET state = 'completed', response_code = response_code,
         response_body = response_body, completed_at = clock_timestamp(), locked_until = NULL
   WHERE t.key = key AND t.state = 'in_progress' AND t.expires_at > clock_timestamp()
     AND t.holder_hash = v_hash;
  IF FOUND THEN
    RETURN;
  END IF;
  PERFORM 1 FROM skiplock.idempotency_keys t
   WHERE t.key = key AND t.state = 'completed' AND t.holder_hash = v_hash
     AND t.response_code = response_code
     AND t.response_body IS NOT DISTINCT FROM response_body;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'idempotency key "%" is not in progress under this holder', key
      USING ERRCODE = 'SK002',
            HINT = 'The claim was released, expired, or taken over after its recovery '
                   'window, or the holder is not the one idem_claim returned.';
  END IF;
END
$fn$;

-- Gives up the claim that `holder` acquired.  A key not in progress (done,
-- released, expired, unknown) is left alone; a key in progress under
-- another holder (a takeover, or a wrong token) is SK002.
CREATE FUNCTION skiplock.idem_release(key text, holder text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
  v_hash bytea := skiplock.idem_holder_hash(holder);
BEGIN
  DELETE FROM skiplock.idempotency_keys t
   WHERE t.key = key AND t.state = 'in_progress' AND t.holder_hash = v_hash;
  IF FOUND THEN
    RETURN;
  END IF;
  PERFORM 1 FROM skiplock.idempotency_keys t
   WHERE t.key = key AND t.state = 'in_progress' AND t.expires_at > clock_timestamp();
  IF FOUND THEN
    RAISE EXCEPTION 'idempotency key "%" is in progress under another holder', key
      USING ERRCODE = 'SK002',
            HINT = 'It was taken over after its recovery window, or the holder is not the '
                   'one idem_claim returned.';
  END IF;
END
$fn$;

-- The calls without a holder: only for a claim made before this step.
CREATE OR REPLACE FUNCTION skiplock.idem_complete(key text, response_code int,
                                                  response_body jsonb)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
BEGIN
  IF response_code IS NULL THEN
    RAISE EXCEPTION 'response code must not be null' USING ERRCODE = '22023';
  END IF;
  PERFORM 1 FROM skiplock.idempotency_keys t WHERE t.key = key AND t.holder_hash IS NOT NULL;
  IF FOUND THEN
    RAISE EXCEPTION 'idempotency key "%" was claimed with a holder token', key
      USING ERRCODE = '42501',
            HINT = 'Call skiplock.idem_complete(key, response_code, response_body, holder) '
                   'with the holder that skiplock.idem_claim returned.';
  END IF;
  UPDATE skiplock.idempotency_keys t
     SET state = 'completed', response_code = response_code,
         response_body = response_body, completed_at = clock_timestamp(), locked_until = NULL
   WHERE t.key = key AND t.state = 'in_progress' AND t.expires_at > clock_timestamp()
     AND t.holder_hash IS NULL;
  IF FOUND THEN
    RETURN;
  END IF;
  PERFORM 1 FROM skiplock.idempotency_keys t
   WHERE t.key = key AND t.state = 'completed' AND t.holder_hash IS NULL
     AND t.response_code = response_code
     AND t.response_body IS NOT DISTINCT FROM response_body;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'idempotency key "%" is not in progress', key
      USING ERRCODE = 'SK002',
            HINT = 'The claim was released, expired, or taken over after its recovery window.';
  END IF;
END
$fn$;

CREATE OR REPLACE FUNCTION skiplock.idem_release(key text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
BEGIN
  PERFORM 1 FROM skiplock.idempotency_keys t
   WHERE t.key = key AND t.state = 'in_progress' AND t.holder_hash IS NOT NULL;
  IF FOUND THEN
    RAISE EXCEPTION 'idempotency key "%" was claimed with a holder token', key
      USING ERRCODE = '42501',
            HINT = 'Call skiplock.idem_release(key, holder) with the holder that '
                   'skiplock.idem_claim returned.';
  END IF;
  DELETE FROM skiplock.idempotency_keys t
   WHERE t.key = key AND t.state = 'in_progress' AND t.holder_hash IS NULL;
END
$fn$;

-- ---- least privilege ----

-- The new functions are SECURITY DEFINER: grant_role gives them to worker
-- and operator roles, as the calls they replace; readers get none.
-- idem_holder_hash is granted to no role.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;
SELECT skiplock.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);

COMMENT ON COLUMN skiplock.idempotency_keys.holder_hash IS
  'SHA-256 of the holder token idem_claim returned with acquired; NULL for claims before step 0020';
COMMENT ON FUNCTION skiplock.heartbeat(bigint[], bigint[], interval) IS
  'extend running claims without waiting for row locks: extended = false when lost, locked = true when a transaction holds the row (not extended, still yours)';
COMMENT ON FUNCTION skiplock.idem_claim(text, text, interval, interval) IS
  'claim an idempotency key: acquired (with a holder token), replay, in_progress or conflict';
COMMENT ON FUNCTION skiplock.idem_holder_hash(text) IS
  'the stored form of a holder token; 22023 when it is missing';
COMMENT ON FUNCTION skiplock.idem_complete(text, int, jsonb, text) IS
  'store the response of the claim the holder acquired; SK002 otherwise';
COMMENT ON FUNCTION skiplock.idem_release(text, text) IS
  'give up the claim the holder acquired; SK002 when another holder has it';
COMMENT ON FUNCTION skiplock.idem_complete(text, int, jsonb) IS
  'without a holder: only for a claim made before step 0020 (42501 otherwise)';
COMMENT ON FUNCTION skiplock.idem_release(text) IS
  'without a holder: only for a claim made before step 0020 (42501 otherwise)';
