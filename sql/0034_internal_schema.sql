-- skiplock schema step 0034: the internal functions move to their own
-- schema, skiplock_internal, so that schema skiplock holds the SQL API and
-- nothing else: `\df skiplock.*` lists what a worker, an operator or an
-- application may call, and sql/SCHEMA.md documents exactly that.
--
-- Internal is what every step so far marked so: a function whose COMMENT
-- begins with "Internal" (the checks of arguments, the pieces of the claim
-- and of the outcomes, the cron parser, the protocol-1 functions kept for
-- the statements in flight at step 0027, grant_role, ...).  The step:
--
--   1. creates schema skiplock_internal, owned like schema skiplock;
--   2. moves every such function there with ALTER FUNCTION ... SET SCHEMA,
--      which keeps its oid, owner, privileges and comment, so a prepared
--      statement or a view that calls it keeps working;
--   3. writes again every function of either schema whose text calls a
--      moved function by its old name (skiplock.f(...)): the same
--      definition, as pg_get_functiondef gives it, with each such call
--      naming skiplock_internal.f.  PL/pgSQL and SQL bodies are text,
--      resolved when they run, so without this they would look for the
--      moved function where it no longer is;
--   3a. leaves under each old name a forwarder to the moved function, for
--      the calls in flight when the step commits (their bodies were
--      compiled before it); step 0035 drops the forwarders;
--   4. redefines grant_role and grant_roles for the two schemas: a role
--      gets USAGE on skiplock_internal, and EXECUTE there only on what it
--      had before (the functions of every_role_functions, which the API's
--      invoker functions call with the caller's rights, and, for workers,
--      the protocol-1 functions of statements prepared before step 0027);
--      the owner owns the new schema and what is in it.  Operators no
--      longer write schedules, breakers and breaker_events directly: the
--      functions of steps 0021 and 0032 (breaker_set, schedule_add,
--      schedule_remove, schedules_apply, schedule_set_paused, ...) are the
--      one write path, and log what they do.
--
-- From this step on, a step that adds an internal function creates it in
-- skiplock_internal; the catalog test (tests/cli/test_catalog.sh) fails if
-- a function of schema skiplock is commented "Internal".  To remove
-- skiplock from a database: DROP SCHEMA skiplock, skiplock_internal CASCADE.

CREATE SCHEMA skiplock_internal;
COMMENT ON SCHEMA skiplock_internal IS
  'skiplock''s internal functions: called by the functions of schema skiplock, not an API (sql/SCHEMA.md documents schema skiplock).';
DO $step$
BEGIN
  EXECUTE format('ALTER SCHEMA skiplock_internal OWNER TO %I',
                 (SELECT n.nspowner::regrole::text FROM pg_namespace n WHERE n.nspname = 'skiplock'));
END
$step$;

DO $step$
DECLARE
  v_names text[];
  v_pattern text;
  f regprocedure;
