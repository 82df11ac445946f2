-- bench/sql/enqueue_single.sql — pgbench script: one job through the SQL
-- interface any language can call, one autocommit statement per job.
SELECT skiplock.enqueue('bench', '{"n": 1}');
