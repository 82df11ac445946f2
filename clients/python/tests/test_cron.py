"""Periodic jobs: workers fire the schedules (skiplock.cron_tick) and apply
those declared in code (skiplock.schedules_declare), through the mode's
URL.  Each test removes its schedules, so the other tests' workers (cron is
on by default) find nothing due."""

import asyncio
import datetime as dt
import itertools
import logging
import os
import re
import signal
import subprocess
import sys
import time

import psycopg
import pytest

import skiplock
from skiplock._cron import BUSY_MAX_S, IDLE_MAX_S, JITTER_S, MIN_S, tick_delay
from conftest import DIRECT_URL, MODE, URL, idle_in_transaction, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
FAST = dict(poll_interval=0.05, rescue_interval=0.2)
_seq = itertools.count(1)


def unique(what):
    return f"t.{what}.{os.getpid()}.{next(_seq)}"


@pytest.fixture
def names(db):
    """Schedule names the test makes (append them): removed at its end."""
    made = []
    yield made
    db.execute("DELETE FROM skiplock.schedules WHERE name = ANY (%s)", [made])
    db.execute("DELETE FROM skiplock.schedule_declarations WHERE name = ANY (%s)", [made])


async def run_workers(count, handlers, seconds, during=None, **kw):
    """`count` workers started at once, run for `seconds` (while `during()`
    runs, if given), then stopped; the workers."""
    ws = [skiplock.Worker(URL, handlers, **{**FAST, **kw}) for _ in range(count)]
    started = await asyncio.gather(*(w.start() for w in ws), return_exceptions=True)
    try:
        for r in started:
            if isinstance(r, BaseException):
                raise r
        await asyncio.gather(asyncio.sleep(seconds), during() if during else asyncio.sleep(0))
    finally:
        await asyncio.gather(*(w.stop() for w in ws))
    return ws


def fires(db, name):
    """The jobs of schedule `name`, one row per unique key, by fire time:
    (key, jobs, run_at, all completed, the key names run_at)."""
    return db.execute(
        "SELECT unique_key, count(*), min(run_at), bool_and(state = 'completed'), "
        "bool_and(unique_key = 'cron:' || %(n)s || ':' || "
        "to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')) "
        "FROM skiplock.all_jobs WHERE starts_with(unique_key, 'cron:' || %(n)s || ':') "
        "GROUP BY unique_key ORDER BY min(run_at)", {"n": name}).fetchall()


def one_job_per_second(db, name, least):
    """One job for each fire time of an @every 1s schedule, none missing
    between the first and the last, at least `least` of them; the rows."""
    rows = fires(db, name)
    assert len(rows) >= least, f"{len(rows)} fire times, want at least {least}"
    for i, (key, n, run_at, _, keyed) in enumerate(rows):
        assert n == 1, f"{n} jobs for {key}"
        assert keyed, f"{key} names its run_at"
        if i:
            assert (run_at - rows[i - 1][2]).total_seconds() == 1, f"a gap before {key}"
    return rows


def cron_logs(caplog, prefix="skiplock worker: cron: "):
    return [r.getMessage() for r in caplog.records
            if r.name == "skiplock" and r.getMessage().startswith(prefix)]


def test_three_workers_one_job_per_fire_time(db, names):
    """@every 1s declared in code by three workers started at once: each
    fire time is one job, none missing, handled while they run."""
    kind, name = unique("every"), unique("every")
    names.append(name)
    handled = []

    async def handler(job, ctx):
        handled.append(job.id)
        return job.payload

    schedules = [{"name": name, "expression": "@every 1s", "kind": kind,
                  "payload": {"from": "code"}}]
    ws = asyncio.run(run_workers(3, {kind: handler}, 6, schedules=schedules))
    rows = one_job_per_second(db, name, 4)
    assert sum(w.stats.cron_enqueued for w in ws) == len(rows), "each job enqueued by one tick"
    assert all(w.stats.cron_ticks >= 3 for w in ws), [w.stats.cron_ticks for w in ws]
    done = sum(1 for r in rows if r[3])
    assert done >= len(rows) - 2, f"{done} of {len(rows)} completed while they ran"
    assert len(handled) == len(set(handled)), "no job handled twice"
    assert {p for (p,) in db.execute("SELECT payload::text FROM skiplock.all_jobs WHERE kind = %s",
                                     [kind])} == {'{"from": "code"}'}
    assert idle_in_transaction(db) == 0


