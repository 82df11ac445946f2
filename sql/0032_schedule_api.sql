-- skiplock schema step 0032: one write path for schedules.
--
-- Every change to skiplock.schedules made on someone's behalf now goes
-- through a function of the schema, and `skiplock cron add`, `remove`,
-- `pause`, `resume` and `apply` (the C library) only call them: the same
-- checks, the same timing and the same action log whether a schedule is
-- changed from the CLI, the dashboard or SQL.  The tick still moves
-- schedules on through schedule_fire and cron_fire; schedules_declare
-- (step 0025) now writes through schedule_put too, which fixes its update
-- of a schedule whose expression and zone stay the same (it failed).
--
--   schedule_add         adds one schedule; with replace, makes an
--                        existing one equal to the definition given
--   schedule_remove      removes one (the jobs it enqueued stay)
--   schedules_apply      makes the schedules equal to a list, with
--                        paused per schedule and prune (`cron apply FILE`)
--   schedule_set_paused  as in step 0014, with the resume below and the
--                        instant of a resume (at) for tests
--   schedule_put         internal: one schedule made equal to a checked
--                        definition, the write the others share
--   schedules_declare    as in step 0025, writing through schedule_put
--
-- All are for operators (operator_functions), logged in the action log
-- with an actor and a role, and check every argument before writing
-- anything: 22004 for a NULL that is not allowed, 22023 for a bad value
-- (the words of schedule_spec_check, step 0025), 23505 when schedule_add
-- finds the name taken.
--
-- Timing, one rule for every route.  A new schedule's first fire time is
-- the first after its creation.  A change of expression or zone, and a
-- resume, skip the fire times that passed: last_fire moves to the newest
-- fire time at or before now (none: it stays) and next_fire to the first
-- one after now (schedule_times, step 0025), whatever the catch-up
-- policy, so a pause never causes a burst.  Any other change keeps the
-- fire times.  Before this step schedule_set_paused set both times of a
-- resumed schedule to now() and left the rest to the next tick, while
-- `skiplock cron resume` computed them at once; both now compute them at
-- once (the same fire times are skipped either way, and `cron list`
-- shows the real next fire time right after a resume).
--
-- Concurrency: schedule_add and schedules_apply take skiplock.schedules
-- in SHARE ROW EXCLUSIVE mode for their transaction (as schedules_declare
-- does): two never interleave, and the tick waits for them.

-- the action log names the three new actions
ALTER TABLE skiplock.actions DROP CONSTRAINT actions_action_check;
ALTER TABLE skiplock.actions ADD CONSTRAINT actions_action_check CHECK (action = ANY (ARRAY[
  'retry', 'cancel', 'discard', 'pause', 'resume', 'breaker_open', 'breaker_close',
  'schedule_pause', 'schedule_resume', 'schedule_run', 'limit_set', 'limit_remove',
  'schedule_add', 'schedule_remove', 'schedules_apply']));

