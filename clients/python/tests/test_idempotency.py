"""Idempotency keys from Python (skiplock.idempotent): acquired, replay,
in_progress, conflict; the response stored in the effect's transaction;
a crashed holder's key taken over after its recovery window; bad input
refused before anything is written."""

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid

import psycopg
import pytest

import skiplock
from conftest import URL, idle_in_transaction

HERE = os.path.dirname(os.path.abspath(__file__))
FP = skiplock.fingerprint("POST", "/charges", b'{"amount": 1250}')


def fresh():
    return f"t-idem-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def charges(db):
    db.execute("DROP TABLE IF EXISTS public.t_charges; "
               "CREATE TABLE public.t_charges (id serial PRIMARY KEY, key text NOT NULL)")
    yield lambda key: db.execute("SELECT count(*) FROM public.t_charges WHERE key = %s",
                                 [key]).fetchone()[0]
    db.execute("DROP TABLE public.t_charges")


def key_row(db, key):
    return db.execute("SELECT state, response_code, response_body, claims "
                      "FROM skiplock.idempotency_keys WHERE key = %s", [key]).fetchone()


def charge(conn, claim, key, code=201):
    """The effect and the stored response in one transaction."""
    with conn.transaction():
        n = conn.execute("INSERT INTO public.t_charges (key) VALUES (%s) RETURNING id",
                         [key]).fetchone()[0]
        claim.complete(conn, code, {"id": n, "key": key})
    return n


def test_fingerprint_is_the_c_librarys():
    import hashlib
    assert FP == hashlib.sha256(b'POST\0/charges\0{"amount": 1250}').hexdigest()


def test_acquired_then_replay_then_conflict(db, app_conn, charges):
    key = fresh()
    claim = skiplock.idempotent(app_conn, key, FP)
    assert claim.acquired and claim.holder and len(claim.holder) == 64
    assert claim.holder not in repr(claim)  # a secret: never printed
    assert key_row(db, key)[0] == "in_progress"  # the claim committed by itself
    n = charge(app_conn, claim, key)
    again = skiplock.idempotent(app_conn, key, FP)
    assert (again.outcome, again.response_code, again.response_body) == \
        ("replay", 201, {"id": n, "key": key})
    other = skiplock.idempotent(app_conn, key, skiplock.fingerprint("POST", "/charges", b"{}"))
    assert other.conflict and other.response_body is None
    assert charges(key) == 1 and idle_in_transaction(db) == 0


def test_concurrent_duplicate_is_in_progress(db, app_conn):
    key = fresh()
    assert skiplock.idempotent(app_conn, key, FP).acquired
    with psycopg.connect(URL, prepare_threshold=None) as second:
        assert skiplock.idempotent(second, key, FP).in_progress


def test_a_rolled_back_effect_stores_nothing(db, app_conn, charges):
    key = fresh()
    claim = skiplock.idempotent(app_conn, key, FP)
    with pytest.raises(RuntimeError):
        with app_conn.transaction():
            app_conn.execute("INSERT INTO public.t_charges (key) VALUES (%s)", [key])
            claim.complete(app_conn, 201, {"ok": True})
            raise RuntimeError("the effect failed after complete, before the commit")
    assert key_row(db, key)[0] == "in_progress" and charges(key) == 0
    claim.release(app_conn)  # given up: a retry runs at once
    assert key_row(db, key) is None
    retry = skiplock.idempotent(app_conn, key, FP)
    assert retry.acquired
    charge(app_conn, retry, key)
    assert charges(key) == 1


def test_async_connection(db, charges):
    key = fresh()

    async def main():
        async with await psycopg.AsyncConnection.connect(URL, prepare_threshold=None) as conn:
            claim = await skiplock.idempotent(conn, key, FP)
            async with conn.transaction():
                await conn.execute("INSERT INTO public.t_charges (key) VALUES (%s)", [key])
                await claim.complete(conn, 202, ["accepted"])
            return await skiplock.idempotent(conn, key, FP)
    replay = asyncio.run(main())
    assert (replay.response_code, replay.response_body) == (202, ["accepted"])
    assert charges(key) == 1


