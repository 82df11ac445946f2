"""Calls on the caller's own connection: enqueue, and the fenced calls.

Each is one statement of the SQL protocol (docs/protocol.md) run on the
connection you pass, so it joins the transaction you have open there:
enqueue a job in the same transaction as the row it is about, and it
exists exactly when that transaction commits.  Pass a psycopg Connection
(or Cursor) and get the answer; pass an AsyncConnection (or AsyncCursor)
and get an awaitable.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Dict, List, Optional, Tuple

import psycopg
from psycopg.types.json import Jsonb

from .errors import FencedError, classify

# enqueue's options: name -> SQL placeholder (intervals as milliseconds).
_MS = "(%s::double precision * interval '1 millisecond')"
_OPTIONS = {
    "queue": "%s::text",
    "run_at": "%s::timestamptz",
    "priority": "%s::int",
    "unique_key": "%s::text",
    "max_attempts": "%s::int",
    "timeout": _MS,
    "backoff": "%s::text",
    "backoff_base": _MS,
    "backoff_cap": _MS,
}


def _ms(value: Any, name: str) -> float:
    """Seconds (int, float) or a timedelta, as milliseconds."""
    if isinstance(value, dt.timedelta):
        return value.total_seconds() * 1000.0
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) * 1000.0
    raise TypeError(f"{name} must be seconds (int or float) or a timedelta, "
                    f"not {type(value).__name__}")


def enqueue_sql(kind: str, payload: Any, opts: Dict[str, Any]) -> Tuple[str, List[Any]]:
    """The statement and parameters of one enqueue (options left out keep
    the SQL defaults: queue 'default', now, priority 0, 25 attempts)."""
    if not isinstance(kind, str):
        raise TypeError(f"kind must be a str, not {type(kind).__name__}")
    args = ["kind => %s::text", "payload => %s::jsonb"]
    params: List[Any] = [kind, Jsonb(payload)]
    delay = opts.pop("delay", None)
    if delay is not None:
        if "run_at" in opts:
            raise TypeError("pass run_at or delay, not both")
        args.append("run_at => now() + " + _MS)
        params.append(_ms(delay, "delay"))
    for name, value in opts.items():
        if name not in _OPTIONS:
            raise TypeError(f"enqueue() got an unknown option {name!r} (expected one of "
                            f"{', '.join(['delay', *_OPTIONS])})")
        if value is None:
            continue
        if _OPTIONS[name] == _MS:
            value = _ms(value, name)
        args.append(f"{name} => {_OPTIONS[name]}")
        params.append(value)
    return f"SELECT skiplock.enqueue({', '.join(args)})", params


def _is_async(conn: Any) -> bool:
    return isinstance(conn, (psycopg.AsyncConnection, psycopg.AsyncCursor))


def _one(conn: Any, sql: str, params: List[Any]) -> Any:
    """The first column of the one row `sql` returns, sync or async.

    Never prepared on the server (prepare=False): the caller's connection may
    go through a transaction pooler, which hands each transaction whichever
    server is free, where a prepared name is unknown or already taken."""
    if _is_async(conn):
        return _one_async(conn, sql, params)
    try:
        row = conn.execute(sql, params, prepare=False).fetchone()
    except psycopg.Error as e:
        raise classify(e) from e
    return row[0] if row else None


async def _one_async(conn: Any, sql: str, params: List[Any]) -> Any:
    try:
        cur = await conn.execute(sql, params, prepare=False)
        row = await cur.fetchone()
    except psycopg.Error as e:
        raise classify(e) from e
    return row[0] if row else None


def enqueue(conn: Any, kind: str, payload: Any = None, **opts: Any) -> Any:
    """Enqueue one job of `kind` in the caller's transaction; the job id.

    Options: queue, run_at (a datetime) or delay (seconds or timedelta),
    priority, unique_key (the holder's id is returned when it is taken),
    max_attempts, timeout, backoff ('full', 'equal', 'decorrelated',
    'exponential' or 'fixed'), backoff_base, backoff_cap (seconds or
    timedelta).  Raises TypeError for an unknown option, PermanentError
    (SQLSTATE 22023, ...) for a value the database refuses, TransientError
    for a lock timeout, a serialization failure or a lost connection.
    """
    sql, params = enqueue_sql(kind, {} if payload is None else payload, dict(opts))
    return _one(conn, sql, params)


def _fenced(state: Optional[str], job_id: int, fencing: int) -> Optional[str]:
    if state == "fenced_out":
        raise FencedError(f"job {job_id} is no longer held under fencing token {fencing}",
                          job_id, fencing)
    return state


def complete(conn: Any, job_id: int, fencing: int, result: Any = None,
             queue: Optional[str] = None) -> Any:
    """skiplock.complete: 'completed', or FencedError if the claim was lost.
    queue: the job's queue as claimed (the handle's third part, protocol 2)."""
    state = _one(conn, "SELECT skiplock.complete(%s::bigint, %s::bigint, %s::jsonb, %s::text)",
                 [job_id, fencing, None if result is None else Jsonb(result), queue])
    return _then(state, lambda s: _fenced(s, job_id, fencing))


def fail(conn: Any, job_id: int, fencing: int, error: str, retryable: bool = True,
         retry_after: Any = None, queue: Optional[str] = None) -> Any:
    """skiplock.fail: 'available' or 'discarded', or FencedError."""
    sql = ("SELECT skiplock.fail(%s::bigint, %s::bigint, %s::text, %s::boolean, "
           + _MS + ", %s::text)")
    ms = None if retry_after is None else _ms(retry_after, "retry_after")
    state = _one(conn, sql, [job_id, fencing, error, retryable, ms, queue])
    return _then(state, lambda s: _fenced(s, job_id, fencing))


def job_fence(conn: Any, job_id: int, fencing: int, queue: Optional[str] = None) -> Any:
    """In the caller's transaction, before a job's effect: locks the job row
    FOR SHARE and raises FencedError unless (job_id, fencing) is the
    current claim (the effect pattern of docs/protocol.md)."""
    return _one(conn, "SELECT skiplock.job_fence(%s::bigint, %s::bigint, %s::text)",
                [job_id, fencing, queue])


def job_complete(conn: Any, job_id: int, fencing: int, result: Any = None,
                 queue: Optional[str] = None) -> Any:
    """In the transaction of a job's effect, last before COMMIT: raises
    FencedError unless (job_id, fencing) is the current claim (or if this
    claim completed the job already), then completes the job with `result`
    (any JSON value) in that transaction: the effect and the completion
    commit together or not at all, so the effect happens exactly once
    (sql/0019_complete_in_tx.sql).  In a handler, use ctx.complete(conn)
    instead: it also tells the worker to send no outcome of its own."""
    return _one(conn, "SELECT skiplock.job_complete(%s::bigint, %s::bigint, %s::jsonb, %s::text)",
                [job_id, fencing, None if result is None else Jsonb(result), queue])


def lease_fence(conn: Any, name: str, fencing: int) -> Any:
    """In the caller's transaction, before the effect a lease guards:
    skiplock.lease_fence locks the lease row FOR SHARE and raises
    FencedError (SQLSTATE SK001) unless `fencing` is the current token of
    the live lease `name` (docs/leases.md, "Fenced writes")."""
    return _one(conn, "SELECT skiplock.lease_fence(%s::text, %s::bigint)", [name, fencing])


def _then(value: Any, fn: Any) -> Any:
    """fn(value), or an awaitable of it when value is one."""
    if hasattr(value, "__await__"):
        async def chained() -> Any:
            return fn(await value)
        return chained()
    return fn(value)
