"""The Worker against the real database: concurrency, outcomes, heartbeats,
lost leases, fenced outcomes, timeouts, graceful stop, connections."""

import asyncio
import json
import logging
import re
import threading
import time

import psycopg
import pytest

import skiplock
from conftest import DIRECT_URL, MODE, URL, async_wait_until, enqueue_direct, job, wait_until

FAST = dict(poll_interval=0.05, rescue_interval=0.2)


def worker(handlers, **kw):
    return skiplock.Worker(URL, handlers, **{**FAST, **kw})


def states(db, kind):
    return db.execute("SELECT state, count(*) FROM skiplock.all_jobs WHERE kind = %s GROUP BY 1 "
                      "ORDER BY 1", [kind]).fetchall()


class Gauge:
    """Counts handlers running at once (from threads and tasks)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.now = self.max = 0

    def __enter__(self):
        with self.lock:
            self.now += 1
            self.max = max(self.max, self.now)

    def __exit__(self, *exc):
        with self.lock:
            self.now -= 1


def test_sync_and_async_handlers_bounded_by_concurrency(db):
    gauge = Gauge()

    def sync_h(job, ctx):
        with gauge:
            time.sleep(0.1)
        return {"n": job.payload["n"], "thread": threading.current_thread().name}

    async def async_h(job, ctx):
        with gauge:
            await asyncio.sleep(0.1)
        return {"n": job.payload["n"]}

    for i in range(20):
        enqueue_direct(db, "t.sync", f'{{"n": {i}}}')
        enqueue_direct(db, "t.async", f'{{"n": {i}}}')
    w = worker({"t.sync": sync_h, "t.async": async_h}, concurrency=6)
    w.start_thread()
    wait_until(lambda: states(db, "t.sync") == [("completed", 20)] and
               states(db, "t.async") == [("completed", 20)], 20, "40 jobs completed")
    w.stop_thread()
    assert gauge.max == 6, f"{gauge.max} handlers at once, concurrency 6"
    rows = db.execute("SELECT payload->'n' = result->'n', result->>'thread' FROM skiplock.all_jobs "
                      "WHERE kind = 't.sync'").fetchall()
    assert all(ok and name.startswith("skiplock-handler") for ok, name in rows)
    assert w.stats.completed == 40 and w.stats.fenced == 0


def frame(error, function, line):
    """The traceback entry of `function` in this file, raising `line`."""
    return re.search(r'\n  File "[^"]*test_worker\.py", line \d+, in ' + function +
                     r"\n +" + re.escape(line) + "(\n|$)", error)


def test_outcomes(db):
    """The stored error is the type and message, then the traceback: the
    handler's frame, with its file, function and line."""
    def fails(job, ctx):
        raise ValueError("no stock")

    def discards(job, ctx):
        raise skiplock.Discard("bad payload")

    def later(job, ctx):
        raise skiplock.Retry("rate limited", after=120)

    def huge(job, ctx):
        raise ValueError("a\0b" + "x" * 10000)

    # t.fails waits 10 minutes before its retry: one failed attempt each
    ids = [enqueue_direct(db, k, backoff="fixed", backoff_base="10 minutes")[0]
           for k in ("t.fails", "t.huge")]
    ids += [enqueue_direct(db, k)[0] for k in ("t.discards", "t.later")]
    w = worker({"t.fails": fails, "t.huge": huge, "t.discards": discards, "t.later": later})
    w.start_thread()
    wait_until(lambda: w.stats.failed >= 4, 60, "four failed attempts")
    w.stop_thread()
    cols = "state, attempt, errors->0->>'error', run_at > now() + interval '100 s'"
    state, attempt, error, _ = job(db, ids[0], cols)
    assert (state, attempt) == ("available", 1)
    assert error.startswith("ValueError: no stock\nTraceback (most recent call last):\n"), error
    assert frame(error, "fails", 'raise ValueError("no stock")'), error
    assert error.count("no stock") == 2, error  # the message once, and the raising line
    # NUL removed, cut at 8,192 characters by the client (the database's
    # cut would add a note of what it cut)
    state, attempt, error, _ = job(db, ids[1], cols)
    assert (state, attempt, len(error)) == ("available", 1, 8192)
    assert error.startswith("ValueError: abxxx") and "\0" not in error
    state, attempt, error, _ = job(db, ids[2], cols)
    assert (state, attempt) == ("discarded", 1)
    assert error.startswith("Discard: bad payload\nTraceback"), error
    assert frame(error, "discards", 'raise skiplock.Discard("bad payload")'), error
    state, attempt, error, later_due = job(db, ids[3], cols)
    assert (state, attempt, later_due) == ("available", 1, True)
    assert error.startswith("Retry: rate limited\nTraceback"), error
    assert frame(error, "later", 'raise skiplock.Retry("rate limited", after=120)'), error


