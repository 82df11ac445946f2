"""The claims a worker holds, and the handlers that run them.

A claim is held from its claim until its outcome is recorded (or the claim
is lost).  Up to `concurrency` handlers run at once: async ones as tasks on
the worker's event loop, sync ones on a pool of that many threads.  With
`prefetch`, up to concurrency + prefetch claims are held: the jobs no
handler runs yet wait here in claim order, leased and heartbeated like the
running ones, and each starts as a handler ends, without the worker's loop
or a round trip, so handlers have work while the loop waits for the
database.  A waiting job whose claim is lost is dropped, never started;
past the shutdown timeout the waiting jobs are given back at once.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional

from ._session import Outcome, result_json
from ._threads import DaemonPool
from .job import Discard, Job, JobContext, Retry

log = logging.getLogger("skiplock")

Handler = Callable[[Job, JobContext], Any]
# The error a prefetched job that never started is given back with (a retry
# due in 1 ms: available again at once, to any worker).
NOT_STARTED = "the worker stopped before starting it"


@dataclass(eq=False)
class Held:
    """A claimed job until its outcome is recorded (or its claim is lost)."""

    job: Job
    ctx: JobContext
    is_async: bool
    task: Optional["asyncio.Future[Any]"] = None
    started: bool = False  # a handler took it (else it waits)
    finished: bool = False  # its outcome is queued, or it is dropped
    timer: Optional[asyncio.TimerHandle] = None


@dataclass
class Stats:
    claimed: int = 0
    completed: int = 0
    failed: int = 0
    fenced: int = 0  # outcomes refused: the claim had been lost
    lost: int = 0  # claims lost while the job was held (heartbeat said so)
    timed_out: int = 0
    cron_ticks: int = 0  # cron ticks that succeeded
    cron_enqueued: int = 0  # jobs those ticks enqueued (fire times this worker fired)
    cron_failures: int = 0  # cron ticks that failed
    errors: List[str] = field(default_factory=list)


def _is_async_handler(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None))


# What a failed attempt's error keeps: PostgreSQL text cannot hold NUL, and
# the job's history keeps 8,192 characters of it (schema step 0026).
ERROR_MAX = 8192


def _clean(text: str) -> str:
    return text.replace("\x00", "")[:ERROR_MAX]


def _summary(exc: BaseException) -> str:
    """The exception's type and message: "ValueError: no stock"."""
    try:
        message = str(exc)
    except Exception:
        message = "<exception str() failed>"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _error_text(exc: BaseException) -> str:
    """What a failed attempt stores of the exception its handler raised: the
    type and message first, then the traceback as Python prints it (with
    any chained exceptions), so the job's history shows where the handler
    failed.  Python's last line, the type and message again, is left out
    when it is only that (it stays when it adds notes or a SyntaxError's
    location)."""
    te = traceback.TracebackException.from_exception(exc)
    lines = list(te.format())
    only = list(te.format_exception_only())
    if len(only) == 1 and lines[-1:] == only:
        lines.pop()
    return _clean((_summary(exc) + "\n" + "".join(lines)).rstrip("\n"))


def outcome_of(job: Job, fut: "asyncio.Future[Any]") -> Outcome:
    """The outcome of a handler's finished future."""
    if fut.cancelled():
        return Outcome(job.id, job.fencing, "retry", queue=job.queue,
                       error="the handler was cancelled")
    exc = fut.exception()
    if exc is None:
        text, why = result_json(fut.result())
        if why is None:
            return Outcome(job.id, job.fencing, "ok", queue=job.queue, result=text)
        return Outcome(job.id, job.fencing, "retry", queue=job.queue, error=why)
    if isinstance(exc, Discard):
        return Outcome(job.id, job.fencing, "discard", queue=job.queue, error=_error_text(exc))
    after = None
    if isinstance(exc, Retry) and exc.after is not None:
        from .protocol import _ms
        after = max(0, int(_ms(exc.after, "Retry.after")))
    return Outcome(job.id, job.fencing, "retry", queue=job.queue, error=_error_text(exc),
                   retry_after_ms=after)


def log_failure(job: Job, out: Outcome, exc: Optional[BaseException]) -> None:
    """A failed attempt on the `skiplock` logger at WARNING, with the
    handler's traceback when it raised: visible unless the app silences it.
    The line has the exception's type and message (the traceback that
    out.error holds too is the record's exc_info, printed once)."""
    log.warning("skiplock worker: job %d (%s) attempt %d of %d failed (%s): %s", job.id, job.kind,
                job.attempt, job.max_attempts, "discarded" if out.outcome == "discard" else
                "retried" if job.attempt < job.max_attempts else "its last attempt",
                out.error if exc is None else _clean(_summary(exc)), exc_info=exc)


