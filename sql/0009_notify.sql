-- skiplock schema step 0009: wake-up notifications on channel skiplock_jobs.
--
-- A worker on a direct connection LISTENs on skiplock_jobs and claims as
-- soon as a notification arrives; through a pooler it only polls.  The
-- notifications are a hint that lowers latency, never a promise: a
-- worker that misses one still finds the job at its next poll.  Payloads
-- are empty; PostgreSQL folds identical notifications of one transaction
-- into one, so a bulk enqueue wakes each listener once.
--
-- Sent when:
--   * a statement inserts into skiplock.jobs (enqueue, enqueue_bulk, a
--     cron fire): once per statement, whatever the row count;
--   * a row becomes available and due again (rescue of an expired lease,
--     `jobs retry`, a retry without delay): once per row, folded at commit;
--   * a statement changes skiplock.schedules (cron add, pause, resume,
--     remove), so idle workers read the next fire time again.
--
-- Opting out: a transaction (SET LOCAL skiplock.notify = 'off') or a whole
-- database (ALTER DATABASE … SET skiplock.notify = 'off') sends none; the
-- workers then find its jobs by polling.  NOTIFY takes a cluster-wide lock
-- while the transaction commits, so very many small concurrent enqueue
-- transactions may prefer that (or batches).

CREATE FUNCTION skiplock.notify_jobs() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF coalesce(current_setting('skiplock.notify', true), '') <> 'off' THEN
    PERFORM pg_notify('skiplock_jobs', '');
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER jobs_notify_insert AFTER INSERT ON skiplock.jobs
  FOR EACH STATEMENT EXECUTE FUNCTION skiplock.notify_jobs();

-- UPDATE OF state: heartbeats never fire it; the WHEN clause is checked
-- without calling the function, so claims and completions cost nothing.
CREATE TRIGGER jobs_notify_available AFTER UPDATE OF state ON skiplock.jobs
  FOR EACH ROW WHEN (NEW.state = 'available' AND NEW.run_at <= now()
                     AND (OLD.state <> 'available' OR OLD.run_at > now()))
  EXECUTE FUNCTION skiplock.notify_jobs();

CREATE TRIGGER schedules_notify AFTER INSERT OR UPDATE OR DELETE ON skiplock.schedules
  FOR EACH STATEMENT EXECUTE FUNCTION skiplock.notify_jobs();

