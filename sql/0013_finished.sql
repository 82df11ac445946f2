-- skiplock schema step 0013: finished jobs leave the hot table; retention.
--
-- skiplock.jobs holds live jobs only (available, running).  A job that
-- finishes (completed, discarded, cancelled) is deleted from it and, unless
-- its retention is 0, inserted into skiplock.finished_jobs in the same
-- statement.  A DELETE leaves no new row version and no index entry behind,
-- where the UPDATE it replaces added both; the claim's and the outcomes'
-- indexes and heap hold live jobs only, whatever the history.
--
-- finished_jobs is partitioned by RANGE (expires_at): each row's expiry is
-- fixed when it finishes (finished_at + the retention of its queue and
-- state, skiplock.retention), so retention is dropping whole partitions
-- whose upper bound has passed — a row is never dropped before its own
-- expiry, whatever partition it landed in.  Partitions are partition_width
-- wide (skiplock.maintenance, 6 hours by default), created ahead of need by
-- skiplock.maintain, which workers run under the lease
-- 'skiplock.maintenance' (one at a time, no advisory lock).  Two partitions
-- are permanent: finished_jobs_forever (retention "forever": expires_at =
-- infinity) and finished_jobs_default, which catches rows whose partition
-- does not exist yet (maintenance stopped for longer than the window it
-- creates ahead) so that no outcome can fail for want of one; maintain
-- deletes its expired rows in bounded batches.
--
-- The step itself moves no rows: an installation's finished jobs are moved
-- in bounded batches by skiplock.convert_finished, which `skiplock init`
-- runs to the end with a progress line, and which maintain continues
-- (restartable after a kill: each batch is its own transaction).  Until then
-- finished jobs are in both tables, and every reader looks at both
-- (skiplock.all_jobs).
--
-- Ready for a distributed engine: the new tables' keys contain queue
-- (retention) or are not unique (finished_jobs has indexes, no unique key).

-- ---- settings ----

CREATE TABLE skiplock.retention (
  queue      text NOT NULL CHECK (length(queue) BETWEEN 1 AND 128),  -- '*': the default
  state      text NOT NULL CHECK (state IN ('completed', 'discarded', 'cancelled')),
  keep       interval CHECK (keep >= interval '0' AND keep <= interval '100 years'),  -- NULL: forever
  changed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (queue, state)
);
INSERT INTO skiplock.retention (queue, state, keep) VALUES
  ('*', 'completed', interval '24 hours'),
  ('*', 'discarded', interval '7 days'),
  ('*', 'cancelled', interval '7 days');

CREATE TABLE skiplock.maintenance (
  one             boolean PRIMARY KEY DEFAULT true CHECK (one),
  partition_width interval NOT NULL DEFAULT interval '6 hours'
                  CHECK (partition_width BETWEEN interval '1 second' AND interval '1 day'),
  last_run_at     timestamptz,
  last_owner      text,
  last_summary    text
);
INSERT INTO skiplock.maintenance DEFAULT VALUES;

-- ---- the finished jobs ----

CREATE TABLE skiplock.finished_jobs (
  LIKE skiplock.jobs INCLUDING DEFAULTS,
  expires_at timestamptz NOT NULL,
  CHECK (state IN ('completed', 'discarded', 'cancelled'))
) PARTITION BY RANGE (expires_at);
CREATE INDEX finished_jobs_id_idx ON skiplock.finished_jobs (id);
CREATE INDEX finished_jobs_finished_idx ON skiplock.finished_jobs (finished_at);
CREATE TABLE skiplock.finished_jobs_forever PARTITION OF skiplock.finished_jobs
  FOR VALUES FROM ('infinity') TO (MAXVALUE);
CREATE TABLE skiplock.finished_jobs_default PARTITION OF skiplock.finished_jobs DEFAULT;

-- Every job, live or finished: what jobs list/show, status and the
-- dashboard read.  A job being moved by convert_finished is in one table or
-- the other in any snapshot, never both.
CREATE VIEW skiplock.all_jobs AS
  SELECT id, queue, kind, payload, state, priority, run_at, attempt, max_attempts, fencing,
         lease_owner, lease_expires_at, unique_key, timeout_ms, backoff_base_ms, backoff_cap_ms,
         errors, result, created_at, attempted_at, finished_at, backoff, last_delay_ms,
         NULL::timestamptz AS expires_at
    FROM skiplock.jobs
  UNION ALL
  SELECT id, queue, kind, payload, state, priority, run_at, attempt, max_attempts, fencing,
         lease_owner, lease_expires_at, unique_key, timeout_ms, backoff_base_ms, backoff_cap_ms,
         errors, result, created_at, attempted_at, finished_at, backoff, last_delay_ms,
         expires_at
    FROM skiplock.finished_jobs;