def test_a_failed_attempt_is_logged_with_its_traceback(db, caplog):
    """Visible by default: the skiplock logger at WARNING, kind, id and
    attempt, the error, and the handler's traceback."""
    def fails(job, ctx):
        raise ValueError("no stock")

    [job_id] = enqueue_direct(db, "t.logged", backoff="fixed", backoff_base="10 minutes")
    w = worker({"t.logged": fails})
    with caplog.at_level(logging.WARNING, logger="skiplock"):
        w.start_thread()
        wait_until(lambda: w.stats.failed >= 1, 30, "the failed attempt")
        w.stop_thread()
    [rec] = [r for r in caplog.records if "failed" in r.getMessage() and r.name == "skiplock"]
    assert rec.levelno == logging.WARNING
    assert f"job {job_id} (t.logged) attempt 1 of 25 failed (retried): ValueError: no stock" \
        in rec.getMessage()
    assert rec.exc_info and rec.exc_info[0] is ValueError
    assert "in fails" in caplog.text  # the traceback names the handler
    # printed once: the stored error's traceback is not in the message too
    assert "Traceback" not in rec.getMessage()
    assert caplog.text.count("Traceback (most recent call last)") == 1, caplog.text


# Array literals' special characters: quotes, backslashes, braces, commas,
# spaces, the word NULL, and a non-ASCII letter.
AWKWARD = 'a "q" \\ {b, c} NULL \u00e9'


def test_job_fields_and_texts_round_trip(db):
    """A claimed job's fields are the row's (timestamps to the microsecond),
    and errors and results with an array literal's special characters are
    stored as the handler gave them."""
    seen = {}

    def handler(job, ctx):
        if job.attempt == 1:
            seen["job"] = job
            raise skiplock.Retry(AWKWARD, after=0)
        return {"s": AWKWARD, "list": [1, None, "x"]}

    [job_id] = enqueue_direct(db, "t.fields", f'{{"p": {json.dumps(AWKWARD)}}}', queue="q,1",
                              priority=3, timeout="5 s")
    w = worker({"t.fields": handler}, queues=["q,1"], lease=60)
    w.start_thread()
    wait_until(lambda: job(db, job_id)[0] == "completed", 30, "attempt 2 completed")
    w.stop_thread()
    j = seen["job"]
    # the first run_at was the enqueue's now(), as created_at
    row = db.execute("SELECT queue, kind, payload, max_attempts, created_at, timeout_ms, "
                     "priority FROM skiplock.all_jobs WHERE id = %s", [job_id]).fetchone()
    assert (j.id, j.attempt, j.fencing) == (job_id, 1, 1)
    assert (j.queue, j.kind, j.payload, j.max_attempts, j.run_at, j.timeout_ms,
            j.priority) == row
    assert j.run_at.tzinfo is not None and j.lease_expires_at > j.run_at
    error, result = job(db, job_id, "errors->0->>'error', result")
    assert error.startswith("Retry: " + AWKWARD + "\nTraceback (most recent call last):\n"), error
    assert result == {"s": AWKWARD, "list": [1, None, "x"]}


def test_unknown_kinds_are_never_claimed(db):
    other = enqueue_direct(db, "t.other", n=3)
    mine = enqueue_direct(db, "t.mine")
    w = worker({"t.mine": lambda job, ctx: None})
    w.start_thread()
    wait_until(lambda: job(db, mine[0])[0] == "completed", 30, "t.mine completed")
    time.sleep(0.3)
    w.stop_thread()
    assert states(db, "t.other") == [("available", 3)]
    assert db.execute("SELECT max(attempt) FROM skiplock.all_jobs WHERE id = ANY(%s)",
                      [other]).fetchone()[0] == 0


