-- bench/sql/ceiling_insert_unnest.sql — pgbench script, ceiling (b'): one
-- INSERT of 1,000 small rows sent by the client as two array parameters
-- (bench/run passes -D kinds=... -D payloads=... with 1,000 elements each).
-- This is the technique skiplock's bulk enqueue uses (unnest of arrays),
-- without its bookkeeping: a stricter ceiling than the VALUES list of (b),
-- whose 1,000 literal rows the server has to parse and analyse every time.
INSERT INTO bench.q (kind, payload) SELECT * FROM unnest(:kinds::text[], :payloads::jsonb[]);
