-- skiplock schema step 0018: maintenance never holds a lock that outcomes
-- wait for longer than its lock_timeout; its lease is reserved.
--
-- Before this step a round of skiplock.maintain was one transaction: it
-- reshaped partitions under LOCK TABLE finished_jobs ACCESS EXCLUSIVE, then
-- attached up to 48 partitions (each ATTACH scanning the whole default
-- partition under its ACCESS EXCLUSIVE lock) and dropped expired ones, and
-- held every one of those locks until the round committed.  With a default
-- partition of a few hundred thousand rows (a queue kept 365 days makes
-- one: its jobs expire past the partitions made ahead) a round took tens
-- of seconds, and every outcome that inserts into finished_jobs waited for
-- it; a maintainer stopped between the round and its COMMIT held the
-- locks until the server ended its idle transaction; a round longer than
-- the 15-second lease was done again by the next maintainer.
--
-- From this step maintenance is a sequence of steps, skiplock.maintain_step,
-- each one statement and one transaction of its own (the caller sends it
-- alone, outside any transaction block, so a stopped caller cannot keep it
-- open), each fenced by the maintenance lease and renewing it, each doing
-- one bounded thing.  A step that needs a lock outcomes conflict with waits
-- for it at most lock_timeout (50 ms) and then holds it only for catalog
-- work: no scan and no row is read or written under it.
--
--   expire    ALTER TABLE .. DETACH PARTITION of a partition whose upper
--             bound has passed (ACCESS EXCLUSIVE on finished_jobs and its
--             default partition, catalog only); a later step drops the
--             detached table, which locks nothing outcomes use.
--   create    CREATE TABLE of a missing range as a standalone table with a
--             CHECK matching its bound: no lock on finished_jobs but ACCESS
--             SHARE.  Listed in finished_tables until it is attached.
--   attach    ALTER TABLE .. ATTACH PARTITION: SHARE UPDATE EXCLUSIVE on
--             finished_jobs (outcomes do not conflict), ACCESS EXCLUSIVE on
--             the table and the default partition.  PostgreSQL scans the
--             default partition unless a valid CHECK on it excludes the
--             range.  So: when the default partition is small (4 MB at
--             most: its scan takes a few milliseconds) the range's rows
--             there are moved under that lock and the scan is cheap;
--             otherwise the range is attached inside an "area" (below).
--   fill      inside an area, moves rows of a range out of the default
--             partition into its table (one batch per step, row locks
--             only).  Until it is attached they are in no partition.
--   reshape   DETACH of an empty partition ahead wider than the width now
--             chosen, made again by create (small default partition, or
--             inside an area).
--   area      for a default partition larger than that: a CHECK on it
--             (expires_at < lo OR expires_at >= hi) added NOT VALID (ACCESS
--             EXCLUSIVE, catalog only), the area's rows moved out, VALIDATE
--             (SHARE UPDATE EXCLUSIVE: scans, blocks no outcome), the
--             ranges attached with no scan, the CHECK dropped.  While the
--             CHECK exists an outcome whose row would land in the area's
--             missing ranges would fail; so an area covers only ranges no
--             outcome reaches for at least 30 minutes under the retention
--             in force ("quiet", finished_quiet_for), opens under a SHARE
--             lock on skiplock.retention, and is given up (the CHECK
--             dropped) when any of its open ranges comes within 10 minutes
--             of being reached: by time, or by retention_set and
--             retention_reset, which check it in their own transaction.
--   purge, tokens, legacy   as before: expired rows of the default
--             partition, old enqueue tokens, finished jobs an installation
--             older than step 0013 left in skiplock.jobs; one batch each.
--
-- The lease: skiplock.maintenance_acquire takes it for 15 seconds; every
-- step renews it (to 15 s from its start) and is bounded below that by the
-- caller's statement_timeout, so a step never outlives the lease and a long
-- run is never taken over while its maintainer is alive.  The name is
-- reserved (lease_check_reserved, as the migration leases are): the lease
-- functions refuse it to any role that is not a member of the schema
-- owner's role (42501), so a worker role can no longer take it for 365
-- days and switch maintenance off.
--
-- Errors: SK001 (the token is not the live maintenance lease's), 22023
-- (batch out of 1 to 1000000), 42501 (the reserved name).

-- ---- state ----

-- Range tables made by maintenance that are not partitions: standalone
-- (being filled, to be attached) or detached (to be dropped).
CREATE TABLE skiplock.finished_tables (
  name  text PRIMARY KEY,
  lo    timestamptz NOT NULL,
  hi    timestamptz NOT NULL,
  state text NOT NULL CHECK (state IN ('standalone', 'detached')),
  since timestamptz NOT NULL DEFAULT now(),
  CHECK (lo < hi)
);

-- The open area (at most one): the range its CHECK on the default
-- partition excludes.
CREATE TABLE skiplock.finished_area (
  one       boolean PRIMARY KEY DEFAULT true CHECK (one),
  lo        timestamptz NOT NULL,
  hi        timestamptz NOT NULL,
  opened_at timestamptz NOT NULL DEFAULT now(),
  CHECK (lo < hi)
);

-- After a VALIDATE that did not finish within its step: no area until then.
ALTER TABLE skiplock.maintenance ADD COLUMN area_backoff_until timestamptz;

CREATE TYPE skiplock.maintenance_step AS (
  action    text,     -- what this step did ('none': nothing to do)
  n         bigint,   -- how much: rows for fill, purge, tokens, legacy; 1 otherwise
  more      boolean,  -- it did something: call again
  blocked   text[],   -- actions that waited lock_timeout in vain (pass back as skip)
  remaining bigint,   -- finished jobs still in skiplock.jobs (after a legacy step)
  detail    text      -- the table or range acted on
);

-- ---- helpers ----

-- How long until an outcome under the retention in force could insert a
-- row whose expiry falls in [p_lo, p_hi): 0 when one can now; 100 years
-- when none ever will (every retention has passed the range, with an hour
-- for transactions that started earlier).
CREATE FUNCTION skiplock.finished_quiet_for(p_lo timestamptz, p_hi timestamptz)
RETURNS interval
LANGUAGE sql STABLE AS $fn$
  SELECT coalesce(min(CASE WHEN clock_timestamp() + r.keep - interval '1 hour' >= p_hi THEN NULL
                           ELSE greatest(p_lo - (clock_timestamp() + r.keep), interval '0') END),
                  interval '100 years')
    FROM skiplock.retention r WHERE r.keep > interval '0'
$fn$;

-- True when ATTACH may scan the default partition under its lock: 4 MB.
CREATE FUNCTION skiplock.finished_default_small()
RETURNS boolean
LANGUAGE sql STABLE AS $fn$
  SELECT pg_relation_size('skiplock.finished_jobs_default') <= 4 * 1024 * 1024
$fn$;

-- The range tables that cover their range: partitions and standalone ones.
CREATE VIEW skiplock.finished_ranges AS
  SELECT p.lo, p.hi, 'partition'::text AS kind, p.name FROM skiplock.finished_partitions p
  UNION ALL
  SELECT s.lo, s.hi, 'standalone'::text, s.name FROM skiplock.finished_tables s
   WHERE s.state = 'standalone';

-- The ranges from the current one to the horizon (now + the longest finite
-- retention + one width, at most 500 widths), partition_width() wide, around
-- the tables that exist: kind 'partition' (attached), 'standalone' (made,
-- not attached) or 'missing'; none that ends before now.  At most p_limit.
CREATE FUNCTION skiplock.finished_slots(p_limit int)
RETURNS TABLE (lo timestamptz, hi timestamptz, kind text, name text)
LANGUAGE plpgsql AS $fn$
DECLARE
  v_w interval := skiplock.partition_width();
  v_now timestamptz := clock_timestamp();
  v_until timestamptz;
  v_lo timestamptz := date_bin(v_w, v_now, timestamptz '2000-01-01 00:00+00');
  v_n int := 0;
  v_i int := 1;
  r_lo timestamptz[];
  r_hi timestamptz[];
  r_kind text[];
  r_name text[];
BEGIN
  v_until := least(v_now + coalesce((SELECT max(r.keep) FROM skiplock.retention r
                                      WHERE r.keep > interval '0'), interval '0') + v_w,
                   v_now + 500 * v_w);
  SELECT array_agg(x.lo ORDER BY x.lo), array_agg(x.hi ORDER BY x.lo),
         array_agg(x.kind ORDER BY x.lo), array_agg(x.name ORDER BY x.lo)
    INTO r_lo, r_hi, r_kind, r_name
    FROM skiplock.finished_ranges x WHERE x.hi > v_lo AND x.lo < v_until;
  WHILE v_lo < v_until AND v_n < p_limit LOOP
    WHILE v_i <= coalesce(cardinality(r_lo), 0) AND r_hi[v_i] <= v_lo LOOP
      v_i := v_i + 1;  -- ranges wholly before v_lo
    END LOOP;
    IF v_i <= coalesce(cardinality(r_lo), 0) AND r_lo[v_i] <= v_lo THEN
      lo := r_lo[v_i]; hi := r_hi[v_i]; kind := r_kind[v_i]; name := r_name[v_i];
    ELSE
      lo := v_lo; kind := 'missing'; name := NULL;
      hi := least(v_lo + v_w, coalesce(r_lo[v_i], v_lo + v_w));
    END IF;
    IF hi > v_now THEN  -- the start of the current width may be past
      RETURN NEXT;
      v_n := v_n + 1;
    END IF;
    v_lo := hi;
  END LOOP;
END
$fn$;

-- Whether a range of finished_slots is work for maintenance: missing or
-- standalone (to make, fill, attach), or an empty partition ahead wider
-- than the width now chosen (to reshape).
CREATE FUNCTION skiplock.finished_slot_work(p_kind text, p_name text, p_lo timestamptz,
                                            p_hi timestamptz)
RETURNS boolean
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
  EXECUTE format('SELECT NOT EXISTS (SELECT FROM skiplock.%I)', p_name) INTO v_empty;
  RETURN v_empty;
END
$fn$;

-- The open area's CHECK is valid (VALIDATE done): ranges in it attach
-- without a scan.
CREATE FUNCTION skiplock.finished_area_valid()
RETURNS boolean
LANGUAGE sql STABLE AS $fn$
  SELECT coalesce((SELECT c.convalidated FROM pg_constraint c
                    WHERE c.conrelid = 'skiplock.finished_jobs_default'::regclass
                      AND c.conname = 'finished_jobs_default_area'), false)
$fn$;

-- Ends the open area: its CHECK dropped (ACCESS EXCLUSIVE on the default
-- partition, catalog only).
CREATE FUNCTION skiplock.finished_area_end()
RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  ALTER TABLE skiplock.finished_jobs_default DROP CONSTRAINT IF EXISTS finished_jobs_default_area;
  DELETE FROM skiplock.finished_area;
END
$fn$;

-- Gives up the open area when a range of it that is not a partition could
-- receive an outcome's row within 10 minutes: 1 when it did.  Run by
-- maintenance and by retention_set and retention_reset.
CREATE FUNCTION skiplock.finished_area_check()
RETURNS int
LANGUAGE plpgsql AS $fn$
DECLARE
  a record;
BEGIN
  SELECT x.lo, x.hi INTO a FROM skiplock.finished_area x;
  IF NOT FOUND OR NOT EXISTS (
       SELECT 1 FROM skiplock.finished_slots(100000) s
        WHERE s.kind <> 'partition' AND s.lo < a.hi AND s.hi > a.lo
          AND skiplock.finished_quiet_for(s.lo, s.hi) < interval '10 minutes') THEN
    RETURN 0;
  END IF;
  PERFORM skiplock.finished_area_end();
  RETURN 1;
END
$fn$;

-- finished_area_check with its locks waited for 50 ms at most, in a
-- caller's transaction whose own lock_timeout is kept for the rest of it
-- (retention_set, retention_reset).  The lock_timeout is set in the body:
-- a function's SET clause would not survive `init --repair`'s restore of
-- function attributes.
CREATE FUNCTION skiplock.finished_area_check_now()
RETURNS int
LANGUAGE plpgsql AS $fn$
DECLARE
  v_lock_timeout text := current_setting('lock_timeout');
  v_n int;
BEGIN
  PERFORM set_config('lock_timeout', '50ms', true);
  v_n := skiplock.finished_area_check();
  PERFORM set_config('lock_timeout', v_lock_timeout, true);
  RETURN v_n;
END
$fn$;

-- Attaches standalone table p_name as the partition [p_lo, p_hi).
CREATE FUNCTION skiplock.finished_attach(p_name text, p_lo timestamptz, p_hi timestamptz)
RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  EXECUTE format('ALTER TABLE skiplock.finished_jobs ATTACH PARTITION skiplock.%I '
                 'FOR VALUES FROM (%L) TO (%L)', p_name, p_lo, p_hi);
  DELETE FROM skiplock.finished_tables t WHERE t.name = p_name;
  INSERT INTO skiplock.finished_partitions (name, lo, hi) VALUES (p_name, p_lo, p_hi);
END
$fn$;

-- ---- the actions: each does one thing and returns how much (0: nothing) ----

-- A detached table, or a standalone one wholly expired outside the area:
-- dropped (it is no partition: nothing outcomes use is locked).
CREATE FUNCTION skiplock.finished_act_drop()
RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  v text;
BEGIN
  SELECT t.name INTO v FROM skiplock.finished_tables t
   WHERE t.state = 'detached'
      OR (t.hi <= clock_timestamp()
          AND NOT EXISTS (SELECT 1 FROM skiplock.finished_area a WHERE a.lo < t.hi AND a.hi > t.lo))
   ORDER BY t.state = 'detached' DESC, t.lo LIMIT 1;
  IF NOT FOUND THEN
    RETURN 0;
  END IF;
  EXECUTE format('DROP TABLE IF EXISTS skiplock.%I', v);
  DELETE FROM skiplock.finished_tables t WHERE t.name = v;
  RETURN 1;
END
$fn$;

-- The oldest partition whose every row has expired: detached.
CREATE FUNCTION skiplock.finished_act_expire()
RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  p record;
BEGIN
  SELECT x.name, x.lo, x.hi INTO p FROM skiplock.finished_partitions x
   WHERE x.hi <= clock_timestamp() ORDER BY x.lo LIMIT 1;
  IF NOT FOUND THEN
    RETURN 0;
  END IF;
  EXECUTE format('ALTER TABLE skiplock.finished_jobs DETACH PARTITION skiplock.%I', p.name);
  DELETE FROM skiplock.finished_partitions x WHERE x.name = p.name;
  INSERT INTO skiplock.finished_tables (name, lo, hi, state) VALUES (p.name, p.lo, p.hi, 'detached');
  RETURN 1;
END
$fn$;

-- A standalone range, attached: inside a validated area (its rows moved
-- out of the default partition already) with no scan; elsewhere only while
-- the default partition is small, the range's rows there (4 MB at most)
-- moved in the same transaction, under the lock the attach takes anyway,
-- so no row is ever out of sight.
CREATE FUNCTION skiplock.finished_act_attach()
RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  t record;
  v_in_area boolean;
BEGIN
  SELECT s.name, s.lo, s.hi,
         EXISTS (SELECT 1 FROM skiplock.finished_area a WHERE a.lo <= s.lo AND a.hi >= s.hi) AS in_area
    INTO t FROM skiplock.finished_tables s
   WHERE s.state = 'standalone' AND s.hi > clock_timestamp()
     AND NOT EXISTS (SELECT 1 FROM skiplock.finished_area a
                      WHERE a.lo < s.hi AND a.hi > s.lo AND NOT (a.lo <= s.lo AND a.hi >= s.hi))
   ORDER BY (EXISTS (SELECT 1 FROM skiplock.finished_area a WHERE a.lo <= s.lo AND a.hi >= s.hi))
            DESC, s.lo LIMIT 1;
  IF NOT FOUND THEN
    RETURN 0;
  END IF;
  v_in_area := t.in_area;
  IF v_in_area THEN
    IF NOT skiplock.finished_area_valid() THEN
      RETURN 0;
    END IF;
  ELSE
    IF NOT skiplock.finished_default_small() THEN
      RETURN 0;
    END IF;
    LOCK TABLE skiplock.finished_jobs_default IN ACCESS EXCLUSIVE MODE;
    EXECUTE format('WITH m AS (DELETE FROM skiplock.finished_jobs_default d '
                   'WHERE d.expires_at >= $1 AND d.expires_at < $2 RETURNING d.*) '
                   'INSERT INTO skiplock.%I SELECT * FROM m', t.name) USING t.lo, t.hi;
  END IF;
  PERFORM skiplock.finished_attach(t.name, t.lo, t.hi);
  RETURN 1;
END
$fn$;

-- The open area with nothing left to make, fill or attach: its CHECK
-- dropped.
CREATE FUNCTION skiplock.finished_act_close()
RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  a record;
BEGIN
  SELECT x.lo, x.hi INTO a FROM skiplock.finished_area x;
  IF NOT FOUND OR EXISTS (SELECT 1 FROM skiplock.finished_slots(100000) s
                           WHERE s.lo < a.hi AND s.hi > a.lo
                             AND skiplock.finished_slot_work(s.kind, s.name, s.lo, s.hi)) THEN
    RETURN 0;
  END IF;
  PERFORM skiplock.finished_area_end();
  RETURN 1;
END
$fn$;

-- The open area's CHECK validated once none of its rows is left in the
-- default partition: a scan under SHARE UPDATE EXCLUSIVE, which outcomes
-- and readers do not conflict with (so it may wait a second for the lock,
-- behind autovacuum).  Cancelled by the step's statement_timeout: the area
-- is given up and none is opened for an hour.
CREATE FUNCTION skiplock.finished_act_validate()
RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  a record;
BEGIN
  SELECT x.lo, x.hi INTO a FROM skiplock.finished_area x;
  IF NOT FOUND OR skiplock.finished_area_valid()
     OR EXISTS (SELECT 1 FROM skiplock.finished_jobs_default d
                 WHERE d.expires_at >= a.lo AND d.expires_at < a.hi) THEN
    RETURN 0;
  END IF;
  BEGIN
    PERFORM set_config('lock_timeout', '1s', true);
    ALTER TABLE skiplock.finished_jobs_default VALIDATE CONSTRAINT finished_jobs_default_area;
    PERFORM set_config('lock_timeout', '50ms', true);
  EXCEPTION WHEN query_canceled THEN
    PERFORM set_config('lock_timeout', '50ms', true);
    PERFORM skiplock.finished_area_end();
    UPDATE skiplock.maintenance SET area_backoff_until = clock_timestamp() + interval '1 hour';
  END;
  RETURN 1;
END
$fn$;

-- Up to p_batch rows of a standalone range of the open area moved out of
-- the default partition into its table.  Until it is attached they are in
-- no partition; the area's ranges are reached by no outcome, so those are
-- jobs that finished half an hour ago or more.
CREATE FUNCTION skiplock.finished_act_fill(p_batch int)
RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  t record;
  v_n bigint;
BEGIN
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

-- An empty partition ahead wider than the width now chosen, detached (the
-- range is made again at the new width); its emptiness is checked under
-- the lock on finished_jobs.  Inside the area, or while the default
-- partition is small.
CREATE FUNCTION skiplock.finished_act_reshape()
RETURNS bigint
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
    EXECUTE format('SELECT NOT EXISTS (SELECT FROM skiplock.%I)', p.name) INTO v_empty;
    CONTINUE WHEN NOT v_empty;
    LOCK TABLE skiplock.finished_jobs IN ACCESS EXCLUSIVE MODE;
    EXECUTE format('SELECT NOT EXISTS (SELECT FROM skiplock.%I)', p.name) INTO v_empty;
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

-- The first missing range (inside the area, or while the default
-- partition is small) made as a standalone table with a CHECK matching
-- its bound and the indexes of finished_jobs, not vacuumed for inserts
-- alone (as since step 0015).
CREATE FUNCTION skiplock.finished_act_create()
RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  v_small boolean := skiplock.finished_default_small();
  s record;
  v_name text;
BEGIN
  FOR s IN SELECT x.lo, x.hi FROM skiplock.finished_slots(100000) x WHERE x.kind = 'missing' LOOP
    CONTINUE WHEN NOT (EXISTS (SELECT 1 FROM skiplock.finished_area a
                                WHERE a.lo <= s.lo AND a.hi >= s.hi)
                       OR (v_small AND NOT EXISTS (SELECT 1 FROM skiplock.finished_area a
                                                    WHERE a.lo < s.hi AND a.hi > s.lo)));
    v_name := 'finished_jobs_' || to_char(s.lo AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MISS');
    CONTINUE WHEN to_regclass('skiplock.' || quote_ident(v_name)) IS NOT NULL;
    EXECUTE format('CREATE TABLE skiplock.%I (LIKE skiplock.finished_jobs INCLUDING DEFAULTS '
                   'INCLUDING CONSTRAINTS INCLUDING INDEXES, CHECK (expires_at >= %L AND '
                   'expires_at < %L)) WITH (autovacuum_vacuum_insert_threshold = -1)',
                   v_name, s.lo, s.hi);
    INSERT INTO skiplock.finished_tables (name, lo, hi, state)
    VALUES (v_name, s.lo, s.hi, 'standalone');
    RETURN 1;
  END LOOP;
  RETURN 0;
END
$fn$;

-- An area opened when the default partition is larger than ATTACH may scan
-- under its lock: the first run of ranges to make, fill, attach or
-- reshape that no outcome reaches for 30 minutes (attached partitions
-- between them included), 48 at most; its CHECK added NOT VALID.  Not
-- while finished jobs of an older installation are still to move (their
-- expiries are in the past) nor for an hour after a VALIDATE was cut short.
CREATE FUNCTION skiplock.finished_act_open()
RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  s record;
  v_work boolean;
  v_lo timestamptz;
  v_hi timestamptz;
  v_n int := 0;
BEGIN
  IF EXISTS (SELECT 1 FROM skiplock.finished_area) OR skiplock.finished_default_small()
     OR (SELECT m.area_backoff_until > clock_timestamp() FROM skiplock.maintenance m)
     OR EXISTS (SELECT 1 FROM skiplock.jobs j WHERE j.finished_at IS NOT NULL
                   AND j.state IN ('completed', 'discarded', 'cancelled')) THEN
    RETURN 0;
  END IF;
  LOCK TABLE skiplock.retention IN SHARE MODE;  -- no retention change until this commits
  FOR s IN SELECT * FROM skiplock.finished_slots(100000) LOOP
    v_work := skiplock.finished_slot_work(s.kind, s.name, s.lo, s.hi);
    IF v_work AND skiplock.finished_quiet_for(s.lo, s.hi) >= interval '30 minutes' THEN
      v_lo := coalesce(v_lo, s.lo);
      v_hi := s.hi;
      v_n := v_n + 1;
      EXIT WHEN v_n >= 48;
    ELSIF v_work AND v_lo IS NOT NULL THEN
      EXIT;
    END IF;
  END LOOP;
  IF v_lo IS NULL THEN
    RETURN 0;
  END IF;
  EXECUTE format('ALTER TABLE skiplock.finished_jobs_default ADD CONSTRAINT '
                 'finished_jobs_default_area CHECK (expires_at < %L OR expires_at >= %L) NOT VALID',
                 v_lo, v_hi);
  INSERT INTO skiplock.finished_area (lo, hi) VALUES (v_lo, v_hi);
  RETURN 1;
END
$fn$;

-- Up to p_batch finished jobs an installation older than step 0013 left in
-- skiplock.jobs, moved (their expiries are anywhere: not while an area is
-- open).
CREATE FUNCTION skiplock.finished_act_legacy(p_batch int)
RETURNS bigint
LANGUAGE plpgsql AS $fn$
BEGIN
  IF EXISTS (SELECT 1 FROM skiplock.finished_area) THEN
    RETURN 0;
  END IF;
  RETURN skiplock.move_finished(ARRAY(
    SELECT j.id FROM skiplock.jobs j WHERE j.state IN ('completed', 'discarded', 'cancelled')
     ORDER BY j.finished_at LIMIT p_batch FOR UPDATE SKIP LOCKED));
END
$fn$;

-- Up to p_batch expired rows of the default partition, deleted.  (The
-- time is a variable: clock_timestamp() in the WHERE clause would keep the
-- index on expires_at from being used.)
CREATE FUNCTION skiplock.finished_act_purge(p_batch int)
RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_n bigint;
BEGIN
  DELETE FROM skiplock.finished_jobs_default d WHERE d.ctid = ANY (ARRAY(
    SELECT x.ctid FROM skiplock.finished_jobs_default x WHERE x.expires_at <= v_now
     LIMIT p_batch));
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END
$fn$;

-- Runs action p_action once (see maintain_step for the names).
CREATE FUNCTION skiplock.finished_act(p_action text, p_batch int)
RETURNS bigint
LANGUAGE plpgsql AS $fn$
BEGIN
  RETURN CASE p_action
    WHEN 'abort' THEN skiplock.finished_area_check()
    WHEN 'drop' THEN skiplock.finished_act_drop()
    WHEN 'expire' THEN skiplock.finished_act_expire()
    WHEN 'legacy' THEN skiplock.finished_act_legacy(p_batch)
    WHEN 'purge' THEN skiplock.finished_act_purge(p_batch)
    WHEN 'tokens' THEN skiplock.enqueue_tokens_prune(p_batch)
    WHEN 'attach' THEN skiplock.finished_act_attach()
    WHEN 'close' THEN skiplock.finished_act_close()
    WHEN 'validate' THEN skiplock.finished_act_validate()
    WHEN 'fill' THEN skiplock.finished_act_fill(p_batch)
    WHEN 'reshape' THEN skiplock.finished_act_reshape()
    WHEN 'create' THEN skiplock.finished_act_create()
    WHEN 'open' THEN skiplock.finished_act_open()
  END;
END
$fn$;

-- ---- the lease ----

-- Renews the maintenance lease of owner's token p_fencing to 15 seconds
-- from now, inside the step's transaction (the row stays locked until it
-- ends: no other token is issued meanwhile); SK001 unless it is live.
CREATE FUNCTION skiplock.maintenance_fence(p_owner text, p_fencing bigint)
RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  UPDATE skiplock.leases l
     SET expires_at = clock_timestamp() + interval '15 seconds', renewed_at = clock_timestamp()
   WHERE l.name = 'skiplock.maintenance' AND l.owner = p_owner AND l.fencing = p_fencing
     AND l.expires_at > clock_timestamp();
  IF NOT FOUND THEN
    RAISE EXCEPTION 'stale fencing token % for lease "skiplock.maintenance"',
                    coalesce(p_fencing::text, 'NULL')
      USING ERRCODE = 'SK001',
            DETAIL = 'The lease expired or another maintainer holds it; this step changes nothing.';
  END IF;
END
$fn$;

-- Takes the maintenance lease for owner for 15 seconds: the new token, or
-- NULL while another holder's is live (or its row is locked by a step).
CREATE FUNCTION skiplock.maintenance_acquire(owner text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_fencing bigint;
  v_lock_timeout text := current_setting('lock_timeout');
BEGIN
  PERFORM set_config('lock_timeout', '50ms', true);
  IF maintenance_acquire.owner IS NULL OR length(maintenance_acquire.owner) NOT BETWEEN 1 AND 256 THEN
    RAISE EXCEPTION 'lease owner must be 1 to 256 characters' USING ERRCODE = '22023';
  END IF;
  INSERT INTO skiplock.leases AS l (name, owner, fencing, acquired_at, expires_at, renewed_at)
  VALUES ('skiplock.maintenance', maintenance_acquire.owner, 1, clock_timestamp(),
          clock_timestamp() + interval '15 seconds', clock_timestamp())
  ON CONFLICT ON CONSTRAINT leases_pkey DO UPDATE
     SET owner = EXCLUDED.owner, fencing = l.fencing + 1, acquired_at = clock_timestamp(),
         expires_at = clock_timestamp() + interval '15 seconds', renewed_at = clock_timestamp()
   WHERE l.expires_at <= clock_timestamp()
  RETURNING l.fencing INTO v_fencing;
  PERFORM set_config('lock_timeout', v_lock_timeout, true);
  RETURN v_fencing;
EXCEPTION WHEN lock_not_available THEN
  PERFORM set_config('lock_timeout', v_lock_timeout, true);
  RETURN NULL;
END
$fn$;

-- Ends owner's maintenance lease at once; true when p_fencing was its token.
CREATE FUNCTION skiplock.maintenance_release(owner text, fencing bigint)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_lock_timeout text := current_setting('lock_timeout');
  v_found boolean;
BEGIN
  PERFORM set_config('lock_timeout', '50ms', true);
  UPDATE skiplock.leases l SET expires_at = least(l.expires_at, clock_timestamp())
   WHERE l.name = 'skiplock.maintenance' AND l.owner = maintenance_release.owner
     AND l.fencing = maintenance_release.fencing;
  v_found := FOUND;
  PERFORM set_config('lock_timeout', v_lock_timeout, true);
  RETURN v_found;
END
$fn$;

-- The maintenance lease is reserved as the migration leases are: the lease
-- functions refuse it to a role that is not a member of the schema owner's
-- role; maintenance takes it through maintenance_acquire.
CREATE OR REPLACE FUNCTION skiplock.lease_check_reserved(p_name text)
RETURNS void
LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  IF (p_name LIKE 'skiplock.migrate:%' OR p_name = 'skiplock.maintenance')
     AND NOT pg_has_role(session_user,
       (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'skiplock'), 'MEMBER') THEN
    IF p_name = 'skiplock.maintenance' THEN
      RAISE EXCEPTION 'lease "%" is reserved for skiplock''s maintenance', p_name
        USING ERRCODE = '42501',
              HINT = 'Maintenance takes it with skiplock.maintenance_acquire for 15 seconds '
                     'at a time (workers, `skiplock retention maintain`).';
    END IF;
    RAISE EXCEPTION 'lease "%" is reserved for the migrator', p_name
      USING ERRCODE = '42501',
            HINT = 'Migration leases are taken by `skiplock migrate` as the schema owner.';
  END IF;
END
$fn$;

-- ---- the step ----

-- One step of maintenance by the holder of the maintenance lease (token
-- fencing; SK001 otherwise), which it renews: the first of these actions
-- that has something to do, in this order, skipping those in skip (the
-- caller passes back what earlier steps of its run found blocked):
-- abort, drop, expire, legacy, purge, tokens, attach, close, validate,
-- fill, reshape, create, open.  An action whose lock is not had within
-- lock_timeout (50 ms) is rolled back, listed in blocked, and the next one
-- tried.  Send it alone, outside a transaction block, with a
-- statement_timeout below 15 seconds.
CREATE FUNCTION skiplock.maintain_step(owner text, fencing bigint, skip text[] DEFAULT '{}',
                                       batch int DEFAULT 10000)
RETURNS skiplock.maintenance_step
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  r skiplock.maintenance_step;
  a text;
  v_n bigint;
  v_lock_timeout text := current_setting('lock_timeout');
BEGIN
  PERFORM set_config('lock_timeout', '50ms', true);
  IF maintain_step.batch IS NULL OR maintain_step.batch NOT BETWEEN 1 AND 1000000 THEN
    RAISE EXCEPTION 'maintain_step: batch must be 1 to 1000000' USING ERRCODE = '22023';
  END IF;
  PERFORM skiplock.maintenance_fence(maintain_step.owner, maintain_step.fencing);
  r := ('none', 0, false, coalesce(maintain_step.skip, '{}'::text[]), 0, NULL);
  FOREACH a IN ARRAY ARRAY['abort', 'drop', 'expire', 'legacy', 'purge', 'tokens', 'attach',
                           'close', 'validate', 'fill', 'reshape', 'create', 'open'] LOOP
    CONTINUE WHEN a = ANY (r.blocked);
    BEGIN
      v_n := skiplock.finished_act(a, maintain_step.batch);
    EXCEPTION WHEN lock_not_available THEN
      r.blocked := r.blocked || a;
      v_n := 0;
    END;
    IF v_n > 0 THEN
      r.action := a; r.n := v_n; r.more := true;
      EXIT;
    END IF;
  END LOOP;
  IF r.action = 'legacy' THEN
    r.remaining := (SELECT count(*) FROM (SELECT 1 FROM skiplock.jobs j
                     WHERE j.state IN ('completed', 'discarded', 'cancelled') LIMIT 1000000) x);
    r.more := true;
  END IF;
  r.detail := CASE WHEN r.action = 'none' THEN 'nothing to do'
                   ELSE format('%s %s', r.action, r.n) END
              || CASE WHEN cardinality(r.blocked) > 0
                      THEN format('; waited in vain for the locks of: %s', array_to_string(r.blocked, ', '))
                      ELSE '' END;
  UPDATE skiplock.maintenance m SET last_run_at = now(), last_owner = maintain_step.owner,
         last_summary = r.detail;
  PERFORM set_config('lock_timeout', v_lock_timeout, true);
  RETURN r;
END
$fn$;

-- The round of step 0013 is now one step (the caller's fencing is of the
-- maintenance lease, as before): what that step did, in the old columns.
CREATE OR REPLACE FUNCTION skiplock.maintain(owner text, fencing bigint, batch int DEFAULT 10000)
RETURNS skiplock.maintenance_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  s skiplock.maintenance_step;
BEGIN
  s := skiplock.maintain_step(maintain.owner, maintain.fencing, '{}', maintain.batch);
  RETURN ((s.action = 'attach')::int, (s.action = 'expire')::int,
          CASE WHEN s.action = 'purge' THEN s.n ELSE 0 END,
          CASE WHEN s.action = 'legacy' THEN s.n ELSE 0 END, s.remaining, s.more);
END
$fn$;

-- The round's helpers of steps 0013 and 0015 took their locks for the
-- whole round; maintain_step replaces them.
DROP FUNCTION skiplock.finished_partitions_ahead(int);
DROP FUNCTION skiplock.finished_partitions_reshape(int);
DROP FUNCTION skiplock.finished_partitions_expire(int);

-- ---- retention changes give up an area they reach ----

-- As in step 0013; then the open area is given up when the new setting
-- reaches it (its CHECK dropped in this transaction, its lock waited for
-- 50 ms at most: 55P03 otherwise, and nothing is changed).
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
  DO UPDATE SET keep = EXCLUDED.keep, changed_at = now();
  PERFORM skiplock.finished_area_check_now();
END
$fn$;

-- As in step 0013; then the same check as retention_set.
CREATE OR REPLACE FUNCTION skiplock.retention_reset(queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  IF retention_reset.queue IS NULL THEN
    RAISE EXCEPTION 'retention_reset: queue must not be NULL' USING ERRCODE = '22004';
  END IF;
  IF retention_reset.queue = '*' THEN
    UPDATE skiplock.retention r SET keep = CASE WHEN r.state = 'completed'
                                                THEN interval '24 hours' ELSE interval '7 days' END,
                                    changed_at = now()
     WHERE r.queue = '*';
  ELSE
    DELETE FROM skiplock.retention r WHERE r.queue = retention_reset.queue;
  END IF;
  PERFORM skiplock.finished_area_check_now();
END
$fn$;

-- ---- least privilege ----

-- grant_role (unchanged) grants the new SECURITY DEFINER functions
-- (maintenance_acquire, maintenance_release, maintain_step) to workers and
-- operators; the helpers are granted to no role.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;
SELECT skiplock.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);

COMMENT ON TABLE skiplock.finished_tables IS
  'range tables of finished_jobs that are not partitions: standalone (being filled) or detached';
COMMENT ON TABLE skiplock.finished_area IS
  'the range a CHECK on finished_jobs_default excludes while maintenance attaches it without a scan';
COMMENT ON VIEW skiplock.finished_ranges IS
  'the range tables of finished_jobs that cover their range: partitions and standalone ones';
COMMENT ON FUNCTION skiplock.finished_quiet_for(timestamptz, timestamptz) IS
  'how long until an outcome could insert a row expiring in the range (100 years: never)';
COMMENT ON FUNCTION skiplock.finished_default_small() IS
  'the default partition is small enough (4 MB) for ATTACH to scan it under its lock';
COMMENT ON FUNCTION skiplock.finished_slots(int) IS
  'the ranges from now to the horizon: partition, standalone or missing';
COMMENT ON FUNCTION skiplock.finished_slot_work(text, text, timestamptz, timestamptz) IS
  'a range is work for maintenance: missing, standalone, or an empty partition to reshape';
COMMENT ON FUNCTION skiplock.finished_area_valid() IS
  'the open area''s CHECK on the default partition is validated';
COMMENT ON FUNCTION skiplock.finished_area_end() IS
  'drop the open area''s CHECK on the default partition';
COMMENT ON FUNCTION skiplock.finished_area_check() IS
  'give up the open area when an outcome could reach it within 10 minutes';
COMMENT ON FUNCTION skiplock.finished_area_check_now() IS
  'finished_area_check with lock_timeout 50 ms, the caller''s lock_timeout kept';
COMMENT ON FUNCTION skiplock.finished_attach(text, timestamptz, timestamptz) IS
  'attach a standalone range table as a partition of finished_jobs and list it';
COMMENT ON FUNCTION skiplock.finished_act_drop() IS
  'maintenance: drop a detached table, or a standalone one wholly expired';
COMMENT ON FUNCTION skiplock.finished_act_expire() IS
  'maintenance: detach the oldest partition whose upper bound has passed';
COMMENT ON FUNCTION skiplock.finished_act_attach() IS
  'maintenance: attach a standalone range (in a validated area, or by a small default partition)';
COMMENT ON FUNCTION skiplock.finished_act_close() IS
  'maintenance: end the open area once every range of it is a partition';
COMMENT ON FUNCTION skiplock.finished_act_validate() IS
  'maintenance: validate the open area''s CHECK once the default partition holds none of its rows';
COMMENT ON FUNCTION skiplock.finished_act_fill(int) IS
  'maintenance: move up to n rows of a standalone range out of the default partition';
COMMENT ON FUNCTION skiplock.finished_act_reshape() IS
  'maintenance: detach an empty partition ahead that is wider than the width now chosen';
COMMENT ON FUNCTION skiplock.finished_act_create() IS
  'maintenance: make the first missing range as a standalone table';
COMMENT ON FUNCTION skiplock.finished_act_open() IS
  'maintenance: open an area over ranges no outcome reaches for 30 minutes';
COMMENT ON FUNCTION skiplock.finished_act_legacy(int) IS
  'maintenance: move up to n finished jobs an older installation left in skiplock.jobs';
COMMENT ON FUNCTION skiplock.finished_act_purge(int) IS
  'maintenance: delete up to n expired rows of the default partition';
COMMENT ON FUNCTION skiplock.finished_act(text, int) IS
  'maintenance: run one action of maintain_step by name';
COMMENT ON FUNCTION skiplock.maintenance_fence(text, bigint) IS
  'renew the maintenance lease of a token inside a step, SK001 unless it is live';
COMMENT ON FUNCTION skiplock.maintenance_acquire(text) IS
  'take the maintenance lease for 15 seconds: the token, or NULL while another holds it';
COMMENT ON FUNCTION skiplock.maintenance_release(text, bigint) IS
  'end the maintenance lease of a token at once';
COMMENT ON FUNCTION skiplock.maintain_step(text, bigint, text[], int) IS
  'one step of maintenance under the maintenance lease: one action, its locks held briefly';
COMMENT ON FUNCTION skiplock.maintain(text, bigint, int) IS
  'one step of maintenance (maintain_step) in the columns of step 0013''s round';