def test_heartbeats_keep_a_long_job(db):
    [job_id] = enqueue_direct(db, "t.long")
    w = worker({"t.long": lambda job, ctx: time.sleep(3.5) or "done"}, lease=1.0)
    w.start_thread()
    wait_until(lambda: job(db, job_id)[0] == "running", 30, "claimed")
    rescued = 0
    while job(db, job_id)[0] == "running":  # a rival rescuing as often as it can
        rescued += db.execute("SELECT count(*) FROM skiplock.rescue()").fetchone()[0]
        time.sleep(0.05)
    w.stop_thread()
    assert rescued == 0
    assert job(db, job_id, "state, attempt, fencing, result, errors") == (
        "completed", 1, 1, "done", [])


def steal(db, job_id):
    """The lease runs out and a rescue gives the job back (fencing moves on
    at the next claim)."""
    with db.transaction():
        db.execute("UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 s' "
                   "WHERE id = %s", [job_id])
        db.execute("SELECT skiplock.rescue()")


def test_lost_lease_sets_the_sync_handlers_event(db):
    seen = {}

    def handler(job, ctx):
        if job.attempt == 1:
            seen["signalled"] = ctx.cancelled.wait(10)
            seen["reason"] = ctx.reason
            return "attempt 1 must not be recorded"
        return f"attempt {job.attempt}"

    [job_id] = enqueue_direct(db, "t.lose")
    w = worker({"t.lose": handler}, lease=0.9)
    w.start_thread()
    wait_until(lambda: job(db, job_id)[0] == "running", 30, "claimed")
    t0 = time.monotonic()
    steal(db, job_id)
    wait_until(lambda: "reason" in seen, 30, "the handler saw its event")
    took = time.monotonic() - t0
    wait_until(lambda: job(db, job_id)[0] == "completed", 30, "attempt 2 completed")
    w.stop_thread()
    assert seen == {"signalled": True, "reason": "lease_lost"}
    assert took < 0.9, f"signalled {took:.2f} s after the loss (heartbeat every 0.3 s)"
    assert job(db, job_id, "attempt, fencing, result") == (2, 2, "attempt 2")
    assert w.stats.lost == 1 and w.stats.fenced == 0


def test_lost_lease_cancels_the_async_handlers_task(db):
    seen = {}

    async def handler(job, ctx):
        if job.attempt > 1:
            return "later attempt"
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen["cancelled"], seen["reason"] = True, ctx.reason
            raise

    [job_id] = enqueue_direct(db, "t.alose")

    async def main():
        w = worker({"t.alose": handler}, lease=0.9)
        await w.start()
        await async_wait_until(lambda: w.running == 1, 30, "running")
        await asyncio.to_thread(steal, db, job_id)
        await async_wait_until(lambda: "reason" in seen, 30, "the task was cancelled")
        await async_wait_until(lambda: w.stats.completed == 1, 30, "attempt 2 completed")
        await w.stop()
        return w

    w = asyncio.run(main())
    assert seen == {"cancelled": True, "reason": "lease_lost"}
    assert job(db, job_id, "state, attempt, result") == ("completed", 2, "later attempt")
    assert w.stats.lost == 1


def test_fenced_outcome_is_dropped(db):
    release = threading.Event()
    [job_id] = enqueue_direct(db, "t.fenced")
    # A long lease: no heartbeat comes before the outcome, so record()
    # itself must refuse it.  Concurrency 1: the rescue's notification
    # must not let this worker claim the job back before the thief does.
    w = worker({"t.fenced": lambda job, ctx: release.wait(10) and "stale"}, lease=60,
               concurrency=1)
    w.start_thread()
    wait_until(lambda: job(db, job_id)[0] == "running", 30, "claimed")
    steal(db, job_id)
    thief = db.execute("SELECT fencing FROM skiplock.claim('thief', ARRAY['t.fenced'])"
                       ).fetchone()
    release.set()
    wait_until(lambda: w.stats.fenced == 1, 30, "the outcome was refused")
    w.stop_thread()
    assert thief == (2,)
    assert job(db, job_id, "state, lease_owner, fencing, result") == (
        "running", "thief", 2, None)
    assert w.stats.completed == 0


def test_job_timeout_cancels_and_fails_the_attempt(db):
    seen = {}

    def handler(job, ctx):
        seen["signalled"] = ctx.cancelled.wait(10)
        seen["reason"] = ctx.reason
        return "too late"

    [job_id] = enqueue_direct(db, "t.timeout", timeout="300 ms", max_attempts=1)
    w = worker({"t.timeout": handler})
    w.start_thread()
    wait_until(lambda: job(db, job_id)[0] == "discarded", 30, "the attempt failed")
    wait_until(lambda: "reason" in seen, 30, "the handler returned")
    w.stop_thread()
    assert seen == {"signalled": True, "reason": "timeout"}
    assert "timeout: the handler ran longer than 300 ms" in job(db, job_id, "errors::text")[0]
    assert w.stats.timed_out == 1


