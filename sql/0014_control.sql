-- skiplock schema step 0014: an operator's fleet-wide actions, logged.
--
-- A queue or a kind can be paused for the whole fleet (skiplock.pauses): a
-- claim takes none of its jobs, nor admits one as a breaker probe, so they
-- wait without using attempts, as behind an open breaker.  The claim pays
-- for this with one look at an empty tiny table when nothing is paused.
--
-- Every job matching a filter (the filters of `skiplock jobs list`, read by
-- one function, skiplock.jobs_matching, that the list uses too) can be
-- retried, cancelled or discarded in bounded batches, each job through the
-- fenced per-job function (job_retry, job_cancel, job_discard).
--
-- Every operator action through these functions writes one row of
-- skiplock.actions (who, when, what, how many).  Only operators may call
-- them; the worker role can neither act nor write the log, and the log is
-- written only by SECURITY DEFINER functions.

-- ---- tables ----

CREATE TABLE skiplock.pauses (
  queue     text NOT NULL CHECK (length(queue) BETWEEN 1 AND 128),  -- '*': a kind's pause
  kind      text NOT NULL CHECK (length(kind) BETWEEN 1 AND 128),   -- '*': a queue's pause
  paused_at timestamptz NOT NULL DEFAULT now(),
  paused_by text NOT NULL CHECK (length(paused_by) BETWEEN 1 AND 200),
  role      text NOT NULL CHECK (length(role) BETWEEN 1 AND 200),
  PRIMARY KEY (queue, kind),
  CHECK ((queue = '*') <> (kind = '*'))
);

CREATE TABLE skiplock.actions (
  id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at      timestamptz NOT NULL DEFAULT now(),
  actor   text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
  role    text NOT NULL CHECK (length(role) BETWEEN 1 AND 200),
  action  text NOT NULL CHECK (action IN ('retry', 'cancel', 'discard', 'pause', 'resume',
                                          'breaker_open', 'breaker_close', 'schedule_pause',
                                          'schedule_resume', 'schedule_run')),
  target  jsonb NOT NULL,
  matched bigint NOT NULL DEFAULT 0 CHECK (matched >= 0),
  changed bigint NOT NULL DEFAULT 0 CHECK (changed >= 0)
);

-- ---- helpers ----

CREATE FUNCTION skiplock.check_actor(p_actor text, p_role text)
RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
  IF p_actor IS NULL OR length(p_actor) NOT BETWEEN 1 AND 200
     OR p_role IS NULL OR length(p_role) NOT BETWEEN 1 AND 200 THEN
    RAISE EXCEPTION 'actor and role must be 1 to 200 characters' USING ERRCODE = '22023';
  END IF;
END
$fn$;

-- Writes one row of the action log; returns its id.
CREATE FUNCTION skiplock.action_record(actor text, role text, action text, target jsonb,
                                       matched bigint, changed bigint)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
  v_id bigint;
BEGIN
  PERFORM skiplock.check_actor(actor, role);
  INSERT INTO skiplock.actions (actor, role, action, target, matched, changed)
  VALUES (actor, role, action, coalesce(target, '{}'), coalesce(matched, 0),
          coalesce(changed, 0))
  RETURNING id INTO v_id;
  RETURN v_id;
END
$fn$;

-- ---- pause and resume ----

-- The pause row of a queue (kind NULL or '*') or a kind (queue NULL or
-- '*'): exactly one of them names something.
CREATE FUNCTION skiplock.pause_key(p_queue text, p_kind text, OUT queue text, OUT kind text)
LANGUAGE plpgsql AS $fn$
BEGIN
  queue := coalesce(nullif(p_queue, '*'), '*');
  kind := coalesce(nullif(p_kind, '*'), '*');
  IF (queue = '*') = (kind = '*') THEN
    RAISE EXCEPTION 'pause: name a queue or a kind, not both nor neither'
      USING ERRCODE = '22023';
  END IF;
  IF length(queue) > 128 OR length(kind) > 128 THEN
    RAISE EXCEPTION 'pause: a queue or kind is 1 to 128 characters' USING ERRCODE = '22023';
  END IF;
END
$fn$;

