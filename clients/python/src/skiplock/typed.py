"""Typed payloads: a handler that gets its payload as a type of yours.

    @dataclass
    class Receipt:
        order: int
        to: str

    async def send_receipt(r: Receipt, job, ctx): ...

    Worker(url, {"email.receipt": skiplock.typed(Receipt, send_receipt)})

The payload is converted before the handler runs: `Receipt(**payload)` for
a JSON object, `Receipt(payload)` for any other JSON value, so a dataclass,
a NamedTuple, a pydantic model or a plain function all work.  A payload
the type refuses (TypeError or ValueError) discards the job at once: no
retry can change it.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping, TypeVar

from .job import Discard

T = TypeVar("T")


def _convert(payload_type: Callable[..., T], job: Any) -> T:
    payload = job.payload
    try:
        if isinstance(payload, Mapping):
            return payload_type(**payload)
        return payload_type(payload)
    except (TypeError, ValueError) as e:
        name = getattr(payload_type, "__name__", repr(payload_type))
        raise Discard(f"the payload of job {job.id} is not a {name}: {e}") from e


def typed(payload_type: Callable[..., T], fn: Callable[[T, Any, Any], Any]) -> Callable[..., Any]:
    """The handler fn(payload, job, ctx) with the job's payload converted to
    payload_type first; sync or async, as fn is."""
    if inspect.iscoroutinefunction(fn):
        async def run_async(job: Any, ctx: Any) -> Any:
            return await fn(_convert(payload_type, job), job, ctx)
        return run_async

    def run(job: Any, ctx: Any) -> Any:
        return fn(_convert(payload_type, job), job, ctx)
    return run
