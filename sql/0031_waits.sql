-- skiplock schema step 0031: why available jobs wait, counted per queue.
--
-- waits_summary(cap, queues) answers, for each queue, how many available
-- jobs are not running and what holds them, one reason per job, in the
-- order job_waits_for (step 0030) tells them for one job:
--
--   dependency  the job waits for parents (job_waits)
--   scheduled   not due yet (its run_at is in the future)
--   paused      due, and its queue or kind is paused
--   breaker     due, and its kind's circuit breaker is not closed
--   limit       due, and its kind has a limit (limit_set): the claim
--               starts it when the limit has room
--   worker      due, and nothing holds it: it waits for a free worker
--
-- Each queue takes two statements on the job table that name it (one
-- shard on the distributed layout), each counting at most cap jobs (the
-- due ones, the later ones), so the answer is bounded however long a
-- queue is; the due jobs are grouped by kind and each kind is classified
-- once against the small tables (pauses, breakers, limits), never per
-- row.  The waiting jobs are counted once for every queue from job_waits
-- (at most cap of them); dependencies are refused on the distributed
-- layout, so there it counts none.  The time is read once per call.  The workers' metrics read it every few seconds
-- (skiplock_jobs_waiting{queue, reason}, docs/metrics.md), the dashboard
-- on request.
--
-- enqueue_after now refuses a bad on_parent_failure without parents too.
--
-- Functions every role may call are now rows of every_role_functions,
-- read by grant_role, as the operators' ones are in operator_functions
-- (step 0029).

-- The functions (by name) every role may execute, SECURITY DEFINER or not.
CREATE TABLE skiplock.every_role_functions (
  name text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 63)
);
COMMENT ON TABLE skiplock.every_role_functions IS
  'The functions (by name) grant_role gives to every role: workers, operators and readers.';
INSERT INTO skiplock.every_role_functions (name)
VALUES ('installed_version'), ('backoff_delay'), ('retry_delay_ms'), ('breaker_step'),
       ('check_job_times'), ('interval_ms'), ('check_claim_args'), ('lease_check_args'),
       ('lease_check_reserved'), ('keep_until'), ('errors_append'), ('jobs_matching'),
       ('partition_width'), ('workers_seen'), ('idle_workers'), ('payload_max'),
       ('limits_status'), ('job_waits_for'), ('waits_summary');

