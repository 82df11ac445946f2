"""Worker: a thin loop around the SQL protocol (docs/protocol.md).

One asyncio task owns the worker's one connection and, turn by turn,
records finished outcomes and claims up to the free slots in one call
(skiplock.record_claim), renews the leases of held jobs every lease/3
(skiplock.heartbeat), and gives back expired leases now and then
(skiplock.rescue).  Handlers run outside any transaction: async ones as
tasks on the worker's event loop, sync ones on a pool of `concurrency`
threads.  Connections: one for claims, outcomes and heartbeats whatever
the concurrency, plus one that only LISTENs when the database is known to
be direct; handlers use their own.

The policy (claim order, fencing, the retry decision) is the database's:
a failed attempt is sent as 'retry' or 'discard' and skiplock.record
decides when it runs again.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import random
import signal
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional

from ._listen import Listener
from ._session import Outcome, Session, result_json
from ._threads import DaemonPool
from .errors import SkiplockError, TransientError
from .job import Discard, Job, JobContext, Retry
from .pooler import check_mode

log = logging.getLogger("skiplock")

Handler = Callable[[Job, JobContext], Any]
# After the shutdown timeout, how long stop() still tries to record outcomes.
GIVE_UP_S = 10.0


@dataclass
class _Held:
    """A claimed job until its outcome is recorded (or its claim is lost)."""

    job: Job
    ctx: JobContext
    is_async: bool
    task: Optional["asyncio.Future[Any]"] = None
    finished: bool = False  # its outcome is queued, or it is dropped
    timer: Optional[asyncio.TimerHandle] = None


@dataclass
class Stats:
    claimed: int = 0
    completed: int = 0
    failed: int = 0
    fenced: int = 0  # outcomes refused: the claim had been lost
    lost: int = 0  # claims lost while the handler ran (heartbeat said so)
    timed_out: int = 0
    errors: List[str] = field(default_factory=list)


def _is_async_handler(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None))


def _seconds(value: float, name: str, low: float, high: float) -> float:
    if not isinstance(value, (int, float)) or not low <= value <= high:
        raise ValueError(f"{name} must be {low} to {high} seconds, got {value!r}")
    return float(value)


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text.replace("\x00", "\\0")[:2000]


class Worker:
    """Runs handlers for the kinds in `handlers` ({kind: fn(job, ctx)}).

    concurrency: jobs at once (1 to 1000).  lease: seconds a claim lasts
    without a heartbeat (0.3 s to 1 day; heartbeats every lease/3).
    queues: the queues to claim from (None: all).  poll_interval: the idle
    poll, jittered down to half of it.  rescue_interval: how often expired
    leases are given back.  shutdown_timeout: how long stop() waits for
    running handlers.  pooler: 'auto' (the C worker's rule), 'none' (direct:
    LISTEN), 'transaction' or 'session' (never LISTEN on this URL).
    direct_url: a direct endpoint for LISTEN when `conninfo` is a pooler
    (default $DIRECT_DATABASE_URL).  connect_kwargs: passed to psycopg.
    """

    def __init__(self, conninfo: str, handlers: Dict[str, Handler], *, concurrency: int = 10,
                 queues: Optional[Iterable[str]] = None, lease: float = 30.0,
                 owner: Optional[str] = None, poll_interval: float = 1.0,
                 rescue_interval: float = 5.0, shutdown_timeout: float = 30.0,
                 pooler: str = "auto", direct_url: Optional[str] = None, listen: bool = True,
                 connect_kwargs: Optional[Dict[str, Any]] = None):
        if not handlers or not all(isinstance(k, str) and k and callable(f)
                                   for k, f in handlers.items()):
            raise ValueError("handlers must map at least one kind (a non-empty str) to a callable")
        if not isinstance(concurrency, int) or not 1 <= concurrency <= 1000:
            raise ValueError(f"concurrency must be 1 to 1000, got {concurrency!r}")
        self.conninfo = conninfo
        self.handlers = dict(handlers)
        self.concurrency = concurrency
        self.queues = list(queues) if queues is not None else None
        self.lease_ms = int(_seconds(lease, "lease", 0.3, 86400) * 1000)
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.poll_interval = _seconds(poll_interval, "poll_interval", 0.01, 3600)
        self.rescue_interval = _seconds(rescue_interval, "rescue_interval", 0.05, 3600)
        self.shutdown_timeout = _seconds(shutdown_timeout, "shutdown_timeout", 0, 86400)
        self.pooler = check_mode(pooler)
        self.direct_url = direct_url or os.environ.get("DIRECT_DATABASE_URL") or None
        self.listen = listen
        self.connect_kwargs = dict(connect_kwargs or {})
        self.stats = Stats()
        self._async = {k: _is_async_handler(f) for k, f in self.handlers.items()}
        self._session = Session(conninfo, self.pooler, self.connect_kwargs)
        self._held: Dict[int, _Held] = {}
        self._outcomes: List[Outcome] = []
        self._task: Optional["asyncio.Task[None]"] = None
        self._listener: Optional[Listener] = None
        self._listen_task: Optional["asyncio.Task[None]"] = None
        self._pool: Optional[DaemonPool] = None
        self._thread: Optional[threading.Thread] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stopping = False
        self._stop_deadline = 0.0
        self._failures = 0
        self._wakes = 0  # notifications seen

    # ---- public: asyncio ----

    async def start(self) -> None:
        """Connects (raising TransientError / PermanentError if it cannot)
        and starts the loop as a task of the running event loop."""
        if self._task is not None:
            raise RuntimeError("the worker was started already")
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        await self._session.connect()
        if any(not a for a in self._async.values()):
            self._pool = DaemonPool(self.concurrency, "skiplock-handler")
        self._start_listener()
        now = time.monotonic()
        self._next_claim = self._next_rescue = now
        self._next_heartbeat = now + self.lease_ms / 3000
        self._task = asyncio.create_task(self._run(), name="skiplock-worker")

    async def stop(self, timeout: Optional[float] = None) -> None:
        """Claims nothing more, waits up to `timeout` (shutdown_timeout) for
        running handlers and records their outcomes, then closes.  Handlers
        still running then are cancelled and their attempts failed."""
        if self._task is None:
            return
        if not self._stopping:
            self._stopping = True
            wait = self.shutdown_timeout if timeout is None else timeout
            self._stop_deadline = time.monotonic() + wait
            self._wake.set()
        await asyncio.shield(self._task)

    async def wait(self) -> None:
        """Until the worker stops; re-raises the error that stopped it."""
        if self._task is not None:
            await asyncio.shield(self._task)

    @property
    def listening(self) -> bool:
        """True while a LISTEN connection is up (direct databases only)."""
        return self._listener is not None and self._listener.listening

    @property
    def running(self) -> int:
        """Handlers running now."""
        return sum(1 for h in self._held.values() if not h.finished)

    # ---- public: threads ----

    def start_thread(self) -> None:
        """Runs the worker on an event loop in a background thread (for a
        sync application: Django, Flask, a script); returns once started."""
        started: "threading.Event" = threading.Event()
        failure: List[BaseException] = []

        def main() -> None:
            async def body() -> None:
                try:
                    await self.start()
                except BaseException as e:
                    failure.append(e)
                    raise
                finally:
                    started.set()
                await self.wait()
            try:
                asyncio.run(body())
            except BaseException:  # reported by start_thread / stop_thread
                pass

        self._thread = threading.Thread(target=main, name="skiplock-worker", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            raise failure[0]

    def stop_thread(self, timeout: Optional[float] = None) -> None:
        """stop() for a worker started with start_thread(); blocks until it
        has drained and closed, and re-raises the error that stopped it."""
        if self._thread is None or self._loop is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self.stop(timeout), self._loop)
        try:
            fut.result()
        finally:
            self._thread.join()

    def run_forever(self, stop_signals: Iterable[int] = (signal.SIGTERM, signal.SIGINT)) -> None:
        """Runs in the foreground until one of `stop_signals`, then stops
        gracefully (a command-line worker, a container's main process)."""
        async def body() -> None:
            await self.start()
            loop = asyncio.get_running_loop()
            for sig in stop_signals:
                loop.add_signal_handler(sig, lambda: asyncio.ensure_future(self.stop()))
            await self.wait()
        asyncio.run(body())

    # ---- the loop ----

    async def _run(self) -> None:
        try:
            while not (self._stopping and not self._held and not self._outcomes):
                if self._stopping and time.monotonic() >= self._stop_deadline:
                    self._abandon("shutdown")
                    if time.monotonic() >= self._stop_deadline + GIVE_UP_S:
                        log.error("skiplock worker: cannot record %d outcomes; leaving the "
                                  "jobs to lease expiry", len(self._outcomes))
                        return
                if await self._turn_safely():
                    continue
                await self._sleep_until(self._next_deadline())
        finally:
            await self._close()

    async def _turn_safely(self) -> bool:
        """One turn; True to go again at once (an error's backoff was slept)."""
        try:
            await self._turn()
            self._failures = 0
            return False
        except TransientError as e:
            self._failures += 1
            delay = random.uniform(0, min(5.0, 0.05 * 2 ** min(self._failures, 10)))
            log.warning("skiplock worker: %s; retrying in %.0f ms", e, delay * 1000)
            await self._sleep_until(time.monotonic() + delay)
            return True
        except SkiplockError as e:
            log.error("skiplock worker stops: %s", e)
            self._abandon("error")
            self._held.clear()
            self._outcomes.clear()
            raise

    async def _turn(self) -> None:
        now = time.monotonic()
        if self._outcomes or self._claim_due(now):
            await self._exchange(now)
        if time.monotonic() >= self._next_heartbeat:
            await self._heartbeat()
        if time.monotonic() >= self._next_rescue and not self._stopping:
            self._next_rescue = time.monotonic() + self.rescue_interval
            if await self._session.rescue() > 0:
                self._next_claim = time.monotonic()

    def _free(self) -> int:
        return self.concurrency - self.running

    def _claim_due(self, now: float) -> bool:
        return not self._stopping and self._free() > 0 and now >= self._next_claim

    async def _exchange(self, now: float) -> None:
        """Records the queued outcomes, and claims when due, in one call."""
        outs, self._outcomes = self._outcomes, []
        try:
            if self._claim_due(now):
                n, wakes = self._free(), self._wakes
                recorded, jobs = await self._session.record_claim(
                    outs, self.owner, list(self.handlers), self.queues, n, self.lease_ms)
                self._recorded(outs, recorded)
                self._claimed(jobs, n, wakes)
            else:
                self._recorded(outs, await self._session.record(outs))
        except BaseException:
            for o in outs:
                o.resent = True
            self._outcomes = outs + self._outcomes
            raise

    def _recorded(self, outs: List[Outcome], recorded: List[int]) -> None:
        accepted = set(recorded)
        for o in outs:
            self._forget(o.id, o.fencing)
            if o.id in accepted:
                if o.outcome == "ok":
                    self.stats.completed += 1
                else:
                    self.stats.failed += 1
            elif not o.resent:
                self.stats.fenced += 1
                log.warning("skiplock worker: the outcome of job %d (token %d) was refused: "
                            "its claim had been lost", o.id, o.fencing)

    def _claimed(self, jobs: List[Job], asked: int, wakes: int) -> None:
        now = time.monotonic()
        if len(jobs) < asked and wakes == self._wakes:  # no NOTIFY came meanwhile
            self._next_claim = now + self.poll_interval * random.uniform(0.5, 1.0)
        else:
            self._next_claim = now
        for job in jobs:
            self.stats.claimed += 1
            self._launch(job)

    async def _heartbeat(self) -> None:
        self._next_heartbeat = time.monotonic() + self.lease_ms / 3000
        held = list(self._held.values())
        if not held:
            return
        rows = await self._session.heartbeat([h.job.id for h in held],
                                             [h.job.fencing for h in held], self.lease_ms)
        for (job_id, extended), h in zip(rows, held):
            if not extended and self._held.get(job_id) is h:
                self._lose(h)

    def _lose(self, h: _Held) -> None:
        """The claim is gone: stop the handler, drop its outcome."""
        self.stats.lost += 1
        log.warning("skiplock worker: lost the claim of job %d (token %d); its handler is "
                    "cancelled and its outcome dropped", h.job.id, h.job.fencing)
        self._forget(h.job.id, h.job.fencing)
        self._outcomes = [o for o in self._outcomes
                          if (o.id, o.fencing) != (h.job.id, h.job.fencing)]
        self._cancel(h, "lease_lost")

    def _forget(self, job_id: int, fencing: int) -> None:
        h = self._held.get(job_id)
        if h is not None and h.job.fencing == fencing:
            del self._held[job_id]

    def _cancel(self, h: _Held, reason: str) -> None:
        h.finished = True
        h.ctx.cancel(reason)
        if h.timer is not None:
            h.timer.cancel()
        if h.is_async and h.task is not None:
            h.task.cancel()

    def _abandon(self, reason: str) -> None:
        """Cancels every running handler and fails its attempt."""
        for h in list(self._held.values()):
            if not h.finished:
                self._cancel(h, reason)
                self._queue(h, Outcome(h.job.id, h.job.fencing, "retry",
                                       error=f"the worker stopped ({reason}) before the "
                                             "handler finished"))

    # ---- handlers ----

    def _launch(self, job: Job) -> None:
        old = self._held.get(job.id)
        if old is not None:  # claimed again: our earlier claim was lost
            self._lose(old)
        ctx = JobContext(job)
        h = _Held(job, ctx, self._async.get(job.kind, False))
        self._held[job.id] = h
        fn = self.handlers.get(job.kind)
        if fn is None:  # never claimed: we ask only for our kinds
            self._queue(h, Outcome(job.id, job.fencing, "retry",
                                   error=f"no handler for kind {job.kind!r}"))
            return
        if h.is_async:
            h.task = asyncio.ensure_future(fn(job, ctx))
        else:
            assert self._pool is not None
            h.task = self._pool.submit(lambda: fn(job, ctx))
        h.task.add_done_callback(lambda fut: self._finished(h, fut))
        if job.timeout_ms > 0:
            assert self._loop is not None
            h.timer = self._loop.call_later(job.timeout_ms / 1000, self._timed_out, h)

    def _timed_out(self, h: _Held) -> None:
        if h.finished:
            return
        self.stats.timed_out += 1
        self._cancel(h, "timeout")
        self._queue(h, Outcome(h.job.id, h.job.fencing, "retry",
                               error=f"timeout: the handler ran longer than "
                                     f"{h.job.timeout_ms} ms"))

    def _finished(self, h: _Held, fut: "asyncio.Future[Any]") -> None:
        if h.finished:
            return
        if h.timer is not None:
            h.timer.cancel()
        self._queue(h, self._outcome_of(h.job, fut))

    def _outcome_of(self, job: Job, fut: "asyncio.Future[Any]") -> Outcome:
        if fut.cancelled():
            return Outcome(job.id, job.fencing, "retry", error="the handler was cancelled")
        exc = fut.exception()
        if exc is None:
            text, why = result_json(fut.result())
            if why is None:
                return Outcome(job.id, job.fencing, "ok", result=text)
            return Outcome(job.id, job.fencing, "retry", error=why)
        if isinstance(exc, Discard):
            return Outcome(job.id, job.fencing, "discard", error=_error_text(exc))
        after = None
        if isinstance(exc, Retry) and exc.after is not None:
            from .protocol import _ms
            after = max(0, int(_ms(exc.after, "Retry.after")))
        return Outcome(job.id, job.fencing, "retry", error=_error_text(exc),
                       retry_after_ms=after)

    def _queue(self, h: _Held, outcome: Outcome) -> None:
        h.finished = True
        self._outcomes.append(outcome)
        self._wake.set()

    # ---- waiting ----

    def _notified(self) -> None:
        self._wakes += 1
        self._next_claim = time.monotonic()
        self._wake.set()

    def _next_deadline(self) -> float:
        t = min(self._next_heartbeat, self._next_rescue if not self._stopping else float("inf"))
        if not self._stopping and self._free() > 0:
            t = min(t, self._next_claim)
        if self._stopping:
            t = min(t, self._stop_deadline)
        return t

    async def _sleep_until(self, deadline: float) -> None:
        delay = deadline - time.monotonic()
        if delay > 0 and not self._wake.is_set():
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except asyncio.TimeoutError:
                pass
        self._wake.clear()

    def _start_listener(self) -> None:
        if not self.listen:
            return
        if self._session.direct:
            url, mode = self.conninfo, self.pooler
        elif self.direct_url:
            url, mode = self.direct_url, "auto"
        else:
            log.info("skiplock worker: not a direct connection and no direct_url: polling")
            return
        self._listener = Listener(url, mode, self.connect_kwargs, self._notified, log)
        self._listen_task = asyncio.create_task(self._listener.run(), name="skiplock-listen")

    async def _close(self) -> None:
        if self._listen_task is not None:
            self._listen_task.cancel()
            await asyncio.gather(self._listen_task, return_exceptions=True)
        if self._pool is not None:
            self._pool.close()
        await self._session.close()



