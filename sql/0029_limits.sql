-- skiplock schema step 0029: limits on job starts across the fleet.
--
-- A limit belongs to a kind and caps how its jobs start, for every worker
-- of every language at once, because the claim enforces it
-- (docs/flow-control.md):
--
--   max_running  at most N jobs of the kind running at a time, counted
--                from live leases: a crashed worker's slot frees when its
--                lease expires, never on a timer of the limit's own;
--   rate / per   at most N starts in any window of `per` (a sliding
--                window, exact: the claim records each start's time).
--
-- With key_field the limit holds per key instead of for the kind as a
-- whole: the key is the payload's top-level field of that name (text;
-- jobs without it share one key), so "at most 2 exports running per
-- customer" is limit_set('export', max_running => 2, key_field =>
-- 'customer') and an enqueue needs nothing new.
--
-- A job held back by a limit stays available and keeps its attempts (like
-- a paused kind's); it starts in claim order as room frees.  The claim
-- takes a limit's row lock with SKIP LOCKED: while one claim of a limited
-- kind decides, the others leave that kind out and take other work, so a
-- transaction left open by a caller can delay a limited kind, never a
-- claim.  The starts it decides are stamped with the time it decided
-- them (attempted_at), the same time its window counts.
--
-- On the distributed layout limits are not yet supported: limit_set
-- refuses there (0A000) and the per-queue claim leaves limited kinds out.

-- the action log names the two new actions
ALTER TABLE skiplock.actions DROP CONSTRAINT actions_action_check;
ALTER TABLE skiplock.actions ADD CONSTRAINT actions_action_check CHECK (action = ANY (ARRAY[
  'retry', 'cancel', 'discard', 'pause', 'resume', 'breaker_open', 'breaker_close',
  'schedule_pause', 'schedule_resume', 'schedule_run', 'limit_set', 'limit_remove']));

CREATE TABLE skiplock.limits (
  kind text PRIMARY KEY CHECK (length(kind) BETWEEN 1 AND 128),
  key_field text CHECK (length(key_field) BETWEEN 1 AND 128),
  max_running integer CHECK (max_running BETWEEN 1 AND 1000000),
  rate integer CHECK (rate BETWEEN 1 AND 1000000),
  per_ms bigint CHECK (per_ms BETWEEN 1 AND 86400000),
  -- the kind's own window (key_field NULL): start times and counts
  starts_at timestamptz[] NOT NULL DEFAULT '{}',
  starts_n integer[] NOT NULL DEFAULT '{}',
  changed_at timestamptz NOT NULL DEFAULT now(),
  changed_by text NOT NULL CHECK (length(changed_by) BETWEEN 1 AND 200),
  CHECK (max_running IS NOT NULL OR rate IS NOT NULL),
  CHECK ((rate IS NULL) = (per_ms IS NULL))
);
COMMENT ON TABLE skiplock.limits IS
  'Limits on job starts per kind (or per key of the kind): max_running at a time, rate starts per per_ms; the kind''s start window when it has no key_field.';

CREATE TABLE skiplock.limit_windows (
  kind text NOT NULL REFERENCES skiplock.limits (kind) ON DELETE CASCADE,
  limit_key text NOT NULL,
  starts_at timestamptz[] NOT NULL DEFAULT '{}',
  starts_n integer[] NOT NULL DEFAULT '{}',
  PRIMARY KEY (kind, limit_key)
);
COMMENT ON TABLE skiplock.limit_windows IS
  'The start windows of the keys of rate limits with a key_field: start times and counts within the last per_ms (older entries are trimmed by the next claim of the key, and by maintenance).';

-- The starts of a window (times and counts) still inside it at p_t.
CREATE FUNCTION skiplock.limit_used(p_at timestamptz[], p_n integer[], p_t timestamptz,
                                    p_per_ms bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE
AS $fn$
  SELECT coalesce(sum(s.n), 0) FROM unnest(p_at, p_n) AS s(a, n)
   WHERE s.a > p_t - p_per_ms * interval '1 millisecond'
$fn$;
COMMENT ON FUNCTION skiplock.limit_used(timestamptz[], integer[], timestamptz, bigint) IS
  'Internal: how many starts of a window (times, counts) fall in the per_ms before p_t.';

-- The window kept after a claim at p_t that started p_got jobs: what is
-- still inside it, then this claim's entry.
CREATE FUNCTION skiplock.limit_window(p_at timestamptz[], p_n integer[], p_t timestamptz,
                                      p_per_ms bigint, p_got integer,
                                      OUT starts_at timestamptz[], OUT starts_n integer[])
LANGUAGE sql IMMUTABLE
AS $fn$
  SELECT coalesce(array_agg(s.a ORDER BY s.o), '{}') || CASE WHEN p_got > 0 THEN ARRAY[p_t] ELSE '{}' END,
         coalesce(array_agg(s.n ORDER BY s.o), '{}') || CASE WHEN p_got > 0 THEN ARRAY[p_got] ELSE '{}' END
    FROM unnest(p_at, p_n) WITH ORDINALITY AS s(a, n, o)
   WHERE s.a > p_t - p_per_ms * interval '1 millisecond'
$fn$;
COMMENT ON FUNCTION skiplock.limit_window(timestamptz[], integer[], timestamptz, bigint, integer) IS
  'Internal: a start window trimmed to the per_ms before p_t, with p_got starts at p_t appended.';

-- The jobs of the kind-wide limits a claim may start now, in one pass:
-- each kind's room (max_running minus its running jobs, rate minus the
-- starts in its window), then the first due jobs of those kinds in claim
-- order (at most 20 times what the claim wants, at least 1,000), each kind
-- within its room, locked SKIP LOCKED; their starts go into the windows.
-- The caller holds the limits' rows.  full receives the kinds with no room.
CREATE FUNCTION skiplock.claim_limited_kinds(p_limits skiplock.limits[], p_queues text[],
                                             p_skip text[], p_n integer, p_t timestamptz,
                                             OUT ids bigint[], OUT full_kinds text[])
LANGUAGE plpgsql
AS $fn$
DECLARE
  v_kinds text[];
  v_rooms bigint[];
  v_pick bigint[];
BEGIN
  WITH lim AS (SELECT * FROM unnest(p_limits) x),
  run AS (
    SELECT j.kind, count(*) AS n FROM skiplock.jobs j
     WHERE j.state = 'running' AND j.lease_expires_at > p_t
       AND j.kind IN (SELECT l.kind FROM lim l WHERE l.max_running IS NOT NULL)
     GROUP BY j.kind),
  room AS (
    SELECT l.kind,
           least(p_n::bigint, coalesce(l.max_running - coalesce(r.n, 0), p_n),
                 coalesce(l.rate - skiplock.limit_used(l.starts_at, l.starts_n, p_t, l.per_ms),
                          p_n)) AS room
      FROM lim l LEFT JOIN run r ON r.kind = l.kind)
  SELECT array_agg(r.kind) FILTER (WHERE r.room > 0), array_agg(r.room) FILTER (WHERE r.room > 0),
         array_agg(r.kind) FILTER (WHERE r.room <= 0)
    INTO v_kinds, v_rooms, full_kinds FROM room r;
  ids := '{}';
  IF v_kinds IS NULL THEN
    RETURN;
  END IF;
  v_pick := ARRAY(
    SELECT c.id FROM (
      SELECT d.id, d.kind, d.ord, row_number() OVER (PARTITION BY d.kind ORDER BY d.ord) AS nth
        FROM (SELECT j.id, j.kind,
                     row_number() OVER (ORDER BY j.priority DESC, j.run_at, j.id) AS ord
                FROM (SELECT j.id, j.kind, j.priority, j.run_at FROM skiplock.jobs j
                       WHERE j.state = 'available' AND j.run_at <= now()
                         AND j.kind = ANY (v_kinds)
                         AND (p_queues IS NULL OR j.queue = ANY (p_queues))
                         AND j.queue <> ALL (p_skip)
                       ORDER BY j.priority DESC, j.run_at, j.id
                       LIMIT greatest(1000, 20 * p_n)) j) d) c
      JOIN unnest(v_kinds, v_rooms) AS r(kind, room) ON r.kind = c.kind
     WHERE c.nth <= r.room
     ORDER BY c.ord LIMIT p_n);
  ids := ARRAY(SELECT j.id FROM skiplock.jobs j
                WHERE j.id = ANY (v_pick) AND j.state = 'available'
                FOR UPDATE SKIP LOCKED);
  UPDATE skiplock.limits x
     SET (starts_at, starts_n) = (SELECT w.starts_at, w.starts_n
                                    FROM skiplock.limit_window(x.starts_at, x.starts_n, p_t,
                                                               x.per_ms, c.n) w)
    FROM (SELECT j.kind, count(*)::int AS n FROM skiplock.jobs j
           WHERE j.id = ANY (claim_limited_kinds.ids) GROUP BY j.kind) c
   WHERE x.kind = c.kind AND x.rate IS NOT NULL;
END
$fn$;
COMMENT ON FUNCTION skiplock.claim_limited_kinds(skiplock.limits[], text[], text[], integer, timestamptz) IS
  'Internal: the due jobs of the kind-wide limits a claim may start at p_t, each kind within its room (max_running, the rate window), locked SKIP LOCKED, in one pass; records their starts; full_kinds: those with no room.';

-- Per key: the first due jobs of the kind in claim order (at most 20 times
-- what the claim wants, at least 1,000), each key's room from its running
-- jobs and its window, and the jobs that fit, in claim order.
CREATE FUNCTION skiplock.claim_limited_keys(l skiplock.limits, p_queues text[], p_skip text[],
                                            p_n integer, p_t timestamptz) RETURNS bigint[]
LANGUAGE plpgsql
AS $fn$
DECLARE
  v_pick bigint[];
  v_keys text[];
  v_ids bigint[];
BEGIN
  WITH due AS (
    SELECT j.id, coalesce(j.payload ->> l.key_field, '') AS k,
           row_number() OVER (ORDER BY j.priority DESC, j.run_at, j.id) AS ord
      FROM (SELECT j.id, j.payload, j.priority, j.run_at FROM skiplock.jobs j
             WHERE j.state = 'available' AND j.run_at <= now() AND j.kind = l.kind
               AND (p_queues IS NULL OR j.queue = ANY (p_queues)) AND j.queue <> ALL (p_skip)
             ORDER BY j.priority DESC, j.run_at, j.id
             LIMIT greatest(1000, 20 * p_n)) j),
  room AS (
    SELECT k.k,
           least(coalesce(l.max_running - (
                   SELECT count(*) FROM skiplock.jobs r
                    WHERE r.state = 'running' AND r.kind = l.kind AND r.lease_expires_at > p_t
                      AND coalesce(r.payload ->> l.key_field, '') = k.k), 2147483647),
                 coalesce(l.rate - (
                   SELECT skiplock.limit_used(w.starts_at, w.starts_n, p_t, l.per_ms)
                     FROM skiplock.limit_windows w
                    WHERE w.kind = l.kind AND w.limit_key = k.k), l.rate, 2147483647)) AS room
      FROM (SELECT DISTINCT d.k FROM due d) k),
  fits AS (
    SELECT d.id, d.k, d.ord FROM (
      SELECT d.*, row_number() OVER (PARTITION BY d.k ORDER BY d.ord) AS nth FROM due d) d
      JOIN room r ON r.k = d.k
     WHERE d.nth <= r.room
     ORDER BY d.ord LIMIT p_n)
  SELECT array_agg(f.id ORDER BY f.ord), array_agg(f.k ORDER BY f.ord) INTO v_pick, v_keys
    FROM fits f;
  IF v_pick IS NULL THEN
    RETURN '{}';
  END IF;
  v_ids := ARRAY(SELECT j.id FROM skiplock.jobs j
                  WHERE j.id = ANY (v_pick) AND j.state = 'available'
                  FOR UPDATE SKIP LOCKED);
  IF l.rate IS NOT NULL AND cardinality(v_ids) > 0 THEN
    INSERT INTO skiplock.limit_windows AS w (kind, limit_key, starts_at, starts_n)
    SELECT l.kind, p.k, ARRAY[p_t], ARRAY[count(*)::int]
      FROM unnest(v_pick, v_keys) AS p(id, k) WHERE p.id = ANY (v_ids) GROUP BY p.k
    ON CONFLICT (kind, limit_key) DO UPDATE
       SET (starts_at, starts_n) = (
         SELECT x.starts_at, x.starts_n
           FROM skiplock.limit_window(w.starts_at, w.starts_n, p_t, l.per_ms,
                                      EXCLUDED.starts_n[1]) x);
  END IF;
  RETURN v_ids;
END
$fn$;
COMMENT ON FUNCTION skiplock.claim_limited_keys(skiplock.limits, text[], text[], integer, timestamptz) IS
  'Internal: the claim of one limit per key (key_field): the room of each key among the first due jobs, the jobs that fit, locked; records their starts per key.';

-- When a limit may next have room, from what it knows at p_t: the
-- oldest start still in its window(s) leaving it, or the first of its
-- running jobs' leases expiring (a completion frees a slot sooner, and the
-- worker that records it claims in the same call).  NULL: no window, no
-- running job.
CREATE FUNCTION skiplock.limit_next_room(l skiplock.limits, p_t timestamptz) RETURNS timestamptz
LANGUAGE sql STABLE
AS $fn$
  SELECT least(
    CASE WHEN l.rate IS NULL THEN NULL
         WHEN l.key_field IS NULL
         THEN (SELECT min(a) FROM unnest(l.starts_at) a
                WHERE a > p_t - l.per_ms * interval '1 millisecond')
              + l.per_ms * interval '1 millisecond'
         ELSE (SELECT min(a) FROM skiplock.limit_windows w, unnest(w.starts_at) a
                WHERE w.kind = l.kind AND a > p_t - l.per_ms * interval '1 millisecond')
              + l.per_ms * interval '1 millisecond' END,
    CASE WHEN l.max_running IS NULL THEN NULL
         ELSE (SELECT min(j.lease_expires_at) FROM skiplock.jobs j
                WHERE j.state = 'running' AND j.kind = l.kind AND j.lease_expires_at > p_t) END)
