"""Flow control through the client: jobs that wait for other jobs
(enqueue's depends_on / depends_on_keys / on_parent_failure, enqueue_batch,
waits_for), run by the Worker, and the Worker's claim again at a limit's
wait hint (docs/flow-control.md)."""

import asyncio
import threading
import time

import psycopg
import pytest

import skiplock
from conftest import URL, job, wait_until

FAST = dict(poll_interval=0.05, rescue_interval=0.2, cron=False)


class Log:
    """What the handlers did, in order: (name, 'start' | 'finish', when)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.events = []

    def add(self, name, what):
        with self.lock:
            self.events.append((name, what, time.monotonic()))

    def at(self, name, what):
        """The times `name` did `what`."""
        return [t for n, w, t in self.events if (n, w) == (name, what)]

    def handler(self, name_of, seconds=0.0, discard=lambda job: False):
        def run(job, ctx):
            name = name_of(job)
            self.add(name, "start")
            time.sleep(seconds)
            self.add(name, "finish")
            if discard(job):
                raise skiplock.Discard(f"{name} fails for good")
            return {"ran": name}
        return run


def run_workers(handlers, done, n=1, timeout=30.0, **kw):
    """n Workers on `handlers` until done() holds."""
    workers = [skiplock.Worker(URL, handlers, **{**FAST, **kw}) for _ in range(n)]
    for w in workers:
        w.start_thread()
    try:
        wait_until(done, timeout, "the jobs to finish")
    finally:
        for w in workers:
            w.stop_thread()
    return workers


def states(db, ids):
    rows = db.execute("SELECT id, state FROM skiplock.all_jobs WHERE id = ANY (%s)",
                      [list(ids)]).fetchall()
    return [dict(rows).get(i) for i in ids]


@pytest.fixture
def deps_db(db):
    db.execute("DELETE FROM skiplock.job_waits")
    db.execute("CREATE TABLE IF NOT EXISTS deps_app_rows (note text)")
    db.execute("DELETE FROM deps_app_rows")
    yield db
    db.execute("DELETE FROM skiplock.job_waits")


def test_diamond_runs_each_job_once_after_its_parents(deps_db, app_conn):
    """A -> B, C -> D, enqueued in the app's transaction: D by B's id and
    C's unique key, C by A's unique key."""
    log = Log()
    with app_conn.transaction():
        a = skiplock.enqueue(app_conn, "deps.diamond", {"name": "A"}, unique_key="diamond-a")
        b = skiplock.enqueue(app_conn, "deps.diamond", {"name": "B"}, depends_on=[a])
        c = skiplock.enqueue(app_conn, "deps.diamond", {"name": "C"}, unique_key="diamond-c",
                             depends_on_keys=["diamond-a"])
        d = skiplock.enqueue(app_conn, "deps.diamond", {"name": "D"}, depends_on=(b,),
                             depends_on_keys=["diamond-c"])
    assert skiplock.waits_for(app_conn, d) == "dependencies: 2 of 2 parent(s) not finished"
    assert skiplock.waits_for(app_conn, a) == "due: waiting for a worker"
    app_conn.commit()
    run_workers({"deps.diamond": log.handler(lambda j: j.payload["name"], 0.2)},
                lambda: states(deps_db, [d]) == ["completed"], concurrency=4)
    assert states(deps_db, [a, b, c, d]) == ["completed"] * 4
    assert [len(log.at(n, "start")) for n in "ABCD"] == [1, 1, 1, 1], log.events
    assert min(log.at("B", "start") + log.at("C", "start")) > log.at("A", "finish")[0]
    assert log.at("D", "start")[0] > max(log.at("B", "finish") + log.at("C", "finish")), \
        log.events
    assert job(deps_db, d, "attempt") == (1,)
    assert skiplock.waits_for(app_conn, d) is None  # finished: not available


def test_batch_callback_runs_once_after_every_child(deps_db, app_conn):
    """30 children on two Workers, child 7 discarded: the callback runs
    once, after all of them, with the batch's counts in its payload."""
    log, payloads = Log(), []

    def callback(job, ctx):
        payloads.append(job.payload)
        log.add("callback", "start")

    with app_conn.transaction():
        ids = skiplock.enqueue_batch(app_conn, "deps.child", [{"i": i} for i in range(30)],
                                     "deps.callback", callback_payload={"album": 1},
                                     max_attempts=3)
    assert len(ids) == 31 and len(set(ids)) == 31
    assert job(deps_db, ids[-1], "kind, max_attempts") == ("deps.callback", 3)
    handlers = {"deps.child": log.handler(lambda j: j.payload["i"], 0.02,
                                          discard=lambda j: j.payload["i"] == 7),
                "deps.callback": callback}
    run_workers(handlers, lambda: states(deps_db, ids[-1:]) == ["completed"], n=2,
                concurrency=4)
    time.sleep(0.3)  # a second run of the callback would show by now
    assert len(payloads) == 1, payloads
    assert payloads[0] == {"album": 1, "batch": {"size": 30, "completed": 29, "discarded": 1,
                                                 "cancelled": 0}}
    finishes = [t for n, w, t in log.events if w == "finish"]
    assert len(finishes) == 30 and log.at("callback", "start")[0] > max(finishes)
    assert sorted(states(deps_db, ids[:30])) == ["completed"] * 29 + ["discarded"]