-- What holds the due jobs of one kind of a queue, or 'worker' when
-- nothing does (the reasons of the header, in job_waits_for's order).
CREATE FUNCTION skiplock.kind_wait_reason(p_queue text, p_kind text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp AS $$
  SELECT CASE
    WHEN EXISTS (SELECT 1 FROM skiplock.pauses p WHERE p.queue = p_queue OR p.kind = p_kind)
    THEN 'paused'
    WHEN EXISTS (SELECT 1 FROM skiplock.breakers b WHERE b.kind = p_kind AND b.state <> 'closed')
    THEN 'breaker'
    WHEN EXISTS (SELECT 1 FROM skiplock.limits l WHERE l.kind = p_kind) THEN 'limit'
    ELSE 'worker' END
$$;
COMMENT ON FUNCTION skiplock.kind_wait_reason(text, text) IS
  'Internal: what holds the due jobs of one kind in one queue: paused, breaker, limit, or worker (nothing).';

CREATE FUNCTION skiplock.waits_summary(cap integer DEFAULT 10000, queues text[] DEFAULT NULL)
RETURNS TABLE (queue text, reason text, jobs bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
  v_queue text;
  v_names text[];
  v_deps jsonb := '{}';
  v_later bigint;
  v_dep bigint;
  v_now timestamptz := now();
BEGIN
  IF cap IS NULL OR cap NOT BETWEEN 1 AND 1000000 THEN
    RAISE EXCEPTION 'waits_summary: cap must be 1 to 1000000, got %', cap USING ERRCODE = '22023';
  END IF;
  IF waits_summary.queues IS NOT NULL THEN
    v_names := ARRAY(SELECT DISTINCT q FROM unnest(waits_summary.queues) q
                      WHERE q IS NOT NULL ORDER BY q LIMIT 1000);
  ELSE -- a loose scan of (queue, kind, state): one probe per queue
    v_names := ARRAY(WITH RECURSIVE q(name) AS (
                       (SELECT j.queue FROM skiplock.jobs j ORDER BY j.queue LIMIT 1)
                       UNION ALL
                       SELECT (SELECT j.queue FROM skiplock.jobs j WHERE j.queue > q.name
                                ORDER BY j.queue LIMIT 1) FROM q WHERE q.name IS NOT NULL)
                     SELECT name FROM q WHERE name IS NOT NULL LIMIT 1000);
  END IF;
  -- the waiting jobs per queue, from job_waits (dependencies are refused
  -- on the distributed layout, where job_waits stays empty)
  IF NOT skiplock.is_distributed() THEN
    SELECT coalesce(jsonb_object_agg(d.queue, d.n), '{}') INTO v_deps
      FROM (SELECT j.queue, count(*) AS n
              FROM (SELECT w.child_id FROM skiplock.job_waits w LIMIT cap) w
              JOIN skiplock.jobs j ON j.id = w.child_id AND j.state = 'available'
             GROUP BY j.queue) d;
  END IF;
  FOREACH v_queue IN ARRAY v_names LOOP
    SELECT count(*) INTO v_later
      FROM (SELECT 1 FROM skiplock.jobs j
             WHERE j.queue = v_queue AND j.state = 'available' AND j.run_at > v_now
             LIMIT cap) l;
    v_dep := least(coalesce((v_deps ->> v_queue)::bigint, 0), v_later);
    RETURN QUERY
      SELECT v_queue, r.reason, sum(r.n)::bigint
        FROM (SELECT skiplock.kind_wait_reason(v_queue, d.kind) AS reason, d.n
                FROM (SELECT x.kind, count(*) AS n
                        FROM (SELECT j.kind FROM skiplock.jobs j
                               WHERE j.queue = v_queue AND j.state = 'available'
                                 AND j.run_at <= v_now
                               LIMIT cap) x
                       GROUP BY x.kind) d
              UNION ALL VALUES ('dependency', v_dep), ('scheduled', v_later - v_dep)) r
       WHERE r.n > 0
       GROUP BY r.reason
       ORDER BY r.reason;
  END LOOP;
END
$$;
COMMENT ON FUNCTION skiplock.waits_summary(integer, text[]) IS
  'The available jobs of each queue (or of the queues given) that are not running, by what holds them: dependency, scheduled, paused, breaker, limit, worker; at most cap jobs counted per queue for the due ones and for the later ones.';

-- As in step 0030, with on_parent_failure checked whether or not parents
-- are named: a bad policy is refused (22023) rather than ignored.
CREATE OR REPLACE FUNCTION skiplock.enqueue_after(depends_on bigint[], kind text,
    payload jsonb DEFAULT '{}', queue text DEFAULT 'default', run_at timestamptz DEFAULT now(),
    priority integer DEFAULT 0, unique_key text DEFAULT NULL, max_attempts integer DEFAULT 25,
    timeout interval DEFAULT NULL, backoff text DEFAULT NULL, backoff_base interval DEFAULT NULL,
    backoff_cap interval DEFAULT NULL, depends_on_keys text[] DEFAULT NULL,
    on_parent_failure text DEFAULT 'cancel') RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_variable
DECLARE
  v_parents bigint[];
  v_id bigint;
BEGIN
  PERFORM skiplock.check_parent_policy(on_parent_failure);
  IF depends_on IS NOT NULL OR depends_on_keys IS NOT NULL THEN
    IF skiplock.is_distributed() THEN
      RAISE EXCEPTION 'enqueue_after: dependencies are not supported on the distributed layout yet'
        USING ERRCODE = '0A000';
    END IF;
    PERFORM skiplock.check_job_times(coalesce(run_at, now()), 0);
    v_parents := skiplock.deps_parents(depends_on, depends_on_keys);
  END IF;
  v_id := (skiplock.enqueue_many(NULL, ARRAY[kind], ARRAY[payload],
            ARRAY[coalesce(queue, 'default')],
            ARRAY[CASE WHEN cardinality(v_parents) > 0 THEN skiplock.waiting_run_at()
                       ELSE coalesce(run_at, now()) END], NULL, ARRAY[priority],
            ARRAY[unique_key], ARRAY[max_attempts],
            ARRAY[skiplock.interval_ms(timeout, 'timeout')::int],
            ARRAY[skiplock.interval_ms(backoff_base, 'backoff_base')::int],
            ARRAY[skiplock.interval_ms(backoff_cap, 'backoff_cap')::int], ARRAY[backoff]))[1];
  -- with parents, unless its unique key was held by another job (returned)
  IF cardinality(v_parents) > 0
     AND EXISTS (SELECT 1 FROM skiplock.jobs j
                  WHERE j.id = v_id AND j.run_at = skiplock.waiting_run_at())
     AND NOT EXISTS (SELECT 1 FROM skiplock.job_waits w WHERE w.child_id = v_id) THEN
    PERFORM skiplock.deps_attach(v_id, coalesce(run_at, now()), on_parent_failure, false,
                                 v_parents);
  END IF;
  RETURN v_id;
END
$$;

-- As before (step 0029), with the functions of every role read from
-- every_role_functions.
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
              AND (p.proname IN (SELECT e.name FROM skiplock.every_role_functions e)
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
-- waits_summary to every role again.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;
SELECT skiplock.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);
