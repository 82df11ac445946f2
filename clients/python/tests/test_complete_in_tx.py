"""Completing a job in the transaction of its effect (ctx.complete,
skiplock.job_complete): the effect and the completion commit together, and
the worker sends no outcome of its own and loses no lease over it."""

import threading
import time

import psycopg
import pytest

import skiplock
from conftest import URL, enqueue_direct, job, wait_until

FAST = dict(poll_interval=0.05, rescue_interval=0.2)
EFFECT = ("INSERT INTO public.t_ledger (job_id, n) VALUES (%s, 1) "
          "ON CONFLICT (job_id) DO UPDATE SET n = t_ledger.n + 1")


@pytest.fixture
def ledger(db):
    db.execute("DROP TABLE IF EXISTS public.t_ledger; "
               "CREATE TABLE public.t_ledger (job_id bigint PRIMARY KEY, n int NOT NULL)")
    yield lambda: dict(db.execute("SELECT job_id, n FROM public.t_ledger").fetchall())
    db.execute("DROP TABLE public.t_ledger")


_local = threading.local()


def conn():
    """A handler thread's own connection (the mode's URL)."""
    c = getattr(_local, "conn", None)
    if c is None or c.closed:
        c = _local.conn = psycopg.connect(URL, prepare_threshold=None)
    return c


def test_the_worker_records_nothing_and_loses_nothing(db, ledger):
    """Jobs that sleep past several heartbeats after their commit: the
    heartbeats find them gone, and that is not a lost lease."""
    def handler(job, ctx):
        c = conn()
        with c.transaction():
            c.execute(EFFECT, [job.id])
            ctx.complete(c, {"n": job.payload["n"]})
        time.sleep(job.payload["sleep"])
        assert not ctx.cancelled.is_set(), ctx.reason
        return "ignored: the completion carried the result"

    ids = [enqueue_direct(db, "t.intx", f'{{"n": {i}, "sleep": {0.9 if i < 3 else 0}}}')[0]
           for i in range(12)]
    w = skiplock.Worker(URL, {"t.intx": handler}, concurrency=4, lease=0.6, **FAST)
    w.start_thread()
    wait_until(lambda: w.stats.completed == 12, 30, "12 completed")
    w.stop_thread()
    s = w.stats
    assert (s.completed, s.fenced, s.lost, s.failed) == (12, 0, 0, 0), s
    assert ledger() == {i: 1 for i in ids}
    for i in ids:
        state, result = job(db, i, "state, result")
        assert state == "completed" and set(result) == {"n"}


def test_async_handler_on_an_async_connection(db, ledger):
    async def handler(job, ctx):
        async with await psycopg.AsyncConnection.connect(URL, prepare_threshold=None) as c:
            async with c.transaction():
                await c.execute(EFFECT, [job.id])
                await ctx.complete(c, {"async": True})
        return None

    ids = enqueue_direct(db, "t.intx.async", n=5)
    w = skiplock.Worker(URL, {"t.intx.async": handler}, concurrency=2, **FAST)
    w.start_thread()
    wait_until(lambda: w.stats.completed == 5, 30, "5 completed")
    w.stop_thread()
    assert (w.stats.fenced, w.stats.lost) == (0, 0)
    assert ledger() == {i: 1 for i in ids}
    assert all(job(db, i, "result")[0] == {"async": True} for i in ids)


def test_rolled_back_or_raised_after_the_commit(db, ledger):
    """A completion rolled back with its effect leaves an ordinary failed
    attempt; a handler that raises after its commit has its outcome
    refused, and that counts as completed, not as a lost claim."""
    def handler(job, ctx):
        c = conn()
        if job.payload.get("rollback") and job.attempt == 1:
            with c.transaction():
                c.execute(EFFECT, [job.id])
                ctx.complete(c)
                raise RuntimeError("the effect failed after all")  # rolls both back
        with c.transaction():
            c.execute(EFFECT, [job.id])
            ctx.complete(c)
        if job.payload.get("raise"):
            raise RuntimeError("after the commit")
        return None

    [back] = enqueue_direct(db, "t.intx.mixed", '{"rollback": true}', backoff="fixed",
                            backoff_base="50 ms")
    [late] = enqueue_direct(db, "t.intx.mixed", '{"raise": true}')
    w = skiplock.Worker(URL, {"t.intx.mixed": handler}, **FAST)
    w.start_thread()
    wait_until(lambda: w.stats.completed == 2, 30, "2 completed")
    w.stop_thread()
    assert (w.stats.failed, w.stats.fenced, w.stats.lost) == (1, 0, 0), w.stats
    assert job(db, back, "state, attempt") == ("completed", 2)
    assert job(db, late, "state, attempt") == ("completed", 1)
    assert ledger() == {back: 1, late: 1}


def test_job_complete_refuses_a_stale_or_repeated_claim(db, ledger, app_conn):
    [job_id] = enqueue_direct(db, "t.intx.sql")
    job_id, fencing = db.execute("SELECT id, fencing FROM skiplock.claim('t', '{t.intx.sql}')"
                                 ).fetchone()
    with pytest.raises(skiplock.FencedError):
        with app_conn.transaction():
            app_conn.execute(EFFECT, [job_id])
            skiplock.job_complete(app_conn, job_id, fencing + 1)
    with app_conn.transaction():
        app_conn.execute(EFFECT, [job_id])
        skiplock.job_complete(app_conn, job_id, fencing, {"ok": 1})
    with pytest.raises(skiplock.FencedError, match="already completed"):
        with app_conn.transaction():  # a retry after a lost COMMIT answer
            app_conn.execute(EFFECT, [job_id])
            skiplock.job_complete(app_conn, job_id, fencing)
    assert ledger() == {job_id: 1}
    assert job(db, job_id, "state, result") == ("completed", {"ok": 1})