def test_a_failed_parent_cancels_a_default_child_and_runs_a_run_child(deps_db):
    """Enqueued on an AsyncConnection, in its transaction."""
    log = Log()

    async def enqueue():
        async with await psycopg.AsyncConnection.connect(URL, prepare_threshold=None) as conn:
            async with conn.transaction():
                parent = await skiplock.enqueue(conn, "deps.parent", {"name": "P"})
                cancelled = await skiplock.enqueue(conn, "deps.kid", {"name": "cancel"},
                                                   depends_on=[parent])
                runs = await skiplock.enqueue(conn, "deps.kid", {"name": "run"},
                                              depends_on=[parent], on_parent_failure="run")
                grandchild = await skiplock.enqueue(conn, "deps.kid", {"name": "grand"},
                                                    depends_on=[cancelled],
                                                    on_parent_failure="cancel")
            return parent, cancelled, runs, grandchild

    ids = asyncio.run(enqueue())
    handlers = {"deps.parent": log.handler(lambda j: j.payload["name"], discard=lambda j: True),
                "deps.kid": log.handler(lambda j: j.payload["name"])}
    run_workers(handlers, lambda: states(deps_db, ids[2:3]) == ["completed"])
    assert states(deps_db, ids) == ["discarded", "cancelled", "completed", "cancelled"]
    assert [n for n, w, _ in log.events if w == "start"] == ["P", "run"]


def count_written(conn, kind):
    """(jobs of `kind`, app rows) as `conn` sees them."""
    return conn.execute("SELECT (SELECT count(*) FROM skiplock.all_jobs WHERE kind = %s), "
                        "(SELECT count(*) FROM deps_app_rows)", [kind]).fetchone()


@pytest.mark.parametrize("opts, sqlstate", [
    ({"depends_on": [2 ** 62]}, "23503"),
    ({"depends_on_keys": ["no-such-key"]}, "23503"),
    ({"on_parent_failure": "sometimes"}, "22023"),
])
def test_refused_dependencies_write_nothing(deps_db, app_conn, opts, sqlstate):
    """The error carries the SQLSTATE; the call wrote nothing, and the
    caller's transaction goes on (a savepoint) until it rolls back."""
    [parent] = deps_db.execute("SELECT skiplock.enqueue(kind => 'deps.bad.parent')").fetchone()
    if "on_parent_failure" in opts:
        opts = {**opts, "depends_on": [parent]}
    with app_conn.transaction(force_rollback=True):
        app_conn.execute("INSERT INTO deps_app_rows VALUES ('the app row')")
        with pytest.raises(skiplock.PermanentError) as e:
            with app_conn.transaction():
                skiplock.enqueue(app_conn, "deps.bad", {}, **opts)
        assert e.value.sqlstate == sqlstate, e.value
        assert count_written(app_conn, "deps.bad") == (0, 1)
        skiplock.enqueue(app_conn, "deps.bad", {}, depends_on=[parent])
        assert count_written(app_conn, "deps.bad") == (1, 1)
    assert count_written(deps_db, "deps.bad") == (0, 0)


def test_batch_size_is_refused_by_the_database(deps_db, app_conn):
    for payloads in ([], [{}] * 1001):
        with pytest.raises(skiplock.PermanentError) as e:
            with app_conn.transaction():
                skiplock.enqueue_batch(app_conn, "deps.bad", payloads, "deps.bad.cb")
        assert e.value.sqlstate == "22023", e.value
    assert count_written(deps_db, "deps.bad") == (0, 0)