$fn$;
COMMENT ON FUNCTION skiplock.limit_next_room(skiplock.limits, timestamptz) IS
  'Internal: the earliest time a limit may have room again, as far as it knows at p_t (a start leaving its window, a lease expiring); NULL when neither.';

-- Every limited kind of a claim whose limit row no other claim holds now.
-- Returns the jobs it may start, the time its decisions were taken at,
-- and, when it took fewer than p_n while a limit held due jobs back, when
-- room may next free (wait_until).
CREATE FUNCTION skiplock.claim_limited(p_kinds text[], p_queues text[], p_skip text[],
                                       p_n integer, OUT ids bigint[], OUT started_at timestamptz,
                                       OUT wait_until timestamptz)
LANGUAGE plpgsql
AS $fn$
DECLARE
  l skiplock.limits;
  v_locked skiplock.limits[];
  v_full text[];
  v_k record;
BEGIN
  ids := '{}';
  v_locked := ARRAY(SELECT x FROM skiplock.limits x WHERE x.kind = ANY (p_kinds)
                     ORDER BY x.kind FOR UPDATE SKIP LOCKED);
  -- after the locks: the claim before ours on these rows has committed,
  -- so this clock is past every start it recorded
  started_at := clock_timestamp();
  SELECT k.ids, k.full_kinds INTO v_k
    FROM skiplock.claim_limited_kinds(ARRAY(SELECT x FROM unnest(v_locked) x
                                             WHERE x.key_field IS NULL),
                                      p_queues, p_skip, p_n, started_at) k;
  ids := v_k.ids;
  v_full := coalesce(v_k.full_kinds, '{}');
  FOREACH l IN ARRAY v_locked LOOP
    CONTINUE WHEN l.key_field IS NULL;
    EXIT WHEN cardinality(ids) >= p_n;
    ids := ids || skiplock.claim_limited_keys(l, p_queues, p_skip, p_n - cardinality(ids),
                                              started_at);
    v_full := v_full || l.kind;
  END LOOP;
  IF cardinality(ids) < p_n AND cardinality(v_full) > 0 THEN
    -- the rows as this claim left them (its own starts in their windows)
    wait_until := (SELECT min(skiplock.limit_next_room(x, started_at)) FROM skiplock.limits x
                    WHERE x.kind = ANY (v_full)
                      AND EXISTS (SELECT 1 FROM skiplock.jobs j
                                   WHERE j.state = 'available' AND j.run_at <= now()
                                     AND j.kind = x.kind AND j.id <> ALL (claim_limited.ids)
                                     AND (p_queues IS NULL OR j.queue = ANY (p_queues))
                                     AND j.queue <> ALL (p_skip)));
  END IF;
