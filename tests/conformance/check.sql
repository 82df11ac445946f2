-- The worker contract's invariants, the same SQL for every implementation.
-- Run by run.sh on a direct connection (psql -At) with -v scope=all when no
-- job should be running any more (the workers may still be up and idle), or
-- -v scope=sessions while handlers run.  Prints one line per check:
-- "ok   NAME" or "FAIL NAME: DETAIL".
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
-- On Citus (make test-citus) the temporary helper below stays on the
-- coordinator, without a warning that it is not created on the workers.
SET citus.enable_ddl_propagation = off;

CREATE FUNCTION pg_temp.verdict(name text, detail text) RETURNS text
LANGUAGE sql AS $$
  SELECT CASE WHEN detail IS NULL THEN 'ok   ' || name ELSE 'FAIL ' || name || ': ' || detail END
$$;

-- Sessions are sampled twice, 300 ms apart: a statement in flight may hold a
-- transaction-level lock or pass through "idle in transaction" between two
-- statements of one transaction; only what lasts across both samples counts.
CREATE TEMP TABLE sample_tx AS
  SELECT pid, state_change, application_name FROM pg_stat_activity
   WHERE datname = current_database() AND state LIKE 'idle in transaction%'
     AND pid <> pg_backend_pid();
CREATE TEMP TABLE sample_adv AS
  SELECT l.pid, l.classid, l.objid, l.objsubid, l.mode FROM pg_locks l
    JOIN pg_database d ON d.oid = l.database
   WHERE l.locktype = 'advisory' AND d.datname = current_database();
DO $$ BEGIN PERFORM pg_sleep(0.3); END $$;

SELECT pg_temp.verdict('no idle-in-transaction session',
  (SELECT string_agg(format('pid %s (%s) idle in transaction since %s', a.pid,
                            a.application_name, a.state_change), '; ')
     FROM pg_stat_activity a JOIN sample_tx s USING (pid, state_change)
    WHERE a.datname = current_database() AND a.state LIKE 'idle in transaction%'));

SELECT pg_temp.verdict('no advisory lock held',
  (SELECT string_agg(format('pid %s holds %s on (%s, %s, %s)', l.pid, l.mode, l.classid,
                            l.objid, l.objsubid), '; ')
     FROM pg_locks l JOIN pg_database d ON d.oid = l.database
     JOIN sample_adv s USING (pid, classid, objid, objsubid, mode)
    WHERE l.locktype = 'advisory' AND d.datname = current_database()));

SELECT pg_temp.verdict('unknown kinds never claimed',
  (SELECT string_agg(format('job %s %s attempt %s fencing %s', id, state, attempt, fencing), '; ')
     FROM skiplock.all_jobs
    WHERE kind = 'conf.unknown'
      AND (state <> 'available' OR attempt <> 0 OR fencing <> 0 OR attempted_at IS NOT NULL)));

SELECT :'scope' = 'all' AS full_check \gset
\if :full_check

SELECT pg_temp.verdict('none lost: every enqueued job is still there',
  (SELECT string_agg(format('job %s (%s)', e.job_id, e.kind), '; ')
     FROM conformance.enqueued e LEFT JOIN skiplock.all_jobs j ON j.id = e.job_id
    WHERE j.id IS NULL));

SELECT pg_temp.verdict('none stuck running',
  (SELECT string_agg(format('job %s %s attempt %s owner %s', id, kind, attempt, lease_owner), '; ')
     FROM skiplock.all_jobs WHERE state = 'running'));

SELECT pg_temp.verdict('every job reached its final state',
  (SELECT string_agg(format('job %s %s is %s at attempt %s', id, kind, state, attempt), '; ')
     FROM skiplock.all_jobs
    WHERE kind <> 'conf.unknown'
      AND state <> CASE WHEN kind IN ('conf.fail', 'conf.discard') THEN 'discarded'
                        ELSE 'completed' END));

SELECT pg_temp.verdict('every completed job took effect exactly once, under its final fencing token',
  (SELECT string_agg(format('job %s (%s, fencing %s): ledger %s', j.id, j.kind, j.fencing,
                            coalesce(l.rows, 'empty')), '; ')
     FROM skiplock.all_jobs j
     -- a join, not a lateral subquery: on the distributed layout the ledger
     -- (local) joins the jobs (distributed) only as an intermediate result
     LEFT JOIN (SELECT job_id, string_agg(format('fencing %s by %s', fencing, owner), ', ') AS rows,
                       array_agg(fencing) AS fencings, count(*) AS total
                  FROM conformance.ledger GROUP BY job_id) l ON l.job_id = j.id
    WHERE j.state = 'completed' AND NOT (coalesce(l.total, 0) = 1 AND l.fencings = ARRAY[j.fencing])));

SELECT pg_temp.verdict('no effect from a fenced-out owner or an unfinished job',
  (SELECT string_agg(format('ledger row of job %s fencing %s by %s; job is %s with fencing %s',
                            l.job_id, l.fencing, l.owner, coalesce(j.state, 'missing'), j.fencing), '; ')
     FROM conformance.ledger l LEFT JOIN skiplock.all_jobs j ON j.id = l.job_id
    WHERE j.id IS NULL OR j.state <> 'completed' OR j.fencing <> l.fencing));

SELECT pg_temp.verdict('handlers received the payload intact',
  (SELECT string_agg(format('job %s: enqueued %s, handler saw %s', j.id, j.payload, l.payload), '; ')
     FROM conformance.ledger l JOIN skiplock.all_jobs j ON j.id = l.job_id
    WHERE l.payload IS DISTINCT FROM j.payload));

SELECT pg_temp.verdict('completed jobs keep their final attempt''s result',
  (SELECT string_agg(format('job %s %s attempt %s: result %s', id, kind, attempt, result), '; ')
     FROM skiplock.all_jobs
    WHERE state = 'completed'
      AND result IS DISTINCT FROM jsonb_build_object('kind', kind, 'attempt', attempt)));

\endif
