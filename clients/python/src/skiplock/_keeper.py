"""Acquires, renews and releases one lease: the policy of `skiplock lease
run` (src/cli/lease/lease_run.c), on an event loop.

held_from is when the last successful renewal (or the acquisition) was
sent: the server set the expiry at least ttl after that, so the lease is
ours until held_from + ttl at the earliest.  Renewals go every ttl/3;
one that fails transiently is retried with jittered backoff until

    stop_at = held_from + ttl - 2 * attempt

(attempt bounds one database call, connecting included; the second one is
the body's time to stop), and then the lease counts as lost.  A renewal
that matches no row (expired and taken, or released) loses it at once.
Time is the boot-time clock, which counts while the process is stopped:
a process frozen past stop_at finds the lease lost when it runs again.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Callable, Optional

from ._conn import Connector
from .errors import LeaseHeldError, SkiplockError, TransientError

log = logging.getLogger("skiplock")

_CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)
_MS = "(%s::double precision * interval '1 millisecond')"
_ACQUIRE = f"SELECT skiplock.lease_acquire(name => %s::text, owner => %s::text, ttl => {_MS})"
_HOLDER = ("SELECT owner, extract(epoch FROM expires_at - clock_timestamp())::float8 "
           "FROM skiplock.leases WHERE name = %s::text")
_RENEW = (f"SELECT skiplock.lease_renew(name => %s::text, owner => %s::text, "
          f"fencing => %s::bigint, ttl => {_MS})")
_RELEASE = ("SELECT skiplock.lease_release(name => %s::text, owner => %s::text, "
            "fencing => %s::bigint)")


def now() -> float:
    """Seconds on the boot-time clock (it counts while the process is stopped)."""
    return time.clock_gettime(_CLOCK)


def jitter(attempt: int, base: float, cap: float) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2^attempt)]."""
    return random.uniform(0, min(cap, base * 2 ** min(attempt, 20)))


class Keeper:
    def __init__(self, conn: Connector, name: str, owner: str, ttl: float,
                 on_lost: Callable[[str], None]):
        self.conn = conn
        self.name = name
        self.owner = owner
        self.ttl = ttl
        self.attempt = min(ttl / 10, 10.0)
        self.on_lost = on_lost
        self.fencing = 0
        self.held_from = 0.0
        self.lost: Optional[str] = None
        self._stop: Optional[asyncio.Event] = None
        self._task: Optional["asyncio.Task[None]"] = None

    @property
    def stop_at(self) -> float:
        return self.held_from + self.ttl - 2 * self.attempt

    # ---- acquire ----

    async def acquire(self, wait: Optional[float], retry_for: float) -> None:
        """Holds the lease, or raises LeaseHeldError once `wait` seconds
        passed (None: at once; inf: never), or the error of the database
        (transient ones retried for `retry_for` seconds)."""
        start, attempt = now(), 0
        poll = min(max(self.ttl / 4, 0.2), 2.0)
        while True:
            sent = now()
            try:
                row = await self.conn.row(_ACQUIRE, [self.name, self.owner, self.ttl * 1000],
                                          self.attempt)
            except TransientError as e:
                if now() - start >= retry_for:
                    raise
                log.warning("lease %r: could not acquire: %s; retrying", self.name, e)
                await asyncio.sleep(jitter(attempt, 0.05, 2.0))
                attempt += 1
                continue
            if row is not None and row[0] is not None:
                self.fencing, self.held_from = int(row[0]), sent
                log.debug("lease %r acquired by %s: token %d", self.name, self.owner,
                          self.fencing)
                return
            if wait is None or now() - start >= wait:
                raise await self._held_error()
            await asyncio.sleep(min(poll / 2 + random.uniform(0, poll),
                                    max(0.0, start + wait - now())))

    async def _held_error(self) -> LeaseHeldError:
        try:
            row = await self.conn.row(_HOLDER, [self.name], self.attempt)
        except SkiplockError:
            row = None
        if row is None:
            return LeaseHeldError(self.name, None, None)
        return LeaseHeldError(self.name, row[0], max(0.0, float(row[1])))

    # ---- renew ----

    def start(self) -> None:
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._renew_loop(), name=f"skiplock-lease-{self.name}")

    def check_deadline(self) -> None:
        """Counts the lease lost once stop_at passed without a renewal."""
        if self.lost is None and now() >= self.stop_at:
            self.lose(f"no renewal succeeded for {now() - self.held_from:.1f} s (ttl "
                      f"{self.ttl:g} s): the process was paused or the database unreachable")

    def lose(self, why: str) -> None:
        if self.lost is None:
            self.lost = why
            log.error("lease %r lost (token %d): %s", self.name, self.fencing, why)
            self.on_lost(why)

    async def _renew_loop(self) -> None:
        assert self._stop is not None
        next_renew, failures = self.held_from + self.ttl / 3, 0
        while self.lost is None and not self._stop.is_set():
            self.check_deadline()
            if self.lost is not None:
                return
            delay = min(next_renew, self.stop_at) - now()
            if delay > 0:
                try:
                    await asyncio.wait_for(self._stop.wait(), delay)
                    return
                except asyncio.TimeoutError:
                    pass
                continue
            if await self._renew_once():
                next_renew, failures = self.held_from + self.ttl / 3, 0
            elif self.lost is None:
                next_renew = now() + jitter(failures, self.ttl / 50, self.ttl / 10)
                failures += 1

    async def _renew_once(self) -> bool:
        """True when renewed; False after a transient failure (or a loss)."""
        sent = now()
        try:
            row = await self.conn.row(_RENEW, [self.name, self.owner, self.fencing,
                                               self.ttl * 1000], self.attempt)
        except TransientError as e:
            log.warning("lease %r: could not renew (%.1f s left to retry): %s", self.name,
                        max(0.0, self.stop_at - now()), e)
            return False
        except SkiplockError as e:
            self.lose(f"the renewal failed: {e}")
            return False
        if row is None or not row[0]:
            self.lose("the renewal matched no row (it expired and was taken, or was released)")
            return False
        self.held_from = sent
        return True

    # ---- release ----

    async def close(self) -> None:
        """Stops renewing, then releases (retried for a while; the lease
        expires by itself otherwise)."""
        if self._task is not None and self._stop is not None:
            self._stop.set()
            await self._task
        if self.fencing and self.lost is None:
            await self._release()
        await self.conn.close()

    async def _release(self) -> None:
        end = now() + min(self.ttl, 5.0)
        for attempt in range(1000):
            try:
                await self.conn.row(_RELEASE, [self.name, self.owner, self.fencing],
                                    self.attempt)
                log.debug("lease %r released (token %d)", self.name, self.fencing)
                return
            except TransientError as e:
                if now() >= end:
                    log.warning("lease %r: could not release (it expires by itself within "
                                "%g s): %s", self.name, self.ttl, e)
                    return
            except SkiplockError as e:
                log.warning("lease %r: could not release: %s", self.name, e)
                return
            await asyncio.sleep(jitter(attempt, 0.05, 1.0))
