-- skiplock schema step 0017: guards.  No value a role may store can stall
-- the fleet, tokens authorise only their holder, names and payloads have
-- one limit everywhere, and the action log names the session's own role.
--
-- Schedules.  schedule_fire stored whatever times its caller gave, so a
-- worker role could write last_fire 'infinity' and next_fire '-infinity':
-- every tick, `cron list` and every idle worker's poll then failed on the
-- conversion of an infinite time.  schedule_fire now checks every time it
-- is given (finite, from 1970 to 2199 as a job's run_at, and consistent:
-- last_fire never moves back, the next fire time is after it, every fire
-- time is pending and handled, every key is the schedule's); a CHECK
-- constraint keeps the stored times in that range; and the readers clamp
-- what they convert, so a value planted around both still stops nothing
-- but its own schedule.
--
-- Breakers.  breaker_configure took any positive setting, and a window of
-- 9223372036854775807 ms made every outcome batch of its kind fail
-- (interval out of range), so workers completed nothing.  The settings are
-- now bounded as the command line bounds them (rate 1 to 100, min and
-- calls 1 to 1000000, probes 1 to 10000, window and open 1 ms to 100
-- years; 22023), a CHECK constraint keeps them so, and breaker_step and
-- claim_probes clamp what they compute, so a row planted by the owner
-- cannot fail a record or a claim either.
--
-- Tokens.  The worker and reader roles read skiplock.jobs and leases
-- whole, fencing tokens included, so any worker session could end or
-- extend another's claim or lease.  grant_role now gives those roles
-- SELECT on every column but `fencing` of jobs, finished_jobs, all_jobs
-- and leases; a claimer gets its token from claim's result, a lease holder
-- from lease_acquire.  jobs_matching (which runs with the caller's rights)
-- returns NULL for the token.  Operators keep the whole rows.
--
-- Names and payloads.  A kind or queue name is 1 to 128 bytes (octet_length)
-- wherever SQL checks it, as the library and the command check it: enqueue
-- refused 128 characters of 2 bytes nowhere, and such a queue could then be
-- served only by a worker without a queue filter.  A claim refuses a kind or
-- queue name outside that range and more than 1000 queues (22023), which
-- also bounds what it records in skiplock.workers (1000 names of 128 bytes
-- each, for kinds and for queues).  A payload is at most
-- skiplock.payload_max() bytes of JSON text (1 MiB, the command's default
-- --max-payload), checked by enqueue_many, through which every enqueue
-- goes; the internal enqueue_many_unchecked and enqueue_one are no longer
-- granted to the worker role.
--
-- The action log records session_user in a new column db_user: the
-- role the session logged in as, which the caller cannot choose, next to
-- the actor and role it names.

-- ---- schedules: times a fleet can convert ----

UPDATE skiplock.schedules
   SET created_at = least(greatest(created_at, timestamptz '1970-01-01 00:00+00'),
                          timestamptz '2199-12-31 00:00+00')
 WHERE NOT (created_at >= timestamptz '1970-01-01 00:00+00'
            AND created_at < timestamptz '2200-01-01 00:00+00');
-- what passed is skipped, as on resume; the next tick sets the next fire time
UPDATE skiplock.schedules SET last_fire = now(), next_fire = now()
 WHERE NOT (last_fire >= timestamptz '1970-01-01 00:00+00'
            AND last_fire < timestamptz '2200-01-01 00:00+00');
UPDATE skiplock.schedules SET next_fire = now()
 WHERE NOT (next_fire >= timestamptz '1970-01-01 00:00+00'
            AND next_fire < timestamptz '2200-01-01 00:00+00');
ALTER TABLE skiplock.schedules ADD CONSTRAINT schedules_times_check
  CHECK (created_at >= timestamptz '1970-01-01 00:00+00'
         AND created_at < timestamptz '2200-01-01 00:00+00'
         AND last_fire >= timestamptz '1970-01-01 00:00+00'
         AND last_fire < timestamptz '2200-01-01 00:00+00'
         AND next_fire >= timestamptz '1970-01-01 00:00+00'
         AND next_fire < timestamptz '2200-01-01 00:00+00') NOT VALID;
ALTER TABLE skiplock.schedules VALIDATE CONSTRAINT schedules_times_check;

-- The checks of schedule_fire's arguments (22023): see the header.  A time
-- left as the caller read it (p_new_last = p_expected_last) is not checked,
-- so a schedule whose stored time is out of range can still be moved on.
CREATE FUNCTION skiplock.schedule_fire_check(
  p_name text, p_created_at timestamptz, p_expected_last timestamptz,
  p_new_last timestamptz, p_next timestamptz, p_fires timestamptz[], p_keys text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  lo CONSTANT timestamptz := timestamptz '1970-01-01 00:00+00';
  hi CONSTANT timestamptz := timestamptz '2200-01-01 00:00+00';
  v_after timestamptz := coalesce(p_expected_last, p_created_at);
BEGIN
  IF coalesce(cardinality(p_fires), 0) <> coalesce(cardinality(p_keys), 0)
     OR cardinality(p_fires) > 100000 THEN
    RAISE EXCEPTION 'schedule_fire: % fire times but % keys', coalesce(cardinality(p_fires), 0),
      coalesce(cardinality(p_keys), 0) USING ERRCODE = '22023',
      DETAIL = 'One unique key per fire time, at most 100000 of each.';
  END IF;
  IF p_new_last IS DISTINCT FROM p_expected_last
     AND NOT coalesce(p_new_last >= lo AND p_new_last < hi AND p_new_last > v_after, false) THEN
    RAISE EXCEPTION 'schedule_fire: last fire time % is out of range',
      coalesce(p_new_last::text, 'NULL') USING ERRCODE = '22023',
      DETAIL = 'A fire time is a finite time from 1970 to 2199, after the last one handled '
               '(or the schedule''s creation): last_fire never moves back.';
  END IF;
  IF p_next IS NOT NULL
     AND NOT coalesce(p_next >= lo AND p_next < hi
                      AND (p_new_last IS NULL OR p_next > p_new_last), false) THEN
    RAISE EXCEPTION 'schedule_fire: next fire time % is out of range', p_next
      USING ERRCODE = '22023',
      DETAIL = 'The next fire time is a finite time from 1970 to 2199, after the last one.';
  END IF;
  IF EXISTS (SELECT 1 FROM unnest(p_fires, p_keys) AS t(f, k)
              WHERE NOT coalesce(f >= lo AND f < hi AND f > v_after AND f <= p_new_last
                                 AND starts_with(k, 'cron:' || p_name || ':'), false)) THEN
    RAISE EXCEPTION 'schedule_fire: a fire time is not pending or a key is not the schedule''s'
      USING ERRCODE = '22023',
      DETAIL = 'Each fire time is after the last one handled and at most the new one; each '
               'key is cron:NAME:TIME.';
  END IF;
END
$fn$;

-- As in step 0004, with its arguments checked first (schedule_fire_check).
CREATE OR REPLACE FUNCTION skiplock.schedule_fire(
  p_name text, p_created_at timestamptz, p_expected_last timestamptz,
  p_new_last timestamptz, p_next timestamptz, p_fires timestamptz[], p_keys text[])
RETURNS bigint[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  s skiplock.schedules;
  n int := coalesce(cardinality(p_fires), 0);
BEGIN
  PERFORM skiplock.schedule_fire_check(p_name, p_created_at, p_expected_last, p_new_last,
                                       p_next, p_fires, p_keys);
  SELECT * INTO s FROM skiplock.schedules x
   WHERE x.name = p_name AND x.enabled AND x.created_at = p_created_at
     AND x.last_fire IS NOT DISTINCT FROM p_expected_last
   FOR UPDATE SKIP LOCKED;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  UPDATE skiplock.schedules x
     SET last_fire = p_new_last, next_fire = p_next, updated_at = now()
   WHERE x.name = p_name AND x.last_fire IS NOT DISTINCT FROM p_expected_last;
  IF n = 0 THEN
    RETURN '{}';
  END IF;
  RETURN skiplock.enqueue_many(NULL, array_fill(s.kind, ARRAY[n]),
           array_fill(s.payload, ARRAY[n]), array_fill(s.queue, ARRAY[n]), p_fires,
           NULL, array_fill(s.priority, ARRAY[n]), p_keys,
           array_fill(s.max_attempts, ARRAY[n]), NULL, NULL, NULL);
END
$fn$;

-- ---- breakers: bounded settings, clamped arithmetic ----

UPDATE skiplock.breakers
   SET min_calls = least(min_calls, 1000000), window_calls = least(window_calls, 1000000),
       window_ms = least(window_ms, 3153600000000), open_ms = least(open_ms, 3153600000000),
       probes = least(probes, 10000)
 WHERE min_calls > 1000000 OR window_calls > 1000000 OR window_ms > 3153600000000
    OR open_ms > 3153600000000 OR probes > 10000;
ALTER TABLE skiplock.breakers ADD CONSTRAINT breakers_bounds_check
  CHECK (min_calls <= 1000000 AND window_calls <= 1000000 AND window_ms <= 3153600000000
         AND open_ms <= 3153600000000 AND probes <= 10000) NOT VALID;
ALTER TABLE skiplock.breakers VALIDATE CONSTRAINT breakers_bounds_check;

-- A breaker's settings as breaker_configure takes them: NULL (22004) or
-- out of range (22023) raises.
CREATE FUNCTION skiplock.check_breaker_settings(p_kind text, p_failure_pct int, p_min_calls int,
                                                p_window_calls int, p_window_ms bigint,
                                                p_open_ms bigint, p_probes int)
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  IF p_kind IS NULL OR p_failure_pct IS NULL OR p_min_calls IS NULL OR p_window_calls IS NULL
     OR p_window_ms IS NULL OR p_open_ms IS NULL OR p_probes IS NULL THEN
    RAISE EXCEPTION 'breaker_configure: no argument may be NULL' USING ERRCODE = '22004';
  END IF;
  IF octet_length(p_kind) NOT BETWEEN 1 AND 128 THEN
    RAISE EXCEPTION 'breaker_configure: job kind must be 1 to 128 bytes' USING ERRCODE = '22023';
  END IF;
  IF p_failure_pct NOT BETWEEN 1 AND 100 OR p_min_calls NOT BETWEEN 1 AND 1000000
     OR p_window_calls NOT BETWEEN 1 AND 1000000 OR p_probes NOT BETWEEN 1 AND 10000
     OR p_window_ms NOT BETWEEN 1 AND 3153600000000 OR p_open_ms NOT BETWEEN 1 AND 3153600000000
  THEN
    RAISE EXCEPTION 'breaker settings for "%" out of range', p_kind USING ERRCODE = '22023',
      DETAIL = format('Got failure_pct %s, min_calls %s, window_calls %s, window_ms %s, '
                      'open_ms %s, probes %s.', p_failure_pct, p_min_calls, p_window_calls,
                      p_window_ms, p_open_ms, p_probes),
      HINT = 'failure_pct is 1 to 100, min_calls and window_calls 1 to 1000000, probes 1 to '
             '10000, window_ms and open_ms 1 to 3153600000000 (100 years).';
  END IF;
END
$fn$;

-- As in step 0011, with the settings checked first.
CREATE OR REPLACE FUNCTION skiplock.breaker_configure(kind text, failure_pct int, min_calls int,
                                                      window_calls int, window_ms bigint,
                                                      open_ms bigint, probes int)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT skiplock.check_breaker_settings($1, $2, $3, $4, $5, $6, $7);
  INSERT INTO skiplock.breakers AS b (kind, failure_pct, min_calls, window_calls, window_ms,
                                      open_ms, probes)
  VALUES ($1, $2, $3, $4, $5, $6, $7)
  ON CONFLICT (kind) DO UPDATE SET failure_pct = $2, min_calls = $3, window_calls = $4,
                                   window_ms = $5, open_ms = $6, probes = $7
   WHERE (b.failure_pct, b.min_calls, b.window_calls, b.window_ms, b.open_ms, b.probes)
         IS DISTINCT FROM ($2, $3, $4, $5, $6, $7)
$fn$;

-- As in step 0007, with every setting clamped into its range and the
-- counts kept within int, so that no stored row can make the statement
-- that records outcomes fail.
CREATE OR REPLACE FUNCTION skiplock.breaker_step(b skiplock.breakers, ok int, bad int)
RETURNS skiplock.breakers
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  n skiplock.breakers := b;
  v_ok bigint := greatest(coalesce(ok, 0), 0);
  v_bad bigint := greatest(coalesce(bad, 0), 0);
  v_window interval := least(greatest(b.window_ms, 1), 3153600000000) * interval '1 millisecond';
  v_open interval := least(greatest(b.open_ms, 1), 3153600000000) * interval '1 millisecond';
  v_calls bigint := greatest(b.calls, 0);
  v_failures bigint := greatest(b.failures, 0);
BEGIN
  n.prev_state := b.state;
  IF b.state = 'closed' THEN
    IF b.window_started_at <= now() - v_window OR b.calls >= b.window_calls THEN
      v_calls := 0;
      v_failures := 0;
      n.window_started_at := now();
    END IF;
    v_calls := least(v_calls + v_ok + v_bad, 2147483647);
    v_failures := least(v_failures + v_bad, v_calls);
    n.calls := v_calls;
    n.failures := v_failures;
    IF v_calls >= b.min_calls
       AND v_failures * 100 >= least(greatest(b.failure_pct, 1), 100) * v_calls THEN
      n.state := 'open';
      n.open_until := now() + v_open;
      n.changed_at := now();
    END IF;
  ELSIF b.state = 'half_open' THEN
    IF v_bad > 0 THEN
      n.state := 'open';
      n.open_until := now() + v_open;
      n.changed_at := now();
    ELSE
      n.probe_ok := least(greatest(b.probe_ok, 0) + v_ok, 2147483647);
      IF n.probe_ok >= least(greatest(b.probes, 1), 10000) THEN
        n.state := 'closed';
        n.calls := 0;
        n.failures := 0;
        n.window_started_at := now();
        n.open_until := NULL;
        n.changed_at := now();
      END IF;
    END IF;
  END IF;
  RETURN n;
END
$fn$;

-- As in step 0014, with open_ms and probes clamped as breaker_step does.
CREATE OR REPLACE FUNCTION skiplock.claim_probes(p_kinds text[], p_queues text[], p_n int,
                                                 p_skip text[])
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
                OR b.changed_at <= now() - least(greatest(b.open_ms, 1), 3153600000000)
                                           * interval '1 millisecond')))),
  p AS (
    SELECT x.id, pk.kind FROM pk CROSS JOIN LATERAL (
      SELECT j.id FROM skiplock.jobs j
       WHERE j.state = 'available' AND j.run_at <= now() AND j.kind = pk.kind
         AND (p_queues IS NULL OR j.queue = ANY (p_queues)) AND j.queue <> ALL (p_skip)
       ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1 FOR UPDATE SKIP LOCKED) x
    LIMIT p_n),
  probe AS (
    UPDATE skiplock.breakers b SET prev_state = b.state, state = 'half_open',
           probes_left = (CASE WHEN b.state = 'half_open' AND b.probes_left > 0
                               THEN b.probes_left
                               ELSE least(greatest(b.probes, 1), 10000) END) - 1,
           probe_ok = CASE WHEN b.state = 'open' THEN 0 ELSE b.probe_ok END,
           changed_at = CASE WHEN b.state = 'half_open' AND b.probes_left > 0
                             THEN b.changed_at ELSE now() END
      FROM p WHERE b.kind = p.kind
       AND ((b.state = 'open' AND b.open_until <= now())
            OR (b.state = 'half_open' AND (b.probes_left > 0
                OR b.changed_at <= now() - least(greatest(b.open_ms, 1), 3153600000000)
                                           * interval '1 millisecond')))
    RETURNING b.kind, b.prev_state, b.state),
  ev AS (
    INSERT INTO skiplock.breaker_events (kind, from_state, to_state, reason)
    SELECT kind, prev_state, state, 'open interval over: admitting probes'
      FROM probe WHERE prev_state <> state)
  SELECT coalesce(array_agg(p.id), '{}') INTO v_ids FROM p JOIN probe USING (kind);
  RETURN v_ids;