def test_a_taken_over_claim_cannot_complete(db, app_conn, charges):
    """After the recovery window a retry takes the key over; the first
    holder's completion is refused (SK002) and its effect rolls back."""
    key = fresh()
    slow = skiplock.idempotent(app_conn, key, FP, recovery=0.3)
    time.sleep(0.5)
    with psycopg.connect(URL, prepare_threshold=None) as other:
        taker = skiplock.idempotent(other, key, FP, recovery=30)
        assert taker.acquired
        with pytest.raises(skiplock.FencedError) as e:
            charge(app_conn, slow, key)
        assert e.value.sqlstate == "SK002"
        charge(other, taker, key)
    assert charges(key) == 1 and key_row(db, key)[3] == 2


def test_crashed_holder_is_taken_over_after_its_recovery_window(db, charges):
    """A process claims and is SIGKILLed before its effect: retries get
    in_progress within the window, one retry after it does the work."""
    key = fresh()
    code = ("import sys, time, psycopg, skiplock\n"
            "conn = psycopg.connect(sys.argv[1], prepare_threshold=None)\n"
            "c = skiplock.idempotent(conn, sys.argv[2], sys.argv[3], recovery=2)\n"
            "print(c.outcome, flush=True)\n"
            "time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code, URL, key, FP], stdout=subprocess.PIPE,
                         env=dict(os.environ, PYTHONPATH=os.path.join(HERE, "..", "src")),
                         text=True)
    assert p.stdout.readline().strip() == "acquired"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    claimed_at = time.monotonic()
    with psycopg.connect(URL, prepare_threshold=None) as conn:
        assert skiplock.idempotent(conn, key, FP).in_progress
        while True:
            claim = skiplock.idempotent(conn, key, FP)
            if claim.acquired:
                break
            assert claim.in_progress and time.monotonic() - claimed_at < 5
            time.sleep(0.2)
        assert time.monotonic() - claimed_at > 1.5
        charge(conn, claim, key)
        assert skiplock.idempotent(conn, key, FP).replay
    assert charges(key) == 1 and key_row(db, key)[3] == 2


def test_bad_input_writes_nothing(db, app_conn):
    before = db.execute("SELECT count(*) FROM skiplock.idempotency_keys").fetchone()[0]
    for key, fp, kwargs, err in [
            ("k" * 256, FP, {}, ValueError), ("", FP, {}, ValueError),
            ("é" * 128, FP, {}, ValueError),  # 256 bytes
            (b"k", FP, {}, TypeError), ("k", "", {}, ValueError),
            ("k", "h" * 256, {}, ValueError), ("k", FP, {"ttl": 0}, ValueError),
            ("k", FP, {"ttl": -5}, ValueError), ("k", FP, {"recovery": 0}, ValueError),
            ("k", FP, {"ttl": "1d"}, TypeError)]:
        with pytest.raises(err):
            skiplock.idempotent(app_conn, key, fp, **kwargs)
    with app_conn.transaction():  # a claim must commit on its own
        with pytest.raises(ValueError):
            skiplock.idempotent(app_conn, "k-in-tx", FP)
    assert db.execute("SELECT count(*) FROM skiplock.idempotency_keys").fetchone()[0] == before

    key = fresh()
    claim = skiplock.idempotent(app_conn, key, FP, max_response_bytes=1000)
    for code, body, err in [(201, {"x": "y" * 1000}, ValueError),  # over the cap
                            (99, {}, ValueError), (1000, {}, ValueError),
                            (201, {"nul": "\0"}, ValueError), (201, {1, 2}, ValueError),
                            (201, float("nan"), ValueError)]:
        with pytest.raises(err):
            claim.complete(app_conn, code, body)
    assert key_row(db, key)[:3] == ("in_progress", None, None)
    assert not claim.completed
    with pytest.raises(ValueError):  # only an acquired claim completes
        skiplock.idempotent(app_conn, key, FP).complete(app_conn, 201, {})
