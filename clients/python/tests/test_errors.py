"""Typed errors: the SQLSTATE table of src/lib/core/error.c, and fencing."""

import asyncio
import time

import psycopg
import psycopg.errors
import pytest

import skiplock
from conftest import enqueue_direct

TRANSIENT = ["08000", "08003", "08006", "57P01", "57P02", "57P03", "40001", "40P01", "55P03",
             "53300"]
PERMANENT = ["23505", "22023", "22004", "2202E", "42501", "42883", "57014", "53200", "XX000"]


@pytest.mark.parametrize("sqlstate", TRANSIENT)
def test_transient_states(sqlstate):
    err = skiplock.classify(psycopg.errors.lookup(sqlstate)("boom"))
    assert isinstance(err, skiplock.TransientError) and err.sqlstate == sqlstate
    assert skiplock.is_transient(sqlstate)


@pytest.mark.parametrize("sqlstate", PERMANENT)
def test_permanent_states(sqlstate):
    err = skiplock.classify(psycopg.errors.lookup(sqlstate)("boom"))
    assert isinstance(err, skiplock.PermanentError) and not isinstance(err, skiplock.FencedError)
    assert err.sqlstate == sqlstate and not skiplock.is_transient(sqlstate)


def test_no_sqlstate_is_transient():
    err = skiplock.classify(psycopg.OperationalError("server closed the connection"))
    assert isinstance(err, skiplock.TransientError) and err.sqlstate is None


def test_unreachable_database_is_transient():
    worker = skiplock.Worker("postgresql://nobody@127.0.0.1:1/x", {"t.x": lambda j, c: None},
                             connect_kwargs={"connect_timeout": 2})
    with pytest.raises(skiplock.TransientError):
        asyncio.run(worker.start())


def test_a_refusal_no_retry_cures_is_permanent_with_its_sqlstate(scratch):
    """A missing database or role: PermanentError with the server's SQLSTATE
    (psycopg's connection error has none; the worker asks for it), fast."""
    from psycopg.conninfo import make_conninfo
    for url, state in [(make_conninfo(scratch[1], dbname="py_no_such_db"), "3D000"),
                       (make_conninfo(scratch[1], user="py_no_such_role"), "28000")]:
        err = start_fails(url)
        assert err.sqlstate == state and f"(SQLSTATE {state})" in str(err)
        assert not skiplock.is_transient(state)


def claim(db, kind, lease="30 s"):
    return db.execute("SELECT id, fencing FROM skiplock.claim('test', ARRAY[%s], NULL, 1, "
                      "%s::interval)", [kind, lease]).fetchone()


def steal(db, job_id):
    """Expire the claim, rescue it and claim it again: fencing moves on."""
    with db.transaction():
        db.execute("UPDATE skiplock.jobs SET lease_expires_at = now() - interval '1 s' "
                   "WHERE id = %s", [job_id])
        db.execute("SELECT skiplock.rescue()")


def test_stale_complete_and_fail_raise_fenced(db, app_conn):
    enqueue_direct(db, "t.fence")
    job_id, fencing = claim(db, "t.fence")
    steal(db, job_id)
    assert claim(db, "t.fence") == (job_id, fencing + 1)
    with pytest.raises(skiplock.FencedError) as e:
        skiplock.complete(app_conn, job_id, fencing, {"late": True})
    assert (e.value.job_id, e.value.fencing, e.value.sqlstate) == (job_id, fencing, "SK001")
    with pytest.raises(skiplock.FencedError):
        skiplock.fail(app_conn, job_id, fencing, "late")
    assert skiplock.complete(app_conn, job_id, fencing + 1, {"ok": 1}) == "completed"
    app_conn.commit()


def test_job_fence_in_the_callers_transaction(db, app_conn):
    enqueue_direct(db, "t.jobfence")
    job_id, fencing = claim(db, "t.jobfence")
    with app_conn.transaction():
        skiplock.job_fence(app_conn, job_id, fencing)  # current: passes
    steal(db, job_id)
    with pytest.raises(skiplock.FencedError) as e:
        with app_conn.transaction():
            skiplock.job_fence(app_conn, job_id, fencing)
    assert isinstance(e.value.__cause__, psycopg.Error) and e.value.sqlstate == "SK001"


def start_fails(url):
    """start() on url: the error it raised, within 5 s."""
    w = skiplock.Worker(url, {"k": lambda job, ctx: None})
    t0 = time.monotonic()
    with pytest.raises(skiplock.PermanentError) as err:
        asyncio.run(w.start())
    assert time.monotonic() - t0 < 5
    return err.value


def test_start_refuses_a_database_without_the_schema(scratch):
    err = start_fails(scratch[0])
    assert "no skiplock schema" in str(err)
    assert "skiplock.init(url) or `python -m skiplock init --url URL`" in str(err)
    assert err.sqlstate in ("3F000", "42883")


def test_start_refuses_a_schema_older_than_it_needs(scratch):
    with psycopg.connect(scratch[1], autocommit=True) as c:
        c.execute("CREATE SCHEMA skiplock; CREATE TABLE skiplock.schema_version (version int); "
                  "INSERT INTO skiplock.schema_version VALUES (26); "
                  "CREATE FUNCTION skiplock.installed_version() RETURNS int LANGUAGE sql "
                  "AS 'SELECT max(version) FROM skiplock.schema_version'")
    err = start_fails(scratch[0])
    assert skiplock.MIN_SCHEMA == 33  # step 33: outcome records, read by every client alike
    assert "at step 26; this client needs step 33 or later: upgrade it with skiplock.init(url) " \
        "or `python -m skiplock init --url URL`" in str(err)