END
$fn$;
COMMENT ON FUNCTION skiplock.claim_limited(text[], text[], text[], integer) IS
  'Internal: the jobs of the limited kinds a claim may start now (those whose limit no other claim holds), the time their starts are recorded at, and when a limit that held due jobs back may next have room.';

-- The claim's pick, now with limits: limited kinds first (within their
-- room), then the rest in claim order.  Returns the ids, the start time
-- record_claim stamps on them, and when a limit may next have room.  (A
-- new name: claim_pick stays, for the sessions that run an earlier
-- record_claim while this step commits; no function a worker calls is
-- dropped, so none is missing under a running statement.)
CREATE FUNCTION skiplock.claim_take(p_owner text, p_kinds text[], p_queues text[], p_n integer,
                                    p_lease interval, p_after_priority integer,
                                    p_after_run_at_us bigint, p_after_id bigint,
                                    OUT ids bigint[], OUT started_at timestamptz,
                                    OUT wait_until timestamptz)
LANGUAGE plpgsql
AS $fn$
DECLARE
  v_kinds text[] := p_kinds;
  v_skip text[] := '{}';
  v_m int;
  v_after timestamptz;
BEGIN
  PERFORM skiplock.check_claim_args(p_owner, p_kinds, p_n, p_lease);
  PERFORM skiplock.check_claim_names(p_kinds, p_queues);
  ids := '{}';
  started_at := now();
  IF EXISTS (SELECT 1 FROM skiplock.pauses) THEN
    v_kinds := ARRAY(SELECT unnest(p_kinds) EXCEPT
                     SELECT p.kind FROM skiplock.pauses p WHERE p.queue = '*');
    v_skip := ARRAY(SELECT p.queue FROM skiplock.pauses p WHERE p.kind = '*');
  END IF;
  IF EXISTS (SELECT 1 FROM skiplock.breakers b
              WHERE b.kind = ANY (v_kinds) AND b.state <> 'closed') THEN
    ids := skiplock.claim_probes(v_kinds, p_queues, p_n, v_skip);
    v_kinds := ARRAY(SELECT unnest(v_kinds) EXCEPT
                     SELECT b.kind FROM skiplock.breakers b
                      WHERE b.kind = ANY (v_kinds) AND b.state <> 'closed');
  END IF;
  IF EXISTS (SELECT 1 FROM skiplock.limits x WHERE x.kind = ANY (v_kinds)) THEN
    SELECT claim_take.ids || c.ids, c.started_at, c.wait_until INTO ids, started_at, wait_until
      FROM skiplock.claim_limited(v_kinds, p_queues, v_skip,
                                  p_n - cardinality(claim_take.ids)) c;
    v_kinds := ARRAY(SELECT unnest(v_kinds) EXCEPT SELECT x.kind FROM skiplock.limits x);
    p_after_id := NULL; -- the keyset mark is of a claim of every kind
  END IF;
  v_m := p_n - cardinality(ids);
  IF v_m > 0 AND cardinality(v_kinds) > 0 AND p_after_id IS NULL THEN
    ids := ids || ARRAY(
      SELECT j.id FROM skiplock.jobs j
       WHERE j.state = 'available' AND j.run_at <= now()
         AND (p_queues IS NULL OR j.queue = ANY (p_queues)) AND j.kind = ANY (v_kinds)
         AND j.queue <> ALL (v_skip)
       ORDER BY j.priority DESC, j.run_at, j.id LIMIT v_m FOR UPDATE SKIP LOCKED);
    IF cardinality(ids) = 0 AND p_n > 0 THEN
      PERFORM skiplock.worker_idle(p_owner, p_kinds, p_queues);
    END IF;
  ELSIF v_m > 0 AND cardinality(v_kinds) > 0 THEN
    v_after := timestamptz 'epoch' + p_after_run_at_us * interval '1 microsecond';
    ids := ids || ARRAY(
      SELECT a.id FROM (
        SELECT j.id FROM skiplock.jobs j
         WHERE j.state = 'available' AND j.run_at <= now()
           AND (p_queues IS NULL OR j.queue = ANY (p_queues)) AND j.kind = ANY (v_kinds)
           AND j.queue <> ALL (v_skip)
           AND j.priority = p_after_priority AND (j.run_at, j.id) > (v_after, p_after_id)
         ORDER BY j.priority DESC, j.run_at, j.id LIMIT v_m FOR UPDATE SKIP LOCKED) a
      UNION ALL
      SELECT b.id FROM (
        SELECT j.id FROM skiplock.jobs j
         WHERE j.state = 'available' AND j.run_at <= now()
           AND (p_queues IS NULL OR j.queue = ANY (p_queues)) AND j.kind = ANY (v_kinds)
           AND j.queue <> ALL (v_skip)
           AND j.priority < p_after_priority
         ORDER BY j.priority DESC, j.run_at, j.id LIMIT v_m FOR UPDATE SKIP LOCKED) b
      LIMIT v_m);
  ELSIF cardinality(ids) = 0 AND p_n > 0 THEN
    PERFORM skiplock.worker_idle(p_owner, p_kinds, p_queues);
  END IF;
