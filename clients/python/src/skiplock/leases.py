"""Leases with fencing tokens (docs/leases.md): one holder of a name at a
time, renewed in the background, released on exit.

    async with skiplock.lease(DATABASE_URL, "nightly-report", ttl=60) as lease:
        async with conn.transaction():
            await lease.fence(conn)          # SK001 unless the lease is still ours
            await conn.execute("INSERT INTO reports ...")

    with skiplock.lease_sync(DATABASE_URL, "nightly-report", ttl=60) as lease:
        for chunk in work:
            lease.check()                    # LeaseLostError once the lease is gone
            ...

Entering raises LeaseHeldError while another owner holds the lease (at
once, or after `wait` seconds of polling).  The lease renews itself every
ttl/3 on a connection of its own; when it is lost, the async body's task
is cancelled and the block raises LeaseLostError, and the sync body sees
`lease.lost` set (and `lease.check()` raise).  The effect that matters
must be fenced: `lease.fence(conn)` first in the transaction that writes.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import uuid
from types import TracebackType
from typing import Any, Awaitable, Dict, Optional, Tuple, Type, Union, overload

import psycopg

from ._conn import Connector, Source
from ._durations import Seconds, seconds
from ._keeper import Keeper
from ._threads import LoopThread
from .errors import LeaseLostError
from .protocol import lease_fence

NAME_MAX = 256  # characters in a lease name or owner
TTL_MIN, TTL_MAX = 0.3, 365 * 86400.0


def check_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= NAME_MAX:
        raise ValueError(f"lease {what} must be a str of 1 to {NAME_MAX} characters, got "
                         f"{value!r:.80}")
    return value


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def wait_seconds(wait: Union[bool, Seconds]) -> Optional[float]:
    """False: no wait (None); True: no limit (inf); else seconds."""
    if wait is False:
        return None
    if wait is True:
        return float("inf")
    return seconds(wait, "wait", 0, TTL_MAX)


class Lease:
    """A held lease: `name`, `owner`, `fencing` (this holding's token) and
    `ttl` (seconds).  `lost` is set (a threading.Event) once the lease is
    lost, and `reason` says why."""

    def __init__(self, name: str, owner: str, ttl: float):
        self.name = name
        self.owner = owner
        self.ttl = ttl
        self.fencing = 0
        self.lost = threading.Event()
        self.reason: Optional[str] = None
        self._keeper: Optional[Keeper] = None

    def __repr__(self) -> str:
        return (f"Lease(name={self.name!r}, owner={self.owner!r}, fencing={self.fencing}, "
                f"lost={self.lost.is_set()})")

    def check(self) -> None:
        """Raises LeaseLostError once the lease is lost, or may be: also
        when no renewal succeeded in time (this process was paused, the
        database unreachable) even before the renewer noticed."""
        if self._keeper is not None:
            self._keeper.check_deadline()
        if self.lost.is_set():
            raise LeaseLostError(self.name, self.fencing, self.reason or "lost")

    @overload
    def fence(self, conn: psycopg.Connection[Any]) -> None: ...

    @overload
    def fence(self, conn: psycopg.AsyncConnection[Any]) -> Awaitable[None]: ...

    def fence(self, conn: Any) -> Any:
        """skiplock.lease_fence(name, fencing) in your transaction on `conn`:
        raises FencedError (SQLSTATE SK001) unless this token is the live
        lease's, and keeps the lease row locked FOR SHARE until your
        transaction ends, so what the transaction writes commits only while
        the lease is ours.  Awaitable on an AsyncConnection."""
        return lease_fence(conn, self.name, self.fencing)

    def _lose(self, why: str) -> None:
        self.reason = why
        self.lost.set()


def _make(source: Source, name: str, ttl: Seconds, owner: Optional[str],
          connect_kwargs: Optional[Dict[str, Any]]) -> Tuple[Lease, Keeper]:
    """The lease and its keeper; bad arguments raise before anything is sent."""
    lease = Lease(check_name(name, "name"),
                  check_name(owner if owner is not None else default_owner(), "owner"),
                  seconds(ttl, "ttl", TTL_MIN, TTL_MAX))
    keeper = Keeper(Connector(source, connect_kwargs, keep=True), lease.name, lease.owner,
                    lease.ttl, lease._lose)
    lease._keeper = keeper
    return lease, keeper


class lease:  # noqa: N801 - used like a function: async with skiplock.lease(...)
    """`async with lease(source, name, ttl=...) as l:` holds the lease
    `name` for the block (see the module's doc).

    source: a conninfo str (the lease keeps one connection of its own) or
    a function returning an async context manager of an AsyncConnection
    (psycopg_pool's `pool.connection`).  ttl: seconds or a timedelta, 0.3 s
    to 365 days.  owner: this holder's id (default HOST:PID:RANDOM).  wait:
    False (default: LeaseHeldError at once), True (poll until free) or the
    seconds to poll.  retry_for: how long a database that cannot be reached
    is retried while acquiring.  cancel: cancel the body's task when the
    lease is lost (default True; else poll `l.lost` / `l.check()`).
    """

    def __init__(self, source: Source, name: str, *, ttl: Seconds = 60.0,
                 owner: Optional[str] = None, wait: Union[bool, Seconds] = False,
                 retry_for: Seconds = 10.0, cancel: bool = True,
                 connect_kwargs: Optional[Dict[str, Any]] = None):
        self._lease, self._keeper = _make(source, name, ttl, owner, connect_kwargs)
        self._keeper.on_lost = self._on_lost
        self._wait = wait_seconds(wait)
        self._retry_for = seconds(retry_for, "retry_for", 0, TTL_MAX)
        self._cancel = cancel
        self._task: Optional["asyncio.Task[Any]"] = None
        self._cancelled = False
        self._in_body = False

    async def __aenter__(self) -> Lease:
        self._task = asyncio.current_task()
        await acquire(self._keeper, self._wait, self._retry_for)
        self._lease.fencing = self._keeper.fencing
        self._in_body = True
        self._keeper.start()
        return self._lease

    def _on_lost(self, why: str) -> None:
        self._lease._lose(why)
        if self._cancel and self._in_body and self._task is not None:
            self._cancelled = True
            self._task.cancel()

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        self._in_body = False
        ours = self._cancelled and isinstance(exc, asyncio.CancelledError)
        if ours:
            self._uncancel()
        await self._close()
        if self._lease.lost.is_set() and (exc is None or ours):
            raise LeaseLostError(self._lease.name, self._lease.fencing,
                                 self._lease.reason or "lost") from exc

    def _uncancel(self) -> None:
        """Our cancellation was taken: the task is no longer being cancelled."""
        if self._task is not None and hasattr(self._task, "uncancel"):
            self._task.uncancel()
        self._cancelled = False

    async def _close(self) -> None:
        """Stops renewing and releases, also when our cancellation of the
        body arrives only now (the body ended just as the lease was lost)."""
        closing = asyncio.ensure_future(self._keeper.close())
        while True:
            try:
                await asyncio.shield(closing)
                return
            except asyncio.CancelledError:
                if not self._cancelled:
                    raise
                self._uncancel()


async def acquire(keeper: Keeper, wait: Optional[float], retry_for: float) -> None:
    """keeper.acquire, closing its connection when nothing was acquired."""
    try:
        await keeper.acquire(wait, retry_for)
    except BaseException:
        await keeper.conn.close()
        raise


class lease_sync:  # noqa: N801 - used like a function: with skiplock.lease_sync(...)
    """`with lease_sync(source, name, ttl=...) as l:` holds the lease for a
    block of blocking code: the same arguments as lease() (but no cancel:
    a thread cannot be cancelled).  Renewals run on an event loop in a
    daemon thread of their own.  The body polls `l.lost` or calls
    `l.check()` between steps (`l.lost.wait(seconds)` sleeps until the
    lease is lost); the block raises LeaseLostError at its end when the
    lease was lost while it ran."""

    def __init__(self, source: Source, name: str, *, ttl: Seconds = 60.0,
                 owner: Optional[str] = None, wait: Union[bool, Seconds] = False,
                 retry_for: Seconds = 10.0, connect_kwargs: Optional[Dict[str, Any]] = None):
        self._lease, self._keeper = _make(source, name, ttl, owner, connect_kwargs)
        self._wait = wait_seconds(wait)
        self._retry_for = seconds(retry_for, "retry_for", 0, TTL_MAX)
        self._loop: Optional[LoopThread] = None

    def __enter__(self) -> Lease:
        self._loop = LoopThread(f"skiplock-lease-{self._lease.name}")
        try:
            self._loop.run(self._start())
        except BaseException:
            self._loop.close()
            raise
        return self._lease

    async def _start(self) -> None:
        await acquire(self._keeper, self._wait, self._retry_for)
        self._lease.fencing = self._keeper.fencing
        self._keeper.start()

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        assert self._loop is not None
        try:
            self._loop.run(self._keeper.close())
        finally:
            self._loop.close()
        if self._lease.lost.is_set() and exc is None:
            raise LeaseLostError(self._lease.name, self._lease.fencing,
                                 self._lease.reason or "lost")
