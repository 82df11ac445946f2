-- bench/sql/flow_claim.sql — pgbench script for bench/flow: the protocol
-- loop of protocol_loop.sql (claim up to :batch jobs, record them 'ok'),
-- naming the kinds in the table flow_kinds (one row, set by bench/flow):
-- 'bench' alone, or 'bench' and 100 rate-limited kinds.
SELECT coalesce(array_agg(c.id), '{}') AS ids, coalesce(array_agg(c.fencing), '{}') AS fencings
  FROM skiplock.claim('pgbench', (SELECT k.kinds FROM flow_kinds k), NULL, :batch,
                      interval '30 seconds') c
\gset
SELECT count(*) AS recorded
  FROM skiplock.record(:ids::bigint[], :fencings::bigint[],
                       array_fill('ok'::text, ARRAY[cardinality(:ids::bigint[])]));
