"""The worker's one connection, and the protocol calls it makes.

Every call is one autocommit statement of the SQL protocol (docs/protocol.md):
no transaction is held across anything, nothing is kept in the session, and
server-side prepared statements are used only on a connection known to be
direct (through a transaction pooler they would land on another backend).
A broken connection is reopened by the next call.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import psycopg

from ._literal import int_array, text_array
from ._connect_state import connect_sqlstate
from .errors import (MIN_SCHEMA, NO_SCHEMA_SQLSTATES, PermanentError, SkiplockError,
                     TransientError, classify, is_transient, schema_error)
from .job import Job
from .pooler import is_direct

_LEASE = "(%s::bigint * interval '1 millisecond')"
# Every argument goes by name, so that an argument added to a function
# shifts nothing.  The outcomes are one JSON array of skiplock.outcome
# objects since protocol 3 (schema step 0033).
_OUTCOMES = "outcomes => %s::jsonb"
_CLAIM_ARGS = (f"owner => %s::text, kinds => %s::text[], queues => %s::text[], n => %s::int, "
               f"lease => {_LEASE}")
# Each call answers one row of JSON texts (decoded by json.loads in C)
# rather than a row per job: psycopg's pure-Python build reads each
# column of each row through ctypes, which costs more than the round trip.
# The timestamps come as microseconds since the epoch.
_JOB_JSON = ("json_build_array(id, queue, kind, payload, attempt, max_attempts, fencing, "
             "(extract(epoch FROM lease_expires_at) * 1000000)::bigint, timeout_ms, priority, "
             "run_at_us)")
# With wait_hints (schema step 0029), a claim that a limit held back also
# answers a 'wait' row: in how many ms the limit may have room again.
_RECORD_CLAIM = (f"SELECT (json_agg(id) FILTER (WHERE row_type = 'recorded'))::text, "
                 f"(json_agg({_JOB_JSON}) FILTER (WHERE row_type = 'claimed'))::text, "
                 f"max(delay_ms) FILTER (WHERE row_type = 'wait') "
                 f"FROM skiplock.record_claim({_OUTCOMES}, {_CLAIM_ARGS}, "
                 f"after_priority => NULL, after_run_at_us => NULL, after_id => NULL, "
                 f"wait_hints => true)")
_RECORD = f"SELECT json_agg(id)::text FROM skiplock.record({_OUTCOMES})"
_HEARTBEAT = (f"SELECT id, extended FROM skiplock.heartbeat(ids => %s::bigint[], "
              f"fencings => %s::bigint[], lease => {_LEASE}, job_queues => %s::text[])")
_RESCUE = "SELECT count(*) FROM skiplock.rescue(n => %s::int)"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


async def connect_error(exc: psycopg.OperationalError, url: str) -> SkiplockError:
    """The typed error for a failed connection: psycopg's error carries no
    SQLSTATE, so one more attempt asks the server for it; a refusal for a
    reason no retry cures (a wrong password, a missing database or role)
    is then a PermanentError, as in the other clients, and an unreachable
    server or one starting up a TransientError."""
    if getattr(exc, "sqlstate", None) is None:
        state = await asyncio.to_thread(connect_sqlstate, url, 2.0)
        if state is not None:
            message = f"{str(exc).strip().splitlines()[0]} (SQLSTATE {state})"
            err: SkiplockError = (TransientError(message, state) if is_transient(state)
                                  else PermanentError(message, state))
            err.__cause__ = exc
            return err
    return classify(exc)


@dataclass
class Outcome:
    """One finished attempt, as skiplock.record takes it."""

    id: int
    fencing: int
    outcome: str  # ok | retry | discard
    result: Optional[str] = None  # the result as JSON text
    error: Optional[str] = None
    retry_after_ms: Optional[int] = None
    resent: bool = False  # sent before without an answer: a missing row is no news
    in_tx: bool = False  # the handler completed the job in its transaction: a refusal is no news
    queue: Optional[str] = None  # the job's queue, the handle's third part (protocol 2)


def outcome_record(o: Outcome) -> str:
    """One outcome as a skiplock.outcome object: the handle (queue, id,
    fencing), the outcome, and only the fields it sets.  The result, JSON
    text already, is spliced in as it is."""
    fields: Dict[str, Any] = {"queue": o.queue, "id": o.id, "fencing": o.fencing,
                              "outcome": o.outcome}
    if o.error is not None:
        fields["error"] = o.error
    if o.retry_after_ms:
        fields["retry_after_ms"] = o.retry_after_ms
    text = json.dumps(fields, separators=(",", ":"))
    if o.result is None:
        return text
    return text[:-1] + ',"result":' + o.result + "}"


def outcomes_json(outs: Sequence[Outcome]) -> str:
    """The outcomes as one JSON array, the one value of record and
    record_claim (protocol 3)."""
    return "[" + ",".join(outcome_record(o) for o in outs) + "]"


def result_json(value: Any) -> Tuple[Optional[str], Optional[str]]:
    """(the JSON text of a handler's result, None), or (None, why it cannot
    be stored as the job's result).  None is stored as SQL NULL."""
    if value is None:
        return None, None
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as e:
        return None, f"the handler's result is not JSON: {e}"
    if "\\u0000" in text:
        return None, "the handler's result holds a NUL character, which jsonb cannot store"
    return text, None


def _job(a: List[Any]) -> Job:
    return Job(a[0], a[1], a[2], a[3], a[4], a[5], a[6],
               _EPOCH + dt.timedelta(microseconds=a[7]), a[8], a[9],
               _EPOCH + dt.timedelta(microseconds=a[10]))


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
        except psycopg.OperationalError as e:
            raise await connect_error(e, self.url) from e
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

    async def check_schema(self) -> None:
        """PermanentError unless the schema is installed, at MIN_SCHEMA or later."""
        try:
            rows = await self.rows("SELECT skiplock.installed_version()", ())
        except SkiplockError as e:
            if e.sqlstate in NO_SCHEMA_SQLSTATES:
                raise schema_error(None, e.sqlstate) from e
            raise
        if rows[0][0] < MIN_SCHEMA:
            raise schema_error(rows[0][0])

    async def rows(self, sql: str, params: Sequence[Any]) -> List[Tuple[Any, ...]]:
        """The rows of one autocommit statement (connecting first if need be)."""
        await self.connect()
        assert self.conn is not None
        try:
            cur = await self.conn.execute(sql, params)
            return await cur.fetchall()
        except psycopg.Error as e:
            raise classify(e) from e

    async def record_claim(self, outs: Sequence[Outcome], owner: str, kinds: List[str],
                           queues: Optional[List[str]], n: int,
                           lease_ms: int) -> Tuple[List[int], List[Job], Optional[int]]:
        """Records `outs`, then claims up to n jobs, in one round trip:
        (the ids recorded, the jobs claimed, and the wait hint: None, or the
        ms after which a limit that held due jobs back may have room)."""
        claim = [owner, text_array(kinds), None if queues is None else text_array(queues), n,
                 lease_ms]
        recorded, claimed, wait_ms = (await self.rows(_RECORD_CLAIM, [
            outcomes_json(outs), *claim]))[0]
        return (json.loads(recorded) if recorded else [],
                [_job(a) for a in json.loads(claimed)] if claimed else [],
                None if wait_ms is None else int(wait_ms))

    async def record(self, outs: Sequence[Outcome]) -> List[int]:
        recorded = (await self.rows(_RECORD, [outcomes_json(outs)]))[0][0]
        ids: List[int] = json.loads(recorded) if recorded else []
        return ids

    async def heartbeat(self, ids: List[int], fencings: List[int], lease_ms: int,
                        queues: Optional[List[str]] = None) -> List[Tuple[int, bool]]:
        rows = await self.rows(_HEARTBEAT, [int_array(ids), int_array(fencings), lease_ms,
                                            None if queues is None else text_array(queues)])
        return [(r[0], r[1]) for r in rows]

    async def rescue(self, n: int = 1000) -> int:
        return int((await self.rows(_RESCUE, [n]))[0][0])