END
$fn$;
COMMENT ON FUNCTION skiplock.claim_take(text, text[], text[], integer, interval, integer, bigint, bigint) IS
  'Internal: the ids a claim takes (breaker probes, the room of limited kinds, then due jobs in claim order), locked SKIP LOCKED, the start time to stamp on them, and when a limit that held jobs back may next have room; record_claim leases them.';

-- As before, for callers of earlier steps: claim_take's ids.
CREATE OR REPLACE FUNCTION skiplock.claim_pick(p_owner text, p_kinds text[], p_queues text[],
    p_n integer, p_lease interval, p_after_priority integer, p_after_run_at_us bigint,
    p_after_id bigint) RETURNS bigint[]
LANGUAGE plpgsql
AS $fn$
DECLARE
  v_ids bigint[];
BEGIN
  SELECT t.ids INTO v_ids FROM skiplock.claim_take(p_owner, p_kinds, p_queues, p_n, p_lease,
    p_after_priority, p_after_run_at_us, p_after_id) t;
  RETURN v_ids;
END
$fn$;
COMMENT ON FUNCTION skiplock.claim_pick(text, text[], text[], integer, interval, integer, bigint, bigint) IS
  'Internal: the ids of claim_take, for the record_claim of earlier steps.';

-- As in step 0028, with the start time of the pick stamped on the jobs it
-- leases, limited kinds left out of the per-queue claim, and wait_hints:
-- a caller that passes true may get one more row, row_type 'wait', when a
-- limit held due jobs back: run_at is when it may next have room and
-- delay_ms how far that is from now (its other columns are NULL).  A
-- caller uses it to claim again then instead of backing off.
--
-- wait_hints is a new argument, so this is a second record_claim; it has
-- no default, so a call without it (every earlier caller, positional or
-- named) resolves to the 19-argument one below, unchanged for them and
-- never dropped (no statement in flight loses its function).
CREATE FUNCTION skiplock.record_claim(ids bigint[], fencings bigint[], outcomes text[],
    results jsonb[], errors text[], retry_after_ms bigint[], deferred boolean[],
    backoffs text[], backoff_bases_ms bigint[], backoff_caps_ms bigint[], owner text,
    kinds text[], queues text[], n integer, lease interval,
    after_priority integer, after_run_at_us bigint, after_id bigint, job_queues text[],
    wait_hints boolean)
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
  v_at timestamptz;
  v_wait timestamptz;
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
  -- 3. the next jobs: picked (pauses, breakers, limits, keyset), then leased
  IF skiplock.is_distributed() THEN
    v_kinds := ARRAY(SELECT unnest(kinds) EXCEPT SELECT x.kind FROM skiplock.limits x);
    IF cardinality(v_kinds) > 0 OR cardinality(kinds) = 0 THEN
      RETURN QUERY SELECT * FROM skiplock.claim_by_queue(owner, v_kinds, queues, n, lease,
                     after_priority, after_run_at_us, after_id);
    END IF;
    RETURN;
  END IF;
  SELECT p.ids, p.started_at, p.wait_until INTO v_ids, v_at, v_wait
    FROM skiplock.claim_take(owner, kinds, queues, n, lease, after_priority, after_run_at_us,
                             after_id) p;
  IF wait_hints AND v_wait IS NOT NULL THEN
    RETURN NEXT ROW('wait', NULL, NULL, v_wait,
                    greatest(0, ceil(extract(epoch FROM v_wait - clock_timestamp()) * 1000))::bigint,
                    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::skiplock.exchange_row;
  END IF;
  RETURN QUERY
    UPDATE skiplock.jobs j
       SET state = 'running', attempt = j.attempt + 1, fencing = j.fencing + 1,
           lease_owner = record_claim.owner, lease_expires_at = now() + record_claim.lease,
           attempted_at = v_at
     WHERE j.id = ANY (v_ids)
    RETURNING 'claimed'::text, j.id, 'running'::text, j.run_at, NULL::bigint, j.queue, j.kind,
              j.payload, j.attempt, j.max_attempts, j.fencing, j.lease_expires_at,
              coalesce(j.timeout_ms, 0), j.priority,
              (extract(epoch FROM j.run_at) * 1000000)::bigint;
END
$fn$;

-- The record_claim of protocol 2 (step 0027): the one above without wait
-- rows.
CREATE OR REPLACE FUNCTION skiplock.record_claim(ids bigint[], fencings bigint[],
    outcomes text[], results jsonb[], errors text[], retry_after_ms bigint[],
    deferred boolean[], backoffs text[], backoff_bases_ms bigint[], backoff_caps_ms bigint[],
    owner text, kinds text[], queues text[], n integer, lease interval,
    after_priority integer DEFAULT NULL, after_run_at_us bigint DEFAULT NULL,
    after_id bigint DEFAULT NULL, job_queues text[] DEFAULT NULL)
RETURNS SETOF skiplock.exchange_row
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  RETURN QUERY SELECT * FROM skiplock.record_claim(ids, fencings, outcomes, results, errors,
    retry_after_ms, deferred, backoffs, backoff_bases_ms, backoff_caps_ms, owner, kinds, queues,
    n, lease, after_priority, after_run_at_us, after_id, job_queues, false);
END
$fn$;

-- Sets (or replaces) the limit of a kind.  per is the rate's window (one
-- second unless given).
CREATE FUNCTION skiplock.limit_set(kind text, max_running integer DEFAULT NULL,
                                   rate integer DEFAULT NULL, per interval DEFAULT NULL,
                                   key_field text DEFAULT NULL,
                                   actor text DEFAULT current_user, role text DEFAULT 'sql')