def test_cron_false_fires_nothing(db, names):
    """cron=False: the schedules it declares are applied, none fired."""
    kind, name = unique("off"), unique("off")
    names.append(name)
    [w] = asyncio.run(run_workers(1, {kind: lambda job, ctx: None}, 3, cron=False,
                                  schedules=[{"name": name, "expression": "@every 1s",
                                              "kind": kind}]))
    assert (w.stats.cron_ticks, w.stats.cron_failures, w.last_tick) == (0, 0, None)
    row = db.execute("SELECT last_fire, next_fire < now() FROM skiplock.schedules "
                     "WHERE name = %s", [name]).fetchone()
    assert row == (None, True), "declared, due, never fired"
    assert fires(db, name) == []


def test_rolling_deploy_never_flaps(db, names, caplog):
    """v1 and v2 started alternately after v2's first start: the definition
    changes once, to v2; each v1 start logs superseded; force applies v1."""
    kind, name = unique("deploy"), unique("deploy")
    names.append(name)
    v1 = [{"name": name, "expression": "0 2 * * *", "kind": kind}]
    v2 = [{"name": name, "expression": "0 3 * * *", "kind": kind}]

    def start(schedules, **kw):
        async def main():
            w = skiplock.Worker(URL, {kind: lambda job, ctx: None}, schedules=schedules, **kw)
            await w.start()
            await w.stop()
        asyncio.run(main())

    def definition():
        return db.execute("SELECT expression, updated_at FROM skiplock.schedules "
                          "WHERE name = %s", [name]).fetchone()

    def superseded():
        return [r.getMessage() for r in caplog.records if "superseded" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="skiplock"):
        start(v1)
        assert definition()[0] == "0 2 * * *"
        start(v2)
        d2 = definition()
        assert d2[0] == "0 3 * * *"
        for i in range(10):
            before = len(superseded())
            start(v1 if i % 2 == 0 else v2)
            assert definition() == d2, f"start {i + 1} changed the schedule"
            assert len(superseded()) - before == (1 if i % 2 == 0 else 0), f"start {i + 1}"
        assert re.match(
            f'schedule "{re.escape(name)}" not applied, superseded: kept the definition set at '
            r"\S+Z; this one was first declared at \S+Z and has been replaced since",
            superseded()[0]), superseded()[0]
        start(v1, schedules_force=True)
        assert definition()[0] == "0 2 * * *", "force applied v1"
        assert len(superseded()) == 5
    [d] = skiplock.declare_schedules(db, v2)
    assert (d.name, d.action) == (name, "superseded"), "v2 is now the replaced one"
    assert skiplock.declare_schedules(db, v1) == [skiplock.Declared(name, "unchanged", None)]


def test_declare_schedules_without_a_worker(db, names, app_conn):
    """On a connection outside a transaction: committed on its own; in the
    caller's transaction: with it; on an AsyncConnection: awaited."""
    kind, a, b = unique("decl"), unique("decl"), unique("decl")
    names.extend([a, b])
    spec = {"name": a, "expression": "@hourly", "kind": kind, "queue": "q", "priority": 3,
            "max_attempts": 2, "catch_up": "none", "zone": "Europe/Berlin",
            "payload": {"x": [1, 2]}}
    assert skiplock.declare_schedules(app_conn, [spec]) == [skiplock.Declared(a, "created", None)]
    assert app_conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    row = db.execute("SELECT expression, zone, queue, priority, max_attempts, catch_up, "
                     "payload FROM skiplock.schedules WHERE name = %s", [a]).fetchone()
    assert row == ("@hourly", "Europe/Berlin", "q", 3, 2, "none", {"x": [1, 2]})
    with pytest.raises(RuntimeError):
        with app_conn.transaction():
            skiplock.declare_schedules(app_conn, [{"name": b, "expression": "@daily",
                                                   "kind": kind}])
            raise RuntimeError("the caller's transaction rolls back")
    assert db.execute("SELECT count(*) FROM skiplock.schedules WHERE name = %s",
                      [b]).fetchone()[0] == 0

    async def on_async():
        async with await psycopg.AsyncConnection.connect(URL, prepare_threshold=None) as c:
            return await skiplock.declare_schedules(c, [spec], force=True)
    assert asyncio.run(on_async()) == [skiplock.Declared(a, "unchanged", None)]


