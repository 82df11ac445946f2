-- skiplock schema step 0030: jobs that wait for other jobs.
--
-- enqueue_after(ARRAY[ids], kind, ..., depends_on_keys => ARRAY[unique
-- keys], on_parent_failure => 'cancel' | 'run') enqueues a job (enqueue's
-- arguments) that becomes available once every job it names (its
-- parents) has finished:
--
--   a parent completed           the child's wait for it is over;
--   a parent discarded/cancelled with 'cancel' (the default) the child
--                                is cancelled at once, and so are its own
--                                children that would follow it; with
--                                'run' it counts as over.
--
-- A waiting child is an available job whose run_at is held at the
-- sentinel waiting_run_at() (2199-12-31), so no claim, index or idle poll
-- sees it as due and nothing else changes for it: its attempts are
-- untouched, it can be cancelled, and it keeps its place once it is due.
-- job_waits holds what it waits for (how many parents are left, the
-- run_at it asked for, its policy, the parents' outcomes so far) and
-- job_deps one row per edge.  The functions that end a job (the outcome
-- statement and move_finished: complete, fail, cancel, discard, rescue,
-- the bulk actions) call deps_resolve in the same transaction, so a
-- completion that unblocks children does it as it commits.  The outcome
-- statement looks its batch up in job_deps' key (one index scan) and does
-- no more when none of its jobs is a parent.
--
-- A parent must exist when its child is enqueued (a live job, or a
-- finished one still kept by retention), so a cycle cannot be formed;
-- an unknown parent is refused (23503) and nothing is written.  The
-- enqueue locks live parents FOR KEY SHARE, so a parent cannot finish
-- between the check and the edge; the lock does not conflict with claims,
-- heartbeats or outcome updates, only with the parent's removal, which
-- waits for the enqueueing transaction.
--
-- enqueue_batch(kind, payloads, callback_kind, ...) enqueues N jobs and a
-- callback job that runs once after all N finished, whatever their
-- outcomes ('run'), with {"batch": {"size", "completed", "discarded",
-- "cancelled"}} merged into its payload when it becomes due.
--
-- Not on the distributed layout yet: the calls with dependencies refuse
-- there (0A000).

CREATE FUNCTION skiplock.waiting_run_at() RETURNS timestamptz
LANGUAGE sql IMMUTABLE
AS $fn$ SELECT timestamptz '2199-12-31 00:00:00+00' $fn$;
COMMENT ON FUNCTION skiplock.waiting_run_at() IS
  'Internal: the run_at that holds a job waiting for its parents (never due).';

CREATE TABLE skiplock.job_waits (
  child_id bigint PRIMARY KEY,
  run_at timestamptz NOT NULL,
  on_parent_failure text NOT NULL DEFAULT 'cancel'
    CHECK (on_parent_failure IN ('cancel', 'run')),
  report boolean NOT NULL DEFAULT false,
  parents integer NOT NULL CHECK (parents >= 1),
  waiting integer NOT NULL CHECK (waiting >= 0),
  completed integer NOT NULL DEFAULT 0,
  discarded integer NOT NULL DEFAULT 0,
  cancelled integer NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE skiplock.job_waits IS
  'Jobs waiting for their parents: the run_at each asked for, its policy when a parent fails (cancel or run), how many parents are left, and their outcomes so far.';

CREATE TABLE skiplock.job_deps (
  parent_id bigint NOT NULL,
  child_id bigint NOT NULL REFERENCES skiplock.job_waits (child_id) ON DELETE CASCADE,
  PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX job_deps_child_idx ON skiplock.job_deps (child_id);
COMMENT ON TABLE skiplock.job_deps IS
  'One row per dependency still open: parent_id must finish before child_id may run.';

-- The plain layout's move of finished jobs (as in step 0028), returning
-- what it moved.
CREATE FUNCTION skiplock.finish_moved(p_ids bigint[], OUT n integer, OUT ids bigint[],
                                      OUT states text[])
LANGUAGE plpgsql
AS $fn$
BEGIN
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
  SELECT count(*)::int, array_agg(m.id), array_agg(m.state) INTO n, ids, states FROM m;
END
$fn$;
COMMENT ON FUNCTION skiplock.finish_moved(bigint[]) IS
  'Internal: moves finished jobs by id from jobs to finished_jobs (one PostgreSQL), kept until their retention; returns how many, their ids and states.';

-- What the end of jobs (ids, their final states) means for the jobs that
-- wait for them, until nothing more follows: edges closed and counted,
-- children made due, children cancelled by their policy (and theirs after
-- them, iteratively: a chain of any length takes no stack).
CREATE FUNCTION skiplock.deps_resolve(p_ids bigint[], p_states text[]) RETURNS void
LANGUAGE plpgsql
AS $fn$
DECLARE
  v_ids bigint[] := p_ids;
  v_states text[] := p_states;
  v_free bigint[];
  v_doomed bigint[];
  v_moved record;
BEGIN
  WHILE coalesce(cardinality(v_ids), 0) > 0 LOOP
    -- an ended job waits for nothing any more
    DELETE FROM skiplock.job_waits w WHERE w.child_id = ANY (v_ids);
    WITH closed AS (
      DELETE FROM skiplock.job_deps d USING unnest(v_ids, v_states) AS f(id, state)
       WHERE d.parent_id = f.id
      RETURNING d.child_id, f.state),
    counted AS (
      SELECT c.child_id, count(*) AS n,
             count(*) FILTER (WHERE c.state = 'completed') AS ok,
             count(*) FILTER (WHERE c.state = 'discarded') AS disc,
             count(*) FILTER (WHERE c.state = 'cancelled') AS canc
        FROM closed c GROUP BY c.child_id),
    waits AS (
      UPDATE skiplock.job_waits w
         SET waiting = w.waiting - c.n, completed = w.completed + c.ok,
             discarded = w.discarded + c.disc, cancelled = w.cancelled + c.canc
        FROM counted c WHERE w.child_id = c.child_id
      RETURNING w.child_id, w.waiting,
                w.on_parent_failure = 'cancel' AND w.discarded + w.cancelled > 0 AS doomed)
    SELECT array_agg(x.child_id) FILTER (WHERE x.waiting = 0 AND NOT x.doomed),
           array_agg(x.child_id) FILTER (WHERE x.doomed)
      INTO v_free, v_doomed FROM waits x;
    IF v_free IS NOT NULL THEN
      UPDATE skiplock.jobs j
         SET run_at = w.run_at,
             payload = CASE WHEN w.report
                            THEN j.payload || jsonb_build_object('batch', jsonb_build_object(
                                   'size', w.parents, 'completed', w.completed,
                                   'discarded', w.discarded, 'cancelled', w.cancelled))
                            ELSE j.payload END
        FROM skiplock.job_waits w
       WHERE w.child_id = j.id AND j.id = ANY (v_free) AND j.state = 'available'
         AND j.run_at = skiplock.waiting_run_at();
      DELETE FROM skiplock.job_waits w WHERE w.child_id = ANY (v_free);
      PERFORM pg_notify('skiplock_jobs', '');
    END IF;
    EXIT WHEN v_doomed IS NULL;
    -- cancelled by their policy: a parent failed; what waits for them follows
    UPDATE skiplock.jobs j
       SET state = 'cancelled', finished_at = now(),
           errors = skiplock.errors_append(j.errors, j.attempt,
                      'cancelled: a job it depends on was discarded or cancelled', now())
     WHERE j.id = ANY (v_doomed) AND j.state = 'available';
    DELETE FROM skiplock.job_waits w WHERE w.child_id = ANY (v_doomed);
    SELECT * INTO v_moved FROM skiplock.finish_moved(v_doomed);
    v_ids := v_moved.ids;
    v_states := v_moved.states;
  END LOOP;
END
$fn$;
COMMENT ON FUNCTION skiplock.deps_resolve(bigint[], text[]) IS
  'Internal: closes the dependencies of ended jobs (ids, final states) in the caller''s transaction: children made due when none is left, or cancelled by their policy, iteratively.';

-- As in step 0028, with the dependencies of the moved jobs resolved.
CREATE OR REPLACE FUNCTION skiplock.move_finished(p_ids bigint[]) RETURNS integer
LANGUAGE plpgsql
AS $fn$
DECLARE
  v_n int := 0;
  v_m int;
  v_q text;
  v_now timestamptz := now();
  v_kc interval;
  v_kd interval;
  v_kx interval;
  v_hc boolean;
  v_hd boolean;
  v_hx boolean;
  v_moved record;
BEGIN
  IF NOT skiplock.is_distributed() THEN
    SELECT * INTO v_moved FROM skiplock.finish_moved(p_ids);
    IF v_moved.n > 0 AND EXISTS (SELECT 1 FROM skiplock.job_waits) THEN
      PERFORM skiplock.deps_resolve(v_moved.ids, v_moved.states);
    END IF;
    RETURN v_moved.n;
  END IF;
  IF coalesce(cardinality(p_ids), 0) = 0 THEN
    RETURN 0;
  END IF;
  FOR v_q IN SELECT DISTINCT j.queue FROM skiplock.jobs j WHERE j.id = ANY (p_ids) LOOP
    SELECT k.keep, k.kept INTO v_kc, v_hc FROM skiplock.keep_of(v_q, 'completed') k;
    SELECT k.keep, k.kept INTO v_kd, v_hd FROM skiplock.keep_of(v_q, 'discarded') k;
    SELECT k.keep, k.kept INTO v_kx, v_hx FROM skiplock.keep_of(v_q, 'cancelled') k;
    WITH m AS (
      DELETE FROM skiplock.jobs j
       WHERE j.queue = v_q AND j.id = ANY (p_ids)
         AND j.state IN ('completed', 'discarded', 'cancelled')
      RETURNING j.*),
    k AS (
      INSERT INTO skiplock.finished_jobs
      SELECT m.*, e.expires_at
        FROM m
       CROSS JOIN LATERAL (
         SELECT CASE m.state WHEN 'completed' THEN v_kc WHEN 'discarded' THEN v_kd
                             ELSE v_kx END AS keep,
                CASE m.state WHEN 'completed' THEN v_hc WHEN 'discarded' THEN v_hd
                             ELSE v_hx END AS kept) r
       CROSS JOIN LATERAL (
         SELECT CASE WHEN r.keep IS NULL THEN timestamptz 'infinity'
                     ELSE ((coalesce(m.finished_at, v_now) AT TIME ZONE 'UTC') + r.keep)
                          AT TIME ZONE 'UTC' END AS expires_at) e
       WHERE r.kept AND e.expires_at > v_now
      RETURNING 1)
    SELECT count(*)::int INTO v_m FROM m;
    v_n := v_n + v_m;
  END LOOP;
  RETURN v_n;
END
$fn$;

-- As in step 0029, with the jobs that outcomes ended resolved for the
-- jobs that wait for them, in the same statement's transaction.
CREATE OR REPLACE FUNCTION skiplock.record_claim(ids bigint[], fencings bigint[], outcomes text[],
    results jsonb[], errors text[], retry_after_ms bigint[], deferred boolean[],
    backoffs text[], backoff_bases_ms bigint[], backoff_caps_ms bigint[], owner text,
    kinds text[], queues text[], n integer, lease interval,
    after_priority integer, after_run_at_us bigint, after_id bigint, job_queues text[],
    wait_hints boolean)
RETURNS SETOF skiplock.exchange_row
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_ids bigint[];
  v_kinds text[];
  v_states text[];
  v_run_at timestamptz[];
  v_outcomes text[];
  v_delays bigint[];
  v_at timestamptz;
  v_wait timestamptz;
BEGIN
  PERFORM skiplock.check_record_args(ids, fencings, outcomes, results, errors, retry_after_ms,
                                     deferred, backoffs, backoff_bases_ms, backoff_caps_ms,
                                     job_queues);
  -- 1. the outcomes, each recorded once
  IF cardinality(record_claim.ids) > 0 AND NOT EXISTS (SELECT 1 FROM skiplock.breakers)
     AND NOT EXISTS (SELECT 1 FROM skiplock.job_deps d WHERE d.parent_id = ANY (record_claim.ids)) THEN
    -- no breaker anywhere, no job of the batch that another waits for:
    -- the rows go straight out
    RETURN QUERY
    SELECT 'recorded'::text, o.id, o.state, o.run_at, o.delay_ms, NULL::text, NULL::text,
           NULL::jsonb, NULL::int, NULL::int, NULL::bigint, NULL::timestamptz, NULL::int,
           NULL::int, NULL::bigint
      FROM skiplock.record_outcomes(ids, fencings, outcomes, results, errors, retry_after_ms,
                                    deferred, backoffs, backoff_bases_ms, backoff_caps_ms,
                                    job_queues) o;
  ELSIF cardinality(record_claim.ids) > 0 THEN
    SELECT array_agg(o.id), array_agg(o.kind), array_agg(o.state), array_agg(o.run_at),
           array_agg(o.outcome), array_agg(o.delay_ms)
      INTO v_ids, v_kinds, v_states, v_run_at, v_outcomes, v_delays
      FROM skiplock.record_outcomes(ids, fencings, outcomes, results, errors, retry_after_ms,
                                    deferred, backoffs, backoff_bases_ms, backoff_caps_ms,
                                    job_queues) o;
    -- 2. what they say about each kind's downstream, for its breaker, and
    -- what the jobs they ended mean for the jobs that wait for them
    PERFORM skiplock.count_for_breakers(v_kinds, v_outcomes);
    IF EXISTS (SELECT 1 FROM skiplock.job_deps d WHERE d.parent_id = ANY (record_claim.ids)) THEN
      PERFORM skiplock.deps_resolve(
        ARRAY(SELECT r.id FROM unnest(v_ids, v_states) r(id, s) WHERE r.s <> 'available'),
        ARRAY(SELECT r.s FROM unnest(v_ids, v_states) r(id, s) WHERE r.s <> 'available'));
    END IF;
    RETURN QUERY
    SELECT 'recorded'::text, r.id, r.state, r.run_at, r.delay_ms, NULL::text, NULL::text,
           NULL::jsonb, NULL::int, NULL::int, NULL::bigint, NULL::timestamptz, NULL::int,
           NULL::int, NULL::bigint
      FROM unnest(v_ids, v_states, v_run_at, v_delays) AS r(id, state, run_at, delay_ms);
  END IF;
  IF record_claim.n = 0 THEN
    RETURN;
  END IF;
  -- 3. the next jobs: picked (pauses, breakers, limits, keyset), then leased
  IF skiplock.is_distributed() THEN
    v_kinds := ARRAY(SELECT unnest(kinds) EXCEPT SELECT x.kind FROM skiplock.limits x);
    IF cardinality(v_kinds) > 0 OR cardinality(kinds) = 0 THEN
      RETURN QUERY SELECT * FROM skiplock.claim_by_queue(owner, v_kinds, queues, n, lease,
                     after_priority, after_run_at_us, after_id);
    END IF;
    RETURN;
  END IF;
  SELECT p.ids, p.started_at, p.wait_until INTO v_ids, v_at, v_wait
    FROM skiplock.claim_take(owner, kinds, queues, n, lease, after_priority, after_run_at_us,
                             after_id) p;
  IF wait_hints AND v_wait IS NOT NULL THEN
    RETURN NEXT ROW('wait', NULL, NULL, v_wait,
                    greatest(0, ceil(extract(epoch FROM v_wait - clock_timestamp()) * 1000))::bigint,
                    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)::skiplock.exchange_row;
  END IF;
  RETURN QUERY
    UPDATE skiplock.jobs j
       SET state = 'running', attempt = j.attempt + 1, fencing = j.fencing + 1,
           lease_owner = record_claim.owner, lease_expires_at = now() + record_claim.lease,
           attempted_at = v_at
     WHERE j.id = ANY (v_ids)
    RETURNING 'claimed'::text, j.id, 'running'::text, j.run_at, NULL::bigint, j.queue, j.kind,
              j.payload, j.attempt, j.max_attempts, j.fencing, j.lease_expires_at,
              coalesce(j.timeout_ms, 0), j.priority,
              (extract(epoch FROM j.run_at) * 1000000)::bigint;
END
$fn$;

-- The parents a child names, as ids: its ids and the jobs holding its
-- unique keys (a live job's, else the newest finished one kept).  Live
-- parents are locked FOR KEY SHARE until the enqueue commits; a parent
-- that is neither live nor kept is refused (23503).
CREATE FUNCTION skiplock.deps_parents(p_ids bigint[], p_keys text[]) RETURNS bigint[]
LANGUAGE plpgsql
AS $fn$
DECLARE
  v_ids bigint[];
  v_key text;
  v_id bigint;
  v_missing bigint;
BEGIN
  IF coalesce(cardinality(p_ids), 0) + coalesce(cardinality(p_keys), 0) > 1000 THEN
    RAISE EXCEPTION 'depends_on: at most 1000 parents' USING ERRCODE = '22023';
  END IF;
  IF array_position(p_ids, NULL) IS NOT NULL OR array_position(p_keys, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'depends_on: a parent id or key must not be NULL' USING ERRCODE = '22004';
  END IF;
  v_ids := coalesce(p_ids, '{}');
  FOREACH v_key IN ARRAY coalesce(p_keys, '{}') LOOP
    v_id := coalesce(
      (SELECT j.id FROM skiplock.jobs j
        WHERE j.unique_key = v_key AND j.state IN ('available', 'running') LIMIT 1),
      (SELECT f.id FROM skiplock.finished_jobs f WHERE f.unique_key = v_key
        ORDER BY f.id DESC LIMIT 1));
    IF v_id IS NULL THEN
      RAISE EXCEPTION 'depends_on_keys: no job holds the unique key %', v_key
        USING ERRCODE = '23503',
              HINT = 'A parent must exist first: live, or finished and kept by retention.';
    END IF;
    v_ids := v_ids || v_id;
  END LOOP;
  v_ids := ARRAY(SELECT DISTINCT u FROM unnest(v_ids) u ORDER BY u);
  PERFORM 1 FROM skiplock.jobs j WHERE j.id = ANY (v_ids) FOR KEY SHARE OF j;
  SELECT u INTO v_missing FROM unnest(v_ids) u
   WHERE NOT EXISTS (SELECT 1 FROM skiplock.jobs j WHERE j.id = u)
     AND NOT EXISTS (SELECT 1 FROM skiplock.finished_jobs f WHERE f.id = u)
   LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'depends_on: job % does not exist', v_missing
      USING ERRCODE = '23503',
            HINT = 'A parent must exist first: live, or finished and kept by retention.';
  END IF;
  RETURN v_ids;
END
$fn$;
COMMENT ON FUNCTION skiplock.deps_parents(bigint[], text[]) IS
  'Internal: the parent ids a child names (ids and unique keys), live ones locked FOR KEY SHARE; 23503 for a parent neither live nor kept, 22023/22004 for bad lists.';

-- Makes a new job (held at waiting_run_at()) wait for its parents; the
-- parents already finished are resolved at once.
CREATE FUNCTION skiplock.deps_attach(p_child bigint, p_run_at timestamptz, p_policy text,
                                     p_report boolean, p_parents bigint[]) RETURNS void
LANGUAGE plpgsql
AS $fn$
DECLARE
  v_ids bigint[];
  v_states text[];
BEGIN
  INSERT INTO skiplock.job_waits (child_id, run_at, on_parent_failure, report, parents, waiting)
  VALUES (p_child, p_run_at, p_policy, p_report, cardinality(p_parents), cardinality(p_parents));
  INSERT INTO skiplock.job_deps (parent_id, child_id)
  SELECT p, p_child FROM unnest(p_parents) p;
  SELECT array_agg(f.id), array_agg(f.state) INTO v_ids, v_states
    FROM skiplock.finished_jobs f
   WHERE f.id = ANY (p_parents) AND NOT EXISTS (SELECT 1 FROM skiplock.jobs j WHERE j.id = f.id);
  IF v_ids IS NOT NULL THEN
    PERFORM skiplock.deps_resolve(v_ids, v_states);
  END IF;
END
$fn$;
COMMENT ON FUNCTION skiplock.deps_attach(bigint, timestamptz, text, boolean, bigint[]) IS
  'Internal: records what a new job waits for (job_waits, job_deps); parents already finished count at once.';

CREATE FUNCTION skiplock.check_parent_policy(p_policy text) RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $fn$
BEGIN
  IF p_policy IS NULL OR p_policy NOT IN ('cancel', 'run') THEN
    RAISE EXCEPTION 'on_parent_failure must be cancel or run, got %', coalesce(p_policy, 'NULL')
      USING ERRCODE = '22023';
  END IF;
END
$fn$;
COMMENT ON FUNCTION skiplock.check_parent_policy(text) IS
  'Internal: refuses a policy for a failed parent other than cancel or run (22023).';

-- enqueue with the job's parents.  A function of its own: enqueue keeps
-- its signature, because adding arguments would mean dropping it, and a
-- fleet upgrades while it runs (a statement in flight must not lose its
-- function).  Its arguments are enqueue's, by the same names, after
-- depends_on.
CREATE FUNCTION skiplock.enqueue_after(depends_on bigint[], kind text, payload jsonb DEFAULT '{}',
    queue text DEFAULT 'default', run_at timestamptz DEFAULT now(), priority integer DEFAULT 0,
    unique_key text DEFAULT NULL, max_attempts integer DEFAULT 25, timeout interval DEFAULT NULL,
    backoff text DEFAULT NULL, backoff_base interval DEFAULT NULL,
    backoff_cap interval DEFAULT NULL, depends_on_keys text[] DEFAULT NULL,
    on_parent_failure text DEFAULT 'cancel')
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
  v_parents bigint[];
  v_id bigint;
BEGIN
  IF depends_on IS NOT NULL OR depends_on_keys IS NOT NULL THEN
    PERFORM skiplock.check_parent_policy(on_parent_failure);
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
$fn$;

-- N jobs and a callback that runs once after all of them finished.
CREATE FUNCTION skiplock.enqueue_batch(kind text, payloads jsonb[], callback_kind text,
    callback_payload jsonb DEFAULT '{}', queue text DEFAULT 'default',
    priority integer DEFAULT 0, max_attempts integer DEFAULT 25)
RETURNS bigint[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_variable
DECLARE
  v_n int := coalesce(cardinality(payloads), 0);
  v_ids bigint[];
  v_cb bigint;
  v_nulls int[];
BEGIN
  IF v_n NOT BETWEEN 1 AND 1000 THEN
    RAISE EXCEPTION 'enqueue_batch: 1 to 1000 payloads, got %', v_n USING ERRCODE = '22023';
  END IF;
  IF callback_kind IS NULL THEN
    RAISE EXCEPTION 'enqueue_batch: callback_kind is required' USING ERRCODE = '22023';
  END IF;
  IF skiplock.is_distributed() THEN
    RAISE EXCEPTION 'enqueue_batch: dependencies are not supported on the distributed layout yet'
      USING ERRCODE = '0A000';
  END IF;
  v_nulls := array_fill(NULL::int, ARRAY[v_n]);
  v_ids := skiplock.enqueue_many(NULL, array_fill(kind, ARRAY[v_n]), payloads,
             array_fill(coalesce(queue, 'default'), ARRAY[v_n]), array_fill(now(), ARRAY[v_n]),
             NULL, array_fill(priority, ARRAY[v_n]), array_fill(NULL::text, ARRAY[v_n]),
             array_fill(max_attempts, ARRAY[v_n]), v_nulls, v_nulls, v_nulls);
  v_cb := (skiplock.enqueue_many(NULL, ARRAY[callback_kind], ARRAY[callback_payload],
             ARRAY[coalesce(queue, 'default')], ARRAY[skiplock.waiting_run_at()], NULL,
             ARRAY[priority], ARRAY[NULL::text], ARRAY[max_attempts], ARRAY[NULL::int],
             ARRAY[NULL::int], ARRAY[NULL::int]))[1];
  PERFORM skiplock.deps_attach(v_cb, now(), 'run', true, skiplock.deps_parents(v_ids, NULL));
  RETURN v_ids || v_cb;
END
$fn$;

-- Why a job is not running now, in words (jobs show, the dashboard).
CREATE FUNCTION skiplock.job_waits_for(id bigint) RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  j record;
  w skiplock.job_waits;
  l skiplock.limits;
BEGIN
  SELECT x.kind, x.queue, x.state, x.run_at INTO j FROM skiplock.jobs x
   WHERE x.id = job_waits_for.id;
  IF NOT FOUND OR j.state <> 'available' THEN
    RETURN NULL;
  END IF;
  SELECT * INTO w FROM skiplock.job_waits x WHERE x.child_id = job_waits_for.id;
  IF FOUND THEN
    RETURN format('dependencies: %s of %s parent(s) not finished', w.waiting, w.parents);
  END IF;
  IF j.run_at > now() THEN
    RETURN format('due at %s', j.run_at);
  END IF;
  IF EXISTS (SELECT 1 FROM skiplock.pauses p WHERE p.queue = j.queue OR p.kind = j.kind) THEN
    RETURN 'paused';
  END IF;
  IF EXISTS (SELECT 1 FROM skiplock.breakers b WHERE b.kind = j.kind AND b.state <> 'closed') THEN
    RETURN 'breaker not closed';
  END IF;
  SELECT * INTO l FROM skiplock.limits x WHERE x.kind = j.kind;
  IF FOUND THEN
    RETURN format('limit: %s', concat_ws(', ',
      CASE WHEN l.max_running IS NOT NULL THEN format('at most %s running', l.max_running) END,
      CASE WHEN l.rate IS NOT NULL THEN format('%s starts per %s ms', l.rate, l.per_ms) END,
      CASE WHEN l.key_field IS NOT NULL THEN format('per %s', l.key_field) END));
  END IF;
  RETURN 'due: waiting for a worker';
END
$fn$;

COMMENT ON FUNCTION skiplock.move_finished(bigint[]) IS
  'Internal: moves finished jobs by id from jobs to finished_jobs, kept until their retention, and resolves what waits for them; returns how many left jobs.';
COMMENT ON FUNCTION skiplock.record_claim(bigint[], bigint[], text[], jsonb[], text[], bigint[],
    boolean[], text[], bigint[], bigint[], text, text[], text[], integer, interval, integer,
    bigint, bigint, text[], boolean) IS
  'record outcomes, then claim, in one call: rows tagged recorded / claimed (and, with wait_hints, wait: when a limit may next have room); n = 0 records only; job_queues: the handles'' queues (protocol 2)';
COMMENT ON FUNCTION skiplock.enqueue_after(bigint[], text, jsonb, text, timestamptz, integer, text,
    integer, interval, text, interval, interval, text[], text) IS
  'enqueue one job (as enqueue) that waits for its parents to finish: depends_on (ids) and depends_on_keys (unique keys); on_parent_failure: cancel (default) or run';
COMMENT ON FUNCTION skiplock.enqueue_batch(text, jsonb[], text, jsonb, text, integer, integer) IS
  'Enqueues one job per payload and a callback job that runs once after all of them finished, with {"batch": {size, completed, discarded, cancelled}} in its payload; returns their ids, the callback''s last.';
COMMENT ON FUNCTION skiplock.job_waits_for(bigint) IS
  'Why an available job is not running now: its dependencies, its due time, a pause, a breaker, a limit, or no free worker; NULL for a job that is not available.';

-- New functions are executable by PUBLIC until revoked; grant_role gives
-- the new SECURITY DEFINER ones to the worker and operator roles again,
-- and the tables to read.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;
SELECT skiplock.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);