RETURNS skiplock.limits
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
  v_per_ms bigint;
  r skiplock.limits;
BEGIN
  PERFORM skiplock.check_actor(actor, role);
  IF kind IS NULL OR length(kind) NOT BETWEEN 1 AND 128 THEN
    RAISE EXCEPTION 'limit_set: a kind of 1 to 128 characters is required' USING ERRCODE = '22023';
  END IF;
  IF max_running IS NULL AND rate IS NULL THEN
    RAISE EXCEPTION 'limit_set: give max_running, rate (with per), or both'
      USING ERRCODE = '22023';
  END IF;
  IF max_running IS NOT NULL AND max_running NOT BETWEEN 1 AND 1000000 THEN
    RAISE EXCEPTION 'limit_set: max_running must be 1 to 1000000, got %', max_running
      USING ERRCODE = '22023';
  END IF;
  IF rate IS NOT NULL AND rate NOT BETWEEN 1 AND 1000000 THEN
    RAISE EXCEPTION 'limit_set: rate must be 1 to 1000000 starts, got %', rate
      USING ERRCODE = '22023';
  END IF;
  IF rate IS NULL AND per IS NOT NULL THEN
    RAISE EXCEPTION 'limit_set: per is the window of a rate; give rate too'
      USING ERRCODE = '22023';
  END IF;
  IF rate IS NOT NULL AND per IS NULL THEN
    per := interval '1 second';
  END IF;
  v_per_ms := (extract(epoch FROM per) * 1000)::bigint;
  IF per IS NOT NULL AND (v_per_ms NOT BETWEEN 1 AND 86400000
                          OR per <> v_per_ms * interval '1 millisecond') THEN
    RAISE EXCEPTION 'limit_set: per must be 1 ms to 1 day in whole milliseconds, got %', per
      USING ERRCODE = '22023';
  END IF;
  IF key_field IS NOT NULL AND length(key_field) NOT BETWEEN 1 AND 128 THEN
    RAISE EXCEPTION 'limit_set: key_field must be 1 to 128 characters' USING ERRCODE = '22023';
  END IF;
  IF skiplock.is_distributed() THEN
    RAISE EXCEPTION 'limit_set: limits are not supported on the distributed layout yet'
      USING ERRCODE = '0A000';
  END IF;
  INSERT INTO skiplock.limits AS x (kind, key_field, max_running, rate, per_ms, changed_by)
  VALUES (kind, key_field, max_running, rate, v_per_ms, actor)
  ON CONFLICT ON CONSTRAINT limits_pkey DO UPDATE
     SET key_field = EXCLUDED.key_field, max_running = EXCLUDED.max_running,
         rate = EXCLUDED.rate, per_ms = EXCLUDED.per_ms, changed_by = EXCLUDED.changed_by,
         changed_at = now(),
         -- a window of another width or key starts empty
         starts_at = CASE WHEN x.per_ms = EXCLUDED.per_ms
                           AND x.key_field IS NOT DISTINCT FROM EXCLUDED.key_field
                          THEN x.starts_at ELSE '{}' END,
         starts_n = CASE WHEN x.per_ms = EXCLUDED.per_ms
                          AND x.key_field IS NOT DISTINCT FROM EXCLUDED.key_field
                         THEN x.starts_n ELSE '{}' END
  RETURNING x.* INTO r;
  DELETE FROM skiplock.limit_windows w
   WHERE w.kind = kind AND (r.key_field IS NULL OR r.rate IS NULL);
  PERFORM skiplock.action_record(actor, role, 'limit_set',
            jsonb_build_object('kind', kind, 'max_running', max_running, 'rate', rate,
                               'per_ms', v_per_ms, 'key_field', key_field), 1, 1);
  PERFORM pg_notify('skiplock_jobs', ''); -- more room, or less: workers look again
  RETURN r;
