"""What a handler gets (Job, JobContext) and how it says retry or discard."""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Job:
    """One claimed job (a skiplock.claimed_job row); lease_expires_at and
    run_at are aware datetimes in UTC."""

    id: int
    queue: str
    kind: str
    payload: Any
    attempt: int
    max_attempts: int
    fencing: int
    lease_expires_at: dt.datetime
    timeout_ms: int
    priority: int
    run_at: dt.datetime


# Guards the lazy creation of a JobContext's event (the loop's thread and a
# handler's thread may both ask for it first).
_EVENT_LOCK = threading.Lock()


class JobContext:
    """Passed to every handler with its job.

    `cancelled` (a threading.Event) is set when the worker gives up on this
    attempt: the lease was lost (another owner may have the job), the job's
    timeout passed, or the worker's shutdown timeout ran out; `reason` says
    which.  A sync handler should check it (or wait on it) between steps
    and return; an async handler's task is also cancelled.  Whatever the
    handler returns afterwards is dropped or recorded as a failure.
    """

    __slots__ = ("job", "reason", "_cancelled")

    def __init__(self, job: Job):
        self.job = job
        self.reason: Optional[str] = None
        self._cancelled: Optional[threading.Event] = None

    def __repr__(self) -> str:
        return f"JobContext(job={self.job!r}, reason={self.reason!r})"

    @property
    def cancelled(self) -> threading.Event:
        """Made on first use: most handlers never look (a lock each)."""
        event = self._cancelled
        if event is None:
            with _EVENT_LOCK:
                if self._cancelled is None:
                    self._cancelled = threading.Event()
                event = self._cancelled
        return event

    def cancel(self, reason: str) -> None:
        if not self.cancelled.is_set():
            self.reason = reason
            self.cancelled.set()

    def fence(self, conn: Any) -> Any:
        """skiplock.job_fence for this claim on `conn`, in your transaction:
        raises FencedError unless the claim is still current (awaitable
        on an AsyncConnection)."""
        from .protocol import job_fence
        return job_fence(conn, self.job.id, self.job.fencing)


class Retry(Exception):
    """Raise from a handler to fail the attempt (retried while attempts are
    left); `after` (seconds or timedelta) is the handler's own delay, such
    as an HTTP Retry-After.  Any other exception also fails the attempt."""

    def __init__(self, message: str = "retry", after: Any = None):
        super().__init__(message)
        self.after = after


class Discard(Exception):
    """Raise from a handler to fail the job for good (no more attempts)."""
