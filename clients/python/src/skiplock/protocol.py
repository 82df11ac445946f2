"""Calls on the caller's own connection: enqueue (with dependencies,
enqueue_batch), waits_for, and the fenced calls.

Each is one statement of the SQL protocol (docs/protocol.md) run on the
connection you pass, so it joins the transaction you have open there:
enqueue a job in the same transaction as the row it is about, and it
exists exactly when that transaction commits.  Pass a psycopg Connection
(or Cursor) and get the answer; pass an AsyncConnection (or AsyncCursor)
and get an awaitable.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import psycopg
from psycopg.types.json import Jsonb

from ._literal import int_array, text_array
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


def _check(value: Any, name: str, kind: Any, what: str) -> Any:
    """value, if an instance of `kind` (a bool is no int); else TypeError."""
    if not isinstance(value, kind) or isinstance(value, bool) and kind is int:
        raise TypeError(f"{name} must be {what}, not {type(value).__name__}")
    return value


def _list_of(value: Any, name: str, kind: Any, what: str) -> List[Any]:
    """value as a list, if a sequence (not a str) of `kind`; else TypeError."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) \
            or not all(isinstance(v, kind) and not isinstance(v, bool) for v in value):
        raise TypeError(f"{name} must be a list of {what}, got {value!r:.80}")
    return list(value)


# enqueue_after's own arguments: the parents by id and by unique key, and
# what a discarded or cancelled parent does to the child (docs/flow-control.md).
_DEPS = ("depends_on", "depends_on_keys", "on_parent_failure")


def _deps_args(deps: Dict[str, Any]) -> Tuple[List[str], List[Any]]:
    """enqueue_after's arguments for the options in `deps` (all None:
    none, and the job is a plain enqueue)."""
    ids, keys, policy = (deps[name] for name in _DEPS)
    if ids is None and keys is None and policy is None:
        return [], []
    args, params = ["depends_on => %s::bigint[]"], [
        None if ids is None else int_array(_list_of(ids, "depends_on", int, "job ids (int)"))]
    if keys is not None:
        args.append("depends_on_keys => %s::text[]")
        params.append(text_array(_list_of(keys, "depends_on_keys", str, "unique keys (str)")))
    if policy is not None:
        args.append("on_parent_failure => %s::text")
        params.append(_check(policy, "on_parent_failure", str, "'cancel' or 'run'"))
    return args, params


def enqueue_sql(kind: str, payload: Any, opts: Dict[str, Any]) -> Tuple[str, List[Any]]:
    """The statement and parameters of one enqueue (options left out keep
    the SQL defaults: queue 'default', now, priority 0, 25 attempts); with
    dependencies, skiplock.enqueue_after."""
    _check(kind, "kind", str, "a str")
    args, params = _deps_args({name: opts.pop(name, None) for name in _DEPS})
    after = bool(args)
    args += ["kind => %s::text", "payload => %s::jsonb"]
    params += [kind, Jsonb(payload)]
    delay = opts.pop("delay", None)
    if delay is not None:
        if "run_at" in opts:
            raise TypeError("pass run_at or delay, not both")
        args.append("run_at => now() + " + _MS)
        params.append(_ms(delay, "delay"))
    for name, value in opts.items():
        if name not in _OPTIONS:
            raise TypeError(f"enqueue() got an unknown option {name!r} (expected one of "
                            f"{', '.join(['delay', *_OPTIONS, *_DEPS])})")
        if value is None:
            continue
        if _OPTIONS[name] == _MS:
            value = _ms(value, name)
        args.append(f"{name} => {_OPTIONS[name]}")
        params.append(value)
    if after:
        return f"SELECT skiplock.enqueue_after({', '.join(args)})", params
    return f"SELECT skiplock.enqueue({', '.join(args)})", params


# enqueue_many: skiplock.enqueue_many's arrays after the token: (option,
# SQL type, argument); durations as whole milliseconds.
_MANY = [("kind", "text", "p_kinds"), ("payload", "jsonb", "p_payloads"),
         ("queue", "text", "p_queues"), ("run_at", "timestamptz", "p_run_ats"),
         ("delay", "bigint", "p_delays_ms"), ("priority", "int", "p_priorities"),
         ("unique_key", "text", "p_unique_keys"), ("max_attempts", "int", "p_max_attempts"),
         ("timeout", "int", "p_timeouts"), ("backoff_base", "int", "p_backoff_bases"),
         ("backoff_cap", "int", "p_backoff_caps"), ("backoff", "text", "p_backoffs")]
_MANY_MS = ("delay", "timeout", "backoff_base", "backoff_cap")


