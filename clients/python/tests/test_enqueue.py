"""enqueue() runs in the caller's transaction, sync and async."""

import asyncio
import datetime as dt
import re

import psycopg
import pytest

import skiplock
from conftest import URL, job


def count(db, kind):
    row = db.execute("SELECT count(*) FROM skiplock.all_jobs WHERE kind = %s", [kind]).fetchone()
    return row[0]


def test_commit_makes_the_job(db, app_conn):
    with app_conn.transaction():
        app_conn.execute("SELECT 1")
        job_id = skiplock.enqueue(app_conn, "t.commit", {"order": 42, "note": "é \"q\" \\"})
        assert count(db, "t.commit") == 0, "visible before the caller's commit"
    assert job(db, job_id, "kind, payload, queue, state") == (
        "t.commit", {"order": 42, "note": "é \"q\" \\"}, "default", "available")


def test_rollback_leaves_no_job(db, app_conn):
    with pytest.raises(RuntimeError):
        with app_conn.transaction():
            skiplock.enqueue(app_conn, "t.rollback", {"order": 1})
            raise RuntimeError("the caller's own failure")
    assert count(db, "t.rollback") == 0


def test_async_commit_and_rollback(db):
    async def main():
        async with await psycopg.AsyncConnection.connect(URL, prepare_threshold=None) as conn:
            async with conn.transaction():
                kept = await skiplock.enqueue(conn, "t.async", {"keep": True})
            try:
                async with conn.transaction():
                    await skiplock.enqueue(conn, "t.async", {"keep": False})
                    raise RuntimeError("rolled back")
            except RuntimeError:
                pass
            return kept
    kept = asyncio.run(main())
    rows = db.execute("SELECT id, payload FROM skiplock.all_jobs WHERE kind = 't.async'").fetchall()
    assert rows == [(kept, {"keep": True})]


def test_options_reach_the_row(db, app_conn):
    with app_conn.transaction():
        a = skiplock.enqueue(app_conn, "t.opts", {}, queue="mail", priority=5, max_attempts=3,
                             timeout=1.5, backoff="fixed", backoff_base=2,
                             backoff_cap=dt.timedelta(minutes=1), unique_key="k1", delay=60)
        b = skiplock.enqueue(app_conn, "t.opts", {}, unique_key="k1")
    assert a == b, "a taken unique key returns the holder's id"
    row = job(db, a, "queue, priority, max_attempts, timeout_ms, backoff, backoff_base_ms, "
                     "backoff_cap_ms, run_at > now() + interval '50 s'")
    assert row == ("mail", 5, 3, 1500, "fixed", 2000, 60000, True)


def test_bad_input(db, app_conn):
    with pytest.raises(TypeError, match="unknown option 'prio'"):
        skiplock.enqueue(app_conn, "t.bad", {}, prio=1)
    with pytest.raises(TypeError, match="run_at or delay"):
        skiplock.enqueue(app_conn, "t.bad", {}, delay=1, run_at=dt.datetime.now(dt.timezone.utc))
    with pytest.raises(skiplock.PermanentError) as e:
        with app_conn.transaction():
            skiplock.enqueue(app_conn, "t.bad", {},
                             run_at=dt.datetime(1960, 1, 1, tzinfo=dt.timezone.utc))
    assert e.value.sqlstate == "22023" and "out of range" in str(e.value)
    assert count(db, "t.bad") == 0


def test_lock_timeout_is_transient(db, app_conn):
    with psycopg.connect(db.info.dsn) as holder:
        holder.execute("LOCK TABLE skiplock.jobs IN EXCLUSIVE MODE")
        with pytest.raises(skiplock.TransientError) as e:
            with app_conn.transaction():
                app_conn.execute("SET LOCAL lock_timeout = '100ms'")
                skiplock.enqueue(app_conn, "t.lock", {})
        holder.rollback()
    assert e.value.sqlstate == "55P03"
    assert isinstance(e.value.__cause__, psycopg.errors.LockNotAvailable)


def test_enqueue_on_default_connections_through_a_pooler(db):
    """Two applications' connections with psycopg's defaults (statements
    prepared after 5 runs) enqueue in turns through the mode's URL: skiplock
    never prepares its calls on a caller's connection, so a transaction
    pooler that hands each transaction another server cannot make one fail
    with 'prepared statement "_pg3_0" already exists'."""
    with psycopg.connect(URL) as a, psycopg.connect(URL) as b:
        for i in range(30):
            for conn in (a, b):
                with conn.transaction():
                    skiplock.enqueue(conn, "t.default_conn", {"i": i})
    assert db.execute("SELECT count(*) FROM skiplock.jobs WHERE kind = 't.default_conn'"
                      ).fetchone()[0] == 60