BAD = [
    ("a malformed expression", {"expression": "30 25 * * *"},
     'invalid cron expression "30 25 * * *": hour field, character 4: 25 is out of range 0-23'),
    ("an unknown zone", {"expression": "30 2 * * *", "zone": "Mars/Base"},
     'unknown time zone "Mars/Base" (not in the tz database)'),
]


@pytest.mark.parametrize("what,spec,why", BAD, ids=[b[0] for b in BAD])
def test_a_bad_schedule_fails_start_and_writes_nothing(db, what, spec, why):
    kind, good = unique("bad"), unique("good")
    app = f"skl-py-cron-bad-{os.getpid()}"
    ok = {"name": good, "expression": "@daily", "kind": kind}
    bad = {"name": "nightly", "kind": kind, **spec}
    for schedules, n in [([bad], 1), ([ok, bad], 2)]:
        message = f'schedule {n} ("nightly"): {why}'
        w = skiplock.Worker(URL, {kind: lambda job, ctx: None}, schedules=schedules,
                            connect_kwargs={"application_name": app})
        t0 = time.monotonic()
        with pytest.raises(skiplock.PermanentError) as err:
            asyncio.run(w.start())
        assert time.monotonic() - t0 < 5
        assert (str(err.value), err.value.sqlstate) == (f"{message} (SQLSTATE 22023)", "22023")
        assert err.value.__cause__.diag.message_primary == message
        with pytest.raises(skiplock.PermanentError) as err:
            skiplock.declare_schedules(db, schedules)
        assert str(err.value) == f"{message} (SQLSTATE 22023)"
    rows = db.execute("SELECT name FROM skiplock.schedules WHERE name IN (%(a)s, %(b)s) "
                      "UNION ALL SELECT name FROM skiplock.schedule_declarations "
                      "WHERE name IN (%(a)s, %(b)s)", {"a": "nightly", "b": good}).fetchall()
    assert rows == [], "nothing written"
    if MODE == "direct":
        n = db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                       [app]).fetchone()[0]
        assert n == 0, "the worker closed its connection"


def test_bad_options_are_type_errors():
    def make(**kw):
        return skiplock.Worker(URL, {"k": lambda job, ctx: None}, **kw)
    for kw, msg in [({"schedules": {"name": "x"}}, "schedules must be a list"),
                    ({"schedules": ["x"]}, r"schedules\[0\] must be a mapping"),
                    ({"schedules": [{"payload": {1, 2}}]}, "not JSON"),
                    ({"cron": "yes"}, "cron must be True or False"),
                    ({"schedules_force": 1}, "schedules_force must be True or False")]:
        with pytest.raises(TypeError, match=msg):
            make(**kw)
    with pytest.raises(TypeError, match="psycopg Connection"):
        skiplock.declare_schedules(URL, [])
    with pytest.raises(TypeError, match="force must be True or False"):
        skiplock.declare_schedules(None, [], force="yes")


def test_tick_timing():
    """The next tick: next_due - db_now within [1 s, cap] (cap 5 s busy,
    5 min idle), a little jitter after a fire time, up to a tenth more
    after the cap, never less."""
    lo, hi = (lambda: 0.0), (lambda: 1.0)
    for due_in, busy, low, high in [
            (None, True, BUSY_MAX_S, BUSY_MAX_S * 1.1), (None, False, IDLE_MAX_S, IDLE_MAX_S * 1.1),
            (-3.0, True, MIN_S, MIN_S + MIN_S / 4), (0.2, False, MIN_S, MIN_S + MIN_S / 4),
            (3.0, True, 3.0, 3.0 + JITTER_S), (10.0, True, BUSY_MAX_S, BUSY_MAX_S * 1.1),
            (100.0, False, 100.0, 100.0 + JITTER_S), (3600.0, False, IDLE_MAX_S, IDLE_MAX_S * 1.1)]:
        assert (tick_delay(due_in, busy, lo), tick_delay(due_in, busy, hi)) == (low, high), due_in


