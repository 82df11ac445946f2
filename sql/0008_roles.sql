-- skiplock schema step 0008: an owner role and a least-privilege worker role.
--
-- skiplock.grant_roles(owner, worker) is what `skiplock init --owner ROLE
-- --grant-worker ROLE` calls after installing the steps (under the same
-- transaction-scoped advisory lock).  Either argument may be NULL.
--
--   owner   owns the schema and everything in it (it alone may ALTER, DROP
--           or TRUNCATE); default privileges are set so that objects it
--           creates later are granted to the worker too.
--   worker  USAGE on the schema, EXECUTE on skiplock's functions, SELECT,
--           INSERT, UPDATE, DELETE on its tables (SELECT only on
--           schema_version), USAGE and SELECT on its sequences.  No
--           TRUNCATE, REFERENCES or TRIGGER, no CREATE, nothing outside
--           the schema.
--
-- Role names are identifiers from the user: every statement is built with
-- format('%I'), never by concatenation.  Re-running it (for example after
-- an upgrade added tables) converges to the same state.

CREATE FUNCTION skiplock.grant_roles(p_owner text, p_worker text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  r record;
BEGIN
  IF p_owner IS NOT NULL THEN
    EXECUTE format('ALTER SCHEMA skiplock OWNER TO %I', p_owner);
    FOR r IN
      SELECT c.oid::regclass AS obj, c.relkind FROM pg_class c
      WHERE c.relnamespace = 'skiplock'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
        AND NOT EXISTS (SELECT 1 FROM pg_depend d  -- sequences of serial columns follow their table
                        WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                          AND d.deptype IN ('a', 'i') AND c.relkind = 'S')
    LOOP
      EXECUTE format('ALTER %s %s OWNER TO %I',
                     CASE r.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                                    WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
                     r.obj, p_owner);
    END LOOP;
    FOR r IN SELECT p.oid::regprocedure AS fn FROM pg_proc p
             WHERE p.pronamespace = 'skiplock'::regnamespace AND p.prokind = 'f' LOOP
      EXECUTE format('ALTER FUNCTION %s OWNER TO %I', r.fn, p_owner);
    END LOOP;
  END IF;
  -- Nobody but the owner runs this function.
  REVOKE EXECUTE ON FUNCTION skiplock.grant_roles(text, text) FROM PUBLIC;
  IF p_worker IS NOT NULL THEN
    EXECUTE format('GRANT USAGE ON SCHEMA skiplock TO %I', p_worker);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA skiplock TO %I',
                   p_worker);
    EXECUTE format('REVOKE INSERT, UPDATE, DELETE ON skiplock.schema_version FROM %I', p_worker);
    EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA skiplock TO %I', p_worker);
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock TO %I', p_worker);
    EXECUTE format('REVOKE EXECUTE ON FUNCTION skiplock.grant_roles(text, text) FROM %I',
                   p_worker);
    IF p_owner IS NOT NULL THEN
      EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA skiplock '
                     'GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO %I', p_owner, p_worker);
      EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA skiplock '
                     'GRANT USAGE, SELECT ON SEQUENCES TO %I', p_owner, p_worker);
      EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA skiplock '
                     'GRANT EXECUTE ON FUNCTIONS TO %I', p_owner, p_worker);
    END IF;
  END IF;
END
$$;

REVOKE EXECUTE ON FUNCTION skiplock.grant_roles(text, text) FROM PUBLIC;
