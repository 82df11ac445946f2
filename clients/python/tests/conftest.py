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