def test_enqueue_many_in_one_statement_in_order_with_options(db, app_conn):
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    with app_conn.transaction():
        ids = skiplock.enqueue_many(app_conn, [
            {"kind": "t.many", "payload": {"n": 1}},
            {"kind": "t.many", "payload": [2, "é \"q\""], "queue": "mail", "priority": 3,
             "max_attempts": 2, "timeout": 2, "backoff": "fixed", "backoff_base": 0.25},
            {"kind": "t.many", "unique_key": "t.many:u", "run_at": later},
            {"kind": "t.many", "delay": 60},
        ])
        assert count(db, "t.many") == 0, "visible before the caller's commit"
    assert len(ids) == 4
    assert job(db, ids[0], "payload, queue, priority, max_attempts") == (
        {"n": 1}, "default", 0, 25)
    assert job(db, ids[1], "payload, queue, priority, max_attempts, timeout_ms, backoff, "
                           "backoff_base_ms") == ([2, "é \"q\""], "mail", 3, 2, 2000, "fixed", 250)
    assert job(db, ids[2], "unique_key, run_at > now() + interval '50 min'") == ("t.many:u", True)
    assert job(db, ids[3], "run_at > now() + interval '50 s'") == (True,)
    assert skiplock.enqueue_many(app_conn, [{"kind": "t.many", "unique_key": "t.many:u"}]) \
        == [ids[2]], "a held unique key gives the holder's id"
    app_conn.commit()
    with pytest.raises(RuntimeError):
        with app_conn.transaction():
            skiplock.enqueue_many(app_conn, [{"kind": "t.many"}])
            raise RuntimeError("the caller's own failure")
    assert count(db, "t.many") == 4


def test_enqueue_many_token_makes_a_retry_a_no_op(db, app_conn):
    first = skiplock.enqueue_many(app_conn, [{"kind": "t.tok"}, {"kind": "t.tok"}], token="t:1")
    again = skiplock.enqueue_many(app_conn, [{"kind": "t.tok"}, {"kind": "t.tok"}], token="t:1")
    app_conn.commit()
    assert first == again and count(db, "t.tok") == 2


def test_enqueue_many_bad_input_writes_nothing(db, app_conn):
    with pytest.raises(TypeError, match="job 1 has an unknown option 'prio'"):
        skiplock.enqueue_many(app_conn, [{"kind": "t.mbad"}, {"kind": "t.mbad", "prio": 1}])
    with pytest.raises(TypeError, match="job 0 must be a mapping"):
        skiplock.enqueue_many(app_conn, [("t.mbad", {})])
    with pytest.raises(TypeError, match="run_at or delay"):
        skiplock.enqueue_many(app_conn, [{"kind": "t.mbad", "delay": 1,
                                          "run_at": dt.datetime.now(dt.timezone.utc)}])
    with pytest.raises(skiplock.PermanentError) as e:
        with app_conn.transaction():
            skiplock.enqueue_many(app_conn, [{"kind": "t.mbad"}, {"kind": "t.mbad",
                                                                  "queue": "q" * 200}])
    assert e.value.sqlstate == "22023"
    assert count(db, "t.mbad") == 0


def test_statements_name_every_argument():
    """The argument lists built by code go by name (the fixed ones are
    checked by scripts/protocol-manifest --check)."""
    from skiplock.protocol import enqueue_batch_sql, enqueue_many_sql, enqueue_sql

    def names(sql):
        inner = re.sub(r"'[^']*'", "''", sql[sql.index("(") + 1:sql.rindex(")")]) + ","
        args, depth, start = [], 0, 0
        for i, c in enumerate(inner):
            depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(c, 0)
            if c == "," and depth == 0:
                args.append(inner[start:i].strip())
                start = i + 1
        assert all(re.match(r"[a-z_]+ => ", a) for a in args), sql
        return [a.split(" => ")[0] for a in args]

    sql, _ = enqueue_sql("k", {}, {"queue": "q", "delay": 1, "timeout": 2})
    assert names(sql) == ["kind", "payload", "run_at", "queue", "timeout"]
    assert sql.startswith("SELECT skiplock.enqueue(")
    sql, _ = enqueue_sql("k", {}, {"queue": "q", "depends_on_keys": ["a"],
                                   "on_parent_failure": "run"})
    assert sql.startswith("SELECT skiplock.enqueue_after(")
    assert names(sql) == ["depends_on", "depends_on_keys", "on_parent_failure", "kind",
                          "payload", "queue"]
    opts = {"callback_payload": {}, "queue": "q", "priority": 1, "max_attempts": 2}
    sql, _ = enqueue_batch_sql("k", [{}], "cb", opts)
    assert names(sql) == ["kind", "payloads", "callback_kind", "callback_payload", "queue",
                          "priority", "max_attempts"]
    sql, _ = enqueue_many_sql([{"kind": "k", "priority": 1}], token="t")
    assert names(sql) == ["p_token", "p_kinds", "p_payloads", "p_queues", "p_run_ats",
                          "p_delays_ms", "p_priorities", "p_unique_keys", "p_max_attempts",
                          "p_timeouts", "p_backoff_bases", "p_backoff_caps", "p_backoffs"]
