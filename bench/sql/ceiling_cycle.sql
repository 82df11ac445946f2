-- bench/sql/ceiling_cycle.sql — pgbench script: one raw queue cycle.
--   ceiling (a): -D batch=100   ceiling (c): -D batch=1
-- Two autocommit statements, as a worker that claims, runs the work outside
-- any transaction, and then records the outcome would send them:
-- 1. claim up to :batch rows with one FOR UPDATE SKIP LOCKED statement
--    (state -> running, with a lease), returning their ids as one array;
-- 2. mark exactly those rows done with one UPDATE ... WHERE id = ANY (...).
-- No fencing token, no attempts, no error history: the floor of the work.
WITH c AS (
  SELECT id FROM bench.q
   WHERE state = 'available' AND run_at <= now()
   ORDER BY run_at, id
   LIMIT :batch
   FOR UPDATE SKIP LOCKED),
u AS (
  UPDATE bench.q q
     SET state = 'running', lease_expires_at = now() + interval '30 seconds'
    FROM c WHERE q.id = c.id
  RETURNING q.id)
SELECT coalesce(array_agg(id), '{}') AS ids FROM u
\gset
UPDATE bench.q SET state = 'done', lease_expires_at = NULL, finished_at = now()
 WHERE id = ANY (:ids::bigint[]);
