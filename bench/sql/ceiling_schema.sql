-- bench/sql/ceiling_schema.sql — the table of the raw-SQL ceilings.
--
-- A minimal queue: the columns a claim and a completion touch, a primary
-- key, and one partial index that holds only claimable rows, as
-- skiplock.jobs has (jobs_claim_idx).  Defaults everywhere else (fillfactor
-- 100, global autovacuum settings): this is the naive design the ceilings
-- stand for, not a tuned one.
DROP SCHEMA IF EXISTS bench CASCADE;
CREATE SCHEMA bench;
CREATE TABLE bench.q (
  id               bigserial PRIMARY KEY,
  kind             text        NOT NULL DEFAULT 'bench',
  payload          jsonb       NOT NULL DEFAULT '{}',
  state            text        NOT NULL DEFAULT 'available',
  run_at           timestamptz NOT NULL DEFAULT now(),
  lease_expires_at timestamptz,
  finished_at      timestamptz
);
CREATE INDEX q_claim_idx ON bench.q (run_at, id) WHERE state = 'available';