-- What the action log names: {"queue": q} or {"kind": k}.
CREATE FUNCTION skiplock.pause_target(p_queue text, p_kind text)
RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $fn$
  SELECT CASE WHEN p_kind = '*' THEN jsonb_build_object('queue', p_queue)
              ELSE jsonb_build_object('kind', p_kind) END
$fn$;

-- Pauses a queue or a kind fleet-wide; true when it was not paused.
CREATE FUNCTION skiplock.pause(queue text, kind text, actor text, role text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
  k record;
  v_changed boolean;
BEGIN
  PERFORM skiplock.check_actor(actor, role);
  SELECT * INTO k FROM skiplock.pause_key(queue, kind);
  INSERT INTO skiplock.pauses (queue, kind, paused_by, role)
  VALUES (k.queue, k.kind, actor, role) ON CONFLICT DO NOTHING;
  v_changed := FOUND;
  PERFORM skiplock.action_record(actor, role, 'pause', skiplock.pause_target(k.queue, k.kind),
                                 1, v_changed::int);
  RETURN v_changed;
END
$fn$;

-- Undoes pause; true when it was paused.
CREATE FUNCTION skiplock.resume(queue text, kind text, actor text, role text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
  k record;
  v_changed boolean;
BEGIN
  PERFORM skiplock.check_actor(actor, role);
  SELECT * INTO k FROM skiplock.pause_key(queue, kind);
  DELETE FROM skiplock.pauses p WHERE p.queue = k.queue AND p.kind = k.kind;
  v_changed := FOUND;
  PERFORM skiplock.action_record(actor, role, 'resume', skiplock.pause_target(k.queue, k.kind),
                                 1, v_changed::int);
  RETURN v_changed;
END
$fn$;

-- ---- the claim skips what is paused ----

-- As in step 0012, with paused kinds left out of the kinds and paused
-- queues out of the scan.  When nothing is paused this costs one look at
-- the empty pauses table, as the breakers' EXISTS.
CREATE OR REPLACE FUNCTION skiplock.claim_pick(
  p_owner text, p_kinds text[], p_queues text[], p_n int, p_lease interval,
  p_after_priority int, p_after_run_at_us bigint, p_after_id bigint)
RETURNS bigint[]
LANGUAGE plpgsql AS $fn$
DECLARE
  v_kinds text[] := p_kinds;
  v_skip text[] := '{}';
  v_probes bigint[] := '{}';
  v_m int;
  v_after timestamptz;
BEGIN
  PERFORM skiplock.check_claim_args(p_owner, p_kinds, p_n, p_lease);
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
    RETURN v_probes || ARRAY(
      SELECT j.id FROM skiplock.jobs j
       WHERE j.state = 'available' AND j.run_at <= now()
         AND (p_queues IS NULL OR j.queue = ANY (p_queues)) AND j.kind = ANY (v_kinds)
         AND j.queue <> ALL (v_skip)
       ORDER BY j.priority DESC, j.run_at, j.id LIMIT v_m FOR UPDATE SKIP LOCKED);
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

-- As claim_probes of step 0011, with the jobs of paused queues (p_skip)
-- left out; the caller leaves paused kinds out of p_kinds.
CREATE FUNCTION skiplock.claim_probes(p_kinds text[], p_queues text[], p_n int, p_skip text[])
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
         AND (p_queues IS NULL OR j.queue = ANY (p_queues)) AND j.queue <> ALL (p_skip)
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

-- The old three-argument form, for a caller of step 0011's claim_probes.
CREATE OR REPLACE FUNCTION skiplock.claim_probes(p_kinds text[], p_queues text[], p_n int)
RETURNS bigint[]
LANGUAGE sql AS $fn$
  SELECT skiplock.claim_probes(
           ARRAY(SELECT unnest(p_kinds) EXCEPT
                 SELECT p.kind FROM skiplock.pauses p WHERE p.queue = '*'),
           p_queues, p_n, ARRAY(SELECT p.queue FROM skiplock.pauses p WHERE p.kind = '*'))
$fn$;

-- ---- the filter of a job list, in one place ----

-- Every job (live or finished) matching the filters of `skiplock jobs
-- list` (NULL: no such filter): queue, kind, state, payload containing
-- p_payload, an entry of the error history containing p_error (ignoring
-- case), and p_time_field ('created', 'run', 'attempted', 'finished',
-- 'lease') at or after p_from (or p_from_ago_ms before now()) and before
-- p_to (or p_to_ago_ms before now()).  A plain SQL function: the planner
-- inlines it into the caller's statement (ORDER BY id DESC LIMIT n reads
-- the id indexes), so it must not be SECURITY DEFINER nor have settings.
CREATE FUNCTION skiplock.jobs_matching(
  p_queue text, p_kind text, p_state text, p_payload jsonb, p_error text,
  p_time_field text, p_from timestamptz, p_from_ago_ms bigint, p_to timestamptz,
  p_to_ago_ms bigint)
RETURNS SETOF skiplock.all_jobs
LANGUAGE sql STABLE AS $fn$
  SELECT j.* FROM skiplock.all_jobs j
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

-- ---- bulk actions, each job through its fenced function ----

-- Discards an available or running job: it is discarded and moves to
-- finished_jobs (kept for the discarded retention), its fencing token
-- raised so that a running claim's outcome is refused.
CREATE FUNCTION skiplock.job_discard(id bigint)
RETURNS skiplock.job_action_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_state text;
BEGIN
  IF job_discard.id IS NULL THEN
    RAISE EXCEPTION 'job_discard: id must not be NULL' USING ERRCODE = '22004';
  END IF;
  UPDATE skiplock.jobs j SET state = 'discarded', finished_at = now(), fencing = j.fencing + 1,
         lease_owner = NULL, lease_expires_at = NULL
   WHERE j.id = job_discard.id AND j.state IN ('available', 'running');
  IF FOUND THEN
    PERFORM skiplock.move_finished(ARRAY[job_discard.id]);
    RETURN (true, 'discarded'::text);
  END IF;
  SELECT j.state INTO v_state FROM skiplock.all_jobs j WHERE j.id = job_discard.id LIMIT 1;
  RETURN (false, v_state);
END
$fn$;

-- Applies action ('retry', 'cancel', 'discard') of the logged bulk action
-- p_action_id to each job of p_ids, one fenced per-job call each (a retry
-- refused for a unique key another unfinished job holds is skipped), and
-- adds what changed to the log row.  Returns how many were looked at,
-- how many changed, and the smallest id (the next batch starts below it).
CREATE FUNCTION skiplock.jobs_act(p_action_id bigint, p_ids bigint[],
                                  OUT visited int, OUT changed int, OUT last_id bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_action text;
  v_id bigint;
  v_r skiplock.job_action_result;
BEGIN
  SELECT a.action INTO v_action FROM skiplock.actions a
   WHERE a.id = p_action_id AND a.action IN ('retry', 'cancel', 'discard') FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'jobs_act: no bulk action %', p_action_id USING ERRCODE = '22023';
  END IF;
  visited := 0;
  changed := 0;
  FOREACH v_id IN ARRAY coalesce(p_ids, '{}') LOOP
    visited := visited + 1;
    last_id := least(last_id, v_id);
    IF v_action = 'cancel' THEN
      v_r := skiplock.job_cancel(v_id);
    ELSIF v_action = 'discard' THEN
      v_r := skiplock.job_discard(v_id);
    ELSIF NOT EXISTS (SELECT 1 FROM skiplock.all_jobs j
                       WHERE j.id = v_id AND j.unique_key IS NOT NULL) THEN
      v_r := skiplock.job_retry(v_id);
    ELSE
      BEGIN -- a subtransaction only for a job with a unique key
        v_r := skiplock.job_retry(v_id);
      EXCEPTION WHEN unique_violation THEN
        v_r := (false, NULL::text);
      END;
    END IF;
    changed := changed + v_r.changed::int;
  END LOOP;
  UPDATE skiplock.actions a SET changed = a.changed + jobs_act.changed WHERE a.id = p_action_id;
END
$fn$;

-- ---- schedules and breakers, logged ----

-- Enqueues one job of a schedule now, as its tick would (kind, payload,
-- queue, priority, attempts) but without a unique key and without moving
-- its fire times, paused or not.  Returns the job's id; NULL when there is
-- no such schedule (nothing logged).
CREATE FUNCTION skiplock.schedule_run_now(name text, actor text, role text)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
  s skiplock.schedules;
  v_id bigint;
BEGIN
  PERFORM skiplock.check_actor(actor, role);
  SELECT * INTO s FROM skiplock.schedules x WHERE x.name = name FOR SHARE;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  v_id := (skiplock.enqueue_many(NULL, ARRAY[s.kind], ARRAY[s.payload], ARRAY[s.queue], NULL,
             NULL, ARRAY[s.priority], NULL, ARRAY[s.max_attempts], NULL, NULL, NULL))[1];
  PERFORM skiplock.action_record(actor, role, 'schedule_run',
                                 jsonb_build_object('schedule', name, 'job', v_id), 1, 1);
  RETURN v_id;
END
$fn$;

-- Pauses (p_paused) or resumes a schedule.  A resumed schedule is due at
-- once with its fire times handled up to now: the next tick (any worker)
-- skips what passed while it was paused and sets its next fire time, so a
-- pause never ends in a burst.  Returns whether it changed; NULL when
-- there is no such schedule (nothing logged).
CREATE FUNCTION skiplock.schedule_set_paused(name text, paused boolean, actor text, role text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
  v_was boolean;
BEGIN
  PERFORM skiplock.check_actor(actor, role);
  IF paused IS NULL THEN
    RAISE EXCEPTION 'schedule_set_paused: paused must not be NULL' USING ERRCODE = '22004';
  END IF;
  SELECT NOT x.enabled INTO v_was FROM skiplock.schedules x WHERE x.name = name FOR UPDATE;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF v_was <> paused THEN
    UPDATE skiplock.schedules x
       SET enabled = NOT paused, updated_at = now(),
           last_fire = CASE WHEN paused THEN x.last_fire ELSE now() END,
           next_fire = CASE WHEN paused THEN x.next_fire ELSE now() END
     WHERE x.name = name;
  END IF;
  PERFORM skiplock.action_record(actor, role,
                                 CASE WHEN paused THEN 'schedule_pause' ELSE 'schedule_resume' END,
                                 jsonb_build_object('schedule', name), 1, (v_was <> paused)::int);
  RETURN v_was <> paused;
END
$fn$;

-- Forces kind's breaker open (created with default settings when missing)
-- until closed, or closes it and starts a new window, as
-- skl_breaker_force; recorded in breaker_events and the action log.
-- Returns whether its state changed; NULL when closing a kind without a
-- breaker (nothing logged).
CREATE FUNCTION skiplock.breaker_set(kind text, open boolean, actor text, role text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
  v_prev text;
BEGIN
  PERFORM skiplock.check_actor(actor, role);
  IF kind IS NULL OR length(kind) NOT BETWEEN 1 AND 128 OR open IS NULL THEN
    RAISE EXCEPTION 'breaker_set: a kind of 1 to 128 characters and open are required'
      USING ERRCODE = '22023';
  END IF;
  IF open THEN
    INSERT INTO skiplock.breakers AS b (kind, state, open_until) VALUES (kind, 'open', 'infinity')
    ON CONFLICT ON CONSTRAINT breakers_pkey DO UPDATE SET prev_state = b.state, state = 'open',
       open_until = 'infinity', probes_left = 0, probe_ok = 0, changed_at = now()
    RETURNING b.prev_state INTO v_prev;
  ELSE
    UPDATE skiplock.breakers b SET prev_state = b.state, state = 'closed', calls = 0,
           failures = 0, window_started_at = now(), probes_left = 0, probe_ok = 0,
           open_until = NULL, changed_at = now()
     WHERE b.kind = kind
    RETURNING b.prev_state INTO v_prev;
    IF NOT FOUND THEN
      RETURN NULL;
    END IF;
  END IF;
  INSERT INTO skiplock.breaker_events (kind, from_state, to_state, reason)
  VALUES (kind, v_prev, CASE WHEN open THEN 'open' ELSE 'closed' END,
          format('%s by %s (%s)', CASE WHEN open THEN 'opened' ELSE 'closed' END, actor, role));
  PERFORM skiplock.action_record(actor, role,
                                 CASE WHEN open THEN 'breaker_open' ELSE 'breaker_close' END,
                                 jsonb_build_object('breaker', kind), 1,
                                 (v_prev IS DISTINCT FROM
                                  CASE WHEN open THEN 'open' ELSE 'closed' END)::int);
  RETURN v_prev IS DISTINCT FROM CASE WHEN open THEN 'open' ELSE 'closed' END;
END
$fn$;

-- ---- least privilege ----

-- As in step 0013, with pauses readable by every role, the action log by
-- operators and readers, jobs_matching for every role (the list runs it),
-- and the new actions for operators only.
CREATE OR REPLACE FUNCTION skiplock.grant_role(p_role text, p_kind text) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  f regprocedure;
BEGIN
  EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA skiplock FROM %I', p_role);
  EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA skiplock FROM %I', p_role);
  EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA skiplock FROM %I', p_role);
  EXECUTE format('GRANT USAGE ON SCHEMA skiplock TO %I', p_role);
  EXECUTE format('GRANT SELECT ON skiplock.jobs, skiplock.finished_jobs, skiplock.all_jobs, '
                 'skiplock.retention, skiplock.maintenance, skiplock.finished_partitions, '
                 'skiplock.breakers, skiplock.breaker_events, skiplock.schedules, '
                 'skiplock.leases, skiplock.schema_version, skiplock.pauses TO %I', p_role);
  IF p_kind <> 'worker' THEN
    EXECUTE format('GRANT SELECT ON skiplock.actions TO %I', p_role);
  END IF;
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'skiplock'::regnamespace AND p.prokind = 'f'
              AND (p.proname IN ('installed_version', 'backoff_delay', 'retry_delay_ms',
                                 'breaker_step', 'check_job_times', 'interval_ms',
                                 'check_claim_args', 'lease_check_args', 'lease_check_reserved',
                                 'keep_until', 'errors_append', 'jobs_matching')
                   OR (p_kind = 'worker' AND p.prosecdef
                       AND p.proname NOT IN ('job_cancel', 'job_retry', 'jobs_prune',
                                             'retention_set', 'retention_reset',
                                             'partition_width_set', 'action_record', 'pause',
                                             'resume', 'job_discard', 'jobs_act',
                                             'schedule_run_now', 'schedule_set_paused',
                                             'breaker_set'))
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

COMMENT ON TABLE skiplock.pauses IS
  'paused queues (kind ''*'') and kinds (queue ''*''): claims take none of their jobs';
COMMENT ON TABLE skiplock.actions IS
  'the operators'' action log: one row per action, with the jobs matched and changed';
COMMENT ON FUNCTION skiplock.pause(text, text, text, text) IS
  'pause a queue or a kind fleet-wide (operators); true when it was not paused';
COMMENT ON FUNCTION skiplock.resume(text, text, text, text) IS
  'resume a paused queue or kind (operators); true when it was paused';
COMMENT ON FUNCTION skiplock.jobs_matching(text, text, text, jsonb, text, text, timestamptz,
                                           bigint, timestamptz, bigint) IS
  'the jobs matching the filters of a job list (inlined into the caller''s statement)';
COMMENT ON FUNCTION skiplock.job_discard(bigint) IS
  'discard an available or running job, fencing its claim out (operators)';
COMMENT ON FUNCTION skiplock.jobs_act(bigint, bigint[]) IS
  'one batch of a logged bulk retry, cancel or discard (operators)';
COMMENT ON FUNCTION skiplock.action_record(text, text, text, jsonb, bigint, bigint) IS
  'write one row of the action log (operators)';
COMMENT ON FUNCTION skiplock.schedule_run_now(text, text, text) IS
  'enqueue one job of a schedule now, its fire times unchanged (operators)';
COMMENT ON FUNCTION skiplock.schedule_set_paused(text, boolean, text, text) IS
  'pause or resume a schedule, logged (operators)';
COMMENT ON FUNCTION skiplock.breaker_set(text, boolean, text, text) IS
  'force a breaker open or close it, logged (operators)';