BEGIN
  SELECT array_agg(DISTINCT p.proname ORDER BY p.proname) INTO v_names
    FROM pg_proc p
   WHERE p.pronamespace = 'skiplock'::regnamespace
     AND obj_description(p.oid, 'pg_proc') LIKE 'Internal%';
  -- a name is internal in every overload or in none
  IF EXISTS (SELECT 1 FROM pg_proc p
              WHERE p.pronamespace = 'skiplock'::regnamespace AND p.proname = ANY (v_names)
                AND obj_description(p.oid, 'pg_proc') NOT LIKE 'Internal%') THEN
    RAISE EXCEPTION 'skiplock: a function name is both internal and public'
      USING ERRCODE = 'XX000';
  END IF;
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'skiplock'::regnamespace AND p.proname = ANY (v_names) LOOP
    EXECUTE format('ALTER FUNCTION %s SET SCHEMA skiplock_internal', f);
  END LOOP;
  -- every call by the old name, in the body of a function of either schema
  v_pattern := '\mskiplock\.(' || array_to_string(v_names, '|') || ')\(';
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace IN ('skiplock'::regnamespace, 'skiplock_internal'::regnamespace)
              AND p.prokind = 'f' AND p.prosrc ~ v_pattern
            ORDER BY p.oid LOOP
    EXECUTE regexp_replace(pg_get_functiondef(f), v_pattern, 'skiplock_internal.\1(', 'g');
  END LOOP;
  -- A call in flight when this step commits runs the body it compiled
  -- before, which names skiplock.f: under each old name, a forwarder to
  -- skiplock_internal.f with the caller's rights, until step 0035 drops
  -- them once the transactions open at this commit have ended.
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'skiplock_internal'::regnamespace AND p.proname = ANY (v_names)
            ORDER BY p.oid LOOP
    EXECUTE format('CREATE FUNCTION skiplock.%I(%s) RETURNS %s LANGUAGE sql %s AS %L',
                   (SELECT p.proname FROM pg_proc p WHERE p.oid = f),
                   pg_get_function_arguments(f), pg_get_function_result(f),
                   (SELECT CASE p.provolatile WHEN 'i' THEN 'IMMUTABLE' WHEN 's' THEN 'STABLE'
                                              ELSE 'VOLATILE' END FROM pg_proc p WHERE p.oid = f),
                   format('SELECT * FROM skiplock_internal.%I(%s)',
                          (SELECT p.proname FROM pg_proc p WHERE p.oid = f),
                          (SELECT coalesce(string_agg(CASE a.m WHEN 'v' THEN 'VARIADIC $' ELSE '$' END
                                                        || a.n, ', ' ORDER BY a.n), '')
                             FROM (SELECT row_number() OVER (ORDER BY u.o) AS n, u.m
                                     FROM pg_proc p,
                                          unnest(coalesce(p.proargmodes::text[],
                                                          array_fill('i'::text, ARRAY[p.pronargs::int])))
                                            WITH ORDINALITY AS u(m, o)
                                    WHERE p.oid = f AND u.m IN ('i', 'b', 'v')) a)));
    EXECUTE format('COMMENT ON FUNCTION skiplock.%I(%s) IS %L',
                   (SELECT p.proname FROM pg_proc p WHERE p.oid = f),
                   pg_get_function_identity_arguments(f),
                   'Internal: forwards a call in flight across step 0034 to skiplock_internal; dropped by step 0035.');
  END LOOP;
END
$step$;

-- The privileges of one role of a kind, from scratch, over both schemas.
CREATE OR REPLACE FUNCTION skiplock_internal.grant_role(p_role text, p_kind text) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  f regprocedure;
  t regclass;
BEGIN
  EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA skiplock FROM %I', p_role);
  EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA skiplock FROM %I', p_role);
  EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA skiplock FROM %I', p_role);
  EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA skiplock_internal FROM %I', p_role);
  EXECUTE format('GRANT USAGE ON SCHEMA skiplock, skiplock_internal TO %I', p_role);
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
            WHERE p.pronamespace IN ('skiplock'::regnamespace, 'skiplock_internal'::regnamespace)
              AND p.prokind = 'f'
              AND (p.proname IN (SELECT e.name FROM skiplock.every_role_functions e)
                   OR (p_kind = 'worker' AND p.prosecdef
                       AND p.proname NOT IN (SELECT o.name FROM skiplock.operator_functions o))
                   OR (p_kind = 'operator' AND p.prosecdef))
  LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f, p_role);
  END LOOP;
  IF p_kind = 'operator' THEN
    EXECUTE format('GRANT INSERT, UPDATE, DELETE ON skiplock.jobs, skiplock.enqueue_tokens TO %I',
                   p_role);
    EXECUTE format('GRANT SELECT ON skiplock.enqueue_tokens TO %I', p_role);
    EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA skiplock TO %I', p_role);
  END IF;
  INSERT INTO skiplock.granted_roles (role_name, kind) VALUES (p_role, p_kind)
  ON CONFLICT (role_name) DO UPDATE SET kind = EXCLUDED.kind, granted_at = now();