END
$fn$;

-- Removes the limit of a kind; true when there was one.
CREATE FUNCTION skiplock.limit_remove(kind text, actor text DEFAULT current_user,
                                      role text DEFAULT 'sql') RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
BEGIN
  PERFORM skiplock.check_actor(actor, role);
  DELETE FROM skiplock.limits x WHERE x.kind = kind;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  PERFORM skiplock.action_record(actor, role, 'limit_remove', jsonb_build_object('kind', kind),
                                 1, 1);
  PERFORM pg_notify('skiplock_jobs', '');
  RETURN true;
END
$fn$;

-- Each limit and its use now.
CREATE FUNCTION skiplock.limits_status()
RETURNS TABLE (kind text, key_field text, max_running integer, running bigint, rate integer,
               per_ms bigint, started bigint, waiting bigint, keys bigint,
               changed_at timestamptz, changed_by text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT l.kind, l.key_field, l.max_running,
         (SELECT count(*) FROM skiplock.jobs j
           WHERE j.state = 'running' AND j.kind = l.kind AND j.lease_expires_at > now()),
         l.rate, l.per_ms,
         CASE WHEN l.rate IS NULL THEN NULL
              WHEN l.key_field IS NULL
              THEN skiplock.limit_used(l.starts_at, l.starts_n, clock_timestamp(), l.per_ms)
              ELSE (SELECT coalesce(sum(skiplock.limit_used(w.starts_at, w.starts_n,
                                                            clock_timestamp(), l.per_ms)), 0)
                      FROM skiplock.limit_windows w WHERE w.kind = l.kind)::bigint END,
         (SELECT count(*) FROM skiplock.jobs j
           WHERE j.state = 'available' AND j.kind = l.kind AND j.run_at <= now()),
         CASE WHEN l.key_field IS NULL THEN NULL
              ELSE (SELECT count(DISTINCT coalesce(j.payload ->> l.key_field, ''))
                      FROM skiplock.jobs j
                     WHERE j.kind = l.kind AND j.state IN ('available', 'running')) END,
         l.changed_at, l.changed_by
    FROM skiplock.limits l ORDER BY l.kind
$fn$;

COMMENT ON FUNCTION skiplock.record_claim(bigint[], bigint[], text[], jsonb[], text[], bigint[],
    boolean[], text[], bigint[], bigint[], text, text[], text[], integer, interval, integer,
    bigint, bigint, text[]) IS
  'record outcomes, then claim, in one call (protocol 2): rows tagged recorded / claimed; n = 0 records only; job_queues: the handles'' queues';
COMMENT ON FUNCTION skiplock.record_claim(bigint[], bigint[], text[], jsonb[], text[], bigint[],
    boolean[], text[], bigint[], bigint[], text, text[], text[], integer, interval, integer,
    bigint, bigint, text[], boolean) IS
  'record outcomes, then claim, in one call: rows tagged recorded / claimed (and, with wait_hints, wait: when a limit may next have room); n = 0 records only; job_queues: the handles'' queues (protocol 2)';
COMMENT ON FUNCTION skiplock.limit_set(text, integer, integer, interval, text, text, text) IS
  'Sets the limit of a kind: at most max_running running, and/or rate starts per interval; per key (the payload''s key_field) or for the kind; logged (operators).';
COMMENT ON FUNCTION skiplock.limit_remove(text, text, text) IS
  'Removes the limit of a kind; true when there was one; logged (operators).';
COMMENT ON FUNCTION skiplock.limits_status() IS
  'Each limit and its use now: running (live leases), starts in the current window, due jobs waiting, keys seen.';

-- The functions only operators may call, read by grant_role: a step that
-- adds one lists it here instead of rewriting grant_role.
CREATE TABLE skiplock.operator_functions (
  name text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 63)
);
COMMENT ON TABLE skiplock.operator_functions IS
  'The SECURITY DEFINER functions (by name) that grant_role gives to operators but not to workers.';
