-- skiplock schema step 0002: the job queue.
--
-- States (one comment each; sql/SCHEMA.md has the full state machine):
--   available  waiting to run: new, delayed (run_at in the future) or
--              retrying after a failed attempt (run_at = next try)
--   running    claimed: lease_owner holds it until lease_expires_at; the
--              claim added 1 to attempt and to fencing
--   completed  finished successfully (terminal)
--   discarded  failed for good: exit 65, or attempts exhausted (terminal)
--   cancelled  cancelled by an operator before it finished (terminal)
--
-- Invariant: every write that ends or extends a claim says
--   WHERE id = $1 AND fencing = $2 AND state = 'running'
-- so a worker that lost its lease changes nothing.

CREATE TABLE skiplock.jobs (
  id               bigserial PRIMARY KEY,
  queue            text        NOT NULL DEFAULT 'default',
  kind             text        NOT NULL,
  payload          jsonb       NOT NULL DEFAULT '{}',
  state            text        NOT NULL DEFAULT 'available',
  priority         int         NOT NULL DEFAULT 0,
  run_at           timestamptz NOT NULL DEFAULT now(),
  attempt          int         NOT NULL DEFAULT 0,
  max_attempts     int         NOT NULL DEFAULT 25,
  fencing          bigint      NOT NULL DEFAULT 0,
  lease_owner      text,
  lease_expires_at timestamptz,
  unique_key       text,
  timeout_ms       int,
  backoff_base_ms  int,
  backoff_cap_ms   int,
  errors           jsonb       NOT NULL DEFAULT '[]',
  result           jsonb,
  created_at       timestamptz NOT NULL DEFAULT now(),
  attempted_at     timestamptz,
  finished_at      timestamptz,
  CONSTRAINT jobs_state_check CHECK (state IN ('available', 'running', 'completed',
                                               'discarded', 'cancelled')),
  CONSTRAINT jobs_queue_check CHECK (length(queue) BETWEEN 1 AND 128),
  CONSTRAINT jobs_kind_check CHECK (length(kind) BETWEEN 1 AND 128),
  CONSTRAINT jobs_attempts_check CHECK (max_attempts >= 1 AND attempt >= 0),
  CONSTRAINT jobs_unique_key_check CHECK (length(unique_key) BETWEEN 1 AND 512),
  CONSTRAINT jobs_lease_check CHECK (state <> 'running' OR lease_expires_at IS NOT NULL)
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.01,
        autovacuum_vacuum_cost_delay = 0, autovacuum_analyze_scale_factor = 0.02);

-- The claim reads only due, available jobs, in claim order.
CREATE INDEX jobs_claim_idx ON skiplock.jobs (priority DESC, run_at, id)
  WHERE state = 'available';
-- The rescue reads only running jobs, oldest lease first.
CREATE INDEX jobs_rescue_idx ON skiplock.jobs (lease_expires_at)
  WHERE state = 'running';
-- Retention reads only finished jobs, oldest first.
CREATE INDEX jobs_finished_idx ON skiplock.jobs (finished_at)
  WHERE state IN ('completed', 'discarded', 'cancelled');
-- One unfinished job per unique key.
CREATE UNIQUE INDEX jobs_unique_key_idx ON skiplock.jobs (unique_key)
  WHERE unique_key IS NOT NULL AND state IN ('available', 'running');
CREATE INDEX jobs_queue_kind_state_idx ON skiplock.jobs (queue, kind, state);

