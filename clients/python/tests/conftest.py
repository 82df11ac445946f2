"""Fixtures: the mode's URL (direct, or PgBouncer in transaction mode), a
direct connection for looking at the jobs, and a clean jobs table."""

import asyncio
import os
import time

import psycopg
import pytest

MODE = os.environ.get("SKIPLOCK_TEST_MODE", "")
URL = os.environ.get("SKIPLOCK_TEST_URL", "")
DIRECT_URL = os.environ.get("SKIPLOCK_TEST_DIRECT_URL", "")

if not URL or not DIRECT_URL:
    raise RuntimeError("run the tests with clients/python/run-tests.sh (it sets SKIPLOCK_TEST_*)")


@pytest.fixture
def db():
    """A direct, autocommit connection for setting up and checking."""
    with psycopg.connect(DIRECT_URL, autocommit=True) as conn:
        conn.execute("DELETE FROM skiplock.jobs; DELETE FROM skiplock.finished_jobs")
        yield conn


@pytest.fixture
def scratch():
    """An empty database next to the test's, reached in the test's mode:
    (its URL, its direct URL)."""
    from psycopg.conninfo import make_conninfo
    name = f"py_scratch_{os.getpid()}"
    with psycopg.connect(make_conninfo(DIRECT_URL, dbname="postgres"), autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield make_conninfo(URL, dbname=name), make_conninfo(DIRECT_URL, dbname=name)
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def app_conn():
    """What an application holds: the mode's URL, no prepared statements
    (PgBouncer in transaction mode), transactions of its own."""
    with psycopg.connect(URL, prepare_threshold=None) as conn:
        yield conn


def job(db, job_id, columns="state, attempt, fencing"):
    return db.execute(f"SELECT {columns} FROM skiplock.all_jobs WHERE id = %s", [job_id]).fetchone()


def wait_until(pred, timeout=10.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


async def async_wait_until(pred, timeout=10.0, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def enqueue_direct(db, kind, payload="{}", n=1, **cols):
    """n jobs, enqueued with SQL on the direct connection; their ids."""
    args = "".join(f", {k} => %({k})s" for k in cols)
    rows = db.execute(f"SELECT skiplock.enqueue(%(kind)s, %(payload)s::jsonb{args}) "
                      "FROM generate_series(1, %(n)s)",
                      {"kind": kind, "payload": payload, "n": n, **cols}).fetchall()
    return [r[0] for r in rows]


def kill_backends(db):
    """pg_terminate_backend on every other backend of the test database
    (direct: the clients'; pooled: PgBouncer's server connections); how many."""
    return db.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                      "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                      "AND backend_type = 'client backend'").fetchone()[0]


def idle_in_transaction(db):
    """Sessions of the test database left idle in a transaction."""
    return db.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                      "AND state LIKE 'idle in transaction%'").fetchone()[0]


def lease_row(db, name):
    """(owner, fencing, live) of a lease, or None."""
    return db.execute("SELECT owner, fencing, expires_at > clock_timestamp() FROM skiplock.leases "
                      "WHERE name = %s", [name]).fetchone()


def expire_lease(db, name):
    """What a holder paused past its ttl sees: its lease expired."""
    db.execute("UPDATE skiplock.leases SET expires_at = clock_timestamp() - interval '1 s' "
               "WHERE name = %s", [name])


class CutProxy:
    """tests/tools/cutproxy (docs/testing-cutproxy.md) in front of the mode's endpoint."""

    def __init__(self, tmp_path):
        import subprocess
        from psycopg.conninfo import conninfo_to_dict, make_conninfo
        binary = os.environ.get("SKL_CUTPROXY")
        if not binary:
            raise RuntimeError("SKL_CUTPROXY is not set: run under CTest")
        opts = conninfo_to_dict(URL)
        self.ctl_path, port_file = str(tmp_path / "ctl"), tmp_path / "port"
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--upstream", f"{opts['host']}:{opts['port']}",
             "--control", self.ctl_path, "--port-file", str(port_file), "--ttl", "300"],
            stderr=open(tmp_path / "cutproxy.log", "w"))
        self.binary = binary
        port = wait_until(lambda: port_file.exists() and port_file.read_text().strip(), 10,
                          "cutproxy's port")
        self.url = make_conninfo(URL, port=port, sslmode="disable")

    def ctl(self, *args):
        import subprocess
        subprocess.run([self.binary, "ctl", self.ctl_path, *args], check=True,
                       stdout=subprocess.DEVNULL)

    def close(self):
        self.proc.terminate()
        self.proc.wait()


@pytest.fixture
def cutproxy(tmp_path):
    proxy = CutProxy(tmp_path)
    yield proxy
    proxy.close()
