-- skiplock schema step 0019: complete a job inside the transaction of its
-- effect, so that the effect happens exactly once.
--
-- The effect pattern of step 0011 (skiplock.job_fence first in the effect's
-- transaction) lets at most one effect commit per claim, and a stale owner's
-- none.  It cannot stop the next claim: a worker that dies after its
-- effect's COMMIT and before its outcome (skiplock.complete, record) leaves
-- the job running; the lease expires, the job is claimed again under a new
-- token, that attempt passes its own fence and applies the effect a second
-- time.  Fault runs of 2,900 jobs with workers killed saw 8 to 17 jobs whose
-- effect was applied twice.
--
-- skiplock.job_complete(id, fencing, result) closes that window: called in
-- the effect's own transaction, it checks the fence and completes the job
-- there (as skiplock.complete does: the job moves to finished_jobs with its
-- result, its kind's breaker counts a success), so the effect and the
-- completion commit together or not at all.  A committed effect leaves no
-- running job behind to be claimed again; a rolled-back one leaves the claim
-- as it was.  The worker then sends no outcome of its own for the job.
--
-- Errors (the caller's transaction must roll back):
--   22004  id or fencing is NULL
--   SK001  the claim is not current: the job does not exist, is not
--          running, or runs under another token (lost lease, rescued,
--          claimed again, cancelled); or it was completed already by this
--          very claim (an earlier transaction of the same claim committed,
--          e.g. a retry after a COMMIT whose answer was lost) -- its
--          message says which, and either way this transaction's effect
--          must not commit.
--
-- Locks: the job row FOR UPDATE (it is deleted), then the kind's breaker
-- row when the kind has one, both until the transaction ends.  Call it last,
-- just before COMMIT: a heartbeat of the job waits for that transaction.

CREATE OR REPLACE FUNCTION skiplock.job_complete(id bigint, fencing bigint,
                                                 result jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
#variable_conflict use_column
DECLARE
  v_fencing bigint;
  v_state text;
BEGIN
  IF job_complete.id IS NULL OR job_complete.fencing IS NULL THEN
    RAISE EXCEPTION 'job_complete: id and fencing must not be NULL' USING ERRCODE = '22004';
  END IF;
  SELECT j.fencing, j.state INTO v_fencing, v_state
    FROM skiplock.jobs j WHERE j.id = job_complete.id FOR UPDATE;
  IF NOT FOUND THEN
    IF EXISTS (SELECT 1 FROM skiplock.finished_jobs f
                WHERE f.id = job_complete.id AND f.fencing = job_complete.fencing
                  AND f.state = 'completed') THEN
      RAISE EXCEPTION 'job % was already completed under token %', job_complete.id,
                      job_complete.fencing
        USING ERRCODE = 'SK001',
              DETAIL = 'An earlier transaction of this claim committed its completion; this '
                       'one is aborted so that its effect is not applied twice.';
    END IF;
    RAISE EXCEPTION 'job % does not exist', job_complete.id USING ERRCODE = 'SK001';
  END IF;
  IF v_fencing <> job_complete.fencing OR v_state <> 'running' THEN
    RAISE EXCEPTION 'stale claim of job % (token %)', job_complete.id, job_complete.fencing
      USING ERRCODE = 'SK001',
            DETAIL = format('The job is %s under token %s. This transaction is aborted so '
                            'that an owner that lost the job changes nothing.',
                            v_state, v_fencing);
  END IF;
  PERFORM 1 FROM skiplock.record(ARRAY[job_complete.id], ARRAY[job_complete.fencing],
                                 ARRAY['ok'], ARRAY[job_complete.result]);
END
$fn$;

COMMENT ON FUNCTION skiplock.job_complete(bigint, bigint, jsonb) IS
  'in the caller''s transaction: raise SK001 unless the claim is current, then complete the job';

-- A new function is executable by PUBLIC until revoked; the worker and
-- operator roles granted before this step get it from grant_role (it is
-- SECURITY DEFINER and not on the worker's deny-list).
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skiplock FROM PUBLIC;
SELECT skiplock.grant_role(g.role_name, g.kind) FROM skiplock.granted_roles g
 WHERE EXISTS (SELECT 1 FROM pg_roles x WHERE x.rolname = g.role_name);