@pytest.mark.parametrize("call, message", [
    (lambda c: skiplock.enqueue(c, "k", depends_on="12"), "depends_on must be a list of job"),
    (lambda c: skiplock.enqueue(c, "k", depends_on=[1, "2"]), "depends_on must be a list"),
    (lambda c: skiplock.enqueue(c, "k", depends_on=[True]), "depends_on must be a list"),
    (lambda c: skiplock.enqueue(c, "k", depends_on=3), "depends_on must be a list"),
    (lambda c: skiplock.enqueue(c, "k", depends_on_keys="a"), "depends_on_keys must be a list"),
    (lambda c: skiplock.enqueue(c, "k", depends_on_keys=[1]), "depends_on_keys must be a list"),
    (lambda c: skiplock.enqueue(c, "k", depends_on=[1], on_parent_failure=True),
     "on_parent_failure must be 'cancel' or 'run', not bool"),
    (lambda c: skiplock.enqueue(c, "k", dependson=[1]), "unknown option 'dependson'"),
    (lambda c: skiplock.enqueue_batch(c, "k", "[{}]", "cb"), "payloads must be a list"),
    (lambda c: skiplock.enqueue_batch(c, "k", {"a": 1}, "cb"), "payloads must be a list"),
    (lambda c: skiplock.enqueue_batch(c, "k", [{}], None), "callback_kind must be a str"),
    (lambda c: skiplock.enqueue_batch(c, 1, [{}], "cb"), "kind must be a str"),
    (lambda c: skiplock.enqueue_batch(c, "k", [{}], "cb", priority="1"),
     "priority must be an int"),
    (lambda c: skiplock.enqueue_batch(c, "k", [{}], "cb", queue=5), "queue must be a str"),
    (lambda c: skiplock.waits_for(c, "1"), "job_id must be a job id"),
])
def test_type_errors_before_any_statement(deps_db, app_conn, call, message):
    with app_conn.transaction():
        with pytest.raises(TypeError, match=message):
            call(app_conn)
        app_conn.execute("SELECT 1")  # nothing was sent: the transaction is fine
    assert count_written(deps_db, "k") == (0, 0)


def test_waits_for(deps_db, app_conn):
    assert skiplock.waits_for(app_conn, 2 ** 62) is None
    [later] = deps_db.execute("SELECT skiplock.enqueue(kind => 'deps.later', "
                              "run_at => now() + interval '1 hour')").fetchone()
    assert skiplock.waits_for(app_conn, later).startswith("due at ")


def test_worker_claims_again_at_the_limits_wait_hint(deps_db):
    """5 starts a second, 15 jobs, one Worker polling every 5 to 10 s: done
    in three claims a second apart (under 4.5 s only if the worker claims
    again at the wait hint), and no 1 s window started more than 5."""
    kind = "deps.limited"
    deps_db.execute("SELECT skiplock.limit_set(kind => %s, rate => 5, per => '1 second')", [kind])
    try:
        deps_db.execute("SELECT skiplock.enqueue(kind => %s) FROM generate_series(1, 15)", [kind])
        started = time.monotonic()
        run_workers({kind: lambda job, ctx: None},
                    lambda: states_of(deps_db, kind) == [("completed", 15)], timeout=20,
                    concurrency=10, poll_interval=10, rescue_interval=60)
        took = time.monotonic() - started
    finally:
        deps_db.execute("SELECT skiplock.limit_remove(kind => %s)", [kind])
    assert took < 4.5, f"15 jobs at 5/s took {took:.2f} s"
    [most, attempts] = deps_db.execute(
        "SELECT max((SELECT count(*) FROM skiplock.all_jobs b WHERE b.kind = a.kind "
        "AND b.attempted_at >= a.attempted_at "
        "AND b.attempted_at < a.attempted_at + interval '1 second')), max(attempt) "
        "FROM skiplock.all_jobs a WHERE a.kind = %s", [kind]).fetchone()
    assert (most, attempts) == (5, 1)


def states_of(db, kind):
    return db.execute("SELECT state, count(*) FROM skiplock.all_jobs WHERE kind = %s GROUP BY 1",
                      [kind]).fetchall()
