-- skiplock schema step 0035: the forwarders that step 0034 left under the
-- old names of the internal functions are dropped, once the calls that
-- needed them have ended.
--
-- A call in flight when step 0034 committed runs the body it had compiled
-- before, which names skiplock.f; the forwarder sends it on to
-- skiplock_internal.f.  Calls that start later compile the bodies step
-- 0034 wrote, which name skiplock_internal.f.  So the forwarders are
-- needed only by the transactions open when step 0034 committed, and this
-- step, which starts after that commit, first waits for the transactions
-- of this database that are open when it starts: it watches their virtual
-- transaction ids in pg_locks, which every role may read (the wait of
-- CREATE INDEX CONCURRENTLY, polled).  A worker's call lasts milliseconds;
-- the wait gives up after 5 seconds (a session idle in a transaction, say)
-- and drops the forwarders all the same.

DO $step$
DECLARE
  v_open text[];
  v_until timestamptz := clock_timestamp() + interval '5 seconds';
  f regprocedure;
BEGIN
  SELECT array_agg(l.virtualxid) INTO v_open
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
   WHERE l.locktype = 'virtualxid' AND l.granted AND l.pid <> pg_backend_pid()
     AND a.datname = current_database();
  WHILE v_open IS NOT NULL AND clock_timestamp() < v_until
        AND EXISTS (SELECT 1 FROM pg_locks l
                     WHERE l.locktype = 'virtualxid' AND l.granted AND l.virtualxid = ANY (v_open)) LOOP
    PERFORM pg_sleep(0.01);
  END LOOP;
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'skiplock'::regnamespace
              AND obj_description(p.oid, 'pg_proc') LIKE 'Internal: forwards a call in flight%' LOOP
    EXECUTE format('DROP FUNCTION %s', f);
  END LOOP;
END
$step$;