END
$fn$;

-- ---- names and payloads: one limit each ----

-- The largest payload, in bytes of its JSON text: the one definition
-- (the command's default --max-payload, SKL_PAYLOAD_MAX_DEFAULT, is the
-- same; an integration test compares them).
CREATE FUNCTION skiplock.payload_max() RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $fn$ SELECT 1048576 $fn$;

-- The kinds, queues and payloads of an enqueue (22023): a kind is 1 to 128
-- bytes, a queue NULL (the default) or 1 to 128 bytes, a payload at most
-- payload_max() bytes of JSON text.  A jsonb value's text is at most about
-- 6 times its binary size (an escaped control character), so only a
-- payload whose binary size is over payload_max() / 8 is turned into text
-- to be measured; an element of an array is never compressed.
CREATE FUNCTION skiplock.check_job_input(p_kinds text[], p_queues text[], p_payloads jsonb[])
RETURNS void
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  r record;
  n int := cardinality(p_kinds);
BEGIN
  SELECT t.i, t.k, t.q, octet_length(t.p::text) AS size INTO r
    FROM unnest(p_kinds, p_queues, p_payloads) WITH ORDINALITY AS t(k, q, p, i)
   WHERE t.k IS NULL OR octet_length(t.k) NOT BETWEEN 1 AND 128
      OR octet_length(t.q) NOT BETWEEN 1 AND 128
      OR (pg_column_size(t.p) > skiplock.payload_max() / 8
          AND octet_length(t.p::text) > skiplock.payload_max())
   LIMIT 1;
  IF NOT FOUND THEN
    RETURN;
  ELSIF r.k IS NULL OR octet_length(r.k) NOT BETWEEN 1 AND 128 THEN
    RAISE EXCEPTION 'job kind must be 1 to 128 bytes, got %', coalesce(octet_length(r.k), 0)
      USING ERRCODE = '22023', DETAIL = format('Job %s of %s.', r.i, n);
  ELSIF octet_length(r.q) NOT BETWEEN 1 AND 128 THEN
    RAISE EXCEPTION 'queue name must be 1 to 128 bytes, got %', octet_length(r.q)
      USING ERRCODE = '22023', DETAIL = format('Job %s of %s.', r.i, n);
  END IF;
  RAISE EXCEPTION 'payload is % bytes, over the limit of %', r.size, skiplock.payload_max()
    USING ERRCODE = '22023',
    DETAIL = format('Job %s of %s. A payload is at most skiplock.payload_max() bytes of JSON '
                    'text.', r.i, n);