-- An instant a schedule may be created or resumed at: finite, 1970 to
-- 2199 (the range of the table's times), or NULL for now().
CREATE FUNCTION skiplock.schedule_instant(p_at timestamptz, p_fn text) RETURNS timestamptz
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF p_at IS NOT NULL AND NOT (p_at >= timestamptz '1970-01-01 00:00+00'
                               AND p_at < timestamptz '2200-01-01 00:00+00') THEN
    RAISE EXCEPTION '%: at must be a finite time from 1970 to 2199, got %', p_fn, p_at
      USING ERRCODE = '22023';
  END IF;
  RETURN coalesce(p_at, now());
END
$fn$;
COMMENT ON FUNCTION skiplock.schedule_instant(timestamptz, text) IS
  'Internal: the instant a schedule is created or resumed at (NULL: now()); 22023 outside 1970 to 2199.';

-- Makes the schedule d->>'name' equal to d (checked by
-- schedule_spec_check), paused or not (NULL: as it is; a new one is
-- enabled), at the instant p_at.  action: created, updated or unchanged;
-- fields: what differed, "expression, paused".  The caller locks.
CREATE FUNCTION skiplock.schedule_put(d jsonb, p_paused boolean, p_at timestamptz,
                                      OUT action text, OUT fields text)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  cur skiplock.schedules;
  t record;
  k text;
  diff text[] := '{}';
  v_enabled boolean;
BEGIN
  SELECT * INTO cur FROM skiplock.schedules x WHERE x.name = d->>'name' FOR UPDATE;
  IF NOT FOUND THEN
    t := skiplock.schedule_times(d->>'expression', d->>'zone', p_at, p_at);
    INSERT INTO skiplock.schedules (name, expression, zone, kind, payload, queue, priority,
                                    max_attempts, catch_up, enabled, next_fire, created_at)
    VALUES (d->>'name', d->>'expression', d->>'zone', d->>'kind', d->'payload', d->>'queue',
            (d->>'priority')::int, (d->>'max_attempts')::int, d->>'catch_up',
            NOT coalesce(p_paused, false), t.next_fire, p_at);
    action := 'created';
    fields := '';
    RETURN;
  END IF;
  FOREACH k IN ARRAY ARRAY['expression', 'zone', 'kind', 'payload', 'queue', 'priority',
                           'max_attempts', 'catch_up'] LOOP
    IF skiplock.schedule_definition(cur)->k IS DISTINCT FROM d->k THEN
      diff := diff || k;
    END IF;
  END LOOP;
  v_enabled := CASE WHEN p_paused IS NULL THEN cur.enabled ELSE NOT p_paused END;
  IF v_enabled <> cur.enabled THEN
    diff := diff || 'paused'::text;
  END IF;
  action := CASE WHEN cardinality(diff) = 0 THEN 'unchanged' ELSE 'updated' END;
  fields := array_to_string(diff, ', ');
  IF action = 'unchanged' THEN
    RETURN;
  END IF;
  IF 'expression' = ANY (diff) OR 'zone' = ANY (diff) OR (v_enabled AND NOT cur.enabled) THEN
    t := skiplock.schedule_times(d->>'expression', d->>'zone',
                                 coalesce(cur.last_fire, cur.created_at), p_at);
  ELSE
    SELECT cur.last_fire, cur.next_fire INTO t;
  END IF;
  UPDATE skiplock.schedules x
     SET expression = d->>'expression', zone = d->>'zone', kind = d->>'kind',
         payload = d->'payload', queue = d->>'queue', priority = (d->>'priority')::int,
         max_attempts = (d->>'max_attempts')::int, catch_up = d->>'catch_up',
         enabled = v_enabled, last_fire = coalesce(t.last_fire, x.last_fire),
         next_fire = t.next_fire, updated_at = now()
   WHERE x.name = d->>'name';
END
$fn$;
COMMENT ON FUNCTION skiplock.schedule_put(jsonb, boolean, timestamptz) IS
  'Internal: one schedule made equal to a checked definition (created, updated or unchanged, and what differed); a change of expression or zone, or a resume, skips the fire times that passed.';

-- Adds one schedule, or with replace makes an existing one equal to it.
-- Only paused (NULL: a new one is enabled, an existing one stays as it
-- is) and at (NULL: now(); an instant for tests and simulations) may be
-- NULL.  Without replace a taken name is 23505, unless the schedule is
-- this very call's, retried after a lost answer: the same definition
-- created at the same given at (unchanged, not logged again).
CREATE FUNCTION skiplock.schedule_add(name text, expression text, kind text,
    zone text DEFAULT 'UTC', payload jsonb DEFAULT '{}', queue text DEFAULT 'default',
    priority integer DEFAULT 0, max_attempts integer DEFAULT 25,
    catch_up text DEFAULT 'latest', replace boolean DEFAULT false,
    paused boolean DEFAULT NULL, actor text DEFAULT current_user, role text DEFAULT 'sql',
    at timestamptz DEFAULT NULL)
RETURNS TABLE (action text, fields text, next_fire timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
  d jsonb;
  cur skiplock.schedules;
  v_at timestamptz := skiplock.schedule_instant(at, 'schedule_add');
BEGIN
  PERFORM skiplock.check_actor(actor, role);
  IF name IS NULL OR expression IS NULL OR kind IS NULL OR zone IS NULL OR payload IS NULL
     OR queue IS NULL OR priority IS NULL OR max_attempts IS NULL OR catch_up IS NULL
     OR replace IS NULL THEN
    RAISE EXCEPTION 'schedule_add: only paused and at may be NULL' USING ERRCODE = '22004';
  END IF;
  d := skiplock.schedule_spec_check(jsonb_build_object(
         'name', name, 'expression', expression, 'kind', kind, 'zone', zone,
         'payload', payload, 'queue', queue, 'priority', priority,
         'max_attempts', max_attempts, 'catch_up', catch_up));
  LOCK TABLE skiplock.schedules IN SHARE ROW EXCLUSIVE MODE;
  SELECT * INTO cur FROM skiplock.schedules x WHERE x.name = name;
  IF FOUND AND NOT replace THEN
    IF at IS NOT NULL AND cur.created_at = at AND skiplock.schedule_definition(cur) = d
       AND (paused IS NULL OR paused <> cur.enabled) THEN
      action := 'unchanged';
      next_fire := cur.next_fire;
      RETURN NEXT;
      RETURN;
    END IF;
    RAISE EXCEPTION 'schedule "%" already exists', name USING ERRCODE = '23505',
      HINT = 'replace => true makes it equal to this definition.';
  END IF;
  SELECT p.action, p.fields INTO action, fields FROM skiplock.schedule_put(d, paused, v_at) p;
  next_fire := (SELECT x.next_fire FROM skiplock.schedules x WHERE x.name = name);
  PERFORM skiplock.action_record(actor, role, 'schedule_add',
                                 jsonb_build_object('schedule', name, 'result', action,
                                                    'fields', fields),
                                 1, (action <> 'unchanged')::int);
  RETURN NEXT;
END
$fn$;
COMMENT ON FUNCTION skiplock.schedule_add(text, text, text, text, jsonb, text, integer, integer,
                                          text, boolean, boolean, text, text, timestamptz) IS
  'Adds a schedule (replace: or makes an existing one equal to it), logged (operators): created, updated or unchanged, what differed, and its next fire time; 23505 when the name is taken without replace.';

-- Removes one schedule; false (nothing logged) when there is none.  The
-- log keeps the definition removed.
CREATE FUNCTION skiplock.schedule_remove(name text, actor text DEFAULT current_user,
                                         role text DEFAULT 'sql') RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
  cur skiplock.schedules;
BEGIN
  PERFORM skiplock.check_actor(actor, role);
  IF name IS NULL THEN
    RAISE EXCEPTION 'schedule_remove: name must not be NULL' USING ERRCODE = '22004';
  END IF;
  DELETE FROM skiplock.schedules x WHERE x.name = name RETURNING x.* INTO cur;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  PERFORM skiplock.action_record(actor, role, 'schedule_remove',
                                 jsonb_build_object('schedule', name, 'definition',
                                                    skiplock.schedule_definition(cur),
                                                    'paused', NOT cur.enabled), 1, 1);
  RETURN true;
END
$fn$;
COMMENT ON FUNCTION skiplock.schedule_remove(text, text, text) IS
  'Removes a schedule (the jobs it enqueued stay), logged with its definition (operators); false when there is none.';

-- One element of schedules_apply's list: the definition checked by
-- schedule_spec_check, and "paused" (true, false, or absent/null: as it
-- is) taken out of it.
CREATE FUNCTION skiplock.schedule_want_check(e jsonb, i integer, OUT d jsonb,
                                             OUT paused boolean)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF jsonb_typeof(e) = 'object' AND coalesce(jsonb_typeof(e->'paused'), 'null')
                                    NOT IN ('boolean', 'null') THEN
    RAISE EXCEPTION 'schedule % ("%"): "paused" must be true, false or null', i,
      left(coalesce(e->>'name', ''), 128) USING ERRCODE = '22023';
  END IF;
  paused := CASE WHEN jsonb_typeof(e) = 'object' THEN (e->>'paused')::boolean END;
  BEGIN
    d := skiplock.schedule_spec_check(CASE WHEN jsonb_typeof(e) = 'object' THEN e - 'paused'
                                           ELSE e END);
  EXCEPTION WHEN data_exception THEN
    RAISE EXCEPTION 'schedule % ("%"): %', i,
      left(coalesce(CASE WHEN jsonb_typeof(e) = 'object' THEN e->>'name' END, ''), 128),
      left(SQLERRM, 400) USING ERRCODE = '22023';
  END;
END
$fn$;
COMMENT ON FUNCTION skiplock.schedule_want_check(jsonb, integer) IS
  'Internal: element i of schedules_apply''s list checked (22023, schedule N ("name"): ...): the definition and paused.';

-- Makes the schedules equal to a JSON array of definitions (the fields
-- of schedules_declare, and "paused"): adds the missing, changes those
-- that differ, and with prune removes every other schedule.  One row per
-- schedule, the list's order then the removed by name; one action-log
-- row per call that changed anything.  Idempotent: a second call with
-- the same list changes nothing.
CREATE FUNCTION skiplock.schedules_apply(schedules jsonb, prune boolean DEFAULT false,
                                         actor text DEFAULT current_user,
                                         role text DEFAULT 'sql')
RETURNS TABLE (name text, action text, fields text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
  specs jsonb[] := '{}';
  pauses boolean[] := '{}';
  w record;
  e jsonb;
  i int := 0;
  v_at timestamptz := now();
  done jsonb := '{"created": [], "updated": [], "removed": []}';
BEGIN
  PERFORM skiplock.check_actor(actor, role);
  IF schedules IS NULL OR prune IS NULL THEN
    RAISE EXCEPTION 'schedules_apply: schedules and prune must not be NULL'
      USING ERRCODE = '22004';
  END IF;
  IF (CASE WHEN jsonb_typeof(schedules) = 'array' THEN jsonb_array_length(schedules) > 1000
           ELSE true END) THEN
    RAISE EXCEPTION 'schedules must be a JSON array of at most 1000 schedules'
      USING ERRCODE = '22023';
  END IF;
  FOR e IN SELECT x FROM jsonb_array_elements(schedules) x LOOP
    i := i + 1;
    w := skiplock.schedule_want_check(e, i);
    IF w.d->>'name' IN (SELECT s->>'name' FROM unnest(specs) s) THEN
      RAISE EXCEPTION 'schedule "%" is given twice', w.d->>'name' USING ERRCODE = '22023';
    END IF;
    specs := specs || w.d;
    pauses := pauses || w.paused;
  END LOOP;
  LOCK TABLE skiplock.schedules IN SHARE ROW EXCLUSIVE MODE;
  FOR i IN 1 .. cardinality(specs) LOOP
    name := specs[i]->>'name';
    SELECT p.action, p.fields INTO action, fields
      FROM skiplock.schedule_put(specs[i], pauses[i], v_at) p;
    IF action <> 'unchanged' THEN
      done := jsonb_insert(done, ARRAY[action, '-1'], to_jsonb(name), true);
    END IF;
    RETURN NEXT;
  END LOOP;
  FOR name IN SELECT x.name FROM skiplock.schedules x
               WHERE prune AND x.name NOT IN (SELECT s->>'name' FROM unnest(specs) s)
               ORDER BY x.name LOOP
    DELETE FROM skiplock.schedules x WHERE x.name = name;
    action := 'removed';
    fields := '';
    done := jsonb_insert(done, '{removed, -1}', to_jsonb(name), true);
    RETURN NEXT;
  END LOOP;
  IF done <> '{"created": [], "updated": [], "removed": []}' THEN
    PERFORM skiplock.action_record(actor, role, 'schedules_apply', done,
      cardinality(specs) + jsonb_array_length(done->'removed'),
      jsonb_array_length(done->'created') + jsonb_array_length(done->'updated')
        + jsonb_array_length(done->'removed'));
  END IF;
END
$fn$;
COMMENT ON FUNCTION skiplock.schedules_apply(jsonb, boolean, text, text) IS
  'Makes the schedules equal to a list (cron apply; prune: removes the others), logged when anything changed (operators): created, updated (with what differed), unchanged, removed.';

-- As in step 0025, with the write of a created or updated schedule made
-- by schedule_put: an update that changed neither the expression nor the
-- zone (a payload, say) failed there ("record "t" has no field
-- "last_fire""); it now keeps the fire times, as the header says.
CREATE OR REPLACE FUNCTION skiplock.schedules_declare(schedules jsonb, force boolean DEFAULT false)
RETURNS TABLE (name text, action text, detail text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  specs jsonb[] := '{}';
  d jsonb;
  h text;
  cur skiplock.schedules;
  seen timestamptz;
  i int := 0;
BEGIN
  IF jsonb_typeof(schedules) IS DISTINCT FROM 'array' THEN
    RAISE EXCEPTION 'schedules must be a JSON array of schedules' USING ERRCODE = '22023';
  END IF;
  IF jsonb_array_length(schedules) > 1000 THEN
    RAISE EXCEPTION 'at most 1000 schedules may be declared at once (got %)',
      jsonb_array_length(schedules) USING ERRCODE = '22023';
  END IF;
  FOR d IN SELECT e FROM jsonb_array_elements(schedules) e LOOP
    i := i + 1;
    BEGIN
      d := skiplock.schedule_spec_check(d);
    EXCEPTION WHEN data_exception THEN
      RAISE EXCEPTION 'schedule % ("%"): %', i,
        left(coalesce(CASE WHEN jsonb_typeof(d) = 'object' THEN d->>'name' END, ''), 128),
        left(SQLERRM, 400) USING ERRCODE = '22023';
    END;
    IF d->>'name' IN (SELECT x->>'name' FROM unnest(specs) x) THEN
      RAISE EXCEPTION 'schedule "%" is given twice', d->>'name' USING ERRCODE = '22023';
    END IF;
    specs := specs || d;
  END LOOP;
  LOCK TABLE skiplock.schedules IN SHARE ROW EXCLUSIVE MODE;
  FOREACH d IN ARRAY specs LOOP
    name := d->>'name';
    detail := NULL;
    h := md5(d::text);
    SELECT * INTO cur FROM skiplock.schedules x WHERE x.name = d->>'name';
    SELECT x.first_seen INTO seen FROM skiplock.schedule_declarations x
     WHERE x.name = d->>'name' AND x.definition_hash = h;
    IF cur.name IS NOT NULL AND skiplock.schedule_definition(cur) = d THEN
      action := 'unchanged';
      INSERT INTO skiplock.schedule_declarations AS x (name, definition_hash)
      VALUES (d->>'name', h) ON CONFLICT DO NOTHING;
    ELSIF cur.name IS NOT NULL AND seen IS NOT NULL AND NOT force THEN
      action := 'superseded';
      detail := format('kept the definition set at %s; this one was first declared at %s and '
                       'has been replaced since (a newer version of the application?)',
                       to_char(cur.updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
                       to_char(seen AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'));
    ELSE
      action := (SELECT p.action FROM skiplock.schedule_put(d, NULL, now()) p);
    END IF;
    IF action IN ('created', 'updated') THEN
      INSERT INTO skiplock.schedule_declarations AS x (name, definition_hash)
      VALUES (d->>'name', h)
      ON CONFLICT ON CONSTRAINT schedule_declarations_pkey DO UPDATE SET first_seen = now();
    END IF;
    RETURN NEXT;
  END LOOP;
END
$fn$;
COMMENT ON FUNCTION skiplock.schedules_declare(jsonb, boolean) IS
  'Applies schedules declared in an application''s code: created, updated, unchanged, or superseded by a newer definition (force applies it anyway).';

-- As in step 0014, with at (the instant of a resume; NULL: now()) and
-- the resume of the header: the fire times that passed are skipped at
-- once rather than by the next tick.  NULL when there is no such
-- schedule (nothing logged).
DROP FUNCTION skiplock.schedule_set_paused(text, boolean, text, text);
CREATE FUNCTION skiplock.schedule_set_paused(name text, paused boolean,
    actor text DEFAULT current_user, role text DEFAULT 'sql', at timestamptz DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
  cur skiplock.schedules;
  v_at timestamptz := skiplock.schedule_instant(at, 'schedule_set_paused');
  v_changed boolean;
BEGIN
  PERFORM skiplock.check_actor(actor, role);
  IF name IS NULL OR paused IS NULL THEN
    RAISE EXCEPTION 'schedule_set_paused: name and paused must not be NULL'
      USING ERRCODE = '22004';
  END IF;
  SELECT * INTO cur FROM skiplock.schedules x WHERE x.name = name FOR UPDATE;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  v_changed := (SELECT p.action FROM skiplock.schedule_put(skiplock.schedule_definition(cur),
                                                           paused, v_at) p) <> 'unchanged';
  PERFORM skiplock.action_record(actor, role,
                                 CASE WHEN paused THEN 'schedule_pause' ELSE 'schedule_resume' END,
                                 jsonb_build_object('schedule', name), 1, v_changed::int);
  RETURN v_changed;
END
$fn$;
COMMENT ON FUNCTION skiplock.schedule_set_paused(text, boolean, text, text, timestamptz) IS
  'Pauses or resumes a schedule, logged (operators); a resume skips the fire times that passed before at (NULL: now()); true when it changed, NULL when there is no such schedule.';

-- The new writers are the operators'; grant_role gives them again.
INSERT INTO skiplock.operator_functions (name)
VALUES ('schedule_add'), ('schedule_remove'), ('schedules_apply');
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;
SELECT skiplock.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);
