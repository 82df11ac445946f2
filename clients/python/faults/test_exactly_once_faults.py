"""Exactly one effect per job under faults (docs/protocol.md, "The effect
pattern"): Python workers whose handlers complete their jobs in the
effect's transaction (ctx.complete), SIGKILLed mid-effect while backends
are terminated.  Run by clients/python/run-tests.sh MODE faults (CTest
client.python.faults.{direct,pooled}).

SKIPLOCK_FAULT_PATTERN=fence runs the same faults over the fence-only
pattern (ctx.fence, the outcome recorded afterwards): it then fails, with
jobs whose effect was applied twice.
"""

import os
import random
import signal
import subprocess
import sys
import time

import psycopg
import pytest

URL = os.environ["SKIPLOCK_TEST_URL"]
DIRECT_URL = os.environ["SKIPLOCK_TEST_DIRECT_URL"]
HERE = os.path.dirname(os.path.abspath(__file__))
JOBS = 3000
WORKERS = 3
CHAOS_S = 40  # the faults stop after this, or once 90 % of the jobs are done
FINISH_S = 90  # then every job must be finished within this


@pytest.fixture
def db():
    with psycopg.connect(DIRECT_URL, autocommit=True) as conn:
        conn.execute("DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs; "
                     "DROP TABLE IF EXISTS public.ledger; "
                     "CREATE TABLE public.ledger (job_id bigint PRIMARY KEY, n int NOT NULL)")
        yield conn


class Fleet:
    """Worker processes (fault_worker.py), each in its own session."""

    def __init__(self, kind, pattern, logdir):
        self.kind, self.pattern, self.logdir = kind, pattern, logdir
        self.procs = []
        self.started = 0

    def start(self, crash=False):
        self.started += 1
        owner = f"fault-{self.pattern}-{self.started}"
        log = open(os.path.join(self.logdir, owner + ".log"), "w")
        args = [sys.executable, os.path.join(HERE, "fault_worker.py"), URL, self.kind,
                self.pattern, owner] + (["crash"] if crash else [])
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.procs.append(p)
        return p

    def kill_one(self):
        live = [p for p in self.procs if p.poll() is None]
        victim = random.choice(live)
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        self.procs.remove(victim)

    def ready(self, p, timeout=30):
        """Waits until p has started its worker (a SIGTERM before would
        kill it, not stop it)."""
        end = time.monotonic() + timeout
        path = os.path.join(self.logdir, p.args[5] + ".log")
        while p.poll() is None and time.monotonic() < end:
            with open(path) as f:
                if " ready\n" in f.read():
                    return
            time.sleep(0.05)

    def stop(self):
        codes = []
        for p in self.procs:
            self.ready(p)
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            codes.append(p.wait(timeout=30))
        return codes

    def logs(self):
        out = []
        for name in sorted(os.listdir(self.logdir)):
            with open(os.path.join(self.logdir, name)) as f:
                out.append(f"--- {name}\n" + "".join(f.readlines()[-15:]))
        return "\n".join(out)


def count(db, sql, *args):
    return db.execute(sql, args).fetchone()[0]


def wait_finished(db, kind, timeout, fleet):
    end = time.monotonic() + timeout
    while count(db, "SELECT count(*) FROM skiplock.jobs WHERE kind = %s", kind) > 0:
        if time.monotonic() > end:
            raise AssertionError(f"jobs of {kind} unfinished after {timeout} s\n{fleet.logs()}")
        time.sleep(0.1)


def terminate_one(db):
    """pg_terminate_backend of one random backend of this database (a
    worker's claims, heartbeats or effect; through PgBouncer, a server
    connection it shares), never this checker's."""
    return count(db, "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid "
                     "FROM pg_stat_activity WHERE datname = current_database() "
                     "AND pid <> pg_backend_pid() AND backend_type = 'client backend' "
                     "ORDER BY random() LIMIT 1) x")


