"""One replica of many runs a function: `skiplock lease run` for Python.

    result = await skiplock.run_singleton(DATABASE_URL, "nightly-reconcile",
                                          reconcile, ttl=60)
    if not result.ran:
        print("another replica has it:", result.holder)

fn gets the Lease (its fencing token, lease.fence(conn) for its writes).
Every replica calls run_singleton; the one that acquires the lease runs
fn while renewing it, then releases it.  The others return at once
(ran=False, naming the holder), or with wait=True keep polling and take
over within about the ttl when the holder dies: its lease is not renewed
and expires.  A lease lost while fn runs raises LeaseLostError (an async
fn's task is cancelled first; a sync fn should poll lease.lost).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Dict, Generic, Optional, TypeVar, Union

from ._conn import Source
from .errors import LeaseHeldError
from ._durations import Seconds
from .leases import Lease, lease, lease_sync

T = TypeVar("T")


@dataclass(frozen=True)
class SingletonResult(Generic[T]):
    """ran: fn ran here (value is what it returned, fencing the token it
    ran under); else holder and expires_in describe the lease's holder,
    when they could be read."""

    ran: bool
    value: Optional[T] = None
    fencing: Optional[int] = None
    holder: Optional[str] = None
    expires_in: Optional[float] = None


def _not_run(e: LeaseHeldError) -> SingletonResult[Any]:
    return SingletonResult(False, holder=e.holder, expires_in=e.expires_in)


async def run_singleton(source: Source, name: str, fn: Callable[[Lease], Awaitable[T]], *,
                        ttl: Seconds = 60.0, wait: Union[bool, Seconds] = False,
                        owner: Optional[str] = None, retry_for: Seconds = 10.0,
                        connect_kwargs: Optional[Dict[str, Any]] = None) -> SingletonResult[T]:
    """Runs `await fn(lease)` while holding the lease `name` (the arguments
    are lease()'s); SingletonResult(ran=False, ...) when another replica
    holds it (after `wait`)."""
    held = lease(source, name, ttl=ttl, owner=owner, wait=wait, retry_for=retry_for,
                 connect_kwargs=connect_kwargs)
    try:
        the_lease = await held.__aenter__()
    except LeaseHeldError as e:
        return _not_run(e)
    try:
        value = await fn(the_lease)
    except BaseException as e:
        await held.__aexit__(type(e), e, e.__traceback__)
        raise
    await held.__aexit__(None, None, None)
    return SingletonResult(True, value, the_lease.fencing)


def run_singleton_sync(source: Source, name: str, fn: Callable[[Lease], T], *,
                       ttl: Seconds = 60.0, wait: Union[bool, Seconds] = False,
                       owner: Optional[str] = None, retry_for: Seconds = 10.0,
                       connect_kwargs: Optional[Dict[str, Any]] = None) -> SingletonResult[T]:
    """run_singleton for blocking code: fn(lease) runs in the calling thread
    (lease_sync's renewals in another)."""
    held = lease_sync(source, name, ttl=ttl, owner=owner, wait=wait, retry_for=retry_for,
                      connect_kwargs=connect_kwargs)
    try:
        the_lease = held.__enter__()
    except LeaseHeldError as e:
        return _not_run(e)
    try:
        value = fn(the_lease)
    except BaseException as e:
        held.__exit__(type(e), e, e.__traceback__)
        raise
    held.__exit__(None, None, None)
    return SingletonResult(True, value, the_lease.fencing)
