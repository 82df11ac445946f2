"""Idempotency keys (docs/idempotency.md): one outcome per key, however
often and however concurrently the key arrives.

    claim = skiplock.idempotent(conn, key, skiplock.fingerprint("POST", "/charges", body))
    if claim.acquired:
        with conn.transaction():
            conn.execute("INSERT INTO charges ...")
            claim.complete(conn, 201, {"id": charge_id})   # commits with the charge
    elif claim.replay:
        return claim.response_code, claim.response_body    # the first response
    elif claim.in_progress:
        return 409                                          # with Retry-After
    else:  # claim.conflict: the key was used for another request
        return 422

The claim is skiplock.idem_claim in a transaction of its own; complete is
skiplock.idem_complete with the claim's holder token, in your transaction,
so the stored response and the effect commit together or not at all.
Every function takes a psycopg Connection or AsyncConnection; on an
AsyncConnection it returns an awaitable.  Bad input raises ValueError or
TypeError before anything is sent.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Awaitable, List, Optional, overload

import psycopg
from psycopg.pq import TransactionStatus

from ._durations import Seconds, seconds
from .errors import PermanentError, classify
from .protocol import _then

KEY_MAX = 255  # bytes in a key (and in a request fingerprint)
RESPONSE_MAX = 64 * 1024  # bytes of a stored response body, as JSON text
TTL_DEFAULT = 86400.0  # a key is remembered 24 hours
RECOVERY_DEFAULT = 60.0  # an in-progress claim is safe from takeover for 60 s
OUTCOMES = ("acquired", "replay", "in_progress", "conflict")

_MS = "(%s::double precision * interval '1 millisecond')"
_CLAIM = (f"SELECT outcome, response_code, response_body, holder "
          f"FROM skiplock.idem_claim(key => %s::text, request_hash => %s::text, "
          f"ttl => {_MS}, recovery => {_MS})")
_COMPLETE = ("SELECT skiplock.idem_complete(key => %s::text, response_code => %s::int, "
             "response_body => %s::jsonb, holder => %s::text)")
_RELEASE = "SELECT skiplock.idem_release(key => %s::text, holder => %s::text)"


def fingerprint(method: str, path: str, body: bytes) -> str:
    """SHA-256 (hex) over the method, a NUL, the path, a NUL and the body's
    bytes: the C library's skl_idem_fingerprint."""
    h = hashlib.sha256(method.encode())
    h.update(b"\0" + path.encode() + b"\0")
    h.update(body)
    return h.hexdigest()


def check_key(value: Any, what: str = "idempotency key") -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    n = len(value.encode())
    if not 1 <= n <= KEY_MAX or "\0" in value:
        raise ValueError(f"{what} must be 1 to {KEY_MAX} bytes without NUL (got {n} bytes)")
    return value


def positive_ms(value: Any, name: str) -> float:
    """A ttl or recovery window (positive, at most 10 years) as milliseconds."""
    return seconds(value, name, 0, 10 * 365 * 86400.0, positive=True) * 1000.0


