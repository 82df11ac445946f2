-- skiplock schema step 0004: periodic jobs (cron schedules).
--
-- Every worker evaluates every schedule; no leader is elected.  A fire
-- time becomes a job in the same statement that moves the schedule's
-- last_fire forward with a compare-and-set on its previous value, so of
-- several workers evaluating the same fire time exactly one enqueues it.
-- The job's unique key, 'cron:' || name || ':' || <fire time, UTC, ISO
-- 8601>, names the fire time it was made for and keeps a second job for
-- it out while the first is unfinished.
--
-- Fire times are computed by the library (expressions and IANA zones are
-- parsed in C, never by the server's TimeZone setting); the database only
-- stores them and judges due-ness by its own clock.
--
-- States of a schedule:
--   enabled  evaluated by workers whenever next_fire <= now(); entered by
--            cron add and cron resume
--   paused   never evaluated; entered by cron pause.  Resuming skips the
--            fire times that passed meanwhile (last_fire jumps to the
--            newest of them), so a pause never ends in a burst.

CREATE TABLE skiplock.schedules (
  name         text        PRIMARY KEY,
  expression   text        NOT NULL,
  zone         text        NOT NULL DEFAULT 'UTC',
  kind         text        NOT NULL,
  payload      jsonb       NOT NULL DEFAULT '{}',
  queue        text        NOT NULL DEFAULT 'default',
  priority     int         NOT NULL DEFAULT 0,
  max_attempts int         NOT NULL DEFAULT 25,
  enabled      boolean     NOT NULL DEFAULT true,
  catch_up     text        NOT NULL DEFAULT 'latest',
  -- The newest fire time handled: enqueued, or skipped by the catch-up
  -- policy or a pause.  NULL until the first; fire times after
  -- coalesce(last_fire, created_at) are pending.
  last_fire    timestamptz,
  -- The first pending fire time (NULL: none within 100 years); a worker
  -- looks at a schedule only once this has passed.
  next_fire    timestamptz,
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT schedules_name_check CHECK (length(name) BETWEEN 1 AND 128),
  CONSTRAINT schedules_expression_check CHECK (length(expression) BETWEEN 1 AND 256),
  CONSTRAINT schedules_zone_check CHECK (length(zone) BETWEEN 1 AND 128),
  CONSTRAINT schedules_kind_check CHECK (length(kind) BETWEEN 1 AND 128),
  CONSTRAINT schedules_queue_check CHECK (length(queue) BETWEEN 1 AND 128),
  CONSTRAINT schedules_attempts_check CHECK (max_attempts >= 1),
  CONSTRAINT schedules_catch_up_check CHECK (catch_up IN ('none', 'latest', 'all'))
);

-- Each worker's tick reads only the enabled schedules that are due.
CREATE INDEX schedules_due_idx ON skiplock.schedules (next_fire) WHERE enabled;

-- One evaluation of one schedule, all or nothing: if the schedule still
-- has the last_fire (and creation instant) the caller read, move last_fire
-- to p_new_last and next_fire to p_next, and enqueue one job per element
-- of p_fires with the matching unique key of p_keys.  Returns the job ids
-- (an empty array when nothing was due), or NULL when the schedule had
-- moved on, was paused or was removed: another worker got there first,
-- and nothing was written.  A row locked by another evaluation is skipped
-- at once rather than waited for.
CREATE FUNCTION skiplock.schedule_fire(
  p_name text, p_created_at timestamptz, p_expected_last timestamptz,
  p_new_last timestamptz, p_next timestamptz, p_fires timestamptz[], p_keys text[])
RETURNS bigint[]
LANGUAGE plpgsql AS $fn$
DECLARE
  s skiplock.schedules;
  n int := coalesce(array_length(p_fires, 1), 0);
BEGIN
  IF n <> coalesce(array_length(p_keys, 1), 0) THEN
    RAISE EXCEPTION 'schedule_fire: % fire times but % keys', n,
      coalesce(array_length(p_keys, 1), 0) USING ERRCODE = '22023';
  END IF;
  SELECT * INTO s FROM skiplock.schedules
   WHERE name = p_name AND enabled AND created_at = p_created_at
     AND last_fire IS NOT DISTINCT FROM p_expected_last
   FOR UPDATE SKIP LOCKED;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  UPDATE skiplock.schedules
     SET last_fire = p_new_last, next_fire = p_next, updated_at = now()
   WHERE name = p_name AND last_fire IS NOT DISTINCT FROM p_expected_last;
  IF n = 0 THEN
    RETURN '{}';
  END IF;
  RETURN skiplock.enqueue_many(NULL, array_fill(s.kind, ARRAY[n]),
           array_fill(s.payload, ARRAY[n]), array_fill(s.queue, ARRAY[n]), p_fires,
           NULL, array_fill(s.priority, ARRAY[n]), p_keys,
           array_fill(s.max_attempts, ARRAY[n]), NULL, NULL, NULL);
END
$fn$;