END
$fn$;
COMMENT ON FUNCTION skiplock_internal.grant_role(text, text) IS
  'Internal: the privileges of one role of a kind (worker, operator, reader) in schemas skiplock and skiplock_internal, from scratch; run by grant_roles and by steps that change them.';

-- The owner of both schemas and of everything in them.
CREATE FUNCTION skiplock_internal.own_all(p_owner text) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  r record;
BEGIN
  EXECUTE format('ALTER SCHEMA skiplock OWNER TO %I', p_owner);
  EXECUTE format('ALTER SCHEMA skiplock_internal OWNER TO %I', p_owner);
  FOR r IN
    SELECT c.oid::regclass AS obj, c.relkind FROM pg_class c
    WHERE c.relnamespace = 'skiplock'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
      AND NOT EXISTS (SELECT 1 FROM pg_depend d
                      WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                        AND d.deptype IN ('a', 'i') AND c.relkind = 'S')
  LOOP
    EXECUTE format('ALTER %s %s OWNER TO %I',
                   CASE r.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                                  WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
                   r.obj, p_owner);
  END LOOP;
  FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_proc p
           WHERE p.pronamespace IN ('skiplock'::regnamespace, 'skiplock_internal'::regnamespace)
             AND p.prokind = 'f' LOOP
    EXECUTE format('ALTER FUNCTION %s OWNER TO %I', r.fn, p_owner);
  END LOOP;
  FOR r IN SELECT t.oid::regtype AS ty FROM pg_type t
           WHERE t.typnamespace = 'skiplock'::regnamespace AND t.typtype = 'c'
             AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = t.typrelid
                                                        AND c.relkind <> 'c') LOOP
    EXECUTE format('ALTER TYPE %s OWNER TO %I', r.ty, p_owner);
  END LOOP;
  -- Step 0008 gave the worker default privileges on new objects: gone.
  FOR r IN SELECT DISTINCT grantee::regrole::text AS g
             FROM pg_default_acl d, aclexplode(d.defaclacl) a
            WHERE d.defaclnamespace = 'skiplock'::regnamespace AND a.grantee <> 0 LOOP
    EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA skiplock '
                   'REVOKE ALL ON TABLES FROM %s', p_owner, r.g);
    EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA skiplock '
                   'REVOKE ALL ON SEQUENCES FROM %s', p_owner, r.g);
    EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA skiplock '
                   'REVOKE ALL ON FUNCTIONS FROM %s', p_owner, r.g);
  END LOOP;
END
$fn$;
COMMENT ON FUNCTION skiplock_internal.own_all(text) IS
  'Internal: makes a role the owner of schemas skiplock and skiplock_internal and of every table, view, sequence, function and type in them (grant_roles).';

CREATE OR REPLACE FUNCTION skiplock.grant_roles(p_owner text, p_worker text,
                                               p_operator text DEFAULT NULL,
                                               p_reader text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  r record;
BEGIN
  IF p_owner IS NOT NULL THEN
    PERFORM skiplock_internal.own_all(p_owner);
  END IF;
  IF p_worker IS NOT NULL THEN
    PERFORM skiplock_internal.grant_role(p_worker, 'worker');
  END IF;
  IF p_operator IS NOT NULL THEN
    PERFORM skiplock_internal.grant_role(p_operator, 'operator');
  END IF;
  IF p_reader IS NOT NULL THEN
    PERFORM skiplock_internal.grant_role(p_reader, 'reader');
  END IF;
  -- Every role granted before gets the functions later steps added.
  FOR r IN SELECT g.role_name, g.kind FROM skiplock.granted_roles g
            WHERE g.role_name IS DISTINCT FROM p_worker AND g.role_name IS DISTINCT FROM p_operator
              AND g.role_name IS DISTINCT FROM p_reader
              AND EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name) LOOP
    PERFORM skiplock_internal.grant_role(r.role_name, r.kind);
  END LOOP;
END
$fn$;

-- New functions are executable by PUBLIC until revoked; the roles granted
-- before get their privileges again, over both schemas.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock, skiplock_internal FROM PUBLIC;
SELECT skiplock_internal.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);
