-- skiplock schema step 0022: a comment on every function and table.
--
-- Rule: every function and every table of schema skiplock says what it is
-- in its own COMMENT, so that `\df+ skiplock.*` and `\dt+ skiplock.*` read as
-- the reference of the SQL API (cli.test_catalog checks it).  This step
-- only adds comments; it changes no definition.

-- ---- tables ----
COMMENT ON TABLE skiplock.schema_version IS
  'The schema steps applied by skiplock init: number, name and the SHA-256 of the text applied.';
COMMENT ON TABLE skiplock.jobs IS
  'The live jobs: available (due or delayed) and running.  A job leaves it for finished_jobs when it completes, is discarded or cancelled.';
COMMENT ON TABLE skiplock.enqueue_tokens IS
  'The ids each bulk enqueue call made, by its token, so that a retried call returns the same ids; pruned by the maintenance after 15 minutes.';
COMMENT ON TABLE skiplock.schedules IS
  'Cron schedules: expression, zone, the job each fire enqueues, and the last and next fire times.';
COMMENT ON TABLE skiplock.idempotency_keys IS
  'Idempotency keys: the request fingerprint, in progress or completed with the stored response, until it expires.';
COMMENT ON TABLE skiplock.breakers IS
  'One circuit breaker per kind, shared by the fleet: state, settings and the counts of the current window.';
COMMENT ON TABLE skiplock.breaker_events IS
  'The transitions of the circuit breakers (opened, half-open, closed, forced), newest last.';
COMMENT ON TABLE skiplock.granted_roles IS
  'The roles given access by grant_roles and their kind (worker, operator, reader), so that later steps re-apply their grants.';
COMMENT ON TABLE skiplock.maintenance IS
  'One row: the partition width of finished_jobs and when the maintenance last ran.';
COMMENT ON TABLE skiplock.finished_jobs_forever IS
  'The partition of finished_jobs for jobs kept forever (expires_at infinity).';
COMMENT ON TABLE skiplock.finished_jobs_default IS
  'The default partition of finished_jobs: rows whose range has no partition yet; the maintenance moves them out.';
COMMENT ON TABLE skiplock.finished_partitions IS
  'The range partitions of finished_jobs that the maintenance made, with their bounds, so it can drop them once expired.';

-- ---- functions ----
COMMENT ON FUNCTION skiplock.installed_version() IS
  'The newest schema step applied to this database (0 before any).';
COMMENT ON FUNCTION skiplock.enqueue_one(text, jsonb, text, timestamptz, integer, text, integer, integer, integer, integer) IS
  'Internal: one job written after enqueue checked its arguments; an existing id when the unique key is taken by an unfinished job.';
COMMENT ON FUNCTION skiplock.enqueue_many_unchecked(text, text[], jsonb[], text[], timestamptz[], bigint[], integer[], text[], integer[], integer[], integer[], integer[], text[]) IS
  'Internal: the bulk insert behind enqueue_many, after its checks; a token already used returns the ids of that call.';
COMMENT ON FUNCTION skiplock.enqueue_many(text, text[], jsonb[], text[], timestamptz[], bigint[], integer[], text[], integer[], integer[], integer[], integer[], text[]) IS
  'Enqueues many jobs at once, all or nothing; with a token, a retried call returns the ids of the first instead of enqueueing again.';
COMMENT ON FUNCTION skiplock.leases_keep_rows() IS
  'Trigger: refuses to delete lease rows, which keep the last fencing token of their name.';
COMMENT ON FUNCTION skiplock.lease_check_args(text, text, interval) IS
  'Internal: the checks of the lease functions'' name, owner and ttl (22004, 22023).';
COMMENT ON FUNCTION skiplock.lease_check_reserved(text) IS
  'Internal: refuses (42501) a reserved lease name to a role that may not take it.';
COMMENT ON FUNCTION skiplock.schedule_fire(text, timestamptz, timestamptz, timestamptz, timestamptz, timestamptz[], text[]) IS
  'Fires a due schedule once for the fleet: enqueues the given fire times under their unique keys and moves the schedule on; NULL when another worker got there first.';