def test_stop_drains_running_jobs_and_claims_no_more(db):
    ids = enqueue_direct(db, "t.drain", n=3)
    w = worker({"t.drain": lambda job, ctx: time.sleep(1) or "drained"}, concurrency=3)
    w.start_thread()
    wait_until(lambda: states(db, "t.drain") == [("running", 3)], 30, "three running")
    stopper = threading.Thread(target=w.stop_thread)
    t0 = time.monotonic()
    stopper.start()
    time.sleep(0.2)
    late = enqueue_direct(db, "t.drain", n=2)
    stopper.join(10)
    assert not stopper.is_alive()
    assert time.monotonic() - t0 > 0.5, "stop returned before the handlers finished"
    assert [job(db, i, "state, attempt, result") for i in ids] == [("completed", 1, "drained")] * 3
    assert [job(db, i) for i in late] == [("available", 0, 0)] * 2


def test_stop_ends_when_the_last_outcome_is_recorded(db):
    """Not at the next heartbeat (lease / 3) or the shutdown timeout."""
    [job_id] = enqueue_direct(db, "t.stop_soon")
    w = skiplock.Worker(URL, {"t.stop_soon": lambda job, ctx: time.sleep(0.3) or "done"},
                        poll_interval=0.05, lease=30, shutdown_timeout=30)
    w.start_thread()
    wait_until(lambda: job(db, job_id)[0] == "running", 30, "claimed")
    t0 = time.monotonic()
    w.stop_thread()
    assert time.monotonic() - t0 < 3
    assert job(db, job_id, "state, result") == ("completed", "done")


def test_stop_timeout_cancels_and_fails_stragglers(db):
    seen = {}

    def handler(job, ctx):
        seen["signalled"] = ctx.cancelled.wait(10)
        seen["reason"] = ctx.reason

    [job_id] = enqueue_direct(db, "t.straggler")
    w = worker({"t.straggler": handler}, shutdown_timeout=0.3)
    w.start_thread()
    wait_until(lambda: job(db, job_id)[0] == "running", 30, "claimed")
    t0 = time.monotonic()
    w.stop_thread()
    assert time.monotonic() - t0 < 3
    wait_until(lambda: "reason" in seen, 30, "the handler returned")
    assert seen == {"signalled": True, "reason": "shutdown"}
    state, attempt, errors = job(db, job_id, "state, attempt, errors::text")
    assert (state, attempt) == ("available", 1) and "the worker stopped (shutdown)" in errors


def test_permanent_error_stops_the_worker(db):
    w = worker({"t.x": lambda job, ctx: None}, owner="o" * 300)  # claim refuses it (22023)

    async def main():
        await w.start()
        await w.wait()

    with pytest.raises(skiplock.PermanentError) as e:
        asyncio.run(main())
    assert e.value.sqlstate == "22023"


def connections(db, app):
    """Connections named `app`: server backends when direct, PgBouncer's
    clients when pooled (its admin console, simple queries only)."""
    if MODE == "direct":
        return db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                          [app]).fetchone()[0]
    admin = URL.rsplit("/", 1)[0] + "/pgbouncer"
    with psycopg.connect(admin, autocommit=True, cursor_factory=psycopg.ClientCursor) as c:
        cur = c.execute("SHOW CLIENTS")
        col = [d.name for d in cur.description].index("application_name")
        return sum(1 for r in cur.fetchall() if r[col] == app)


def test_one_connection_for_claims(db):
    """Direct: one for claims and outcomes, one that LISTENs.  Pooled (no
    direct endpoint given): one."""
    ids = enqueue_direct(db, "t.conns", n=40)
    w = worker({"t.conns": lambda job, ctx: time.sleep(0.05)}, concurrency=32,
               connect_kwargs={"application_name": "skl-py-conns"})
    w.start_thread()
    if MODE == "direct":
        wait_until(lambda: w.listening, 30, "LISTEN")
    peak = 0
    while job(db, ids[-1])[0] != "completed" or states(db, "t.conns") != [("completed", 40)]:
        peak = max(peak, connections(db, "skl-py-conns"))
        time.sleep(0.01)
    w.stop_thread()
    # a reconnect (of the claims' connection after a statement past its
    # deadline on a loaded machine, or of the LISTEN) shows the old backend
    # for a moment beside the new one: each allows one more
    again = w._session.connects - 1 + max(w._listens - 1, 0)
    want = 2 if MODE == "direct" else 1
    assert want <= peak <= want + again, \
        f"{peak} connections at concurrency 32 ({again} reconnects)"