END
$fn$;

-- As in step 0011, with the kinds, queues and payloads checked as well.
CREATE OR REPLACE FUNCTION skiplock.enqueue_many(
  p_token text, p_kinds text[], p_payloads jsonb[], p_queues text[],
  p_run_ats timestamptz[], p_delays_ms bigint[], p_priorities int[], p_unique_keys text[],
  p_max_attempts int[], p_timeouts int[], p_backoff_bases int[], p_backoff_caps int[],
  p_backoffs text[] DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  PERFORM skiplock.check_job_times(r, d)
     FROM unnest(p_run_ats, p_delays_ms) AS t(r, d)
    WHERE NOT (r >= timestamptz '1970-01-01 00:00+00' AND r < timestamptz '2200-01-01 00:00+00')
       OR d < 0 OR d > 3153600000000;
  PERFORM skiplock.check_job_input(p_kinds, p_queues, p_payloads);
  RETURN skiplock.enqueue_many_unchecked(p_token, p_kinds, p_payloads, p_queues, p_run_ats,
           p_delays_ms, p_priorities, p_unique_keys, p_max_attempts, p_timeouts,
           p_backoff_bases, p_backoff_caps, p_backoffs);
END
$fn$;

-- A claim's kinds and queues (22023): each name 1 to 128 bytes, at most
-- 1000 queues (check_claim_args bounds the kinds to 1000).
CREATE FUNCTION skiplock.check_claim_names(p_kinds text[], p_queues text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  IF cardinality(p_queues) > 1000 THEN
    RAISE EXCEPTION 'claim: queues must name at most 1000 queues' USING ERRCODE = '22023';
  END IF;
  IF EXISTS (SELECT 1 FROM unnest(p_kinds) k WHERE k IS NULL OR octet_length(k) NOT BETWEEN 1 AND 128)
     OR EXISTS (SELECT 1 FROM unnest(p_queues) q
                 WHERE q IS NULL OR octet_length(q) NOT BETWEEN 1 AND 128) THEN
    RAISE EXCEPTION 'claim: each kind and queue name must be 1 to 128 bytes'
      USING ERRCODE = '22023';
  END IF;
END
$fn$;

-- As in step 0016, with the names checked (check_claim_names) before
-- anything is read or recorded.
CREATE OR REPLACE FUNCTION skiplock.claim_pick(
  p_owner text, p_kinds text[], p_queues text[], p_n int, p_lease interval,
  p_after_priority int, p_after_run_at_us bigint, p_after_id bigint)
RETURNS bigint[]
LANGUAGE plpgsql AS $fn$
DECLARE
  v_kinds text[] := p_kinds;
  v_skip text[] := '{}';
  v_probes bigint[] := '{}';
  v_ids bigint[];
  v_m int;
  v_after timestamptz;
BEGIN
  PERFORM skiplock.check_claim_args(p_owner, p_kinds, p_n, p_lease);
  PERFORM skiplock.check_claim_names(p_kinds, p_queues);
  IF EXISTS (SELECT 1 FROM skiplock.pauses) THEN
    v_kinds := ARRAY(SELECT unnest(p_kinds) EXCEPT
                     SELECT p.kind FROM skiplock.pauses p WHERE p.queue = '*');
    v_skip := ARRAY(SELECT p.queue FROM skiplock.pauses p WHERE p.kind = '*');
  END IF;
  IF EXISTS (SELECT 1 FROM skiplock.breakers b
              WHERE b.kind = ANY (v_kinds) AND b.state <> 'closed') THEN
    v_probes := skiplock.claim_probes(v_kinds, p_queues, p_n, v_skip);
    v_kinds := ARRAY(SELECT unnest(v_kinds) EXCEPT
                     SELECT b.kind FROM skiplock.breakers b
                      WHERE b.kind = ANY (v_kinds) AND b.state <> 'closed');
  END IF;
  v_m := p_n - cardinality(v_probes);
  IF v_m <= 0 THEN
    RETURN v_probes;
  ELSIF p_after_id IS NULL THEN
    v_ids := v_probes || ARRAY(
      SELECT j.id FROM skiplock.jobs j
       WHERE j.state = 'available' AND j.run_at <= now()
         AND (p_queues IS NULL OR j.queue = ANY (p_queues)) AND j.kind = ANY (v_kinds)
         AND j.queue <> ALL (v_skip)
       ORDER BY j.priority DESC, j.run_at, j.id LIMIT v_m FOR UPDATE SKIP LOCKED);
    IF cardinality(v_ids) = 0 AND p_n > 0 THEN
      PERFORM skiplock.worker_idle(p_owner, p_kinds, p_queues);
    END IF;
    RETURN v_ids;
  END IF;
  v_after := timestamptz 'epoch' + p_after_run_at_us * interval '1 microsecond';
  RETURN v_probes || ARRAY(
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
END
$fn$;

-- ---- the action log: who logged in ----

-- No default for the rows already there (who wrote them is not known);
-- a new row gets session_user, which neither the caller's arguments nor
-- SET ROLE nor a SECURITY DEFINER function changes.
ALTER TABLE skiplock.actions ADD COLUMN db_user text;
ALTER TABLE skiplock.actions ALTER COLUMN db_user SET DEFAULT session_user;

-- ---- tokens: only their holders know them ----

-- As in step 0014, with the token left out (NULL): the function runs with
-- the caller's rights, and the worker and reader roles may not read it.
CREATE OR REPLACE FUNCTION skiplock.jobs_matching(
  p_queue text, p_kind text, p_state text, p_payload jsonb, p_error text,
  p_time_field text, p_from timestamptz, p_from_ago_ms bigint, p_to timestamptz,
  p_to_ago_ms bigint)
RETURNS SETOF skiplock.all_jobs
LANGUAGE sql STABLE AS $fn$
  SELECT j.id, j.queue, j.kind, j.payload, j.state, j.priority, j.run_at, j.attempt,
         j.max_attempts, NULL::bigint AS fencing, j.lease_owner, j.lease_expires_at,
         j.unique_key, j.timeout_ms, j.backoff_base_ms, j.backoff_cap_ms, j.errors, j.result,
         j.created_at, j.attempted_at, j.finished_at, j.backoff, j.last_delay_ms, j.expires_at
    FROM skiplock.all_jobs j
   WHERE (p_queue IS NULL OR j.queue = p_queue) AND (p_kind IS NULL OR j.kind = p_kind)
     AND (p_state IS NULL OR j.state = p_state)
     AND (p_payload IS NULL OR j.payload @> p_payload)
     AND (p_error IS NULL OR EXISTS (
           SELECT FROM pg_catalog.jsonb_array_elements(
                    CASE WHEN pg_catalog.jsonb_typeof(j.errors) = 'array' THEN j.errors
                         ELSE '[]' END) x(v)
            WHERE pg_catalog.strpos(pg_catalog.lower(coalesce(x.v ->> 'error', x.v #>> '{}')),
                                    pg_catalog.lower(p_error)) > 0))
     AND (p_from IS NULL AND p_from_ago_ms IS NULL
          OR CASE p_time_field WHEN 'created' THEN j.created_at WHEN 'run' THEN j.run_at
               WHEN 'attempted' THEN j.attempted_at WHEN 'finished' THEN j.finished_at
               WHEN 'lease' THEN j.lease_expires_at END
             >= coalesce(p_from, now() - p_from_ago_ms * interval '1 millisecond'))
     AND (p_to IS NULL AND p_to_ago_ms IS NULL
          OR CASE p_time_field WHEN 'created' THEN j.created_at WHEN 'run' THEN j.run_at
               WHEN 'attempted' THEN j.attempted_at WHEN 'finished' THEN j.finished_at
               WHEN 'lease' THEN j.lease_expires_at END
             < coalesce(p_to, now() - p_to_ago_ms * interval '1 millisecond'))
$fn$;

-- As in step 0016, except: the worker and reader roles read every column
-- of jobs, finished_jobs, all_jobs and leases but `fencing` (operators
-- read them whole), and the system column xmin of jobs, by which enqueue
-- tells the rows it inserted (queue.c); the internal enqueue_many_unchecked and enqueue_one
-- are no longer granted to workers; payload_max is a pure helper every
-- role may call.  A later step that adds a column to one of those tables
-- runs this again for the roles in granted_roles, as every step does.
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
                 'skiplock.workers TO %I', p_role);
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
                                 'payload_max')
                   OR (p_kind = 'worker' AND p.prosecdef
                       AND p.proname NOT IN ('job_cancel', 'job_retry', 'jobs_prune',
                                             'retention_set', 'retention_reset',
                                             'partition_width_set', 'action_record', 'pause',
                                             'resume', 'job_discard', 'jobs_act',
                                             'schedule_run_now', 'schedule_set_paused',
                                             'breaker_set', 'enqueue_many_unchecked',
                                             'enqueue_one'))
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

REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;
SELECT skiplock.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);

COMMENT ON CONSTRAINT schedules_times_check ON skiplock.schedules IS
  'created_at, last_fire and next_fire are finite times from 1970 to 2199, as a job''s run_at';
COMMENT ON CONSTRAINT breakers_bounds_check ON skiplock.breakers IS
  'the settings stay within what breaker_configure accepts';
COMMENT ON COLUMN skiplock.actions.db_user IS
  'session_user of the session that acted (NULL for rows written before step 0017)';
COMMENT ON FUNCTION skiplock.schedule_fire_check(text, timestamptz, timestamptz, timestamptz,
                                                 timestamptz, timestamptz[], text[]) IS
  'schedule_fire''s argument checks: finite times in range, never back, pending fires (22023)';
COMMENT ON FUNCTION skiplock.schedule_fire(text, timestamptz, timestamptz, timestamptz,
                                           timestamptz, timestamptz[], text[]) IS
  'one evaluation of a schedule, compare-and-set on last_fire: the job ids, or NULL if moved';
COMMENT ON FUNCTION skiplock.check_breaker_settings(text, int, int, int, bigint, bigint, int) IS
  'breaker_configure''s argument checks: NULL (22004), out of range (22023)';
COMMENT ON FUNCTION skiplock.breaker_configure(text, int, int, int, bigint, bigint, int) IS
  'a worker''s breaker settings for a kind, bounded (22023); written only when they change';
COMMENT ON FUNCTION skiplock.breaker_step(skiplock.breakers, int, int) IS
  'one transition of a breaker after ok successes and bad failures, pure; settings clamped';
COMMENT ON FUNCTION skiplock.claim_probes(text[], text[], int, text[]) IS
  'probe jobs the kinds'' breakers admit now, one per kind, counted fleet-wide';
COMMENT ON FUNCTION skiplock.payload_max() IS
  'the largest job payload in bytes of JSON text (1 MiB), the one definition of the limit';
COMMENT ON FUNCTION skiplock.check_job_input(text[], text[], jsonb[]) IS
  'enqueue''s checks of kinds, queues (1 to 128 bytes) and payloads (payload_max()); 22023';
COMMENT ON FUNCTION skiplock.enqueue_many(text, text[], jsonb[], text[], timestamptz[], bigint[],
                                          int[], text[], int[], int[], int[], int[], text[]) IS
  'enqueue many jobs, all or nothing, every input checked; the token makes a retry safe';
COMMENT ON FUNCTION skiplock.check_claim_names(text[], text[]) IS
  'a claim''s kind and queue names 1 to 128 bytes, at most 1000 queues (22023)';
COMMENT ON FUNCTION skiplock.claim_pick(text, text[], text[], int, interval, int, bigint,
                                        bigint) IS
  'the ids a claim takes (probes, then due jobs), locked SKIP LOCKED; record_claim updates them';
COMMENT ON FUNCTION skiplock.jobs_matching(text, text, text, jsonb, text, text, timestamptz,
                                           bigint, timestamptz, bigint) IS
  'every job matching the filters of jobs list, without its fencing token; inlined';
COMMENT ON FUNCTION skiplock.grant_role(text, text) IS
  'grant one role its kind''s rights: worker, operator or reader (tokens for operators only)';