COMMENT ON FUNCTION skiplock.idem_complete(text, integer, jsonb) IS
  'Stores the response of an acquired key, in the caller''s transaction; SK002 when the key is not in progress.';
COMMENT ON FUNCTION skiplock.idem_release(text) IS
  'Gives up an acquired key before any side effect, so that a retry may run at once.';
COMMENT ON FUNCTION skiplock.idem_prune(integer) IS
  'Deletes up to batch expired idempotency keys, oldest first; returns how many.';
COMMENT ON FUNCTION skiplock.breaker_step(skiplock.breakers, integer, integer) IS
  'Internal, pure: a breaker after ok successes and bad failures were counted; the caller writes the row it returns.';
COMMENT ON FUNCTION skiplock.breaker_configure(text, integer, integer, integer, bigint, bigint, integer) IS
  'A worker''s circuit-breaker settings for a kind, written at its start.';
COMMENT ON FUNCTION skiplock.notify_jobs() IS
  'Trigger: NOTIFY skiplock_jobs when jobs become available or schedules change, to wake idle workers on a direct connection (a hint only).';
COMMENT ON FUNCTION skiplock.check_job_times(timestamptz, bigint) IS
  'Internal: refuses a run_at outside 1970-2199 or a negative delay (22023), before any enqueue writes.';
COMMENT ON FUNCTION skiplock.interval_ms(interval, text) IS
  'Internal: an interval as whole milliseconds, 0 to 24 days; 22023 naming what outside that.';
COMMENT ON FUNCTION skiplock.backoff_delay(text, integer, bigint, bigint, bigint, double precision) IS
  'Internal, pure: the delay in ms of a backoff strategy (full, equal, decorrelated, exponential, fixed) for attempt n, given a random draw.';
COMMENT ON FUNCTION skiplock.check_claim_args(text, text[], integer, interval) IS
  'Internal: the checks of a claim''s owner, kinds, n and lease (22004, 22023).';
COMMENT ON FUNCTION skiplock.claim_probes(text[], text[], integer) IS
  'Internal: the three-argument form of claim_probes for callers of step 0011; reads the pauses itself.';
COMMENT ON FUNCTION skiplock.claim_probes(text[], text[], integer, text[]) IS
  'Internal: the half-open breakers'' probe jobs a claim may take, skipping paused queues and kinds.';
COMMENT ON FUNCTION skiplock.grant_role(text, text) IS
  'Internal: the privileges of one role of a kind (worker, operator, reader), from scratch; run by grant_roles and by steps that change them.';
COMMENT ON FUNCTION skiplock.grant_roles(text, text, text, text) IS
  'Makes owner the owner of everything in skiplock and gives the worker, operator and reader roles their privileges.';
COMMENT ON FUNCTION skiplock.check_record_args(bigint[], bigint[], text[], jsonb[], text[], bigint[], boolean[], text[], bigint[], bigint[]) IS
  'Internal: the checks of record''s outcome arrays (22004, 2202E, 22023).';
COMMENT ON FUNCTION skiplock.errors_append(jsonb, integer, text, timestamptz) IS
  'Internal: a job''s error history with one more entry; the newest 20 are kept.';
COMMENT ON FUNCTION skiplock.keep_until(text, text, timestamptz) IS
  'Internal: when a finished job of a queue in a state expires under the retention: NULL when not kept, infinity when kept forever.';
COMMENT ON FUNCTION skiplock.move_finished(bigint[]) IS
  'Internal: moves finished jobs by id from jobs to finished_jobs, kept until their retention; returns how many left jobs.';
COMMENT ON FUNCTION skiplock.retention_reset(text) IS
  'Forgets a queue''s own retention (it follows ''*'' again); ''*'' goes back to the defaults.';
COMMENT ON FUNCTION skiplock.check_actor(text, text) IS
  'Internal: refuses an action-log actor or role that is empty or over 200 characters (22023).';
COMMENT ON FUNCTION skiplock.pause_key(text, text) IS
  'Internal: the pause row''s key of a queue or a kind; exactly one must name something.';
COMMENT ON FUNCTION skiplock.pause_target(text, text) IS
  'Internal: what the action log names for a pause: {"queue": q} or {"kind": k}.';
