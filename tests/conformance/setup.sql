-- The conformance suite's own tables, installed after `skiplock init`.
--
-- conformance.enqueued  every job the suite enqueued (so none can go missing)
-- conformance.ledger    the handlers' effect: one row per accepted write
-- conformance.effect()  the one fenced write every handler makes: the job
--                       must be running under this fencing token, checked
--                       with a row lock that the job's outcome must wait for

CREATE SCHEMA conformance;

CREATE TABLE conformance.enqueued (
  job_id bigint PRIMARY KEY,
  kind   text   NOT NULL
);

CREATE TABLE conformance.ledger (
  job_id  bigint      NOT NULL,
  fencing bigint      NOT NULL,
  owner   text        NOT NULL,
  payload jsonb       NOT NULL,
  at      timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Raises SQLSTATE SK001 and writes nothing unless job `job_id` is running
-- under token `fencing`.  FOR SHARE keeps the job's outcome (an UPDATE of the
-- same row) from committing until this transaction ends, so no effect can
-- land after the lease was lost.  This is the only place that knows how to
-- fence a job: it uses skiplock.job_fence when the schema has it.
CREATE FUNCTION conformance.effect(job_id bigint, fencing bigint, owner text, payload jsonb)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF to_regprocedure('skiplock.job_fence(bigint, bigint, text)') IS NOT NULL
     OR to_regprocedure('skiplock.job_fence(bigint, bigint)') IS NOT NULL THEN
    EXECUTE 'SELECT skiplock.job_fence($1, $2)' USING effect.job_id, effect.fencing;
  ELSE
    PERFORM 1 FROM skiplock.jobs j
     WHERE j.id = effect.job_id AND j.fencing = effect.fencing AND j.state = 'running'
       FOR SHARE;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'job % is not running under fencing token %', effect.job_id, effect.fencing
        USING ERRCODE = 'SK001';
    END IF;
  END IF;
  INSERT INTO conformance.ledger (job_id, fencing, owner, payload)
  VALUES (effect.job_id, effect.fencing, effect.owner, effect.payload);
END $$;

-- Enqueue n jobs of `kind` (through skiplock.enqueue, in this transaction)
-- and remember them.
CREATE FUNCTION conformance.enqueue(kind text, payload jsonb DEFAULT '{}', n int DEFAULT 1,
                                    max_attempts int DEFAULT 25)
RETURNS SETOF bigint LANGUAGE sql AS $$
  INSERT INTO conformance.enqueued (job_id, kind)
  SELECT skiplock.enqueue(kind, payload, max_attempts => max_attempts), kind
    FROM generate_series(1, n)
  RETURNING job_id;
$$;