INSERT INTO skiplock.operator_functions (name)
VALUES ('job_cancel'), ('job_retry'), ('jobs_prune'), ('retention_set'), ('retention_reset'),
       ('partition_width_set'), ('action_record'), ('pause'), ('resume'), ('job_discard'),
       ('jobs_act'), ('schedule_run_now'), ('schedule_set_paused'), ('breaker_set'),
       ('enqueue_many_unchecked'), ('enqueue_one'), ('limit_set'), ('limit_remove');

-- As before, with the operators' functions read from
-- operator_functions, and the limits (limits_status) and why a job waits
-- (job_waits_for, step 0030) readable by every role.
CREATE OR REPLACE FUNCTION skiplock.grant_role(p_role text, p_kind text) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  f regprocedure;
  t regclass;
BEGIN
  EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA skiplock FROM %I', p_role);
  EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA skiplock FROM %I', p_role);
  EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA skiplock FROM %I', p_role);
  EXECUTE format('GRANT USAGE ON SCHEMA skiplock TO %I', p_role);
  EXECUTE format('GRANT SELECT ON skiplock.retention, skiplock.maintenance, '
                 'skiplock.finished_partitions, skiplock.breakers, skiplock.breaker_events, '
                 'skiplock.schedules, skiplock.schema_version, skiplock.pauses, '
                 'skiplock.workers, skiplock.limits, skiplock.limit_windows TO %I', p_role);
  FOREACH t IN ARRAY ARRAY['skiplock.jobs', 'skiplock.finished_jobs', 'skiplock.all_jobs',
                           'skiplock.leases']::regclass[] LOOP
    IF p_kind = 'operator' THEN
      EXECUTE format('GRANT SELECT ON %s TO %I', t, p_role);
    ELSE
      EXECUTE format('GRANT SELECT (%s) ON %s TO %I',
                     (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
                        FROM pg_attribute a
                       WHERE a.attrelid = t AND NOT a.attisdropped AND a.attname <> 'fencing'
                         AND (a.attnum > 0 OR (a.attname = 'xmin'
                                               AND t = 'skiplock.jobs'::regclass))),
                     t, p_role);
    END IF;
  END LOOP;
  IF p_kind <> 'worker' THEN
    EXECUTE format('GRANT SELECT ON skiplock.actions TO %I', p_role);
  END IF;
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'skiplock'::regnamespace AND p.prokind = 'f'
              AND (p.proname IN ('installed_version', 'backoff_delay', 'retry_delay_ms',
                                 'breaker_step', 'check_job_times', 'interval_ms',
                                 'check_claim_args', 'lease_check_args', 'lease_check_reserved',
                                 'keep_until', 'errors_append', 'jobs_matching',
                                 'partition_width', 'workers_seen', 'idle_workers',
                                 'payload_max', 'limits_status', 'job_waits_for')
                   OR (p_kind = 'worker' AND p.prosecdef
                       AND p.proname NOT IN (SELECT o.name FROM skiplock.operator_functions o))
                   OR (p_kind = 'operator' AND p.prosecdef))
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
COMMENT ON FUNCTION skiplock.grant_role(text, text) IS
  'Internal: the privileges of one role of a kind (worker, operator, reader), from scratch; run by grant_roles and by steps that change them.';

-- New functions are executable by PUBLIC until revoked; grant_role gives
-- the new SECURITY DEFINER ones to the worker and operator roles again.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;
SELECT skiplock.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);