def _many_value(name: str, value: Any, i: int) -> Optional[str]:
    """One job's value of one array, as the text of an array element."""
    if value is None:
        return None
    if name in _MANY_MS:
        return str(round(_ms(value, f"job {i}: {name}")))
    if name == "payload":
        return json.dumps(value)
    if name == "run_at":
        if not isinstance(value, dt.datetime):
            raise TypeError(f"job {i}: run_at must be a datetime, not {type(value).__name__}")
        return value.isoformat()
    if name in ("priority", "max_attempts"):
        return str(int(value))
    return str(value)


def enqueue_many_sql(jobs: Iterable[Mapping[str, Any]],
                     token: Optional[str] = None) -> Tuple[str, List[Any]]:
    """The statement and parameters of one enqueue_many."""
    cols: List[List[Optional[str]]] = [[] for _ in _MANY]
    names = {n for n, _, _ in _MANY}
    for i, job in enumerate(jobs):
        if not isinstance(job, Mapping) or not isinstance(job.get("kind"), str):
            raise TypeError(f"enqueue_many(): job {i} must be a mapping with a str 'kind'")
        unknown = set(job) - names
        if unknown:
            raise TypeError(f"enqueue_many(): job {i} has an unknown option "
                            f"{sorted(unknown)[0]!r} (expected {', '.join(sorted(names))})")
        if job.get("run_at") is not None and job.get("delay") is not None:
            raise TypeError(f"enqueue_many(): job {i}: pass run_at or delay, not both")
        for col, (name, _, _) in zip(cols, _MANY):
            col.append(_many_value(name, job.get(name, {} if name == "payload" else None), i))
    arrays = [int_array(int(v) if v is not None else None for v in col) if ty in ("int", "bigint")
              else text_array(col) for col, (_, ty, _) in zip(cols, _MANY)]
    args = ", ".join(["p_token => %s::text"]
                     + [f"{arg} => %s::text[]::{ty}[]" for _, ty, arg in _MANY])
    return f"SELECT skiplock.enqueue_many({args})", [token, *arrays]


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


def enqueue(conn: Any, kind: str, payload: Any = None, *,
            depends_on: Optional[Sequence[int]] = None,
            depends_on_keys: Optional[Sequence[str]] = None,
            on_parent_failure: Optional[str] = None, **opts: Any) -> Any:
    """Enqueue one job of `kind` in the caller's transaction; the job id.

    Options: queue, run_at (a datetime) or delay (seconds or timedelta),
    priority, unique_key (the holder's id is returned when it is taken),
    max_attempts, timeout, backoff ('full', 'equal', 'decorrelated',
    'exponential' or 'fixed'), backoff_base, backoff_cap (seconds or
    timedelta).  Raises TypeError for an unknown option, PermanentError
    (SQLSTATE 22023, ...) for a value the database refuses, TransientError
    for a lock timeout, a serialization failure or a lost connection.

    Dependencies (skiplock.enqueue_after, used when any of these is given):
    the job runs once every parent has finished; depends_on: parent job
    ids, depends_on_keys: parents by unique key, on_parent_failure:
    'cancel' (the default: a discarded or cancelled parent cancels this
    job) or 'run' (it runs anyway).  A parent must exist, live or finished
    and still kept, else PermanentError with SQLSTATE 23503 and nothing is
    written; a policy other than 'cancel' or 'run' is SQLSTATE 22023.
    """
    deps = {"depends_on": depends_on, "depends_on_keys": depends_on_keys,
            "on_parent_failure": on_parent_failure}
    sql, params = enqueue_sql(kind, {} if payload is None else payload, {**opts, **deps})
    return _one(conn, sql, params)


# enqueue_batch's options besides the callback's payload: (name, SQL type,
# Python type, what it must be).
_BATCH_OPTIONS = [("queue", "text", str, "a str"), ("priority", "int", int, "an int"),
                  ("max_attempts", "int", int, "an int")]


def enqueue_batch_sql(kind: str, payloads: Sequence[Any], callback_kind: str,
                      opts: Dict[str, Any]) -> Tuple[str, List[Any]]:
    """The statement and parameters of one enqueue_batch (options that are
    None keep the SQL defaults)."""
    _check(kind, "kind", str, "a str")
    _check(callback_kind, "callback_kind", str, "a str")
    if isinstance(payloads, (str, bytes, Mapping)) or not isinstance(payloads, Sequence):
        raise TypeError(f"payloads must be a list of JSON values, not {type(payloads).__name__}")
    args = ["kind => %s::text", "payloads => %s::text[]::jsonb[]", "callback_kind => %s::text"]
    params: List[Any] = [kind, text_array(json.dumps(p) for p in payloads), callback_kind]
    if opts.get("callback_payload") is not None:
        args.append("callback_payload => %s::jsonb")
        params.append(Jsonb(opts["callback_payload"]))
    for name, sql_type, cls, what in _BATCH_OPTIONS:
        if opts.get(name) is not None:
            args.append(f"{name} => %s::{sql_type}")
            params.append(_check(opts[name], name, cls, what))
    return f"SELECT skiplock.enqueue_batch({', '.join(args)})", params


