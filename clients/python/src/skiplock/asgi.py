"""Idempotent HTTP endpoints for ASGI apps (FastAPI, Starlette, any other):
a retried request with the same Idempotency-Key gets the first response.

    app = FastAPI()
    app.add_middleware(IdempotencyMiddleware, source=DATABASE_URL)

For a request with the key header (POST, PUT, PATCH and DELETE by default)
the middleware reads the body, fingerprints method, path (with the query)
and body, and claims the key (skiplock.idempotent):

  acquired     the app runs; its response is stored, then sent
  replay       the stored status, body and kept headers are sent again,
               with Idempotent-Replayed: true; the app does not run
  in_progress  409 with Retry-After: another attempt holds the key
  conflict     422: the key was used for a different request
  (bad key)    400: empty, over 255 bytes; 413: a body over max_body

The stored response commits with the effect when the handler stores it in
the effect's transaction: `claim_of(request).complete(conn, response)`,
then return that response.  Otherwise the middleware stores the response
after the handler returned, in a transaction of its own: an effect that
committed before a crash in between is then applied again by the retry
that takes the key over after the recovery window.  A response of 500 or
more, or an exception, releases the key (a retry runs at once), unless
the handler completed it.  The whole response is buffered before it is
sent: a client that got an answer can always get it again.

Nothing here imports Starlette: it is plain ASGI.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from typing import (Any, Awaitable, Callable, Dict, Iterable, List, MutableMapping, Optional,
                    Protocol, Sequence, Tuple)

from ._conn import Connector, Source
from ._keeper import jitter, now
from .errors import SkiplockError, TransientError
from ._durations import Seconds
from .idem import (KEY_MAX, RECOVERY_DEFAULT, RESPONSE_MAX, TTL_DEFAULT, IdemClaim, fingerprint,
                   idempotent, positive_ms, response_json)

log = logging.getLogger("skiplock")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Headers = List[Tuple[bytes, bytes]]

SCOPE_KEY = "skiplock.idempotency"
REPLAYED = (b"idempotent-replayed", b"true")


class ResponseLike(Protocol):
    """A Starlette (FastAPI) Response, or anything with these."""

    status_code: int
    body: bytes
    raw_headers: Headers


def stored_form(headers: Iterable[Tuple[bytes, bytes]], body: bytes,
                keep: Sequence[str]) -> Dict[str, Any]:
    """How a response is stored: the kept headers, and the body as text
    (UTF-8 without NUL) or base64, so a replay sends the same bytes."""
    kept = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in headers
            if k.decode("latin-1").lower() in keep]
    try:
        text = body.decode()
        if "\0" not in text:
            return {"headers": kept, "text": text}
    except UnicodeDecodeError:
        pass
    return {"headers": kept, "base64": base64.b64encode(body).decode()}


def from_stored(value: Any) -> Tuple[Headers, bytes]:
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in value["headers"]]
    body = value["text"].encode() if "text" in value else base64.b64decode(value["base64"])
    return headers, body


class RequestClaim:
    """The claim of the request being handled (claim_of(request))."""

    def __init__(self, claim: IdemClaim, keep: Sequence[str]):
        self.claim = claim
        self.keep = keep

    @property
    def key(self) -> str:
        return self.claim.key

    @property
    def completed(self) -> bool:
        return self.claim.completed

    def complete(self, conn: Any, response: ResponseLike) -> Any:
        """Stores `response` in your transaction on `conn` (the effect's);
        return that same response.  Awaitable on an AsyncConnection;
        FencedError (SK002) when the claim was taken over: roll back.
        ValueError, before anything is sent, for a response over the cap."""
        value = stored_form(response.raw_headers, bytes(response.body), self.keep)
        return self.claim.complete(conn, response.status_code, value)


def claim_of(request: Any) -> Optional[RequestClaim]:
    """The RequestClaim of a request (a Starlette Request, or an ASGI scope)
    that the middleware acquired; None without a key or outside it."""
    scope = getattr(request, "scope", request)
    found = scope.get(SCOPE_KEY)
    return found if isinstance(found, RequestClaim) else None


class _Capture:
    """The app's response, held until it is stored."""

    def __init__(self) -> None:
        self.status = 500
        self.headers: Headers = []
        self.chunks: List[bytes] = []
        self.started = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            self.status = int(message["status"])
            self.headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
        elif message["type"] == "http.response.body":
            self.chunks.append(bytes(message.get("body", b"")))

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)


async def send_response(send: Send, status: int, headers: Headers, body: bytes) -> None:
    headers = [h for h in headers if h[0].lower() != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, status: int, message: str, retry_after: int = 0) -> None:
    headers: Headers = [(b"content-type", b"application/json")]
    if retry_after:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send_response(send, status, headers, json.dumps({"error": message}).encode())


class _Disconnected(Exception):
    pass


async def read_body(receive: Receive, limit: int) -> Optional[bytes]:
    """The request body, or None when it is over `limit` bytes."""
    chunks: List[bytes] = []
    size, more = 0, True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected()
        chunk = bytes(message.get("body", b""))
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        more = bool(message.get("more_body", False))
    return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the app the body read already, then the real one."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}
    return replay


