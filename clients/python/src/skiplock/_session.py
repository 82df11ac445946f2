"""The worker's one connection, and the protocol calls it makes.

Every call is one autocommit statement of the SQL protocol (docs/protocol.md):
no transaction is held across anything, nothing is kept in the session, and
server-side prepared statements are used only on a connection known to be
direct (through a transaction pooler they would land on another backend).
A broken connection is reopened by the next call.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import psycopg
from psycopg.types.json import Jsonb

from .errors import classify
from .job import Job
from .pooler import is_direct

_LEASE = "(%s::bigint * interval '1 millisecond')"
_OUTCOME_ARRAYS = ("%s::bigint[], %s::bigint[], %s::text[], %s::jsonb[], %s::text[], "
                   "%s::bigint[]")
_JOB_COLUMNS = ("id, queue, kind, payload, attempt, max_attempts, fencing, lease_expires_at, "
                "timeout_ms, priority, run_at")
_RECORD_CLAIM = (f"SELECT row_type, {_JOB_COLUMNS} FROM skiplock.record_claim("
                 f"{_OUTCOME_ARRAYS}, NULL, NULL, NULL, NULL, %s::text, %s::text[], "
                 f"%s::text[], %s::int, {_LEASE})")
_CLAIM = (f"SELECT {_JOB_COLUMNS} FROM skiplock.claim(%s::text, %s::text[], %s::text[], "
          f"%s::int, {_LEASE})")
_RECORD = f"SELECT id FROM skiplock.record({_OUTCOME_ARRAYS})"
_HEARTBEAT = f"SELECT id, extended FROM skiplock.heartbeat(%s::bigint[], %s::bigint[], {_LEASE})"
_RESCUE = "SELECT count(*) FROM skiplock.rescue(%s::int)"


@dataclass
class Outcome:
    """One finished attempt, as skiplock.record takes it."""

    id: int
    fencing: int
    outcome: str  # ok | retry | discard
    result: Any = None
    error: Optional[str] = None
    retry_after_ms: Optional[int] = None
    resent: bool = False  # sent before without an answer: a missing row is no news


def _json_or_none(value: Any) -> Any:
    return None if value is None else Jsonb(value)


def outcome_params(outs: Sequence[Outcome]) -> List[Any]:
    return [[o.id for o in outs], [o.fencing for o in outs], [o.outcome for o in outs],
            [_json_or_none(o.result) for o in outs], [o.error for o in outs],
            [o.retry_after_ms for o in outs]]


def check_result(value: Any) -> Optional[str]:
    """Why `value` cannot be stored as a job's result (None when it can)."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as e:
        return f"the handler's result is not JSON: {e}"
    if "\\u0000" in text:
        return "the handler's result holds a NUL character, which jsonb cannot store"
    return None


class Session:
    def __init__(self, url: str, pooler: str, connect_kwargs: Dict[str, Any]):
        self.url = url
        self.pooler = pooler
        self.connect_kwargs = connect_kwargs
        self.conn: Optional[psycopg.AsyncConnection[Any]] = None
        self.direct = False
        self.connects = 0

    async def connect(self) -> None:
        if self.conn is not None and not self.conn.closed and not self.conn.broken:
            return
        await self.close()
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, prepare_threshold=None, **self.connect_kwargs)
            self.direct = await is_direct(conn, self.url, self.pooler)
        except psycopg.Error as e:
            raise classify(e) from e
        if self.direct:
            conn.prepare_threshold = 0  # prepare the hot statements at once
        self.conn = conn
        self.connects += 1

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                await conn.close()
            except psycopg.Error:
                pass

    async def _rows(self, sql: str, params: Sequence[Any]) -> List[Tuple[Any, ...]]:
        await self.connect()
        assert self.conn is not None
        try:
            cur = await self.conn.execute(sql, params)
            return await cur.fetchall()
        except psycopg.Error as e:
            raise classify(e) from e

    async def record_claim(self, outs: Sequence[Outcome], owner: str, kinds: List[str],
                           queues: Optional[List[str]], n: int,
                           lease_ms: int) -> Tuple[List[int], List[Job]]:
        """Records `outs`, then claims up to n jobs: one round trip (a plain
        claim when there is nothing to record, which costs the server less)."""
        if not outs:
            rows = await self._rows(_CLAIM, [owner, kinds, queues, n, lease_ms])
            return [], [Job(*r) for r in rows]
        rows = await self._rows(_RECORD_CLAIM, [*outcome_params(outs), owner, kinds, queues, n,
                                                lease_ms])
        recorded = [r[1] for r in rows if r[0] == "recorded"]
        return recorded, [Job(*r[1:]) for r in rows if r[0] == "claimed"]

    async def record(self, outs: Sequence[Outcome]) -> List[int]:
        return [r[0] for r in await self._rows(_RECORD, outcome_params(outs))]

    async def heartbeat(self, ids: List[int], fencings: List[int],
                        lease_ms: int) -> List[Tuple[int, bool]]:
        return [(r[0], r[1]) for r in await self._rows(_HEARTBEAT, [ids, fencings, lease_ms])]

    async def rescue(self, n: int = 1000) -> int:
        return int((await self._rows(_RESCUE, [n]))[0][0])
