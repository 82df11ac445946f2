"""Schedules declared in an application's code (docs/cron.md; schema step
0025).

One call to skiplock.schedules_declare applies them as `skiplock cron
apply` would, without removing the others.  The database checks every
schedule before it writes anything (SQLSTATE 22023, `schedule N ("name"):
...`, a PermanentError here), and it remembers every definition it was
given: one replaced since is reported superseded and not applied again,
so replicas of two versions of an application starting side by side in a
rolling deploy never make a schedule flap; `force` applies it anyway (a
deliberate rollback).  Each superseded one is logged at WARNING on the
"skiplock" logger, with the database's detail.
"""

from __future__ import annotations

import json
import logging
from typing import Any, List, Mapping, NamedTuple, Optional, Sequence, Tuple, TypedDict

import psycopg

from ._conn import all_rows
from .errors import classify

log = logging.getLogger("skiplock")

DECLARE_SQL = ("SELECT name, action, detail "
               "FROM skiplock.schedules_declare(schedules => %s::jsonb, force => %s::boolean)")


class _ScheduleFields(TypedDict):
    name: str
    expression: str  # five cron fields, a macro (@daily) or @every 30s
    kind: str


class Schedule(_ScheduleFields, total=False):
    """A schedule as schedules_declare takes it (any Mapping of these keys
    will do; this type only lets a type checker check them)."""

    zone: str  # an IANA zone; default UTC
    queue: str
    payload: Any  # any JSON value
    priority: int
    max_attempts: int
    catch_up: str  # 'none', 'latest' (default) or 'all'


class Declared(NamedTuple):
    """One schedule's result: action 'created', 'updated', 'unchanged' or
    'superseded'; detail says why a superseded one was not applied."""

    name: str
    action: str
    detail: Optional[str]


def schedules_json(schedules: Any, what: str = "schedules") -> str:
    """The schedules as the JSON text schedules_declare takes: a list (or
    tuple) of mappings, their values JSON (the database checks the fields).
    TypeError, naming `what`, otherwise."""
    if not isinstance(schedules, (list, tuple)):
        raise TypeError(f"{what} must be a list of mappings {{name, expression, kind, ...}}, "
                        f"not {type(schedules).__name__}")
    for i, s in enumerate(schedules):
        if not isinstance(s, Mapping):
            raise TypeError(f"{what}[{i}] must be a mapping {{name, expression, kind, ...}}, "
                            f"not {type(s).__name__}")
    try:
        return json.dumps([dict(s) for s in schedules])
    except (TypeError, ValueError) as e:
        raise TypeError(f"{what}: a value is not JSON: {e}") from None


def check_bool(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{what} must be True or False, not {value!r}")
    return value


def declared(rows: Sequence[Tuple[Any, ...]]) -> List[Declared]:
    """schedules_declare's rows; each superseded one logged as a warning."""
    out = [Declared(*r) for r in rows]
    for d in out:
        if d.action == "superseded":
            log.warning('schedule "%s" not applied, superseded: %s', d.name, d.detail)
    return out


def declare_schedules(conn: Any, schedules: Sequence[Mapping[str, Any]], *,
                      force: bool = False) -> Any:
    """Applies schedules declared in code with one statement on `conn`, for
    an application that declares them without running a worker (a deploy
    step); a worker does it at start with Worker(..., schedules=[...]).

    `conn` is a psycopg Connection (the answer) or AsyncConnection (an
    awaitable of it): autocommit, or outside a transaction (the call is
    then committed on its own), or inside yours (it commits with it).  The
    answer is a list of Declared(name, action, detail); each superseded
    one is also logged.  A bad schedule raises PermanentError (SQLSTATE
    22023) with the database's message, and nothing is written; TypeError
    when `schedules` is not a list of mappings of JSON values."""
    params = [schedules_json(schedules), check_bool(force, "force")]
    if isinstance(conn, psycopg.AsyncConnection):
        return _declare_async(conn, params)
    if not isinstance(conn, psycopg.Connection):
        raise TypeError("conn must be a psycopg Connection or AsyncConnection, "
                        f"not {type(conn).__name__}")
    try:
        if conn.autocommit:
            return declared(conn.execute(DECLARE_SQL, params, prepare=False).fetchall())
        with conn.transaction():
            return declared(conn.execute(DECLARE_SQL, params, prepare=False).fetchall())
    except psycopg.Error as e:
        raise classify(e) from e


async def _declare_async(conn: "psycopg.AsyncConnection[Any]",
                         params: List[Any]) -> List[Declared]:
    try:
        return declared(await all_rows(conn, DECLARE_SQL, params))
    except psycopg.Error as e:
        raise classify(e) from e
