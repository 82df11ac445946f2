"""Where leases and the idempotency middleware get their connections.

A source is a conninfo string, or a function that returns an async
context manager of an AsyncConnection: psycopg_pool's
`AsyncConnectionPool.connection` is one, and so is any function of yours
that connects and closes.  Each call here is one short statement in a
transaction of its own (autocommit, or an explicit transaction on a
connection that is not), never prepared (a transaction pooler hands each
transaction whichever server is free), and nothing is left in the session:
so acquire, renew and release may each land on a different backend.

With a conninfo string, `keep=True` keeps one connection open (a lease's:
one call at a time) and reopens it when it broke; `keep=False` connects
for each borrow (the middleware's: requests run concurrently).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import (Any, AsyncContextManager, AsyncIterator, Callable, Dict, List, Optional,
                    Sequence, Tuple, Union)

import psycopg

from .errors import TransientError, classify

AsyncConn = psycopg.AsyncConnection[Any]
ConnectionFactory = Callable[[], AsyncContextManager[AsyncConn]]
Source = Union[str, ConnectionFactory]


def check_source(source: Any) -> Source:
    if isinstance(source, str) or callable(source):
        return source  # type: ignore[no-any-return]
    raise TypeError("the connection source must be a conninfo str or a function returning an "
                    "async context manager of a psycopg AsyncConnection (such as "
                    f"AsyncConnectionPool.connection), not {type(source).__name__}")


class Connector:
    def __init__(self, source: Source, connect_kwargs: Optional[Dict[str, Any]] = None,
                 keep: bool = False):
        self.source = check_source(source)
        self.connect_kwargs = dict(connect_kwargs or {})
        self.keep = keep
        self._conn: Optional[AsyncConn] = None
        self._lock: Optional[asyncio.Lock] = None

    async def _connect(self) -> AsyncConn:
        assert isinstance(self.source, str)
        conn: AsyncConn = await psycopg.AsyncConnection.connect(
            self.source, autocommit=True, prepare_threshold=None, **self.connect_kwargs)
        return conn

    @contextlib.asynccontextmanager
    async def _kept(self) -> AsyncIterator[AsyncConn]:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._conn is None or self._conn.closed or self._conn.broken:
                await self.close()
                self._conn = await self._connect()
            try:
                yield self._conn
            except BaseException:
                await self.close()  # its state is unknown: a timeout, a broken socket
                raise

    @contextlib.asynccontextmanager
    async def _fresh(self) -> AsyncIterator[AsyncConn]:
        conn = await self._connect()
        try:
            yield conn
        finally:
            await conn.close()

    def borrow(self) -> AsyncContextManager[AsyncConn]:
        """A connection for one or a few calls."""
        if not isinstance(self.source, str):
            return self.source()
        return self._kept() if self.keep else self._fresh()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                await conn.close()
            except psycopg.Error:
                pass

    async def row(self, sql: str, params: Sequence[Any],
                  timeout: Optional[float] = None) -> Optional[Tuple[Any, ...]]:
        """The first row of one statement, in a transaction of its own,
        bounded by `timeout` seconds (connecting included); errors typed."""
        async def call() -> Optional[Tuple[Any, ...]]:
            async with self.borrow() as conn:
                return await one_row(conn, sql, params)
        try:
            return await asyncio.wait_for(call(), timeout)
        except asyncio.TimeoutError:
            raise TransientError(f"no answer from the database within {timeout:.1f} s") from None
        except psycopg.Error as e:
            raise classify(e) from e


async def one_row(conn: AsyncConn, sql: str,
                  params: Sequence[Any]) -> Optional[Tuple[Any, ...]]:
    """The first row of all_rows()."""
    rows = await all_rows(conn, sql, params)
    return rows[0] if rows else None


async def all_rows(conn: AsyncConn, sql: str, params: Sequence[Any]) -> List[Tuple[Any, ...]]:
    """One statement committed on its own: autocommit, or an explicit
    transaction (BEGIN ... COMMIT) on a connection that is not (inside the
    caller's open transaction, a savepoint: it commits with that one)."""
    if conn.autocommit:
        cur = await conn.execute(sql, params, prepare=False)
        return await cur.fetchall()
    async with conn.transaction():
        cur = await conn.execute(sql, params, prepare=False)
        return await cur.fetchall()