-- Retry-safe enqueue: a client-generated token per enqueue call, written in
-- the same transaction as the jobs.  A retry after a lost COMMIT answer
-- finds its token and returns the ids instead of inserting again.
CREATE TABLE skiplock.enqueue_tokens (
  token      text PRIMARY KEY,
  ids        bigint[] NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX enqueue_tokens_created_idx ON skiplock.enqueue_tokens (created_at);

-- One job, with every column a caller may set.  Returns the new id, or
-- the id of the unfinished job holding unique_key (nothing inserted).
-- The insert is the decision (ON CONFLICT); the lookup only reads back
-- the holder, and the loop covers a holder that finished in between.
CREATE FUNCTION skiplock.enqueue_one(
  p_kind text, p_payload jsonb, p_queue text, p_run_at timestamptz, p_priority int,
  p_unique_key text, p_max_attempts int, p_timeout_ms int, p_backoff_base_ms int,
  p_backoff_cap_ms int)
RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
  v_id bigint;
BEGIN
  IF p_kind IS NULL OR length(p_kind) NOT BETWEEN 1 AND 128 THEN
    RAISE EXCEPTION 'job kind must be 1 to 128 characters' USING ERRCODE = '22023';
  END IF;
  IF p_queue IS NULL OR length(p_queue) NOT BETWEEN 1 AND 128 THEN
    RAISE EXCEPTION 'queue name must be 1 to 128 characters' USING ERRCODE = '22023';
  END IF;
  IF p_max_attempts IS NULL OR p_max_attempts < 1 THEN
    RAISE EXCEPTION 'max_attempts must be at least 1' USING ERRCODE = '22023';
  END IF;
  FOR i IN 1..10 LOOP
    INSERT INTO skiplock.jobs AS j (kind, payload, queue, run_at, priority, unique_key,
                                    max_attempts, timeout_ms, backoff_base_ms, backoff_cap_ms)
    VALUES (p_kind, coalesce(p_payload, '{}'), p_queue, coalesce(p_run_at, now()),
            coalesce(p_priority, 0), p_unique_key, p_max_attempts, p_timeout_ms,
            p_backoff_base_ms, p_backoff_cap_ms)
    ON CONFLICT DO NOTHING
    RETURNING j.id INTO v_id;
    IF v_id IS NOT NULL THEN
      RETURN v_id;
    END IF;
    SELECT j.id INTO v_id FROM skiplock.jobs j
     WHERE j.unique_key = p_unique_key AND j.state IN ('available', 'running');
    IF v_id IS NOT NULL THEN
      RETURN v_id;
    END IF;
  END LOOP;
  RAISE EXCEPTION 'unique key "%" is contended', p_unique_key USING ERRCODE = '40001';
END
$fn$;

-- Enqueue from any language, inside the caller's own transaction.
-- Returns the new job's id, or the id of the unfinished job that already
-- holds unique_key (then nothing is inserted).
CREATE FUNCTION skiplock.enqueue(
  kind text,
  payload jsonb DEFAULT '{}',
  queue text DEFAULT 'default',
  run_at timestamptz DEFAULT now(),
  priority int DEFAULT 0,
  unique_key text DEFAULT NULL,
  max_attempts int DEFAULT 25)
RETURNS bigint
LANGUAGE sql AS $fn$
  SELECT skiplock.enqueue_one(kind, payload, queue, run_at, priority, unique_key,
                              max_attempts, NULL, NULL, NULL)
$fn$;

-- Many jobs in one statement, all or nothing; element i of the result is
-- the id for element i of the input.  With a token, a repeated call (a
-- retry after a lost answer) returns the first call's ids and inserts
-- nothing.  Used by the C library and `skiplock enqueue --batch`.
CREATE FUNCTION skiplock.enqueue_many(
  p_token text, p_kinds text[], p_payloads jsonb[], p_queues text[],
  p_run_ats timestamptz[], p_delays_ms bigint[], p_priorities int[], p_unique_keys text[],
  p_max_attempts int[], p_timeouts int[], p_backoff_bases int[], p_backoff_caps int[])
RETURNS bigint[]
LANGUAGE plpgsql AS $fn$
DECLARE
  v_ids bigint[];
BEGIN
  IF p_token IS NOT NULL THEN
    INSERT INTO skiplock.enqueue_tokens (token) VALUES (p_token) ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
      SELECT t.ids INTO v_ids FROM skiplock.enqueue_tokens t WHERE t.token = p_token;
      RETURN v_ids;
    END IF;
  END IF;
  IF EXISTS (SELECT 1 FROM unnest(p_kinds) k WHERE k IS NULL OR length(k) NOT BETWEEN 1 AND 128)
  THEN
    RAISE EXCEPTION 'job kind must be 1 to 128 characters' USING ERRCODE = '22023';
  END IF;
  WITH input AS MATERIALIZED (
    SELECT t.*, nextval(pg_get_serial_sequence('skiplock.jobs', 'id')) AS nid
      FROM unnest(p_kinds, p_payloads, p_queues, p_run_ats, p_delays_ms, p_priorities,
                  p_unique_keys, p_max_attempts, p_timeouts, p_backoff_bases, p_backoff_caps)
           WITH ORDINALITY AS t(k, p, q, r, d, pr, u, m, tmo, bb, bc, ord)
  ), ins AS (
    INSERT INTO skiplock.jobs (id, kind, payload, queue, run_at, priority, unique_key,
                               max_attempts, timeout_ms, backoff_base_ms, backoff_cap_ms)
    SELECT nid, k, coalesce(p, '{}'), coalesce(q, 'default'),
           coalesce(r, now() + coalesce(d, 0) * interval '1 millisecond'),
           coalesce(pr, 0), u, coalesce(m, 25), tmo, bb, bc
      FROM input ORDER BY ord
    ON CONFLICT DO NOTHING
    RETURNING id
  )
  SELECT array_agg(ins.id ORDER BY input.ord) INTO v_ids
    FROM input LEFT JOIN ins ON ins.id = input.nid;
  -- Elements whose unique key was held: the holder's id.
  FOR i IN 1..coalesce(array_length(v_ids, 1), 0) LOOP
    IF v_ids[i] IS NULL THEN
      v_ids[i] := skiplock.enqueue_one(p_kinds[i], p_payloads[i],
                    coalesce(p_queues[i], 'default'),
                    coalesce(p_run_ats[i], now() + coalesce(p_delays_ms[i], 0) * interval '1 millisecond'),
                    p_priorities[i],
                    p_unique_keys[i], coalesce(p_max_attempts[i], 25), p_timeouts[i],
                    p_backoff_bases[i], p_backoff_caps[i]);
    END IF;
  END LOOP;
  IF p_token IS NOT NULL THEN
    UPDATE skiplock.enqueue_tokens t SET ids = v_ids WHERE t.token = p_token;
  END IF;
  RETURN v_ids;
END
$fn$;
