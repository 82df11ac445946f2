-- skiplock schema step 0005: idempotency keys.
--
-- The insert is the claim: the primary key on `key` decides which of any
-- number of concurrent attempts does the work, in one statement, with no
-- read-then-write window.  A retry of a finished request gets the stored
-- response (status code and body); a concurrent attempt is told the work is
-- in progress; the same key with a different request fingerprint is refused.
--
-- States of a key:
--   in_progress  entered by a claim that returned 'acquired' (a new key, an
--                expired key, or an abandoned claim taken over); left by
--                idem_complete (-> completed), idem_release (row deleted),
--                a takeover once locked_until has passed (stays
--                in_progress, claims + 1), or expiry and prune.
--   completed    entered by idem_complete; left only by expiry: an expired
--                key may be claimed afresh or deleted by idem_prune.
--
-- Recovery of abandoned claims: an in_progress claim protects itself until
-- locked_until (claim time + the recovery window, default 60 s).  After
-- that a claim with the same fingerprint takes it over, so a server that
-- crashed between claiming and completing does not block its key until
-- expiry.  The trade-off: a holder still working after the window races
-- the taker-over.  idem_complete succeeds only on an in_progress key, so
-- when the side effect and idem_complete share one transaction, the
-- second of two racing holders fails at idem_complete and its side effect
-- rolls back; the window must exceed the longest handler otherwise.
--
-- Times that a wait may have preceded (a claim queued behind another
-- claim's row lock) are read from clock_timestamp(), not now().

CREATE TABLE skiplock.idempotency_keys (
  key           text        PRIMARY KEY,
  -- The caller's fingerprint of the request (e.g. SHA-256 hex of method,
  -- path and body): the same key with another fingerprint is a conflict.
  request_hash  text        NOT NULL,
  state         text        NOT NULL DEFAULT 'in_progress',
  response_code int,
  response_body jsonb,
  -- Acquisitions so far: 1 for the first claim, + 1 per takeover.
  claims        int         NOT NULL DEFAULT 1,
  -- in_progress: the claim may not be taken over before this instant.
  locked_until  timestamptz,
  created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
  completed_at  timestamptz,
  -- After this instant the key is forgotten: reusable, and pruned.
  expires_at    timestamptz NOT NULL,
  CONSTRAINT idempotency_keys_key_check CHECK (octet_length(key) BETWEEN 1 AND 255),
  CONSTRAINT idempotency_keys_hash_check CHECK (octet_length(request_hash) BETWEEN 1 AND 255),
  CONSTRAINT idempotency_keys_state_check CHECK (state IN ('in_progress', 'completed')),
  CONSTRAINT idempotency_keys_completed_check
    CHECK ((state = 'completed') = (response_code IS NOT NULL))
);

-- idem_prune reads the oldest expired keys: a range scan, not a table scan.
CREATE INDEX idempotency_keys_expires_idx ON skiplock.idempotency_keys (expires_at);

-- Claims `key` for a request with fingerprint `request_hash`.
--   acquired     do the work, then idem_complete (or idem_release)
--   replay       finished before with the same fingerprint: return the
--                stored response_code and response_body verbatim
--   in_progress  another attempt holds the key and is not abandoned
--   conflict     the key belongs to a request with another fingerprint
-- `ttl` is how long the key is remembered; `recovery` how long an
-- in-progress claim is protected from takeover.
CREATE FUNCTION skiplock.idem_claim(
  key text, request_hash text, ttl interval DEFAULT '24 hours',
  recovery interval DEFAULT '60 seconds')