def response_json(body: Any, limit: int = RESPONSE_MAX) -> str:
    """The JSON text a response body is stored as; ValueError when it is
    not JSON, holds a NUL character (jsonb cannot) or is over `limit`."""
    try:
        text = json.dumps(body, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise ValueError(f"the response body is not JSON: {e}") from None
    if "\\u0000" in text:
        raise ValueError("the response body holds a NUL character, which jsonb cannot store")
    if len(text.encode()) > limit:
        raise ValueError(f"the response body is {len(text.encode())} bytes as JSON, over the "
                         f"stored-response cap of {limit} bytes")
    return text


def _wrap(conn: Any, own: Optional[str]) -> bool:
    """Whether the statement needs a transaction of its own: on an idle
    connection, yes; inside the caller's transaction it joins it, unless
    the call (`own` names it) must commit by itself: then ValueError."""
    if conn.info.transaction_status == TransactionStatus.IDLE:
        return True
    if own is not None:
        raise ValueError(f"{own} runs in a transaction of its own: call it on a connection "
                         "that is not inside a transaction")
    return False


def _row(conn: Any, sql: str, params: List[Any], own: Optional[str] = None) -> Any:
    """The first row of `sql` on conn; an awaitable of it on an AsyncConnection."""
    if not isinstance(conn, (psycopg.Connection, psycopg.AsyncConnection)):
        raise TypeError(f"expected a psycopg Connection or AsyncConnection, not "
                        f"{type(conn).__name__}")
    wrap = _wrap(conn, own)
    if isinstance(conn, psycopg.AsyncConnection):
        return _row_async(conn, sql, params, wrap)
    try:
        with conn.transaction() if wrap else contextlib.nullcontext():
            return conn.execute(sql, params, prepare=False).fetchone()
    except psycopg.Error as e:
        raise classify(e) from e


async def _row_async(conn: psycopg.AsyncConnection[Any], sql: str, params: List[Any],
                     wrap: bool) -> Any:
    try:
        if not wrap:
            return await (await conn.execute(sql, params, prepare=False)).fetchone()
        async with conn.transaction():
            return await (await conn.execute(sql, params, prepare=False)).fetchone()
    except psycopg.Error as e:
        raise classify(e) from e


def _none(_: Any) -> None:
    return None


@dataclass
class IdemClaim:
    """What idem_claim answered for `key`: `outcome` is one of acquired,
    replay, in_progress, conflict (and the properties of those names say
    which).  replay: `response_code` and `response_body` (the stored JSON
    value) are the first response.  acquired: complete() or release()
    with the holder token it keeps (never printed)."""

    key: str
    outcome: str
    response_code: Optional[int] = None
    response_body: Any = None
    holder: Optional[str] = field(default=None, repr=False)
    max_response_bytes: int = RESPONSE_MAX
    completed: bool = False  # complete() succeeded (its transaction may not have committed)

    @property
    def acquired(self) -> bool:
        return self.outcome == "acquired"

    @property
    def replay(self) -> bool:
        return self.outcome == "replay"

    @property
    def in_progress(self) -> bool:
        return self.outcome == "in_progress"

    @property
    def conflict(self) -> bool:
        return self.outcome == "conflict"

    def _holder(self) -> str:
        if not self.acquired or self.holder is None:
            raise ValueError(f"idempotency key {self.key!r} was not acquired by this claim "
                             f"({self.outcome})")
        return self.holder

    @overload
    def complete(self, conn: psycopg.Connection[Any], response_code: int,
                 response_body: Any) -> None: ...

    @overload
    def complete(self, conn: psycopg.AsyncConnection[Any], response_code: int,
                 response_body: Any) -> Awaitable[None]: ...

    def complete(self, conn: Any, response_code: int, response_body: Any) -> Any:
        """Stores the response (a status code 100 to 999 and a JSON value of
        at most max_response_bytes) in your transaction on `conn`, the one
        that makes the effect: both commit or neither (on a connection not
        in a transaction, in one of its own).  FencedError (SQLSTATE
        SK002) when the key is no longer in progress under this claim
        (taken over after its recovery window, or expired): roll back."""
        if isinstance(response_code, bool) or not isinstance(response_code, int) \
                or not 100 <= response_code <= 999:
            raise ValueError(f"response code must be an int from 100 to 999, got "
                             f"{response_code!r}")
        params = [self.key, response_code, response_json(response_body,
                                                         self.max_response_bytes),
                  self._holder()]

        def done(_: Any) -> None:
            self.completed = True
        return _then(_row(conn, _COMPLETE, params), done)

    @overload
    def release(self, conn: psycopg.Connection[Any]) -> None: ...

    @overload
    def release(self, conn: psycopg.AsyncConnection[Any]) -> Awaitable[None]: ...

    def release(self, conn: Any) -> Any:
        """Gives the key up (in a transaction of its own on `conn`) when the
        work failed before any effect, so that a retry runs at once rather
        than after the recovery window.  A completed key is left alone."""
        return _then(_row(conn, _RELEASE, [self.key, self._holder()], "release()"), _none)


@overload
def idempotent(conn: psycopg.Connection[Any], key: str, request_hash: str, *,
               ttl: Seconds = ..., recovery: Seconds = ...,
               max_response_bytes: int = ...) -> IdemClaim: ...


@overload
def idempotent(conn: psycopg.AsyncConnection[Any], key: str, request_hash: str, *,
               ttl: Seconds = ..., recovery: Seconds = ...,
               max_response_bytes: int = ...) -> Awaitable[IdemClaim]: ...


def idempotent(conn: Any, key: str, request_hash: str, *, ttl: Seconds = TTL_DEFAULT,
               recovery: Seconds = RECOVERY_DEFAULT,
               max_response_bytes: int = RESPONSE_MAX) -> Any:
    """Claims `key` (1 to 255 bytes) for the request whose fingerprint is
    `request_hash` (fingerprint(); 1 to 255 bytes), in a transaction of its
    own on `conn` (which must not be inside one): an IdemClaim.  ttl: how
    long the key is remembered (default 24 h); recovery: how long an
    in-progress claim is safe from takeover by the same request (default
    60 s; after it, a retry takes a crashed holder's key over).
    max_response_bytes: the cap complete() enforces."""
    params = [check_key(key), check_key(request_hash, "request fingerprint"),
              positive_ms(ttl, "ttl"), positive_ms(recovery, "recovery")]
    if not isinstance(max_response_bytes, int) or max_response_bytes < 2:
        raise ValueError(f"max_response_bytes must be an int of at least 2, got "
                         f"{max_response_bytes!r}")

    def claim(row: Any) -> IdemClaim:
        if row is None or row[0] not in OUTCOMES:
            raise PermanentError(f"idem_claim answered an unknown outcome {row!r}")
        return IdemClaim(key, row[0], row[1], row[2], row[3], max_response_bytes)
    return _then(_row(conn, _CLAIM, params, "idempotent()"), claim)
