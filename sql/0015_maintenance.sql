-- skiplock schema step 0015: the partition width follows the retention;
-- maintenance prunes the enqueue tokens.
--
-- A partition of finished_jobs is dropped once its whole range has
-- expired, so a finished job is stored for its retention plus up to one
-- width.  With the fixed width of step 0013 (6 hours), a queue that keeps
-- its jobs 5 minutes stored 6 hours of them.  From this step the width is
-- chosen by maintenance unless an operator sets one
-- (skiplock.partition_width): a quarter of the shortest finite retention,
-- at least the longest one / 100 (so that about 100 partitions at most are
-- made ahead of the longest one), rounded up to a minute, from 1 minute
-- to 6 hours.  The defaults (24 hours, 7 days) give
-- 6 hours, as before.
--
-- Range partitions made from this step on are not vacuumed for their
-- inserts alone: rows are only ever inserted, and deleted by a retry, and
-- the whole partition is dropped within its retention; a vacuum over
-- millions of rows just inserted bought nothing.  Dead rows and the
-- wraparound limit still start autovacuum as usual.
--
-- enqueue_tokens (a retried bulk enqueue finds its first run's ids) were
-- pruned only by `jobs prune`, so with automatic retention they grew by one
-- row of ids per enqueue call forever.  A retry happens within the
-- client's retry bound (30 seconds by default); maintenance now deletes
-- tokens older than 15 minutes, in bounded batches.

-- NULL: chosen by maintenance from the retention (the default from now on).
ALTER TABLE skiplock.maintenance ALTER COLUMN partition_width DROP NOT NULL,
                                 ALTER COLUMN partition_width DROP DEFAULT;
UPDATE skiplock.maintenance SET partition_width = NULL
 WHERE partition_width = interval '6 hours';

-- The width of the partitions maintenance creates now: the operator's
-- setting, else a quarter of the shortest finite retention above 0 (at
-- least the longest / 100), rounded up to a minute, 1 minute to 6 hours.
CREATE FUNCTION skiplock.partition_width()
RETURNS interval
LANGUAGE sql STABLE AS $fn$
  SELECT coalesce(m.partition_width,
                  (SELECT least(interval '6 hours', greatest(interval '1 minute',
                            ceil(extract(epoch FROM greatest(min(r.keep) / 4, max(r.keep) / 100))
                                 / 60) * interval '1 minute'))
                     FROM skiplock.retention r WHERE r.keep > interval '0'
                   HAVING count(*) > 0),
                  interval '6 hours')
    FROM skiplock.maintenance m
$fn$;

-- width NULL: chosen by maintenance from the retention again.
CREATE OR REPLACE FUNCTION skiplock.partition_width_set(width interval)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF width < interval '1 second' OR width > interval '1 day' THEN
    RAISE EXCEPTION 'partition_width_set: width must be 1 second to 1 day (NULL: automatic), got %',
      width USING ERRCODE = '22023';
  END IF;
  UPDATE skiplock.maintenance SET partition_width = width;
END
$fn$;

-- As in step 0013, at the width of skiplock.partition_width(), each new
-- partition without vacuums for inserts alone, and past only the ranges
-- that hold rows of the default partition (step 0013 started after the
-- latest of them, so one job kept longer than the partitions made ahead
-- sent every later one to the default partition too).
CREATE OR REPLACE FUNCTION skiplock.finished_partitions_ahead(p_max int)
RETURNS int
LANGUAGE plpgsql AS $fn$
DECLARE
  v_w interval := skiplock.partition_width();
  v_until timestamptz;
  v_lo timestamptz;
  v_hi timestamptz;
  v_name text;
  v_made int := 0;
BEGIN
  v_until := least(now() + coalesce((SELECT max(r.keep) FROM skiplock.retention r
                                      WHERE r.keep > interval '0'), interval '0') + v_w,
                   now() + 500 * v_w);
  v_lo := date_bin(v_w, now(), timestamptz '2000-01-01 00:00+00');
  WHILE v_lo < v_until AND v_made < p_max LOOP
    v_hi := (SELECT max(p.hi) FROM skiplock.finished_partitions p
              WHERE p.lo <= v_lo AND p.hi > v_lo);
    IF v_hi IS NOT NULL THEN
      v_lo := v_hi;
      CONTINUE;
    END IF;
    v_hi := least(v_lo + v_w, coalesce((SELECT min(p.lo) FROM skiplock.finished_partitions p
                                         WHERE p.lo > v_lo), v_lo + v_w));
    -- a range must not claim rows the default partition holds: past it
    IF EXISTS (SELECT 1 FROM skiplock.finished_jobs_default d
                WHERE d.expires_at >= v_lo AND d.expires_at < v_hi) THEN
      v_lo := v_hi;
      CONTINUE;
    END IF;
    v_name := 'finished_jobs_' || to_char(v_lo AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MISS');
    BEGIN
      EXECUTE format('CREATE TABLE skiplock.%I (LIKE skiplock.finished_jobs INCLUDING DEFAULTS '
                     'INCLUDING CONSTRAINTS, CHECK (expires_at >= %L AND expires_at < %L)) '
                     'WITH (autovacuum_vacuum_insert_threshold = -1)',
                     v_name, v_lo, v_hi);
      EXECUTE format('ALTER TABLE skiplock.finished_jobs ATTACH PARTITION skiplock.%I '
                     'FOR VALUES FROM (%L) TO (%L)', v_name, v_lo, v_hi);
      INSERT INTO skiplock.finished_partitions (name, lo, hi) VALUES (v_name, v_lo, v_hi);
    EXCEPTION
      WHEN lock_not_available THEN
        EXIT;
      WHEN check_violation THEN
        EXIT;
    END;
    v_lo := v_hi;
    v_made := v_made + 1;
  END LOOP;
  RETURN v_made;
END
$fn$;

-- As in step 0013, against skiplock.partition_width().
CREATE OR REPLACE FUNCTION skiplock.finished_partitions_reshape(p_max int)
RETURNS int
LANGUAGE plpgsql AS $fn$
DECLARE
  v_w interval := skiplock.partition_width();
  p record;
  v_empty boolean;
  v_n int := 0;
BEGIN
  FOR p IN SELECT x.name FROM skiplock.finished_partitions x
            WHERE x.hi > now() AND x.hi - x.lo <> v_w ORDER BY x.lo DESC LIMIT p_max LOOP
    BEGIN
      LOCK TABLE skiplock.finished_jobs IN ACCESS EXCLUSIVE MODE;
      EXECUTE format('SELECT NOT EXISTS (SELECT FROM skiplock.%I)', p.name) INTO v_empty;
      IF v_empty THEN
        EXECUTE format('DROP TABLE skiplock.%I', p.name);
        DELETE FROM skiplock.finished_partitions x WHERE x.name = p.name;
        v_n := v_n + 1;
      END IF;
    EXCEPTION WHEN lock_not_available THEN
      EXIT;
    END;
  END LOOP;
  RETURN v_n;
END
$fn$;

-- Deletes up to p_max enqueue tokens older than 15 minutes; how many.
CREATE FUNCTION skiplock.enqueue_tokens_prune(p_max int)
RETURNS int
LANGUAGE sql AS $fn$
  WITH d AS (
    DELETE FROM skiplock.enqueue_tokens t WHERE t.token IN (
      SELECT x.token FROM skiplock.enqueue_tokens x
       WHERE x.created_at < now() - interval '15 minutes' LIMIT p_max)
    RETURNING 1)
  SELECT count(*)::int FROM d
$fn$;

-- As in step 0013, and the round also prunes the enqueue tokens (counted
-- in its summary; a full batch asks for another round).
CREATE OR REPLACE FUNCTION skiplock.maintain(owner text, fencing bigint, batch int DEFAULT 10000)
RETURNS skiplock.maintenance_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  r skiplock.maintenance_result;
  v_tokens int;
BEGIN
  IF maintain.batch IS NULL OR maintain.batch NOT BETWEEN 1 AND 1000000 THEN
    RAISE EXCEPTION 'maintain: batch must be 1 to 1000000' USING ERRCODE = '22023';
  END IF;
  PERFORM skiplock.lease_fence('skiplock.maintenance', maintain.fencing);
  PERFORM set_config('lock_timeout', '50ms', true);
  r.dropped := skiplock.finished_partitions_reshape(48);
  r.created := skiplock.finished_partitions_ahead(48);
  r.moved := skiplock.move_finished(ARRAY(
    SELECT j.id FROM skiplock.jobs j WHERE j.state IN ('completed', 'discarded', 'cancelled')
     ORDER BY j.finished_at LIMIT maintain.batch FOR UPDATE SKIP LOCKED));
  r.dropped := r.dropped + skiplock.finished_partitions_expire(48);
  DELETE FROM skiplock.finished_jobs_default d WHERE d.id IN (
    SELECT x.id FROM skiplock.finished_jobs_default x WHERE x.expires_at <= now()
     LIMIT maintain.batch);
  GET DIAGNOSTICS r.deleted = ROW_COUNT;
  v_tokens := skiplock.enqueue_tokens_prune(maintain.batch);
  r.remaining := (SELECT count(*) FROM (SELECT 1 FROM skiplock.jobs j
                   WHERE j.state IN ('completed', 'discarded', 'cancelled')
                   LIMIT 1000000) x);
  r.more := r.created = 48 OR r.dropped = 48 OR r.deleted = maintain.batch
            OR r.remaining > 0 OR v_tokens = maintain.batch;
  UPDATE skiplock.maintenance m SET last_run_at = now(), last_owner = maintain.owner,
         last_summary = format('%s created, %s dropped, %s deleted, %s moved, %s to move, '
                               '%s tokens pruned',
                               r.created, r.dropped, r.deleted, r.moved, r.remaining, v_tokens);
  RETURN r;
END
$fn$;

-- ---- least privilege ----

-- As in step 0014, with partition_width readable by every role.
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
                                 'keep_until', 'errors_append', 'jobs_matching',
                                 'partition_width')
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

COMMENT ON FUNCTION skiplock.partition_width() IS
  'the width of the finished-jobs partitions made from now on (set, or from the retention)';
COMMENT ON FUNCTION skiplock.partition_width_set(interval) IS
  'set the width of new finished-jobs partitions; NULL: follow the retention (operators)';
COMMENT ON FUNCTION skiplock.enqueue_tokens_prune(int) IS
  'delete up to n enqueue tokens older than 15 minutes (maintenance)';
