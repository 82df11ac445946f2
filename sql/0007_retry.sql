-- skiplock schema step 0007: retry policy.
--
-- jobs.backoff       the job's own backoff strategy (NULL: the worker's)
-- jobs.last_delay_ms the delay before the current attempt (decorrelated
--                    jitter grows from it)
-- skiplock.breakers  one fleet-wide circuit breaker per kind that has one:
--   closed     claims as usual; recorded outcomes are counted in a window
--              that restarts after window_calls calls or window_ms
--   open       no worker claims the kind until open_until ('infinity' when
--              an operator forced it open); outcomes are not counted
--   half_open  claims admit at most `probes` jobs fleet-wide (probes_left
--              counts down by a conditional UPDATE); a failed probe opens
--              it again, `probes` successes close it
-- Invariant: every transition is one conditional UPDATE inside the
-- statement that records outcomes or claims jobs; no lock outlives it.

ALTER TABLE skiplock.jobs
  ADD COLUMN backoff text,
  ADD COLUMN last_delay_ms bigint,
  ADD CONSTRAINT jobs_backoff_check
    CHECK (backoff IN ('full', 'equal', 'decorrelated', 'exponential', 'fixed'));

CREATE TABLE skiplock.breakers (
  kind              text        PRIMARY KEY,
  state             text        NOT NULL DEFAULT 'closed',
  prev_state        text,
  failure_pct       int         NOT NULL DEFAULT 50,
  min_calls         int         NOT NULL DEFAULT 10,
  window_calls      int         NOT NULL DEFAULT 100,
  window_ms         bigint      NOT NULL DEFAULT 60000,
  open_ms           bigint      NOT NULL DEFAULT 60000,
  probes            int         NOT NULL DEFAULT 3,
  calls             int         NOT NULL DEFAULT 0,
  failures          int         NOT NULL DEFAULT 0,
  window_started_at timestamptz NOT NULL DEFAULT now(),
  probes_left       int         NOT NULL DEFAULT 0,
  probe_ok          int         NOT NULL DEFAULT 0,
  open_until        timestamptz,
  changed_at        timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT breakers_kind_check CHECK (length(kind) BETWEEN 1 AND 128),
  CONSTRAINT breakers_state_check CHECK (state IN ('closed', 'open', 'half_open')),
  CONSTRAINT breakers_config_check CHECK (failure_pct BETWEEN 1 AND 100 AND min_calls >= 1
    AND window_calls >= 1 AND window_ms > 0 AND open_ms > 0 AND probes >= 1),
  CONSTRAINT breakers_open_check CHECK (state <> 'open' OR open_until IS NOT NULL)
);

-- Every transition, for operators and tests: who changed what, when.
CREATE TABLE skiplock.breaker_events (
  id         bigserial   PRIMARY KEY,
  kind       text        NOT NULL,
  at         timestamptz NOT NULL DEFAULT clock_timestamp(),
  from_state text,
  to_state   text        NOT NULL,
  reason     text        NOT NULL
);
CREATE INDEX breaker_events_kind_idx ON skiplock.breaker_events (kind, at);

-- The breaker b after ok successes and bad failures were recorded.  Pure:
-- the caller's UPDATE writes the row it returns.
CREATE FUNCTION skiplock.breaker_step(b skiplock.breakers, ok int, bad int)
RETURNS skiplock.breakers
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  n skiplock.breakers := b;
BEGIN
  n.prev_state := b.state;
  IF b.state = 'closed' THEN
    IF b.window_started_at <= now() - b.window_ms * interval '1 millisecond'
       OR b.calls >= b.window_calls THEN
      n.calls := 0;
      n.failures := 0;
      n.window_started_at := now();
    END IF;
    n.calls := n.calls + ok + bad;
    n.failures := n.failures + bad;
    IF n.calls >= b.min_calls AND n.failures * 100 >= b.failure_pct * n.calls THEN
      n.state := 'open';
      n.open_until := now() + b.open_ms * interval '1 millisecond';
      n.changed_at := now();
    END IF;
  ELSIF b.state = 'half_open' THEN
    IF bad > 0 THEN
      n.state := 'open';
      n.open_until := now() + b.open_ms * interval '1 millisecond';
      n.changed_at := now();
    ELSE
      n.probe_ok := b.probe_ok + ok;
      IF n.probe_ok >= b.probes THEN
        n.state := 'closed';
        n.calls := 0;
        n.failures := 0;
        n.window_started_at := now();
        n.open_until := NULL;
        n.changed_at := now();
      END IF;
    END IF;
  END IF;
  RETURN n;
END
$fn$;

-- enqueue_many with one more column, the backoff strategy per job.
DROP FUNCTION skiplock.enqueue_many(text, text[], jsonb[], text[], timestamptz[], bigint[],
                                    int[], text[], int[], int[], int[], int[]);
CREATE FUNCTION skiplock.enqueue_many(
  p_token text, p_kinds text[], p_payloads jsonb[], p_queues text[],
  p_run_ats timestamptz[], p_delays_ms bigint[], p_priorities int[], p_unique_keys text[],
  p_max_attempts int[], p_timeouts int[], p_backoff_bases int[], p_backoff_caps int[],
  p_backoffs text[] DEFAULT NULL)
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
                  p_unique_keys, p_max_attempts, p_timeouts, p_backoff_bases, p_backoff_caps,
                  coalesce(p_backoffs, array_fill(NULL::text, ARRAY[cardinality(p_kinds)])))
           WITH ORDINALITY AS t(k, p, q, r, d, pr, u, m, tmo, bb, bc, bs, ord)
  ), ins AS (
    INSERT INTO skiplock.jobs (id, kind, payload, queue, run_at, priority, unique_key,
                               max_attempts, timeout_ms, backoff_base_ms, backoff_cap_ms,
                               backoff)
    SELECT nid, k, coalesce(p, '{}'), coalesce(q, 'default'),
           coalesce(r, now() + coalesce(d, 0) * interval '1 millisecond'),
           coalesce(pr, 0), u, coalesce(m, 25), tmo, bb, bc, bs
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
