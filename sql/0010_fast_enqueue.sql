-- skiplock schema step 0010: a faster skiplock.enqueue_many, same signature
-- and same results.
--
-- Jobs without a unique key cannot conflict with anything, so they go in
-- with one plain INSERT ... SELECT FROM unnest(...): no ON CONFLICT (whose
-- speculative insertion checks every unique index first), no join to
-- match RETURNING rows back to the input.  Their ids are drawn in input
-- order from the table's sequence, resolved to a regclass once per call
-- instead of once per row.  Only jobs with a unique key take the
-- conflict-aware path: one INSERT ... ON CONFLICT DO NOTHING for all of
-- them, then skiplock.enqueue_one for each that found its key held (it
-- returns the holder's id).
--
-- Any array argument but p_kinds may be NULL, meaning NULL (the default)
-- for every job; the client sends NULL for a column no job of the batch
-- sets, which keeps the statement small.  The token row (a retry after a
-- lost COMMIT answer returns the first call's ids) is unchanged.
--
-- CREATE OR REPLACE keeps the function's owner and grants (step 0008).

CREATE OR REPLACE FUNCTION skiplock.enqueue_many(
  p_token text, p_kinds text[], p_payloads jsonb[], p_queues text[],
  p_run_ats timestamptz[], p_delays_ms bigint[], p_priorities int[], p_unique_keys text[],
  p_max_attempts int[], p_timeouts int[], p_backoff_bases int[], p_backoff_caps int[],
  p_backoffs text[] DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql AS $fn$
DECLARE
  v_ids bigint[];
  v_seq regclass := pg_get_serial_sequence('skiplock.jobs', 'id')::regclass;
  v_keyed boolean := EXISTS (SELECT 1 FROM unnest(p_unique_keys) u WHERE u IS NOT NULL);
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
  IF NOT v_keyed THEN
    -- No job has a unique key: nothing can conflict.  Ids first, in input
    -- order, then one plain INSERT of the zipped arrays.
    v_ids := ARRAY(SELECT nextval(v_seq) FROM generate_series(1, cardinality(p_kinds)));
    INSERT INTO skiplock.jobs (id, kind, payload, queue, run_at, priority, max_attempts,
                               timeout_ms, backoff_base_ms, backoff_cap_ms, backoff)
    SELECT i, k, coalesce(p, '{}'), coalesce(q, 'default'),
           coalesce(r, now() + coalesce(d, 0) * interval '1 millisecond'),
           coalesce(pr, 0), coalesce(m, 25), tmo, bb, bc, bs
      FROM unnest(v_ids, p_kinds, p_payloads, p_queues, p_run_ats, p_delays_ms, p_priorities,
                  p_max_attempts, p_timeouts, p_backoff_bases, p_backoff_caps, p_backoffs)
           AS t(i, k, p, q, r, d, pr, m, tmo, bb, bc, bs);
  ELSE
    WITH input AS MATERIALIZED (
      SELECT t.*, nextval(v_seq) AS nid
        FROM unnest(p_kinds, p_payloads, p_queues, p_run_ats, p_delays_ms, p_priorities,
                    p_unique_keys, p_max_attempts, p_timeouts, p_backoff_bases, p_backoff_caps,
                    p_backoffs)
             WITH ORDINALITY AS t(k, p, q, r, d, pr, u, m, tmo, bb, bc, bs, ord)
    ), plain AS (
      INSERT INTO skiplock.jobs (id, kind, payload, queue, run_at, priority, unique_key,
                                 max_attempts, timeout_ms, backoff_base_ms, backoff_cap_ms,
                                 backoff)
      SELECT nid, k, coalesce(p, '{}'), coalesce(q, 'default'),
             coalesce(r, now() + coalesce(d, 0) * interval '1 millisecond'),
             coalesce(pr, 0), NULL, coalesce(m, 25), tmo, bb, bc, bs
        FROM input WHERE u IS NULL ORDER BY ord
    ), keyed AS (
      INSERT INTO skiplock.jobs (id, kind, payload, queue, run_at, priority, unique_key,
                                 max_attempts, timeout_ms, backoff_base_ms, backoff_cap_ms,
                                 backoff)
      SELECT nid, k, coalesce(p, '{}'), coalesce(q, 'default'),
             coalesce(r, now() + coalesce(d, 0) * interval '1 millisecond'),
             coalesce(pr, 0), u, coalesce(m, 25), tmo, bb, bc, bs
        FROM input WHERE u IS NOT NULL ORDER BY ord
      ON CONFLICT DO NOTHING
      RETURNING id
    )
    SELECT array_agg(CASE WHEN input.u IS NULL THEN input.nid ELSE keyed.id END
                     ORDER BY input.ord) INTO v_ids
      FROM input LEFT JOIN keyed ON keyed.id = input.nid;
  END IF;
  -- Jobs whose unique key was held: the holder's id.
  IF v_keyed THEN
    FOR i IN 1..coalesce(array_length(v_ids, 1), 0) LOOP
      IF v_ids[i] IS NULL THEN
        v_ids[i] := skiplock.enqueue_one(p_kinds[i], p_payloads[i],
                      coalesce(p_queues[i], 'default'),
                      coalesce(p_run_ats[i], now() + coalesce(p_delays_ms[i], 0) * interval '1 millisecond'),
                      p_priorities[i], p_unique_keys[i], coalesce(p_max_attempts[i], 25),
                      p_timeouts[i], p_backoff_bases[i], p_backoff_caps[i]);
      END IF;
    END LOOP;
  END IF;
  IF p_token IS NOT NULL THEN
    UPDATE skiplock.enqueue_tokens t SET ids = v_ids WHERE t.token = p_token;
  END IF;
  RETURN v_ids;
END
$fn$;

-- A token row keeps one id per job of its call: 8 bytes each, so a 5,000
-- job call writes 40 kB.  Compressing that array on every enqueue costs
-- more than it saves; keep it uncompressed (out of line when large).
ALTER TABLE skiplock.enqueue_tokens ALTER COLUMN ids SET STORAGE EXTERNAL;