def test_an_unevaluable_schedule_is_logged_once(db, names, caplog):
    """A stored schedule no tick can evaluate: logged once (not at every
    tick), the others keep firing."""
    kind, good, broken = unique("broken"), unique("good"), unique("broken")
    names.extend([good, broken])
    skiplock.declare_schedules(db, [{"name": broken, "expression": "* * * * *", "kind": kind}])
    # a stored value no tick can evaluate (the declaration would refuse it)
    db.execute("UPDATE skiplock.schedules SET expression = '30 25 * * *', next_fire = now() "
               "WHERE name = %s", [broken])
    with caplog.at_level(logging.WARNING, logger="skiplock"):
        [w] = asyncio.run(run_workers(1, {kind: lambda job, ctx: None}, 4.5, schedules=[
            {"name": good, "expression": "@every 1s", "kind": kind}]))
    assert cron_logs(caplog) == [
        f'skiplock worker: cron: 1 schedule(s) could not be evaluated; schedule "{broken}": '
        'invalid cron expression "30 25 * * *": hour field, character 4: 25 is out of range 0-23']
    assert w.stats.cron_ticks >= 3 and w.last_tick.failed == 1
    one_job_per_second(db, good, 3)


async def terminate_ticks(app):
    """Holds the schedules table as `cron apply` does, so that a tick blocks
    in its UPDATE; terminates the workers' backends blocked there; lets go."""
    connect = psycopg.AsyncConnection.connect
    async with await connect(DIRECT_URL) as c, await connect(DIRECT_URL, autocommit=True) as a:
        await c.execute("LOCK TABLE skiplock.schedules IN SHARE ROW EXCLUSIVE MODE")
        end = time.monotonic() + 5
        while True:  # pg_stat_activity is read outside c's transaction (its snapshot)
            cur = await a.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND "
                "wait_event_type = 'Lock' AND query LIKE '%%skiplock.cron_tick()%%'", [app])
            pids = [r[0] for r in await cur.fetchall()]
            if pids or time.monotonic() > end:
                break
            await asyncio.sleep(0.02)
        assert pids, "a tick blocked on the lock"
        cur = await a.execute("SELECT bool_and(pg_terminate_backend(p)) FROM unnest(%s::int[]) p",
                              [pids])
        assert (await cur.fetchone())[0], "terminated"
        await c.rollback()


def test_terminated_backends_while_ticking(db, names, caplog):
    """Backends terminated in the middle of ticks: the workers keep firing,
    still one job per fire time, nothing left idle in a transaction."""
    kind, name = unique("kill"), unique("kill")
    names.append(name)
    app = f"skl-py-cron-kill-{os.getpid()}"
    resumed = []

    async def during():
        await asyncio.sleep(2)
        await terminate_ticks(app)
        await asyncio.sleep(0.5)
        await terminate_ticks(app)
        resumed.append(db.execute("SELECT now()").fetchone()[0])

    with caplog.at_level(logging.WARNING, logger="skiplock"):
        ws = asyncio.run(run_workers(
            2, {kind: lambda job, ctx: None}, 9, during,
            schedules=[{"name": name, "expression": "@every 1s", "kind": kind}],
            connect_kwargs={"application_name": app}))
    rows = one_job_per_second(db, name, 6)
    after = sum(1 for r in rows if r[2] > resumed[0])
    assert after >= 3, f"{after} fire times after the backends were terminated"
    assert sum(w.stats.cron_failures for w in ws) >= 1
    failed = cron_logs(caplog, "skiplock worker: cron: the tick failed: ")
    assert 1 <= len(failed) <= len(ws), f"at most once a minute per worker: {failed}"
    assert all(w.stats.cron_ticks >= 5 for w in ws), [w.stats.cron_ticks for w in ws]
    assert idle_in_transaction(db) == 0


