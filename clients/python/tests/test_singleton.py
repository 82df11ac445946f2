"""Singletons across processes (skiplock.run_singleton): the nightly
reconcile of examples/nightly_reconcile.py runs once with N replicas; a
SIGKILLed holder is replaced within about the ttl; a SIGSTOPped holder is
replaced and, woken, writes nothing (its fence refuses it); exactly one
replica runs at a time, as the fenced ticks in the database show."""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from conftest import URL, idle_in_transaction, lease_row, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")
ENV = dict(os.environ, DATABASE_URL=URL, PYTHONPATH=os.path.join(HERE, "..", "src"))


def spawn(args, log_path):
    with open(log_path, "w") as log:
        return subprocess.Popen([sys.executable, *args], stdout=log, stderr=subprocess.STDOUT,
                                env=ENV, start_new_session=True)


@pytest.fixture
def refunds(db):
    db.execute("DROP TABLE IF EXISTS refunds, reconcile_runs; "
               "CREATE TABLE refunds (id bigint PRIMARY KEY, amount bigint NOT NULL, "
               "                      processed_at timestamptz, processed_by bigint); "
               "CREATE TABLE reconcile_runs (day date PRIMARY KEY, fencing bigint NOT NULL, "
               "                             refunds int NOT NULL); "
               "INSERT INTO refunds (id, amount) SELECT i, i * 100 "
               "  FROM generate_series(1, 400) i")
    yield
    db.execute("DROP TABLE refunds, reconcile_runs")


def run_replicas(n, tmp_path, tag):
    procs = [spawn([os.path.join(EXAMPLES, "nightly_reconcile.py")],
                   tmp_path / f"{tag}{i}.log") for i in range(n)]
    for p in procs:
        assert p.wait(60) == 0, (tmp_path / f"{tag}{procs.index(p)}.log").read_text()
    return sorted((tmp_path / f"{tag}{i}.log").read_text().strip() for i in range(n))


def test_nightly_reconcile_runs_once_with_n_replicas(db, refunds, tmp_path):
    """Four replicas start the nightly reconcile at once
    through the mode's URL (PgBouncer in transaction mode when pooled,
    where session advisory locks let both run): one reconciles every
    refund once, the others skip; a second night's start does nothing."""
    out = run_replicas(4, tmp_path, "night")
    ran = [line for line in out if line.startswith("reconciled")]
    assert len(ran) == 1 and ran[0].startswith("reconciled 400 refunds"), out
    assert all(line.startswith("skipped") for line in out if line not in ran), out
    runs = db.execute("SELECT fencing, refunds FROM reconcile_runs").fetchall()
    assert len(runs) == 1 and runs[0][1] == 400
    by = db.execute("SELECT processed_by, count(*) FROM refunds GROUP BY 1").fetchall()
    assert by == [(runs[0][0], 400)]  # every refund once, all under the one run's token
    again = run_replicas(2, tmp_path, "again")
    assert all(line.startswith("skipped") for line in again), again
    assert db.execute("SELECT count(*) FROM reconcile_runs").fetchone()[0] == 1
    assert lease_row(db, "nightly-reconcile")[2] is False  # released, not leaked
    assert idle_in_transaction(db) == 0


@pytest.fixture
def ticks(db):
    db.execute("DROP TABLE IF EXISTS public.t_ticks; "
               "CREATE TABLE public.t_ticks (fencing bigint NOT NULL, pid int NOT NULL, "
               "                             at timestamptz NOT NULL)")
    yield
    db.execute("DROP TABLE public.t_ticks")


class Fleet:
    def __init__(self, n, name, ttl, tmp_path):
        self.procs = [spawn([os.path.join(HERE, "singleton_replica.py"), URL, name, str(ttl)],
                            tmp_path / f"replica{i}.log") for i in range(n)]
        self.tmp_path = tmp_path

    def by_pid(self, pid):
        return next(p for p in self.procs if p.pid == pid)

    def log(self, p):
        return (self.tmp_path / f"replica{self.procs.index(p)}.log").read_text()

    def kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def holder(db, after=0):
    """(token, pid) of the newest ticks of a token above `after`, or None."""
    return db.execute("SELECT fencing, pid FROM public.t_ticks WHERE fencing > %s "
                      "ORDER BY at DESC LIMIT 1", [after]).fetchone()


def assert_one_at_a_time(db):
    """Each token's ticks come from one process and end before the next
    token's first tick: never two holders writing at once."""
    spans = db.execute("SELECT fencing, count(DISTINCT pid), min(at), max(at) "
                       "FROM public.t_ticks GROUP BY fencing ORDER BY fencing").fetchall()
    for (_, pids, _, last), (_, _, first, _) in zip(spans, spans[1:]):
        assert last < first, spans
    assert all(pids == 1 for _, pids, _, _ in spans), spans
    return [s[0] for s in spans]


def test_sigkilled_holder_is_replaced_within_the_ttl(db, ticks, tmp_path):
    ttl = 2.0
    fleet = Fleet(3, f"t-singleton-{uuid.uuid4().hex[:8]}", ttl, tmp_path)
    try:
        first, pid = wait_until(lambda: holder(db), 30, "a first holder")
        time.sleep(1.5)  # it renews past its first ttl/3s; the others wait
        assert holder(db) == (first, pid)
        victim = fleet.by_pid(pid)
        os.killpg(victim.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        second, pid2 = wait_until(lambda: holder(db, first), 3 * ttl, "a new holder")
        took = time.monotonic() - killed_at
        assert pid2 != pid
        assert took <= ttl + 2.0, f"takeover took {took:.1f} s with ttl {ttl} s"
        assert took >= ttl * 0.5, "taken over before the dead holder's lease could expire"

        # Freeze the new holder past its ttl: a third replica takes over,
        # and the frozen one, woken, writes nothing more.
        frozen = fleet.by_pid(pid2)
        os.killpg(frozen.pid, signal.SIGSTOP)
        third, pid3 = wait_until(lambda: holder(db, second), 4 * ttl, "a third holder")
        assert pid3 not in (pid, pid2)
        os.killpg(frozen.pid, signal.SIGCONT)
        assert frozen.wait(10) == 3, fleet.log(frozen)
        assert "lost: " in fleet.log(frozen)
        time.sleep(0.5)
        assert holder(db) == (third, pid3)
        assert assert_one_at_a_time(db) == [first, second, third]
    finally:
        fleet.kill_all()