class IdempotencyMiddleware:
    """Makes an ASGI app's endpoints idempotent (see the module's doc).

    source: a conninfo str (a connection per claim and per completion) or
    a function returning an async context manager of an AsyncConnection
    (psycopg_pool's `pool.connection`, better under load).  header: the
    key's header.  methods: the methods it applies to.  require_key: 400
    for such a request without the header (default: it passes through).
    ttl, recovery: as skiplock.idempotent (24 h, 60 s).  retry_after: the
    seconds a 409 asks to wait.  max_body: the largest request body read
    (413 over it, before anything is written).  max_response_bytes: the
    stored-response cap.  keep_headers: the response headers stored and
    replayed with the body.
    """

    def __init__(self, app: ASGIApp, source: Source, *,
                 connect_kwargs: Optional[Dict[str, Any]] = None,
                 header: str = "Idempotency-Key",
                 methods: Iterable[str] = ("POST", "PUT", "PATCH", "DELETE"),
                 require_key: bool = False, ttl: Seconds = TTL_DEFAULT,
                 recovery: Seconds = RECOVERY_DEFAULT, retry_after: int = 1,
                 max_body: int = 1024 * 1024, max_response_bytes: int = RESPONSE_MAX,
                 keep_headers: Iterable[str] = ("content-type", "location")):
        self.app = app
        self.connector = Connector(source, connect_kwargs, keep=False)
        self.header = header.lower().encode("latin-1")
        self.methods = frozenset(m.upper() for m in methods)
        self.require_key = require_key
        self.claim_args: Dict[str, Any] = dict(ttl=ttl, recovery=recovery,
                                               max_response_bytes=max_response_bytes)
        self.recovery_s = positive_ms(recovery, "recovery") / 1000
        positive_ms(ttl, "ttl")
        self.retry_after = int(retry_after)
        self.max_body = int(max_body)
        self.keep = tuple(h.lower() for h in keep_headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in self.methods:
            return await self.app(scope, receive, send)
        key = dict(scope["headers"]).get(self.header)
        if key is None and not self.require_key:
            return await self.app(scope, receive, send)
        text = (key or b"").decode("latin-1")
        if not 1 <= len(text.encode()) <= KEY_MAX:
            return await send_error(send, 400, f"the {self.header.decode()} header must be 1 "
                                    f"to {KEY_MAX} bytes")
        try:
            body = await read_body(receive, self.max_body)
        except _Disconnected:
            return None
        if body is None:
            return await send_error(send, 413, f"the body is over {self.max_body} bytes")
        claim = await self._claim(send, text, self._fingerprint(scope, body))
        if claim is not None:
            await self._answer(claim, scope, replaying(body, receive), send)
        return None

    def _fingerprint(self, scope: Scope, body: bytes) -> str:
        path = scope.get("root_path", "") + scope["path"]
        query = scope.get("query_string", b"")
        if query:
            path += "?" + bytes(query).decode("latin-1")
        return fingerprint(scope["method"], path, body)

    async def _claim(self, send: Send, key: str, request_hash: str) -> Optional[IdemClaim]:
        """The claim, or None once an error was answered."""
        try:
            async with self.connector.borrow() as conn:
                return await idempotent(conn, key, request_hash, **self.claim_args)
        except TransientError as e:
            log.warning("idempotency key %r: could not claim: %s", key, e)
            await send_error(send, 503, "the key could not be claimed; retry with the same key",
                             self.retry_after)
        except SkiplockError as e:
            log.error("idempotency key %r: could not claim: %s", key, e)
            await send_error(send, 500, "the key could not be claimed")
        return None

    async def _answer(self, claim: IdemClaim, scope: Scope, receive: Receive,
                      send: Send) -> None:
        if claim.replay:
            headers, body = from_stored(claim.response_body)
            return await send_response(send, claim.response_code or 200,
                                       headers + [REPLAYED], body)
        if claim.in_progress:
            return await send_error(send, 409, "a request with this idempotency key is in "
                                    "progress", self.retry_after)
        if claim.conflict:
            return await send_error(send, 422, "this idempotency key was used for a "
                                    "different request")
        scope[SCOPE_KEY] = RequestClaim(claim, self.keep)
        out = _Capture()
        try:
            await self.app(scope, receive, out.send)
        except BaseException:
            await self._settle(claim, None)
            raise
        await self._settle(claim, out)
        await send_response(send, out.status, out.headers, out.body)
        return None

    async def _settle(self, claim: IdemClaim, out: Optional[_Capture]) -> None:
        """Stores the response unless the handler did; releases the key
        after an exception or a status of 500 or more."""
        if claim.completed:
            return None
        if out is None or not out.started or out.status >= 500:
            return await self._call(claim, None)
        try:
            value = stored_form(out.headers, out.body, self.keep)
            response_json(value, claim.max_response_bytes)
        except ValueError as e:
            log.warning("idempotency key %r: the response is not stored (%s); the key is "
                        "released", claim.key, e)
            return await self._call(claim, None)
        return await self._call(claim, (out.status, value))

    async def _call(self, claim: IdemClaim, response: Optional[Tuple[int, Any]]) -> None:
        """Completes the claim with `response`, or releases it (None);
        transient failures are retried for half the recovery window (both
        calls are idempotent under the holder token)."""
        end = now() + self.recovery_s / 2
        for attempt in range(1000):
            try:
                async with self.connector.borrow() as conn:
                    if response is None:
                        return await claim.release(conn)
                    return await claim.complete(conn, *response)
            except TransientError as e:
                if now() >= end:
                    log.error("idempotency key %r: could not settle: %s", claim.key, e)
                    return None
            except SkiplockError as e:  # FencedError: taken over, or expired
                log.warning("idempotency key %r: could not settle: %s", claim.key, e)
                return None
            await asyncio.sleep(jitter(attempt, 0.05, 1.0))
        return None