class Slots:
    """held: every claim by job id; waiting: the held jobs not started;
    outcomes: finished attempts not recorded yet (the loop sends them)."""

    def __init__(self, handlers: Dict[str, Handler], concurrency: int, prefetch: int,
                 stats: Stats, wake: Callable[[], None]):
        self.handlers = handlers
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.stats = stats
        self._wake = wake
        self._async = {k: _is_async_handler(f) for k, f in handlers.items()}
        self.held: Dict[int, Held] = {}
        self.waiting: Deque[Held] = deque()
        self.outcomes: List[Outcome] = []
        self.active = 0  # handlers running
        self._pool: Optional[DaemonPool] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    def open(self) -> None:
        """On the worker's event loop: the thread pool, if a handler is sync."""
        self._loop = asyncio.get_running_loop()
        if any(not a for a in self._async.values()):
            self._pool = DaemonPool(self.concurrency, "skiplock-handler")

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    def free(self) -> int:
        """Claims that may be taken: handlers plus prefetch, less those held
        and not finished."""
        return self.concurrency + self.prefetch - self.active - len(self.waiting)

    def launch(self, job: Job) -> None:
        """Holds a claimed job: starts it when a handler is free, else it waits."""
        old = self.held.get(job.id)
        if old is not None:  # claimed again: our earlier claim was lost
            self.lose(old)
        h = Held(job, JobContext(job), self._async.get(job.kind, False))
        self.held[job.id] = h
        if self.active < self.concurrency:
            self._start(h)
        else:
            self.waiting.append(h)

    def _start(self, h: Held) -> None:
        h.started = True
        self.active += 1
        job = h.job
        fn = self.handlers.get(job.kind)
        if fn is None:  # never claimed: we ask only for our kinds
            self._queue(h, Outcome(job.id, job.fencing, "retry", queue=job.queue,
                                   error=f"no handler for kind {job.kind!r}"))
            return
        task: "asyncio.Future[Any]"
        if h.is_async:
            task = asyncio.ensure_future(fn(job, h.ctx))
        else:
            assert self._pool is not None
            task = self._pool.submit(functools.partial(fn, job, h.ctx))
        h.task = task
        task.add_done_callback(lambda fut: self._finished(h, fut))
        if job.timeout_ms > 0:
            assert self._loop is not None
            h.timer = self._loop.call_later(job.timeout_ms / 1000, self._timed_out, h)

    def _timed_out(self, h: Held) -> None:
        if h.finished:
            return
        self.stats.timed_out += 1
        self._cancel(h, "timeout")
        out = Outcome(h.job.id, h.job.fencing, "retry", queue=h.job.queue,
                      error=f"timeout: the handler ran longer than {h.job.timeout_ms} ms")
        log_failure(h.job, out, None)
        self._queue(h, out)

    def _finished(self, h: Held, fut: "asyncio.Future[Any]") -> None:
        if h.finished:  # cancelled, lost or timed out: the outcome is dropped
            if not fut.cancelled():
                fut.exception()  # looked at: asyncio does not log it as never retrieved
            return
        if h.timer is not None:
            h.timer.cancel()
        if h.ctx.completed_in_tx and not fut.cancelled() and fut.exception() is None:
            self._completed_in_tx(h)
            return
        out = outcome_of(h.job, fut)
        if out.outcome != "ok":
            exc = None if fut.cancelled() else fut.exception()
            log_failure(h.job, out, exc)
        self._queue(h, out)

    def _completed_in_tx(self, h: Held) -> None:
        """The handler completed its job in its own transaction and returned:
        nothing to record (the job is finished, or, if that commit did not
        go through after all, still running until its lease expires)."""
        self.stats.completed += 1
        self._settle(h)
        self.forget(h.job.id, h.job.fencing)
        self._wake()

    def _queue(self, h: Held, outcome: Outcome) -> None:
        self._settle(h)
        outcome.in_tx = h.ctx.completed_in_tx
        self.outcomes.append(outcome)
        self._wake()

    def _settle(self, h: Held) -> None:
        """h is done with its handler: the next waiting job takes the slot."""
        h.finished = True
        if h.started:
            self.active -= 1
            if self.waiting:
                self._start(self.waiting.popleft())

    def _cancel(self, h: Held, reason: str) -> None:
        h.ctx.cancel(reason)
        if h.timer is not None:
            h.timer.cancel()
        if h.is_async and h.task is not None:
            h.task.cancel()

    def lose(self, h: Held) -> None:
        """The claim is gone: stop the handler (or never start the job) and
        drop its outcome."""
        self.stats.lost += 1
        what = "its handler is cancelled" if h.started else "it was not started and never will"
        log.warning("skiplock worker: lost the claim of job %d (token %d); %s and its outcome "
                    "dropped", h.job.id, h.job.fencing, what)
        self.forget(h.job.id, h.job.fencing)
        self.outcomes = [o for o in self.outcomes
                         if (o.id, o.fencing) != (h.job.id, h.job.fencing)]
        if not h.started:
            self.waiting.remove(h)
            h.finished = True
        elif not h.finished:
            self._cancel(h, "lease_lost")
            self._settle(h)

    def forget(self, job_id: int, fencing: int) -> None:
        h = self.held.get(job_id)
        if h is not None and h.job.fencing == fencing:
            del self.held[job_id]

    def give_back(self) -> None:
        """The waiting jobs go back with the next record, due again at once
        (the attempt their claim began is spent)."""
        while self.waiting:
            h = self.waiting.popleft()
            h.finished = True
            self.outcomes.append(Outcome(h.job.id, h.job.fencing, "retry", queue=h.job.queue,
                                         error=NOT_STARTED, retry_after_ms=1))
            self._wake()

    def abandon(self, reason: str) -> None:
        """Gives back the waiting jobs, cancels every running handler and
        fails its attempt."""
        self.give_back()
        for h in list(self.held.values()):
            if not h.finished:
                self._cancel(h, reason)
                self._queue(h, Outcome(h.job.id, h.job.fencing, "retry", queue=h.job.queue,
                                       error=f"the worker stopped ({reason}) before the "
                                             "handler finished"))

    def clear(self) -> None:
        self.held.clear()
        self.waiting.clear()
        self.outcomes.clear()
