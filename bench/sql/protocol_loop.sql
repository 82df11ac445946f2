-- bench/sql/protocol_loop.sql — pgbench script: the worker protocol's own
-- cost, a worker written in nothing but SQL (docs/protocol.md).
--   -D batch=100: claim up to 100 jobs, then record them all 'ok' in one call
-- Two autocommit statements per turn, like ceiling (a) (ceiling_cycle.sql),
-- but through skiplock.claim and skiplock.record on skiplock.jobs: the
-- fencing tokens, attempts, lease, outcome CASEs and breaker tally that the
-- ceiling leaves out.  bench/run fills the queue with jobs of kind 'bench'.
SELECT coalesce(array_agg(c.id), '{}') AS ids, coalesce(array_agg(c.fencing), '{}') AS fencings
  FROM skiplock.claim('pgbench', ARRAY['bench'], NULL, :batch, interval '30 seconds') c
\gset
SELECT count(*) AS recorded
  FROM skiplock.record(:ids::bigint[], :fencings::bigint[],
                       array_fill('ok'::text, ARRAY[cardinality(:ids::bigint[])]));