def enqueue_batch(conn: Any, kind: str, payloads: Sequence[Any], callback_kind: str, *,
                  callback_payload: Any = None, queue: Optional[str] = None,
                  priority: Optional[int] = None, max_attempts: Optional[int] = None) -> Any:
    """Enqueue one job of `kind` per payload (1 to 1000) and a job of
    `callback_kind` that runs once after all of them finished, in the
    caller's transaction (skiplock.enqueue_batch); the ids, the callback's
    last.  The callback's payload is callback_payload (default {}) with
    {"batch": {"size", "completed", "discarded", "cancelled"}} merged in.
    queue, priority and max_attempts apply to every job of the batch.
    TypeError for an argument of the wrong type, PermanentError with
    SQLSTATE 22023 for no payloads or more than 1000 (nothing is written)."""
    sql, params = enqueue_batch_sql(kind, payloads, callback_kind, {
        "callback_payload": callback_payload, "queue": queue, "priority": priority,
        "max_attempts": max_attempts})
    return _one(conn, sql, params)


def waits_for(conn: Any, job_id: int) -> Any:
    """Why an available job is not running now, in words (its parents, its
    due time, a pause, a breaker, a limit, or no free worker:
    skiplock.job_waits_for); None when the job is not available (running,
    finished or unknown)."""
    _check(job_id, "job_id", int, "a job id (int)")
    return _one(conn, "SELECT skiplock.job_waits_for(id => %s::bigint)", [job_id])


def enqueue_many(conn: Any, jobs: Iterable[Mapping[str, Any]],
                 token: Optional[str] = None) -> Any:
    """Enqueue a batch in one statement (skiplock.enqueue_many), all or
    none, in the caller's transaction; the ids, in order.

    Each job is a mapping: "kind", "payload", and enqueue()'s options
    (queue, run_at or delay, priority, unique_key, max_attempts, timeout,
    backoff, backoff_base, backoff_cap).  With `token`, a retried call (the
    same token) returns the first call's ids and enqueues nothing.
    TypeError for a malformed job, PermanentError for a value the database
    refuses (nothing is written)."""
    sql, params = enqueue_many_sql(list(jobs), token)
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
    state = _one(conn, "SELECT skiplock.complete(id => %s::bigint, fencing => %s::bigint, "
                 "result => %s::jsonb, queue => %s::text)",
                 [job_id, fencing, None if result is None else Jsonb(result), queue])
    return _then(state, lambda s: _fenced(s, job_id, fencing))


def fail(conn: Any, job_id: int, fencing: int, error: str, retryable: bool = True,
         retry_after: Any = None, queue: Optional[str] = None) -> Any:
    """skiplock.fail: 'available' or 'discarded', or FencedError."""
    sql = ("SELECT skiplock.fail(id => %s::bigint, fencing => %s::bigint, error => %s::text, "
           "retryable => %s::boolean, retry_after => " + _MS + ", queue => %s::text)")
    ms = None if retry_after is None else _ms(retry_after, "retry_after")
    state = _one(conn, sql, [job_id, fencing, error, retryable, ms, queue])
    return _then(state, lambda s: _fenced(s, job_id, fencing))


def job_fence(conn: Any, job_id: int, fencing: int, queue: Optional[str] = None) -> Any:
    """In the caller's transaction, before a job's effect: locks the job row
    FOR SHARE and raises FencedError unless (job_id, fencing) is the
    current claim (the effect pattern of docs/protocol.md)."""
    return _one(conn, "SELECT skiplock.job_fence(id => %s::bigint, fencing => %s::bigint, "
                      "queue => %s::text)",
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
    return _one(conn, "SELECT skiplock.job_complete(id => %s::bigint, fencing => %s::bigint, "
                      "result => %s::jsonb, queue => %s::text)",
                [job_id, fencing, None if result is None else Jsonb(result), queue])


def lease_fence(conn: Any, name: str, fencing: int) -> Any:
    """In the caller's transaction, before the effect a lease guards:
    skiplock.lease_fence locks the lease row FOR SHARE and raises
    FencedError (SQLSTATE SK001) unless `fencing` is the current token of
    the live lease `name` (docs/leases.md, "Fenced writes")."""
    return _one(conn, "SELECT skiplock.lease_fence(name => %s::text, fencing => %s::bigint)",
                [name, fencing])


def _then(value: Any, fn: Any) -> Any:
    """fn(value), or an awaitable of it when value is one."""
    if hasattr(value, "__await__"):
        async def chained() -> Any:
            return fn(await value)
        return chained()
    return fn(value)
