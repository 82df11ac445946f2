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

    __slots__ = ("job", "reason", "_cancelled", "_completed_in_tx")

    def __init__(self, job: Job):
        self.job = job
        self.reason: Optional[str] = None
        self._cancelled: Optional[threading.Event] = None
        self._completed_in_tx = False

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
        return job_fence(conn, self.job.id, self.job.fencing, queue=self.job.queue)

    def complete(self, conn: Any, result: Any = None) -> Any:
        """Completes the job in your transaction on `conn`, the one that
        makes the job's effect (skiplock.job_complete; call it last, just
        before the commit).  The effect and the completion then commit
        together or not at all: the effect happens exactly once, even when
        the worker dies right after the commit (the fence alone cannot
        prevent the next attempt from applying it again).  Raises
        FencedError (SQLSTATE SK001) unless the claim is current: roll
        back.  `result` (any JSON value) is kept as the job's result.

        Return normally only once that transaction has committed: the
        worker then records no outcome of its own (the handler's return
        value is ignored) and does not take the job's end for a lost lease.
        If the commit fails, raise: the worker records a failed attempt,
        which is refused harmlessly when the commit did go through.
        Awaitable on an AsyncConnection."""
        from .protocol import _then, job_complete

        def done(_: Any) -> None:
            self._completed_in_tx = True

        return _then(job_complete(conn, self.job.id, self.job.fencing, result,
                                  queue=self.job.queue), done)

    @property
    def completed_in_tx(self) -> bool:
        """True once complete() succeeded in the handler's transaction."""
        return self._completed_in_tx


class Retry(Exception):
    """Raise from a handler to fail the attempt (retried while attempts are
    left); `after` (seconds or timedelta) is the handler's own delay, such
    as an HTTP Retry-After.  Any other exception also fails the attempt."""

    def __init__(self, message: str = "retry", after: Any = None):
        super().__init__(message)
        self.after = after


class Discard(Exception):
    """Raise from a handler to fail the job for good (no more attempts)."""
