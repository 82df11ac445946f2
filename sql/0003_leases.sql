-- skiplock schema step 0003: named leases with fencing tokens.
--
-- A lease is a row, not a session: who holds NAME is written in
-- skiplock.leases with an expiry judged by the database clock and a fencing
-- token.  The clock is read when each check or write happens
-- (clock_timestamp()), not at the start of the caller's transaction: an
-- acquisition that waited for a row lock gets its full ttl from the moment
-- it took the lease, and a long transaction cannot see an expired lease as
-- live.  Nothing here depends on the connection that made the call, so
-- every function works through a transaction-mode pooler and survives a
-- reconnect between any two calls.
--
-- A row is in one of two states:
--   live     expires_at > clock: `owner` holds the lease under token
--            `fencing`.  Entered by lease_acquire on a free or new name;
--            kept by lease_renew; left by lease_release or by time passing.
--   free     expires_at <= clock: nobody holds it, the row keeps the last
--            token.  Entered by release or expiry; left by lease_acquire.
--
-- Invariants:
--  1. Tokens of a name strictly increase, forever: each acquisition writes
--     the previous token + 1 into the same row, and rows are never deleted
--     (release only expires them; a trigger refuses DELETE and TRUNCATE).
--     Were a row deleted, tokens would start again at 1 and a stale
--     holder's token could become current again.
--  2. At most one live holder per name: lease_acquire is one INSERT … ON
--     CONFLICT DO UPDATE … WHERE expires_at <= clock; concurrent callers
--     serialise on the row, and only the first to find it expired wins.
--  3. Renew and release change the row only when name, owner and token all
--     match, so a holder that lost the lease changes nothing and is told
--     so (false).
--  4. lease_fence(name, token) locks the row FOR SHARE until the caller's
--     transaction ends, and raises SQLSTATE SK001 unless token is the
--     current token of a live lease.  While it holds the lock no new token
--     can be issued, so a fenced write that passed is ordered before any
--     later holder's; a stale writer's whole transaction aborts.

CREATE TABLE skiplock.leases (
  name        text        PRIMARY KEY,
  owner       text        NOT NULL,
  fencing     bigint      NOT NULL,
  acquired_at timestamptz NOT NULL,
  expires_at  timestamptz NOT NULL,
  renewed_at  timestamptz NOT NULL,
  CONSTRAINT leases_name_check CHECK (length(name) BETWEEN 1 AND 256),
  CONSTRAINT leases_owner_check CHECK (length(owner) BETWEEN 1 AND 256),
  CONSTRAINT leases_fencing_check CHECK (fencing >= 1)
) WITH (fillfactor = 50);  -- room on the page keeps renewals HOT updates

COMMENT ON TABLE skiplock.leases IS
  'named leases: one row per name, kept forever so fencing tokens never repeat';

CREATE FUNCTION skiplock.leases_keep_rows() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
  RAISE EXCEPTION 'rows of skiplock.leases are never deleted'
    USING ERRCODE = '55000',
          DETAIL = 'A lease row keeps the last fencing token of its name; without it '
                   'tokens would start again at 1 and a stale token could become current.',
          HINT = 'Release a lease with skiplock.lease_release, or let it expire.';
END
$fn$;

CREATE TRIGGER leases_keep_rows BEFORE DELETE ON skiplock.leases
  FOR EACH STATEMENT EXECUTE FUNCTION skiplock.leases_keep_rows();
CREATE TRIGGER leases_keep_rows_truncate BEFORE TRUNCATE ON skiplock.leases
  FOR EACH STATEMENT EXECUTE FUNCTION skiplock.leases_keep_rows();

-- Bad arguments are data errors (22023), reported before anything is
-- written.
CREATE FUNCTION skiplock.lease_check_args(p_name text, p_owner text, p_ttl interval)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  IF p_name IS NULL OR length(p_name) NOT BETWEEN 1 AND 256 THEN
    RAISE EXCEPTION 'lease name must be 1 to 256 characters' USING ERRCODE = '22023';
  END IF;
  IF p_owner IS NULL OR length(p_owner) NOT BETWEEN 1 AND 256 THEN
    RAISE EXCEPTION 'lease owner must be 1 to 256 characters' USING ERRCODE = '22023';
  END IF;
  IF p_ttl IS NULL OR p_ttl <= interval '0' THEN
    RAISE EXCEPTION 'lease ttl must be positive, got %', coalesce(p_ttl::text, 'NULL')
      USING ERRCODE = '22023';
  END IF;
