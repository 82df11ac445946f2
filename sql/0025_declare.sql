-- skiplock schema step 0025: schedules declared in an application's code.
--
-- A Node, Python or Rust worker declares its schedules at start
-- (`new Worker({ schedules: [...] })`); the database applies them with the
-- semantics of `skiplock cron apply` (without removing the others): a new
-- schedule is created, a changed one updated, an equal one left alone.
--
-- Rolling deploys.  While version 1 and version 2 of an application run
-- side by side, each replica declares its own version's definition when
-- it starts, and replicas of version 1 may still restart.  Applying every
-- declaration as it comes would make such a schedule flap between the two
-- definitions, and a flap can fire a day's job twice or skip it.  So the
-- database remembers every definition it was given for a schedule
-- (skiplock.schedule_declarations, by hash) and applies a definition only
-- the first time it sees it: the newest definition wins, and a replica of
-- an older version that starts again finds its definition superseded and
-- changes nothing (the call reports it, the client logs it).  Rolling
-- back is then a deliberate act: `skiplock cron apply`, `cron add
-- --replace`, or a declaration with `force`.
--
--   schedule_declarations   (name, hash of the definition, first seen)
--   schedule_spec_check     one declared schedule, checked, normalised
--   schedule_times          last_fire and next_fire across a change of
--                           expression or zone (what passed is skipped)
--   schedules_declare       the call

CREATE TABLE skiplock.schedule_declarations (
  name text NOT NULL,
  definition_hash text NOT NULL,
  first_seen timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (name, definition_hash)
);

-- A declared schedule as the row it would be, with the defaults filled in,
-- or 22023 in the words of `skiplock cron add` and `cron apply`.
CREATE FUNCTION skiplock.schedule_spec_check(spec jsonb) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  k text;
  v_name text;
  v_kind text;
  v_queue text;
  v_zone text;
  v_catch text;
  v_payload jsonb;
BEGIN
  IF jsonb_typeof(spec) IS DISTINCT FROM 'object' THEN
    RAISE EXCEPTION 'expected an object' USING ERRCODE = '22023';
  END IF;
  FOR k IN SELECT jsonb_object_keys(spec) LOOP
    IF k NOT IN ('name', 'expression', 'kind', 'zone', 'queue', 'payload', 'priority',
                 'max_attempts', 'catch_up') THEN
      RAISE EXCEPTION 'unknown field "%"', k USING ERRCODE = '22023';
    END IF;
  END LOOP;
  IF jsonb_typeof(spec->'name') IS DISTINCT FROM 'string'
     OR jsonb_typeof(spec->'expression') IS DISTINCT FROM 'string'
     OR jsonb_typeof(spec->'kind') IS DISTINCT FROM 'string'
     OR coalesce(jsonb_typeof(spec->'zone'), 'string') <> 'string'
     OR coalesce(jsonb_typeof(spec->'queue'), 'string') <> 'string'
     OR coalesce(jsonb_typeof(spec->'catch_up'), 'string') <> 'string' THEN
    RAISE EXCEPTION '"name", "expression" and "kind" are required strings; "zone", "queue" and "catch_up" are strings'
      USING ERRCODE = '22023';
  END IF;
  IF coalesce(jsonb_typeof(spec->'priority'), 'number') <> 'number'
     OR coalesce(jsonb_typeof(spec->'max_attempts'), 'number') <> 'number'
     OR (spec->>'priority')::numeric NOT BETWEEN -1000000 AND 1000000
     OR (spec->>'max_attempts')::numeric NOT BETWEEN 1 AND 1000000
     OR (spec->>'priority')::numeric % 1 <> 0 OR (spec->>'max_attempts')::numeric % 1 <> 0 THEN
    RAISE EXCEPTION '"priority" and "max_attempts" must be integers in range'
      USING ERRCODE = '22023';
  END IF;
  v_name := spec->>'name';
  v_kind := spec->>'kind';
  v_queue := coalesce(spec->>'queue', 'default');
  v_zone := coalesce(spec->>'zone', 'UTC');
  v_catch := coalesce(spec->>'catch_up', 'latest');
  v_payload := coalesce(spec->'payload', '{}');
  IF octet_length(v_name) NOT BETWEEN 1 AND 128 THEN
    RAISE EXCEPTION 'schedule name must be 1 to 128 bytes (got %)', octet_length(v_name)
      USING ERRCODE = '22023';
  END IF;
  IF v_name ~ '[\x01-\x1f\x7f]' THEN
    RAISE EXCEPTION 'schedule name must not contain control characters' USING ERRCODE = '22023';
  END IF;
  IF octet_length(v_kind) NOT BETWEEN 1 AND 128 THEN
    RAISE EXCEPTION 'job kind must be 1 to 128 bytes (got %)', octet_length(v_kind)
      USING ERRCODE = '22023';
  END IF;
  IF v_kind ~ '[\x01-\x1f\x7f]' THEN
    RAISE EXCEPTION 'job kind must not contain control characters' USING ERRCODE = '22023';
  END IF;
  IF octet_length(v_queue) NOT BETWEEN 1 AND 128 THEN
    RAISE EXCEPTION 'queue name must be 1 to 128 bytes (got %)', octet_length(v_queue)
      USING ERRCODE = '22023';
  END IF;
  IF v_queue ~ '[\x01-\x1f\x7f]' THEN
    RAISE EXCEPTION 'queue name must not contain control characters' USING ERRCODE = '22023';
  END IF;
  IF octet_length(v_payload::text) > skiplock.payload_max() THEN
    RAISE EXCEPTION 'payload is % bytes, over the limit of %', octet_length(v_payload::text),
      skiplock.payload_max() USING ERRCODE = '22023';
  END IF;
  IF v_catch NOT IN ('none', 'latest', 'all') THEN
    RAISE EXCEPTION 'catch_up: unknown catch-up policy "%" (expected none, latest or all)',
      v_catch USING ERRCODE = '22023';
  END IF;
  PERFORM skiplock.cron_zone_check(v_zone);
  PERFORM skiplock.cron_parse(spec->>'expression');
  RETURN jsonb_build_object('name', v_name, 'expression', spec->>'expression', 'zone', v_zone,
                            'kind', v_kind, 'payload', v_payload, 'queue', v_queue,
                            'priority', coalesce((spec->>'priority')::int, 0),
                            'max_attempts', coalesce((spec->>'max_attempts')::int, 25),
                            'catch_up', v_catch);
