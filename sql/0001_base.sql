-- skiplock schema step 0001: the schema itself.
--
-- Steps are append-only: never edit an applied step, add a new file.
-- `skiplock init` runs each missing step in its own transaction under a
-- transaction-scoped advisory lock and records it in skiplock.schema_version.

COMMENT ON SCHEMA skiplock IS
  'skiplock: job queue, leases and coordination; managed by skiplock init';

CREATE FUNCTION skiplock.installed_version() RETURNS int
LANGUAGE sql STABLE AS $$
  SELECT coalesce(max(version), 0) FROM skiplock.schema_version
$$;