def test_listen_only_on_a_direct_connection(db):
    """Direct: LISTEN, and a job is picked up long before the next poll.
    Pooled: no LISTEN on the pooled URL; the direct endpoint is used when
    given."""
    w = skiplock.Worker(URL, {"t.wake": lambda job, ctx: None}, poll_interval=30)
    w.start_thread()
    time.sleep(0.5)
    assert w.listening == (MODE == "direct")
    if MODE == "direct":
        [job_id] = enqueue_direct(db, "t.wake")
        wait_until(lambda: job(db, job_id)[0] == "completed", 3, "woken by NOTIFY")
    w.stop_thread()
    if MODE == "pooled":
        w = skiplock.Worker(URL, {"t.wake": lambda job, ctx: None}, poll_interval=30,
                            direct_url=DIRECT_URL)
        w.start_thread()
        wait_until(lambda: w.listening, 30, "LISTEN on the direct endpoint")
        [job_id] = enqueue_direct(db, "t.wake")
        wait_until(lambda: job(db, job_id)[0] == "completed", 3, "woken by NOTIFY")
        w.stop_thread()


def test_url_rule():
    pooled = ["postgresql://u@ep-cool-123-pooler.eu-central-1.aws.neon.tech/db",
              "postgresql://u@db.example.com:6432/db", "host=a,b port=5432,6543 dbname=x",
              "postgresql://u@aws-0-eu.pooler.supabase.com:5432/postgres"]
    direct = ["postgresql://u@ep-cool-123.eu-central-1.aws.neon.tech/db",
              "postgresql://u@localhost:5432/db", "postgresql://u@my-pooler-db.internal/db"]
    assert [skiplock.url_looks_pooled(u) for u in pooled] == [True] * 4
    assert [skiplock.url_looks_pooled(u) for u in direct] == [False] * 3


def test_bad_worker_arguments():
    for kw, msg in [({"concurrency": 0}, "concurrency"), ({"lease": 0.01}, "lease"),
                    ({"pooler": "maybe"}, "pooler mode"), ({"prefetch": -1}, "prefetch"),
                    ({"prefetch": 1001}, "prefetch")]:
        with pytest.raises(ValueError, match=msg):
            skiplock.Worker(URL, {"k": lambda j, c: None}, **kw)
    with pytest.raises(ValueError, match="handlers"):
        skiplock.Worker(URL, {})


def test_prepared_statements_only_when_direct():
    async def main():
        w = worker({"t.p": lambda job, ctx: None})
        await w.start()
        direct, threshold = w._session.direct, w._session.conn.prepare_threshold
        await w.stop()
        return direct, threshold
    assert asyncio.run(main()) == ((True, 0) if MODE == "direct" else (False, None))


def test_a_typed_handler_gets_its_payload_type_and_discards_one_that_is_not(db):
    from dataclasses import dataclass

    @dataclass
    class Receipt:
        order: int
        to: str

    async def send(r: Receipt, job, ctx):
        return {"order": r.order, "to": r.to, "type": type(r).__name__}

    def build(day: str, job, ctx):
        return day.upper()

    good = enqueue_direct(db, "t.typed", '{"order": 42, "to": "a@example.com"}')[0]
    bad = enqueue_direct(db, "t.typed", '{"order": 42}')[0]
    plain = enqueue_direct(db, "t.typed.str", '"monday"')[0]
    w = worker({"t.typed": skiplock.typed(Receipt, send),
                "t.typed.str": skiplock.typed(str, build)})
    w.start_thread()
    wait_until(lambda: w.stats.completed >= 2 and w.stats.failed >= 1, 30, "the typed jobs")
    w.stop_thread()
    assert job(db, good, "state, result") == (
        "completed", {"order": 42, "to": "a@example.com", "type": "Receipt"})
    assert job(db, plain, "state, result") == ("completed", "MONDAY")
    state, attempt, error = job(db, bad, "state, attempt, errors->0->>'error'")
    assert (state, attempt) == ("discarded", 1)
    assert error.startswith(f"Discard: the payload of job {bad} is not a Receipt: "), error
