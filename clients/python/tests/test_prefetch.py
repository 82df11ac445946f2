"""Prefetch: claims held beyond the handlers wait in the worker, leased and
heartbeated like running ones; a graceful stop runs them, and past the
shutdown timeout gives back at once those never started; a waiting job
whose claim is lost is dropped."""

import asyncio
import gc
import threading
import time

import skiplock
from conftest import URL, async_wait_until, enqueue_direct, job, wait_until


def worker(handlers, owner, **kw):
    opts = dict(owner=owner, poll_interval=0.1, rescue_interval=0.2, concurrency=1, prefetch=3)
    return skiplock.Worker(URL, handlers, **{**opts, **kw})


def running(db, kind, owner):
    return db.execute("SELECT count(*) FROM skiplock.jobs WHERE kind = %s AND state = 'running' "
                      "AND lease_owner = %s", [kind, owner]).fetchone()[0]


def completed(db, kind):
    return db.execute("SELECT count(*) FROM skiplock.all_jobs WHERE kind = %s AND "
                      "state = 'completed'", [kind]).fetchone()[0]


def test_prefetched_jobs_are_held_and_heartbeated_until_they_run(db):
    """One claim takes concurrency + prefetch jobs; one handler runs at a
    time; the jobs that wait four leases are renewed meanwhile: none is
    rescued (the worker rescues every 0.1 s) or run twice."""
    ids = enqueue_direct(db, "t.pf.held", n=4)
    gauge = {"now": 0, "max": 0, "runs": 0}

    async def handler(job, ctx):
        gauge["now"] += 1
        gauge["max"] = max(gauge["max"], gauge["now"])
        gauge["runs"] += 1
        await asyncio.sleep(2.4 if gauge["runs"] == 1 else 0.01)
        gauge["now"] -= 1
        return "done"

    async def main():
        w = worker({"t.pf.held": handler}, "t-pf-held", lease=0.6, rescue_interval=0.1)
        await w.start()
        await async_wait_until(lambda: running(db, "t.pf.held", "t-pf-held") == 4, 5,
                               "one claim of 4")
        await async_wait_until(lambda: completed(db, "t.pf.held") == 4, 15, "4 completed")
        await w.stop()
        return w

    w = asyncio.run(main())
    assert [job(db, i, "state, attempt, fencing") for i in ids] == [("completed", 1, 1)] * 4
    assert gauge["runs"] == 4 and gauge["max"] == 1, gauge
    assert w.stats.lost == 0 and w.stats.completed == 4


def test_stop_runs_the_prefetched_jobs_and_claims_no_more(db):
    ids = enqueue_direct(db, "t.pf.drain", n=4)
    w = worker({"t.pf.drain": lambda job, ctx: time.sleep(0.3) or "drained"}, "t-pf-drain")
    w.start_thread()
    wait_until(lambda: running(db, "t.pf.drain", "t-pf-drain") == 4, 5, "one claim of 4")
    stopper = threading.Thread(target=w.stop_thread)
    stopper.start()
    time.sleep(0.1)
    [late] = enqueue_direct(db, "t.pf.drain")
    stopper.join(10)
    assert not stopper.is_alive()
    assert [job(db, i, "state, attempt, result") for i in ids] == [("completed", 1, "drained")] * 4
    assert job(db, late) == ("available", 0, 0), "claimed after the stop"


def test_shutdown_timeout_gives_back_the_jobs_never_started(db, caplog):
    """Past the shutdown timeout, the prefetched jobs never started go back
    at once, due again now, without waiting for their 30 s lease; the one
    running is cancelled and retried (the exception its handler raises
    afterwards is dropped without asyncio's "never retrieved" error)."""
    ids = enqueue_direct(db, "t.pf.giveback", n=4)
    started = []

    def handler(job, ctx):
        started.append(job.id)
        ctx.cancelled.wait(10)
        raise skiplock.Retry("cancelled by the stop")

    w = worker({"t.pf.giveback": handler}, "t-pf-giveback", lease=30, shutdown_timeout=0.3)
    w.start_thread()
    wait_until(lambda: running(db, "t.pf.giveback", "t-pf-giveback") == 4, 5, "one claim of 4")
    wait_until(lambda: started, 5, "the first job started")
    t0 = time.monotonic()
    w.stop_thread()
    assert time.monotonic() - t0 < 3, "the stop waited for the leases"
    assert len(started) == 1, started
    time.sleep(0.2)  # the handler's thread returns after its event is set
    gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
    for i in ids:
        state, attempt, owner, error, due = job(
            db, i, "state, attempt, lease_owner, errors->-1->>'error', "
                   "run_at <= now() + interval '1 second'")
        assert (state, attempt, owner, due) == ("available", 1, None, True), (i, state)
        if i == started[0]:
            assert error.startswith("the worker stopped (shutdown)"), error
        else:
            assert error == "the worker stopped before starting it", error


def test_a_waiting_job_whose_lease_is_lost_never_starts(db):
    """A prefetched job whose claim is lost while it waits (rescued and
    claimed by another worker) is dropped: it never starts here."""
    enqueue_direct(db, "t.pf.lost", n=2)
    started, go = [], threading.Event()

    def handler(job, ctx):
        started.append(job.id)
        go.wait(10)
        return "done"

    w = worker({"t.pf.lost": handler}, "t-pf-lost", prefetch=1, lease=0.9, poll_interval=30,
               rescue_interval=60)
    w.start_thread()
    wait_until(lambda: running(db, "t.pf.lost", "t-pf-lost") == 2, 5, "one claim of 2")
    wait_until(lambda: started, 5, "the first job started")
    first = started[0]
    waiting = db.execute("SELECT id FROM skiplock.jobs WHERE kind = 't.pf.lost' AND id <> %s",
                         [first]).fetchone()[0]
    with db.transaction():
        db.execute("UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 s' "
                   "WHERE id = %s", [waiting])
        db.execute("SELECT skiplock.rescue()")
    db.execute("SELECT skiplock.claim('thief', ARRAY['t.pf.lost'])")
    wait_until(lambda: w.stats.lost == 1, 5, "the lost claim seen by a heartbeat")
    go.set()
    wait_until(lambda: job(db, first)[0] == "completed", 5, "the first job completed")
    w.stop_thread()
    assert started == [first], "the lost job started"
    assert job(db, waiting, "state, attempt, fencing, lease_owner") == ("running", 2, 2, "thief")
    assert w.stats.completed == 1 and w.stats.fenced == 0
