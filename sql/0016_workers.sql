-- skiplock schema step 0016: a registry of workers, fed by their empty claims.
--
-- A worker that holds no job leaves no trace in skiplock.jobs (an outcome
-- clears lease_owner), and through a transaction pooler pg_stat_activity
-- shows the pooler, not the workers.  So "which workers are idle while work
-- waits" had no answer.  Every claim of every client (the C worker, the
-- Node, Python and Rust clients, raw SQL skiplock.claim and record_claim)
-- goes through skiplock.claim_pick, so the registry is written there and no
-- client changes: a claim from the front of the queue (no after_* mark)
-- that takes nothing calls skiplock.worker_idle(owner, kinds, queues).
--
-- Cost.  A claim that takes a job does nothing more: no statement, no
-- write.  An empty claim first reads the owner's row; it writes only when
-- the row is missing, its kinds or queues changed, or its empty_at is 10
-- seconds old or more: at most one write per worker per 10 seconds, and only
-- while it finds nothing (that write makes the empty claim's transaction
-- one that commits a row).  An insert also deletes up to 100 rows whose
-- last empty claim is over a day old (SKIP LOCKED: never waits), so the
-- table stays as small as the fleet of the last day without maintenance.
-- An empty claim after a mark (after_*) is not recorded: jobs before the
-- mark may be due, and the worker's next claim starts from the front.
--
-- "Idle while work waits" (skiplock.idle_workers): a worker whose last
-- recorded empty claim is within p_seen (15 minutes by default) and that
-- left due jobs behind: jobs still available whose run_at was at least one
-- second before that claim, in the worker's queues (any when it names
-- none).  It looked and took nothing although they were due: its kinds do
-- not include theirs, or their queue or kind is paused, or their breaker
-- is open.  A worker that stopped stays listed until p_seen has passed.
--
-- Errors: none of its own; a claim's arguments are checked before
-- claim_pick by check_claim_args (22004, 22023), which bounds owner to 256
-- characters and kinds to 1000 names, as the table does.
--
-- Citus: skiplock.workers is small metadata written by any node's claims,
-- a reference table there; idle_workers joins it with the local jobs.

-- ---- the registry ----

CREATE TABLE skiplock.workers (
  owner         text PRIMARY KEY CHECK (length(owner) BETWEEN 1 AND 256),  -- the claim's owner
  kinds         text[] NOT NULL CHECK (cardinality(kinds) BETWEEN 1 AND 1000),
  queues        text[],                       -- NULL: every queue
  empty_at      timestamptz NOT NULL,         -- its last recorded claim that took nothing
  first_seen_at timestamptz NOT NULL DEFAULT now()
);

-- Records an empty claim of owner: at most one write per owner per 10
-- seconds (see the header).  A plain function: it runs as the caller of
-- claim_pick (record_claim, SECURITY DEFINER), never for a role directly.
CREATE FUNCTION skiplock.worker_idle(p_owner text, p_kinds text[], p_queues text[])
RETURNS void
LANGUAGE plpgsql AS $fn$
DECLARE
  w skiplock.workers;
BEGIN
  SELECT * INTO w FROM skiplock.workers x WHERE x.owner = p_owner;
  IF FOUND THEN
    IF w.kinds = p_kinds AND w.queues IS NOT DISTINCT FROM p_queues
       AND w.empty_at > now() - interval '10 seconds' THEN
      RETURN;
    END IF;
    -- another claim of this owner holding the row is recording it now
    PERFORM 1 FROM skiplock.workers x WHERE x.owner = p_owner FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
      UPDATE skiplock.workers x SET kinds = p_kinds, queues = p_queues, empty_at = now()
       WHERE x.owner = p_owner;
    END IF;
    RETURN;
  END IF;
  INSERT INTO skiplock.workers (owner, kinds, queues, empty_at)
  VALUES (p_owner, p_kinds, p_queues, now()) ON CONFLICT (owner) DO NOTHING;
  DELETE FROM skiplock.workers x WHERE x.owner IN (
    SELECT y.owner FROM skiplock.workers y WHERE y.empty_at < now() - interval '1 day'
     LIMIT 100 FOR UPDATE SKIP LOCKED);
END
$fn$;

-- ---- the claim records its empty picks ----

-- As in step 0014, and a pick from the front that took nothing records
-- the owner's empty claim (skiplock.worker_idle).
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

-- ---- reading the registry ----

