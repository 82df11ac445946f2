-- bench/sql/protocol_one.sql — pgbench script: the worker protocol one job
-- at a time, as the simplest client in any language would run it:
-- claim 1, then complete it.  Two autocommit statements (two commits) per
-- job, like ceiling (c) (ceiling_cycle.sql with -D batch=1).  bench/run
-- fills the queue so that a claim never comes back empty.
SELECT c.id, c.fencing
  FROM skiplock.claim('pgbench', ARRAY['bench'], NULL, 1, interval '30 seconds') c
\gset
SELECT skiplock.complete(:id, :fencing) AS state;