END
$fn$;

-- Takes NAME for OWNER for TTL.  Returns the new fencing token — one more
-- than any token the name had before, 1 for a new name — or NULL while a
-- live lease is held (by anyone, the same owner included: a holder already
-- has its token, and two processes sharing an owner id must not both run).
CREATE FUNCTION skiplock.lease_acquire(name text, owner text, ttl interval)
RETURNS bigint
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_fencing bigint;
BEGIN
  PERFORM skiplock.lease_check_args(lease_acquire.name, lease_acquire.owner, lease_acquire.ttl);
  INSERT INTO skiplock.leases AS l (name, owner, fencing, acquired_at, expires_at, renewed_at)
  VALUES (lease_acquire.name, lease_acquire.owner, 1, clock_timestamp(),
          clock_timestamp() + lease_acquire.ttl, clock_timestamp())
  ON CONFLICT ON CONSTRAINT leases_pkey DO UPDATE
     SET owner = EXCLUDED.owner,
         fencing = l.fencing + 1,
         acquired_at = clock_timestamp(),
         expires_at = clock_timestamp() + lease_acquire.ttl,
         renewed_at = clock_timestamp()
   WHERE l.expires_at <= clock_timestamp()
  RETURNING l.fencing INTO v_fencing;
  RETURN v_fencing;
END
$fn$;

-- Extends a live lease to clock_timestamp() + TTL.  True when NAME is live and held by
-- OWNER under FENCING; false otherwise (lost, expired, wrong owner or
-- token), and then nothing changes.  A repeated call is harmless.
CREATE FUNCTION skiplock.lease_renew(name text, owner text, fencing bigint, ttl interval)
RETURNS boolean
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
  PERFORM skiplock.lease_check_args(lease_renew.name, lease_renew.owner, lease_renew.ttl);
  UPDATE skiplock.leases l
     SET expires_at = clock_timestamp() + lease_renew.ttl, renewed_at = clock_timestamp()
   WHERE l.name = lease_renew.name AND l.owner = lease_renew.owner
     AND l.fencing = lease_renew.fencing AND l.expires_at > clock_timestamp();
  RETURN FOUND;
END
$fn$;

-- Ends the lease at once.  True when OWNER's token FENCING is still the
-- name's current token (live, or expired and not taken since: a repeated
-- release answers true again); false otherwise, and then nothing changes.
-- The row stays, keeping the token.
CREATE FUNCTION skiplock.lease_release(name text, owner text, fencing bigint)
RETURNS boolean
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
  UPDATE skiplock.leases l
     SET expires_at = least(l.expires_at, clock_timestamp())
   WHERE l.name = lease_release.name AND l.owner = lease_release.owner
     AND l.fencing = lease_release.fencing;
  RETURN FOUND;
END
$fn$;

-- Inside the caller's transaction, before its writes: locks NAME's row FOR
-- SHARE (no new token can be issued until the transaction ends) and raises
-- SQLSTATE SK001 unless FENCING is the current token of a live lease, so a
-- writer that lost the lease has its whole transaction aborted.  Keep the
-- transaction short: while it is open the next holder cannot acquire.
CREATE FUNCTION skiplock.lease_fence(name text, fencing bigint)
RETURNS void
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v_fencing bigint;
  v_owner text;
  v_expires timestamptz;
BEGIN
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

COMMENT ON FUNCTION skiplock.lease_acquire(text, text, interval) IS
  'new fencing token for owner, or NULL while a live lease is held';
COMMENT ON FUNCTION skiplock.lease_renew(text, text, bigint, interval) IS
  'extend a live lease held by (owner, fencing); false when lost';
COMMENT ON FUNCTION skiplock.lease_release(text, text, bigint) IS
  'expire the lease now if (owner, fencing) is current; the row keeps the token';
COMMENT ON FUNCTION skiplock.lease_fence(text, bigint) IS
  'in the caller''s transaction: lock the lease FOR SHARE, raise SK001 unless the token is current and live';