RETURNS TABLE(outcome text, response_code int, response_body jsonb)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_variable
DECLARE
  k skiplock.idempotency_keys;
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
  -- A few rounds: the key may be released or pruned between the insert
  -- that did not take it and the read of the row that holds it.
  FOR round IN 1..5 LOOP
    INSERT INTO skiplock.idempotency_keys AS t (key, request_hash, locked_until, expires_at)
    VALUES (key, request_hash, clock_timestamp() + recovery, clock_timestamp() + ttl)
    ON CONFLICT ON CONSTRAINT idempotency_keys_pkey DO UPDATE
       SET request_hash = excluded.request_hash, state = 'in_progress',
           response_code = NULL, response_body = NULL,
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
      RETURN QUERY SELECT 'acquired'::text, NULL::int, NULL::jsonb;
      RETURN;
    END IF;
    -- A new statement: its snapshot sees the row the insert collided with.
    SELECT * INTO k FROM skiplock.idempotency_keys t
     WHERE t.key = key AND t.expires_at > clock_timestamp()
       AND (t.state = 'completed' OR t.locked_until > clock_timestamp()
            OR t.request_hash <> request_hash);
    IF FOUND THEN
      IF k.request_hash <> request_hash THEN
        RETURN QUERY SELECT 'conflict'::text, NULL::int, NULL::jsonb;
      ELSIF k.state = 'completed' THEN
        RETURN QUERY SELECT 'replay'::text, k.response_code, k.response_body;
      ELSE
        RETURN QUERY SELECT 'in_progress'::text, NULL::int, NULL::jsonb;
      END IF;
      RETURN;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'idempotency key "%" is contended', key USING ERRCODE = '40001';
END
$fn$;

-- Stores the response of an acquired claim; the key then replays it until
-- it expires.  Calling it again with the same response is a no-op (a retry
-- after a lost answer); on a key that is not in progress otherwise — never
-- claimed, released, expired, or completed by an attempt that took the
-- claim over — it raises SQLSTATE SK002, so a side effect written in the
-- same transaction rolls back with it.
CREATE FUNCTION skiplock.idem_complete(key text, response_code int, response_body jsonb)
RETURNS void
LANGUAGE plpgsql AS $fn$
#variable_conflict use_variable
BEGIN
  IF response_code IS NULL THEN
    RAISE EXCEPTION 'response code must not be null' USING ERRCODE = '22023';
  END IF;
  UPDATE skiplock.idempotency_keys t
     SET state = 'completed', response_code = response_code,
         response_body = response_body, completed_at = clock_timestamp(), locked_until = NULL
   WHERE t.key = key AND t.state = 'in_progress' AND t.expires_at > clock_timestamp();
  IF FOUND THEN
    RETURN;
  END IF;
  PERFORM 1 FROM skiplock.idempotency_keys t
   WHERE t.key = key AND t.state = 'completed'
     AND t.response_code = response_code
     AND t.response_body IS NOT DISTINCT FROM response_body;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'idempotency key "%" is not in progress', key
      USING ERRCODE = 'SK002',
            HINT = 'The claim was released, expired, or taken over after its recovery window.';
  END IF;
END
$fn$;

-- Gives up an acquired claim before any side effect, so a retry may run at
-- once.  A key that is completed, or not there, is left alone.
CREATE FUNCTION skiplock.idem_release(key text)
RETURNS void
LANGUAGE sql AS $fn$
  DELETE FROM skiplock.idempotency_keys t
   WHERE t.key = idem_release.key AND t.state = 'in_progress'
$fn$;

-- Deletes up to `batch` expired keys, oldest first; returns how many.
-- Callers loop until it returns less than `batch`: each call is one short
-- transaction, and keys locked by a concurrent claim are skipped.
CREATE FUNCTION skiplock.idem_prune(batch int DEFAULT 1000)
RETURNS int
LANGUAGE sql AS $fn$
  WITH d AS (
    DELETE FROM skiplock.idempotency_keys WHERE key IN (
      SELECT key FROM skiplock.idempotency_keys
       WHERE expires_at <= clock_timestamp()
       ORDER BY expires_at LIMIT greatest(batch, 1) FOR UPDATE SKIP LOCKED)
     AND expires_at <= clock_timestamp()
    RETURNING 1)
  SELECT count(*)::int FROM d
$fn$;
