-- bench/cron: one tick with 10 of 1,000 schedules due.  In one
-- transaction: make group :g (10 schedules) due now with one fire time in
-- the last minute (not behind), then the tick, measured alone by pgbench
-- -r (its work; the commit's flush is the COMMIT line's).  Unique keys
-- repeat within a minute: the enqueue then finds the job it made before,
-- which is the same work.
\set g random(1, 100)
BEGIN;
UPDATE skiplock.schedules SET last_fire = now() - interval '61 seconds',
       next_fire = now() - interval '1 second' WHERE grp = :g;
SELECT due, fired, enqueued FROM skiplock.cron_tick();
COMMIT;