-- Every worker whose last recorded empty claim is within p_seen, with the
-- due jobs it left behind.  Workers that claim from the same queues share
-- one read of skiplock.jobs: the first 1000 jobs still available in those
-- queues (any when NULL) whose run_at was at least a second before the
-- latest empty claim among them; for each worker, waiting counts those due
-- at least a second before its own (so it is exact below 1000), and
-- waiting_kinds are the distinct kinds of the 10 that have waited longest.
-- Every queue: jobs_claim_idx in claim order.  Named queues: a statement
-- planned with the names, as the claim is (jobs_queue_kind_state_idx for a
-- small queue, a scan where one queue holds most jobs).  The cost grows
-- with the distinct sets of queues, not with the workers.
CREATE FUNCTION skiplock.workers_seen(p_seen interval DEFAULT '15 minutes')
RETURNS TABLE (owner text, kinds text[], queues text[], empty_at timestamptz,
               first_seen_at timestamptz, waiting int, waiting_kinds text[])
LANGUAGE plpgsql STABLE AS $fn$
#variable_conflict use_column
DECLARE
  g record;
  v_run_ats timestamptz[];
  v_kinds text[];
BEGIN
  FOR g IN SELECT w.queues, max(w.empty_at) - interval '1 second' AS upto
             FROM skiplock.workers w WHERE w.empty_at >= now() - p_seen GROUP BY w.queues LOOP
    IF g.queues IS NULL THEN
      SELECT array_agg(y.run_at ORDER BY y.run_at), array_agg(y.kind ORDER BY y.run_at)
        INTO v_run_ats, v_kinds
        FROM (SELECT j.kind, j.run_at FROM skiplock.jobs j
               WHERE j.state = 'available' AND j.run_at <= g.upto
               ORDER BY j.priority DESC, j.run_at, j.id LIMIT 1000) y;
    ELSE
      EXECUTE 'SELECT array_agg(y.run_at ORDER BY y.run_at), array_agg(y.kind ORDER BY y.run_at)'
              '  FROM (SELECT j.kind, j.run_at FROM skiplock.jobs j'
              '         WHERE j.queue = ANY ($1) AND j.state = ''available'' AND j.run_at <= $2'
              '         LIMIT 1000) y'
        INTO v_run_ats, v_kinds USING g.queues, g.upto;
    END IF;
    RETURN QUERY
      SELECT w.owner, w.kinds, w.queues, w.empty_at, w.first_seen_at, c.n,
             ARRAY(SELECT DISTINCT k FROM unnest(v_kinds[1:least(c.n, 10)]) k ORDER BY k)
        FROM skiplock.workers w
       CROSS JOIN LATERAL (
         SELECT coalesce(width_bucket(w.empty_at - interval '1 second', v_run_ats), 0)::int
                AS n) c
       WHERE w.empty_at >= now() - p_seen AND w.queues IS NOT DISTINCT FROM g.queues;
  END LOOP;
END
$fn$;

-- The workers of workers_seen that left due jobs behind: idle while work
-- waits (see the header).
CREATE FUNCTION skiplock.idle_workers(p_seen interval DEFAULT '15 minutes')
RETURNS TABLE (owner text, kinds text[], queues text[], empty_at timestamptz,
               first_seen_at timestamptz, waiting int, waiting_kinds text[])
LANGUAGE sql STABLE AS $fn$
  SELECT s.owner, s.kinds, s.queues, s.empty_at, s.first_seen_at, s.waiting, s.waiting_kinds
    FROM skiplock.workers_seen(p_seen) s WHERE s.waiting > 0
$fn$;

-- ---- least privilege ----

-- As in step 0015, with the registry readable by every role, and
-- workers_seen and idle_workers callable by every role.  worker_idle is
-- granted to none: it runs inside record_claim.
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
                 'skiplock.leases, skiplock.schema_version, skiplock.pauses, '
                 'skiplock.workers TO %I', p_role);
  IF p_kind <> 'worker' THEN
    EXECUTE format('GRANT SELECT ON skiplock.actions TO %I', p_role);
  END IF;
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'skiplock'::regnamespace AND p.prokind = 'f'
              AND (p.proname IN ('installed_version', 'backoff_delay', 'retry_delay_ms',
                                 'breaker_step', 'check_job_times', 'interval_ms',
                                 'check_claim_args', 'lease_check_args', 'lease_check_reserved',
                                 'keep_until', 'errors_append', 'jobs_matching',
                                 'partition_width', 'workers_seen', 'idle_workers')
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

COMMENT ON TABLE skiplock.workers IS
  'the workers'' last empty claims (claim_pick): who looked for work and found none, when';
COMMENT ON FUNCTION skiplock.worker_idle(text, text[], text[]) IS
  'record an empty claim of owner: at most one write per owner per 10 seconds (claim_pick)';
COMMENT ON FUNCTION skiplock.workers_seen(interval) IS
  'workers with an empty claim within p_seen, and the due jobs each left behind (of 1000 read)';
COMMENT ON FUNCTION skiplock.idle_workers(interval) IS
  'workers idle while due jobs of their queues wait: their kinds, a pause or a breaker';