END
$fn$;

-- Fire times across a change: last_fire moves to the newest fire time at
-- or before now (NULL: none since the cursor) and next_fire past it, so a
-- new expression or zone never causes a burst of catch-up jobs.
CREATE FUNCTION skiplock.schedule_times(expression text, zone text, cursor timestamptz,
                                        now timestamptz, OUT last_fire timestamptz,
                                        OUT next_fire timestamptz)
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  p skiplock.cron_plan := skiplock.cron_plan(skiplock.cron_parse(expression), zone,
                                             to_timestamp(floor(extract(epoch FROM least(cursor, now)))),
                                             to_timestamp(floor(extract(epoch FROM now))),
                                             'none', 1, -1);
BEGIN
  last_fire := CASE WHEN p.any_due THEN p.newest END;
  next_fire := CASE WHEN p.next < timestamptz '2200-01-01 00:00+00' THEN p.next END;
END
$fn$;

-- The definition of a stored schedule, as schedule_spec_check returns it.
CREATE FUNCTION skiplock.schedule_definition(s skiplock.schedules) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $fn$
  SELECT jsonb_build_object('name', s.name, 'expression', s.expression, 'zone', s.zone,
                            'kind', s.kind, 'payload', s.payload, 'queue', s.queue,
                            'priority', s.priority, 'max_attempts', s.max_attempts,
                            'catch_up', s.catch_up);
$fn$;

-- Applies an application's schedules: one row per schedule, its action
-- (created, updated, unchanged, superseded) and, when superseded, why.
-- All checked before anything is written (22023 naming the schedule by
-- its place and name, as `cron apply` does); one transaction, serialised
-- with `cron apply` and other declarations by the table lock.
CREATE FUNCTION skiplock.schedules_declare(schedules jsonb, force boolean DEFAULT false)
RETURNS TABLE (name text, action text, detail text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  specs jsonb[] := '{}';
  d jsonb;
  h text;
  cur skiplock.schedules;
  t record;
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
    ELSIF cur.name IS NULL THEN
      action := 'created';
      t := skiplock.schedule_times(d->>'expression', d->>'zone', now(), now());
      INSERT INTO skiplock.schedules (name, expression, zone, kind, payload, queue, priority,
                                      max_attempts, catch_up, next_fire)
      VALUES (d->>'name', d->>'expression', d->>'zone', d->>'kind', d->'payload', d->>'queue',
              (d->>'priority')::int, (d->>'max_attempts')::int, d->>'catch_up', t.next_fire);
    ELSE
      action := 'updated';
      IF (cur.expression, cur.zone) IS DISTINCT FROM (d->>'expression', d->>'zone') THEN
        t := skiplock.schedule_times(d->>'expression', d->>'zone',
                                     coalesce(cur.last_fire, cur.created_at), now());
      ELSE
        t := (cur.last_fire, cur.next_fire);
      END IF;
      UPDATE skiplock.schedules x
         SET expression = d->>'expression', zone = d->>'zone', kind = d->>'kind',
             payload = d->'payload', queue = d->>'queue', priority = (d->>'priority')::int,
             max_attempts = (d->>'max_attempts')::int, catch_up = d->>'catch_up',
             last_fire = coalesce(t.last_fire, x.last_fire), next_fire = t.next_fire,
             updated_at = now()
       WHERE x.name = d->>'name';
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

COMMENT ON TABLE skiplock.schedule_declarations IS
  'Every definition applications declared for a schedule (by hash) and when it was first seen: an older one is not applied again.';
COMMENT ON FUNCTION skiplock.schedule_spec_check(jsonb) IS
  'Internal: a declared schedule checked (22023 in the words of cron add and cron apply), defaults filled in.';
COMMENT ON FUNCTION skiplock.schedule_times(text, text, timestamptz, timestamptz) IS
  'Internal: last_fire and next_fire across a change of expression or zone: what passed is skipped.';
COMMENT ON FUNCTION skiplock.schedule_definition(skiplock.schedules) IS
  'Internal: a stored schedule''s definition, as schedule_spec_check returns a declared one.';
COMMENT ON FUNCTION skiplock.schedules_declare(jsonb, boolean) IS
  'Applies schedules declared in an application''s code: created, updated, unchanged, or superseded by a newer definition (force applies it anyway).';

REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;
SELECT skiplock.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);