-- ---- helpers ----

-- A job's error history with one more entry (the newest 20 are kept).
-- STABLE, as what it calls (a time in JSON depends on the session's zone):
-- so the planner inlines it into the outcome statement instead of running
-- it as a query of its own for every row.
CREATE FUNCTION skiplock.errors_append(errors jsonb, attempt int, err text, at timestamptz)
RETURNS jsonb
LANGUAGE sql STABLE AS $fn$
  SELECT CASE WHEN err IS NULL THEN errors
              ELSE (CASE WHEN jsonb_array_length(errors) >= 20 THEN errors - 0 ELSE errors END)
                   || jsonb_build_array(jsonb_build_object('attempt', attempt, 'at', at,
                                                           'error', err)) END
$fn$;

-- When a job of queue that ended in state at finished expires: NULL when
-- nothing is kept (retention 0), infinity when kept forever.
CREATE FUNCTION skiplock.keep_until(p_queue text, p_state text, p_finished timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE AS $fn$
  SELECT CASE WHEN r.keep IS NULL THEN timestamptz 'infinity'
              WHEN r.keep > interval '0' THEN p_finished + r.keep END
    FROM skiplock.retention r
   WHERE r.state = p_state AND r.queue IN (p_queue, '*')
   ORDER BY r.queue = '*' LIMIT 1
$fn$;

-- Moves finished jobs (by id) from jobs to finished_jobs: deleted from
-- jobs, kept until keep_until when that is still ahead.  Returns how many
-- left jobs.
CREATE FUNCTION skiplock.move_finished(p_ids bigint[])
RETURNS int
LANGUAGE sql AS $fn$
  WITH m AS (
    DELETE FROM skiplock.jobs j
     WHERE j.id = ANY (p_ids) AND j.state IN ('completed', 'discarded', 'cancelled')
    RETURNING j.*),
  k AS (
    INSERT INTO skiplock.finished_jobs
    SELECT m.*, x.expires_at
      FROM m CROSS JOIN LATERAL (SELECT skiplock.keep_until(m.queue, m.state,
                                          coalesce(m.finished_at, now())) AS expires_at) x
     WHERE x.expires_at > now()
    RETURNING 1)
  SELECT count(*)::int FROM m
$fn$;

-- ---- the outcomes: finished jobs move, retried jobs stay ----

CREATE OR REPLACE FUNCTION skiplock.record_claim(
  ids bigint[], fencings bigint[], outcomes text[], results jsonb[], errors text[],
  retry_after_ms bigint[], deferred boolean[], backoffs text[], backoff_bases_ms bigint[],
  backoff_caps_ms bigint[], owner text, kinds text[], queues text[], n int, lease interval,
  after_priority int DEFAULT NULL, after_run_at_us bigint DEFAULT NULL,
  after_id bigint DEFAULT NULL)
RETURNS SETOF skiplock.exchange_row
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_n int := cardinality(record_claim.ids);
  v_ids bigint[];
BEGIN
  PERFORM skiplock.check_record_args(ids, fencings, outcomes, results, errors, retry_after_ms,
                                     deferred, backoffs, backoff_bases_ms, backoff_caps_ms);
  IF v_n > 0 THEN
    RETURN QUERY
    WITH v AS MATERIALIZED (
      SELECT t.*, random() AS r
        FROM unnest(record_claim.ids, record_claim.fencings, record_claim.outcomes,
                    record_claim.results, record_claim.errors, record_claim.retry_after_ms,
                    record_claim.deferred, record_claim.backoffs, record_claim.backoff_bases_ms,
                    record_claim.backoff_caps_ms)
             WITH ORDINALITY AS t(id, fencing, o, res, err, asked, dfr, bs, bb, bc, ord)),
    fin AS (
      DELETE FROM skiplock.jobs j USING v
       WHERE j.id = v.id AND j.fencing = v.fencing AND j.state = 'running' COLLATE "C"
         AND (v.o IN ('ok', 'discard') OR j.attempt >= j.max_attempts)
      RETURNING j.id, j.queue, j.kind, j.payload, j.priority, j.run_at, j.attempt,
                j.max_attempts, j.fencing, j.unique_key, j.timeout_ms, j.backoff_base_ms,
                j.backoff_cap_ms, j.errors, j.created_at, j.attempted_at, j.backoff,
                j.last_delay_ms, CASE WHEN v.o = 'ok' THEN 'completed' ELSE 'discarded' END AS state,
                v.o, v.res, v.err),
    kept AS (
      INSERT INTO skiplock.finished_jobs (id, queue, kind, payload, state, priority, run_at,
                  attempt, max_attempts, fencing, unique_key, timeout_ms, backoff_base_ms,
                  backoff_cap_ms, errors, result, created_at, attempted_at, finished_at, backoff,
                  last_delay_ms, expires_at)
      SELECT f.id, f.queue, f.kind, f.payload, f.state, f.priority, f.run_at, f.attempt,
             f.max_attempts, f.fencing, f.unique_key, f.timeout_ms, f.backoff_base_ms,
             f.backoff_cap_ms, skiplock.errors_append(f.errors, f.attempt, f.err, now()),
             CASE WHEN f.o = 'ok' THEN f.res END, f.created_at, f.attempted_at, now(), f.backoff,
             f.last_delay_ms,
             CASE WHEN k.keep IS NULL THEN timestamptz 'infinity' ELSE now() + k.keep END
        FROM fin f
        JOIN skiplock.retention rd ON rd.queue = '*' AND rd.state = f.state
        LEFT JOIN skiplock.retention rq ON rq.queue = f.queue AND rq.state = f.state
        CROSS JOIN LATERAL (SELECT CASE WHEN rq.queue IS NULL THEN rd.keep ELSE rq.keep END
                                   AS keep) k
       WHERE k.keep IS NULL OR k.keep > interval '0'),
    retried AS (
      UPDATE skiplock.jobs j SET
        state = 'available',
        errors = skiplock.errors_append(j.errors, j.attempt, v.err, now()),
        run_at = now() + skiplock.retry_delay_ms(j.attempt, j.last_delay_ms, j.backoff,
                   j.backoff_base_ms, j.backoff_cap_ms, v.asked, v.dfr, v.bs, v.bb, v.bc, v.r,
                   (v.ord - 1 + v.r) / v_n) * interval '1 millisecond',
        last_delay_ms = skiplock.retry_delay_ms(j.attempt, j.last_delay_ms, j.backoff,
                          j.backoff_base_ms, j.backoff_cap_ms, v.asked, v.dfr, v.bs, v.bb, v.bc,
                          v.r, (v.ord - 1 + v.r) / v_n),
        lease_owner = NULL, lease_expires_at = NULL
        FROM v
       WHERE j.id = v.id AND j.fencing = v.fencing AND j.state = 'running' COLLATE "C"
         AND v.o IN ('retry', 'fail') AND j.attempt < j.max_attempts
      RETURNING j.id, j.kind, j.state, j.run_at, v.o, j.last_delay_ms AS delay_ms),
    done AS (
      SELECT id, kind, state, run_at, o, delay_ms FROM retried
      UNION ALL
      SELECT id, kind, state, run_at, o, NULL::bigint FROM fin),
    tally AS (
      SELECT kind, (count(*) FILTER (WHERE o = 'ok'))::int AS ok,
             (count(*) FILTER (WHERE o IN ('retry', 'fail')))::int AS bad
        FROM done GROUP BY kind),
    brk AS (
      UPDATE skiplock.breakers b
         SET (state, prev_state, calls, failures, window_started_at, probe_ok, open_until,
              changed_at) = (SELECT x.state, x.prev_state, x.calls, x.failures,
                                    x.window_started_at, x.probe_ok, x.open_until, x.changed_at
                               FROM skiplock.breaker_step(b, t.ok, t.bad) x)
        FROM tally t WHERE b.kind = t.kind AND (t.ok > 0 OR t.bad > 0)
      RETURNING b.kind, b.prev_state, b.state, b.calls, b.failures),
    brk_ev AS (
      INSERT INTO skiplock.breaker_events (kind, from_state, to_state, reason)
      SELECT kind, prev_state, state, CASE WHEN state = 'closed' THEN 'probes succeeded'
             WHEN prev_state = 'half_open' THEN 'a probe failed'
             ELSE format('%s of %s calls failed', failures, calls) END
        FROM brk WHERE prev_state <> state)
    SELECT 'recorded'::text, x.id, x.state, x.run_at, x.delay_ms, NULL::text, NULL::text,
           NULL::jsonb, NULL::int, NULL::int, NULL::bigint, NULL::timestamptz, NULL::int,
           NULL::int, NULL::bigint
      FROM done x;
  END IF;
  IF record_claim.n = 0 THEN
    RETURN;
  END IF;
  v_ids := skiplock.claim_pick(owner, kinds, queues, n, lease, after_priority,
                               after_run_at_us, after_id);
  RETURN QUERY
    UPDATE skiplock.jobs j
       SET state = 'running', attempt = j.attempt + 1, fencing = j.fencing + 1,
           lease_owner = record_claim.owner, lease_expires_at = now() + record_claim.lease,
           attempted_at = now()
     WHERE j.id = ANY (v_ids)
    RETURNING 'claimed'::text, j.id, 'running'::text, j.run_at, NULL::bigint, j.queue, j.kind,
              j.payload, j.attempt, j.max_attempts, j.fencing, j.lease_expires_at,
              coalesce(j.timeout_ms, 0), j.priority,
              (extract(epoch FROM j.run_at) * 1000000)::bigint;
END
$fn$;

-- complete is idempotent for the claim that made it, now looking where a
-- completed job is (unless its retention is 0: then nothing remembers it).
CREATE OR REPLACE FUNCTION skiplock.complete(id bigint, fencing bigint, result jsonb DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_state text;
BEGIN
  IF complete.id IS NULL OR complete.fencing IS NULL THEN
    RAISE EXCEPTION 'complete: id and fencing must not be NULL' USING ERRCODE = '22004';
  END IF;
  SELECT r.state INTO v_state
    FROM skiplock.record(ARRAY[complete.id], ARRAY[complete.fencing], ARRAY['ok'],
                         ARRAY[complete.result]) r;
  IF v_state IS NOT NULL THEN
    RETURN v_state;
  END IF;
  IF EXISTS (SELECT 1 FROM skiplock.all_jobs j WHERE j.id = complete.id
                AND j.fencing = complete.fencing AND j.state = 'completed') THEN
    RETURN 'completed';
  END IF;
  RETURN 'fenced_out';
END
$fn$;

-- Rescue: a job whose last attempt's lease expired is discarded, and moves.
CREATE OR REPLACE FUNCTION skiplock.rescue(n int DEFAULT 1000)
RETURNS SETOF skiplock.rescued_job
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_ids bigint[];
  v_states text[];
  v_queues text[];
  v_kinds text[];
BEGIN
  IF rescue.n IS NULL OR rescue.n NOT BETWEEN 1 AND 100000 THEN
    RAISE EXCEPTION 'rescue: n must be 1 to 100000' USING ERRCODE = '22023';
  END IF;
  WITH r AS (
    SELECT j.id FROM skiplock.jobs j
     WHERE j.state = 'running' AND j.lease_expires_at < now()
     ORDER BY j.lease_expires_at LIMIT rescue.n FOR UPDATE SKIP LOCKED),
  u AS (
    UPDATE skiplock.jobs j SET
      state = CASE WHEN j.attempt >= j.max_attempts THEN 'discarded' ELSE 'available' END,
      finished_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
      run_at = now(), lease_owner = NULL, lease_expires_at = NULL,
      errors = skiplock.errors_append(j.errors, j.attempt, 'lease expired: '
                 || coalesce(j.lease_owner, '?') || ' stopped renewing it', now())
      FROM r WHERE j.id = r.id
    RETURNING j.id, j.state, j.queue, j.kind)
  SELECT array_agg(u.id), array_agg(u.state), array_agg(u.queue), array_agg(u.kind)
    INTO v_ids, v_states, v_queues, v_kinds FROM u;
  PERFORM skiplock.move_finished(ARRAY(SELECT t.i FROM unnest(v_ids, v_states) AS t(i, s)
                                        WHERE t.s = 'discarded'));
  RETURN QUERY SELECT * FROM unnest(v_ids, v_states, v_queues, v_kinds);
END
$fn$;

-- ---- operators' actions on one job ----

CREATE TYPE skiplock.job_action_result AS (
  changed boolean,   -- the action was applied
  state   text       -- the job's state now; NULL: there is no such job
);

-- Cancels an unfinished job: it is cancelled and moves to finished_jobs
-- (kept for the cancelled retention).  A running job's claim ends (its
-- owner's outcome will be fenced out).
CREATE FUNCTION skiplock.job_cancel(id bigint)
RETURNS skiplock.job_action_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_state text;
BEGIN
  IF job_cancel.id IS NULL THEN
    RAISE EXCEPTION 'job_cancel: id must not be NULL' USING ERRCODE = '22004';
  END IF;
  UPDATE skiplock.jobs j SET state = 'cancelled', finished_at = now(), lease_owner = NULL,
         lease_expires_at = NULL
   WHERE j.id = job_cancel.id AND j.state IN ('available', 'running')
  RETURNING j.state INTO v_state;
  IF FOUND THEN
    PERFORM skiplock.move_finished(ARRAY[job_cancel.id]);
    RETURN (true, 'cancelled'::text);
  END IF;
  SELECT j.state INTO v_state FROM skiplock.all_jobs j WHERE j.id = job_cancel.id LIMIT 1;
  RETURN (false, v_state);
END
$fn$;

-- Retries a job: a discarded or cancelled one comes back to jobs as
-- available now, with a fresh budget (attempt + attempts in all, or as
-- many again as it had when attempts is NULL); an available one runs now,
-- its budget changed only when attempts is given.  The error history and
-- the fencing token stay: a late outcome of an old claim is still refused.
-- 23505 when another unfinished job holds its unique key.
CREATE FUNCTION skiplock.job_retry(id bigint, attempts int DEFAULT NULL)
RETURNS skiplock.job_action_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_state text;
BEGIN
  IF job_retry.id IS NULL THEN
    RAISE EXCEPTION 'job_retry: id must not be NULL' USING ERRCODE = '22004';
  END IF;
  IF job_retry.attempts < 0 THEN
    RAISE EXCEPTION 'job_retry: attempts must not be negative, got %', job_retry.attempts
      USING ERRCODE = '22023';
  END IF;
  WITH f AS (
    DELETE FROM skiplock.finished_jobs j
     WHERE j.id = job_retry.id AND j.state IN ('discarded', 'cancelled')
    RETURNING j.*)
  INSERT INTO skiplock.jobs (id, queue, kind, payload, state, priority, run_at, attempt,
              max_attempts, fencing, unique_key, timeout_ms, backoff_base_ms, backoff_cap_ms,
              errors, result, created_at, attempted_at, backoff, last_delay_ms)
  SELECT f.id, f.queue, f.kind, f.payload, 'available', f.priority, now(), f.attempt,
         least(f.attempt::bigint + coalesce(job_retry.attempts, f.max_attempts), 2147483647)::int,
         f.fencing, f.unique_key, f.timeout_ms, f.backoff_base_ms, f.backoff_cap_ms, f.errors,
         f.result, f.created_at, f.attempted_at, f.backoff, f.last_delay_ms
    FROM f LIMIT 1;
  IF NOT FOUND THEN
    UPDATE skiplock.jobs j SET state = 'available', run_at = now(), finished_at = NULL,
           max_attempts = CASE WHEN j.state = 'available' AND job_retry.attempts IS NULL
                               THEN j.max_attempts
                               ELSE least(j.attempt::bigint
                                          + coalesce(job_retry.attempts, j.max_attempts),
                                          2147483647)::int END
     WHERE j.id = job_retry.id AND j.state IN ('available', 'discarded', 'cancelled');
  END IF;
  IF FOUND THEN
    RETURN (true, 'available'::text);
  END IF;
  SELECT j.state INTO v_state FROM skiplock.all_jobs j WHERE j.id = job_retry.id LIMIT 1;
  RETURN (false, v_state);
END
$fn$;

-- Deletes up to n finished jobs that finished before now() - older_than,
-- oldest first, wherever they are; returns how many.  Retention makes this
-- unnecessary; it stays for `skiplock jobs prune`.
CREATE FUNCTION skiplock.jobs_prune(older_than interval, n int DEFAULT 10000)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  v_a bigint;
  v_b bigint;
BEGIN
  IF older_than IS NULL OR older_than < interval '0' OR n IS NULL OR n NOT BETWEEN 1 AND 1000000 THEN
    RAISE EXCEPTION 'jobs_prune: older_than must be >= 0 and n 1 to 1000000'
      USING ERRCODE = '22023';
  END IF;
  DELETE FROM skiplock.finished_jobs f WHERE f.id IN (
    SELECT x.id FROM skiplock.finished_jobs x WHERE x.finished_at < now() - older_than
     ORDER BY x.finished_at LIMIT n);
  GET DIAGNOSTICS v_a = ROW_COUNT;
  DELETE FROM skiplock.jobs j WHERE j.id IN (
    SELECT x.id FROM skiplock.jobs x
     WHERE x.state IN ('completed', 'discarded', 'cancelled')
       AND x.finished_at < now() - older_than
     ORDER BY x.finished_at LIMIT greatest(n - v_a, 0) FOR UPDATE SKIP LOCKED);
  GET DIAGNOSTICS v_b = ROW_COUNT;
  RETURN v_a + v_b;
END
$fn$;

-- ---- retention settings ----

-- Sets how long finished jobs of queue ('*': every queue without its own
-- setting) in state (completed, discarded, cancelled; NULL: all three) are
-- kept: keep NULL is forever, '0' is nothing.  Applies to jobs that finish
-- from now on.  partition_width, when given, is the width of the
-- partitions maintenance creates from now on.
CREATE FUNCTION skiplock.retention_set(queue text, state text, keep interval,
                                       forever boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  IF retention_set.queue IS NULL OR length(retention_set.queue) NOT BETWEEN 1 AND 128 THEN
    RAISE EXCEPTION 'retention_set: queue must be 1 to 128 characters (''*'': every queue)'
      USING ERRCODE = '22023';
  END IF;
  IF retention_set.state IS NOT NULL
     AND retention_set.state NOT IN ('completed', 'discarded', 'cancelled') THEN
    RAISE EXCEPTION 'retention_set: state is completed, discarded or cancelled, got %',
      retention_set.state USING ERRCODE = '22023';
  END IF;
  IF forever IS DISTINCT FROM true AND (keep IS NULL OR keep < interval '0'
                                        OR keep > interval '100 years') THEN
    RAISE EXCEPTION 'retention_set: keep must be from 0 to 100 years, or forever'
      USING ERRCODE = '22023';
  END IF;
  INSERT INTO skiplock.retention AS r (queue, state, keep, changed_at)
  SELECT retention_set.queue, s, CASE WHEN forever THEN NULL ELSE keep END, now()
    FROM unnest(CASE WHEN retention_set.state IS NULL
                     THEN ARRAY['completed', 'discarded', 'cancelled']
                     ELSE ARRAY[retention_set.state] END) AS s
  ON CONFLICT ON CONSTRAINT retention_pkey
  DO UPDATE SET keep = EXCLUDED.keep, changed_at = now();
END
$fn$;

-- Forgets queue's own settings (it follows '*' again); '*' is reset to
-- the defaults (completed 24 hours, discarded and cancelled 7 days).
CREATE FUNCTION skiplock.retention_reset(queue text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
BEGIN
  IF retention_reset.queue IS NULL THEN
    RAISE EXCEPTION 'retention_reset: queue must not be NULL' USING ERRCODE = '22004';
  END IF;
  IF retention_reset.queue = '*' THEN
    UPDATE skiplock.retention r SET keep = CASE WHEN r.state = 'completed'
                                                THEN interval '24 hours' ELSE interval '7 days' END,
                                    changed_at = now()
     WHERE r.queue = '*';
  ELSE
    DELETE FROM skiplock.retention r WHERE r.queue = retention_reset.queue;
  END IF;
END
$fn$;

CREATE FUNCTION skiplock.partition_width_set(width interval)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  IF width IS NULL OR width < interval '1 second' OR width > interval '1 day' THEN
    RAISE EXCEPTION 'partition_width_set: width must be 1 second to 1 day, got %', width
      USING ERRCODE = '22023';
  END IF;
  UPDATE skiplock.maintenance SET partition_width = width;
END
$fn$;

-- ---- maintenance: partitions ahead, expired ones dropped, the move ----

-- The range partitions maintain created and has not dropped yet.
CREATE TABLE skiplock.finished_partitions (
  name text PRIMARY KEY,
  lo   timestamptz NOT NULL,
  hi   timestamptz NOT NULL,
  CHECK (lo < hi)
);
CREATE INDEX finished_jobs_default_expires_idx ON skiplock.finished_jobs_default (expires_at);

-- Creates the partitions that are missing between now and now() + the
-- longest finite retention + one width (at most 500 widths), partition_width wide, around the
-- ones that exist (created at another width) and after any row the default
-- partition holds (a range must not claim rows already there): at most
-- p_max.
CREATE FUNCTION skiplock.finished_partitions_ahead(p_max int)
RETURNS int
LANGUAGE plpgsql AS $fn$
DECLARE
  v_w interval := (SELECT m.partition_width FROM skiplock.maintenance m);
  v_until timestamptz;
  v_lo timestamptz;
  v_hi timestamptz;
  v_name text;
  v_made int := 0;
BEGIN
  -- At most 500 partitions ahead: a job expiring later waits in the
  -- default partition (a narrow width with a long retention).
  v_until := least(now() + coalesce((SELECT max(r.keep) FROM skiplock.retention r
                                      WHERE r.keep > interval '0'), interval '0') + v_w,
                   now() + 500 * v_w);
  v_lo := greatest(date_bin(v_w, now(), timestamptz '2000-01-01 00:00+00'),
                   date_bin(v_w, (SELECT max(d.expires_at) FROM skiplock.finished_jobs_default d
                                   WHERE d.expires_at < timestamptz 'infinity'),
                            timestamptz '2000-01-01 00:00+00') + v_w);
  WHILE v_lo < v_until AND v_made < p_max LOOP
    -- past an existing partition that covers v_lo; up to the next one
    v_hi := (SELECT max(p.hi) FROM skiplock.finished_partitions p
              WHERE p.lo <= v_lo AND p.hi > v_lo);
    IF v_hi IS NOT NULL THEN
      v_lo := v_hi;
      CONTINUE;
    END IF;
    v_hi := least(v_lo + v_w, coalesce((SELECT min(p.lo) FROM skiplock.finished_partitions p
                                         WHERE p.lo > v_lo), v_lo + v_w));
    v_name := 'finished_jobs_' || to_char(v_lo AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MISS');
    BEGIN  -- attaching locks the default partition: not within lock_timeout, next round
      EXECUTE format('CREATE TABLE skiplock.%I (LIKE skiplock.finished_jobs INCLUDING DEFAULTS '
                     'INCLUDING CONSTRAINTS, CHECK (expires_at >= %L AND expires_at < %L))',
                     v_name, v_lo, v_hi);
      EXECUTE format('ALTER TABLE skiplock.finished_jobs ATTACH PARTITION skiplock.%I '
                     'FOR VALUES FROM (%L) TO (%L)', v_name, v_lo, v_hi);
      INSERT INTO skiplock.finished_partitions (name, lo, hi) VALUES (v_name, v_lo, v_hi);
    EXCEPTION
      WHEN lock_not_available THEN
        EXIT;
      WHEN check_violation THEN
        EXIT;  -- an outcome put a row of this range in the default partition meanwhile:
               -- the next round starts after it
    END;
    v_lo := v_hi;
    v_made := v_made + 1;
  END LOOP;
  RETURN v_made;
END
$fn$;

-- Drops up to p_max partitions not yet expired that were made at another
-- width and are still empty (the width changed: they are made again at the
-- new one).  The emptiness is checked under the lock the drop takes.
CREATE FUNCTION skiplock.finished_partitions_reshape(p_max int)
RETURNS int
LANGUAGE plpgsql AS $fn$
DECLARE
  v_w interval := (SELECT m.partition_width FROM skiplock.maintenance m);
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

-- Drops up to p_max partitions whose every row has expired (upper bound
-- passed), and empty ones beyond the horizon (retention was shortened).
CREATE FUNCTION skiplock.finished_partitions_expire(p_max int)
RETURNS int
LANGUAGE plpgsql AS $fn$
DECLARE
  p record;
  v_n int := 0;
BEGIN
  FOR p IN SELECT x.name FROM skiplock.finished_partitions x
            WHERE x.hi <= now() ORDER BY x.lo LIMIT p_max LOOP
    BEGIN  -- a partition whose lock is not had within lock_timeout waits for the next round
      EXECUTE format('DROP TABLE skiplock.%I', p.name);
      DELETE FROM skiplock.finished_partitions x WHERE x.name = p.name;
      v_n := v_n + 1;
    EXCEPTION WHEN lock_not_available THEN
      EXIT;
    END;
  END LOOP;
  RETURN v_n;
END
$fn$;

CREATE TYPE skiplock.maintenance_result AS (
  created   int,      -- partitions created ahead
  dropped   int,      -- expired partitions dropped
  deleted   bigint,   -- expired rows deleted from the default partition
  moved     bigint,   -- finished jobs moved out of skiplock.jobs (the upgrade)
  remaining bigint,   -- finished jobs still in skiplock.jobs (estimate when large)
  more      boolean   -- a bound was reached: call again
);

-- One bounded round of maintenance, by the holder of the lease
-- 'skiplock.maintenance' (token p_fencing; SK001 otherwise).  Locks are
-- waited for at most 50 ms (lock_timeout; 55P03 then, and nothing of this
-- round is kept): dropping a partition locks finished_jobs, which outcomes
-- insert into, never jobs, which claims read.
CREATE FUNCTION skiplock.maintain(owner text, fencing bigint, batch int DEFAULT 10000)
RETURNS skiplock.maintenance_result
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  r skiplock.maintenance_result;
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
  r.remaining := (SELECT count(*) FROM (SELECT 1 FROM skiplock.jobs j
                   WHERE j.state IN ('completed', 'discarded', 'cancelled')
                   LIMIT 1000000) x);
  r.more := r.created = 48 OR r.dropped = 48 OR r.deleted = maintain.batch
            OR r.remaining > 0;
  UPDATE skiplock.maintenance m SET last_run_at = now(), last_owner = maintain.owner,
         last_summary = format('%s created, %s dropped, %s deleted, %s moved, %s to move',
                               r.created, r.dropped, r.deleted, r.moved, r.remaining);
  RETURN r;
END
$fn$;

-- The partitions of the next days exist from this step on: no outcome
-- lands in the default partition while the first maintenance is to come.
SELECT skiplock.finished_partitions_ahead(500);

-- ---- least privilege ----

-- As in step 0011, with the new tables readable and the operators' actions
-- (job_cancel, job_retry, jobs_prune, retention_set, retention_reset,
-- partition_width_set) for operators only.
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
                 'skiplock.leases, skiplock.schema_version TO %I', p_role);
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
            WHERE p.pronamespace = 'skiplock'::regnamespace AND p.prokind = 'f'
              AND (p.proname IN ('installed_version', 'backoff_delay', 'retry_delay_ms',
                                 'breaker_step', 'check_job_times', 'interval_ms',
                                 'check_claim_args', 'lease_check_args', 'lease_check_reserved',
                                 'keep_until', 'errors_append')
                   OR (p_kind = 'worker' AND p.prosecdef
                       AND p.proname NOT IN ('job_cancel', 'job_retry', 'jobs_prune',
                                             'retention_set', 'retention_reset',
                                             'partition_width_set'))
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

COMMENT ON TABLE skiplock.finished_jobs IS
  'finished jobs (completed, discarded, cancelled), partitioned by expires_at; see skiplock.retention';
COMMENT ON TABLE skiplock.retention IS
  'how long finished jobs are kept, per queue (''*'': default) and state; keep NULL: forever';
COMMENT ON VIEW skiplock.all_jobs IS 'every job, live (skiplock.jobs) or finished (finished_jobs)';
COMMENT ON FUNCTION skiplock.maintain(text, bigint, int) IS
  'one bounded round of maintenance under the lease skiplock.maintenance';
COMMENT ON FUNCTION skiplock.job_cancel(bigint) IS 'cancel an unfinished job (operators)';
COMMENT ON FUNCTION skiplock.job_retry(bigint, int) IS
  'retry a discarded, cancelled or waiting job now (operators)';
COMMENT ON FUNCTION skiplock.jobs_prune(interval, int) IS
  'delete up to n finished jobs finished before now() - older_than (operators)';
COMMENT ON FUNCTION skiplock.retention_set(text, text, interval, boolean) IS
  'how long finished jobs of a queue (''*'': default) and state are kept (operators)';