def test_killed_and_terminated_every_effect_exactly_once(db, tmp_path):
    pattern = os.environ.get("SKIPLOCK_FAULT_PATTERN", "in_tx")
    kind = "fault.ledger"
    db.execute("SELECT count(skiplock.enqueue(%s, max_attempts => 1000, backoff => 'fixed', "
               "backoff_base => '50 ms')) FROM generate_series(1, %s)", [kind, JOBS])
    fleet = Fleet(kind, pattern, str(tmp_path))
    for _ in range(WORKERS):
        fleet.start()
    kills = terminated = rounds = 0
    start = time.monotonic()
    try:
        while time.monotonic() - start < CHAOS_S:
            time.sleep(0.25)
            rounds += 1
            left = count(db, "SELECT count(*) FROM skiplock.jobs WHERE kind = %s", kind)
            if left < JOBS // 10:
                break  # the tail is left to the survivors
            terminated += terminate_one(db)
            if rounds % 3 == 0:  # a worker dies mid-effect; another takes its place
                fleet.kill_one()
                fleet.start()
                kills += 1
        wait_finished(db, kind, FINISH_S, fleet)
        time.sleep(0.5)
        idle_in_tx = count(db, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                               "current_database() AND state LIKE 'idle in transaction%%'")
        locks = count(db, "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = "
                          "l.database WHERE l.locktype = 'advisory' AND d.datname = "
                          "current_database()")
    finally:
        codes = fleet.stop()
    took = time.monotonic() - start
    again = count(db, "SELECT count(*) FROM skiplock.all_jobs WHERE kind = %s AND attempt > 1",
                  kind)
    doubled = db.execute("SELECT job_id, n FROM public.ledger WHERE n > 1 ORDER BY job_id"
                         ).fetchall()
    print(f"\n{pattern}: {kills} workers SIGKILLed, {terminated} backends terminated, "
          f"{took:.1f} s; {again} jobs ran more than once, {len(doubled)} effects applied "
          f"more than once")
    assert codes == [0] * len(codes), f"workers exited with {codes}\n{fleet.logs()}"
    assert kills >= 3 and terminated >= 10, (kills, terminated)
    assert count(db, "SELECT count(*) FROM skiplock.all_jobs WHERE kind = %s AND state = "
                     "'completed'", kind) == JOBS, "lost jobs"
    assert count(db, "SELECT count(*) FROM skiplock.jobs WHERE state = 'running'") == 0
    assert count(db, "SELECT count(*) FROM public.ledger") == JOBS, "jobs without an effect"
    assert doubled == [], f"{len(doubled)} effects applied more than once: {doubled[:10]}"
    assert (idle_in_tx, locks) == (0, 0)


@pytest.mark.parametrize("pattern,applied", [("fence", 2), ("in_tx", 1)])
def test_the_crash_window(db, tmp_path, pattern, applied):
    """Deterministic: the worker is SIGKILLed right after its effect's
    COMMIT.  With the fence only the job is still running; its lease
    expires and the next attempt, under a new token, passes its own fence
    and applies the effect again.  Completed in the effect's transaction,
    the job is finished: nothing runs again."""
    kind = f"fault.crash.{pattern}"
    job_id = count(db, "SELECT skiplock.enqueue(%s)", kind)
    fleet = Fleet(kind, pattern, str(tmp_path))
    first = fleet.start(crash=True)
    assert first.wait(timeout=30) == -signal.SIGKILL, fleet.logs()
    fleet.procs.remove(first)
    assert count(db, "SELECT n FROM public.ledger WHERE job_id = %s", job_id) == 1
    fleet.start()
    try:
        wait_finished(db, kind, 30, fleet)
    finally:
        assert fleet.stop() == [0], fleet.logs()
    state, attempt = db.execute("SELECT state, attempt FROM skiplock.all_jobs WHERE id = %s",
                                [job_id]).fetchone()
    assert state == "completed"
    assert count(db, "SELECT n FROM public.ledger WHERE job_id = %s", job_id) == applied, \
        f"{pattern}: completed at attempt {attempt}"