def test_an_idle_worker_ticks_once_in_10_s(db, names):
    """One schedule due in an hour, no jobs: the worker ticks once at start,
    counted by pg_stat_statements (and by the worker).  A schedule declared
    meanwhile wakes it where it LISTENs (direct); polling (pooled) it waits
    for its next re-check, minutes away."""
    db.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def calls():
        return db.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE dbid = "
            "(SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND query LIKE '%skiplock.cron_tick()%'").fetchone()[0]

    kind, daily, woken = unique("idle"), unique("daily"), unique("woken")
    names.extend([daily, woken])
    h, m = db.execute("SELECT extract(hour FROM t)::int, extract(minute FROM t)::int FROM "
                      "(SELECT (now() + interval '61 minutes') AT TIME ZONE 'UTC' AS t) x"
                      ).fetchone()
    skiplock.declare_schedules(db, [{"name": daily, "expression": f"{m} {h} * * *",
                                     "kind": kind}])
    before = calls()
    [w] = asyncio.run(run_workers(1, {kind: lambda job, ctx: None}, 10))
    assert w.stats.cron_ticks == 1, f"{w.stats.cron_ticks} ticks, one at start"
    assert calls() - before == 1, "the database ran cron_tick once"
    assert w.last_tick.due_in > 3540, f"next due in {w.last_tick.due_in} s"

    async def declare():
        await asyncio.sleep(0.5)
        skiplock.declare_schedules(db, [{"name": woken, "expression": "@every 1s",
                                         "kind": kind}])
    [w] = asyncio.run(run_workers(1, {kind: lambda job, ctx: None}, 4.5, declare))
    fired = len(fires(db, woken))
    if MODE == "direct":
        assert fired >= 2, f"woken by the notification: {fired} fire times"
    else:
        assert (fired, w.stats.cron_ticks) == (0, 1), "no notification, no tick before re-check"


def test_the_periodic_jobs_example_on_two_replicas(db, names, tmp_path):
    """examples/periodic_jobs.py on two replicas: each heartbeat fire time
    handled once, 2 s apart; both exit 0 on SIGTERM."""
    names.extend(["sessions-cleanup", "heartbeat"])
    db.execute("CREATE TABLE sessions (id bigserial PRIMARY KEY, expires_at timestamptz NOT NULL)")
    env = dict(os.environ, DATABASE_URL=URL, PYTHONPATH=os.path.join(HERE, "..", "src"))
    logs = [tmp_path / f"replica{i}.log" for i in range(2)]
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "..", "examples",
                                                            "periodic_jobs.py")],
                              stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env)
             for log in logs]

    def lines():
        return [ln for log in logs for ln in log.read_text().splitlines()]
    try:
        wait_until(lambda: sum(ln.startswith("up:") for ln in lines()) == 2, 20, "both up")
        wait_until(lambda: sum(ln.startswith("heartbeat for ") for ln in lines()) >= 3, 20,
                   "three heartbeats")
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        codes = [p.wait(30) for p in procs]
        db.execute("DROP TABLE sessions")
        db.execute("DELETE FROM skiplock.jobs WHERE kind = 'heartbeat'")
    assert codes == [0, 0], lines()
    times = sorted(dt.datetime.fromisoformat(ln.split()[2]) for ln in lines()
                   if ln.startswith("heartbeat for "))
    assert len(set(times)) == len(times), f"each fire time once: {lines()}"
    assert all((b - a).total_seconds() == 2 for a, b in zip(times, times[1:])), "none missed"
    rows = db.execute("SELECT name, zone, payload FROM skiplock.schedules WHERE name = ANY (%s) "
                      "ORDER BY name", [names]).fetchall()
    assert rows == [("heartbeat", "UTC", {}),
                    ("sessions-cleanup", "Europe/Berlin", {"grace_days": 7})]
