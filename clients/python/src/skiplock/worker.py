"""Worker: a thin loop around the SQL protocol (docs/protocol.md).

One asyncio task owns the worker's one connection and, turn by turn,
records finished outcomes and claims up to the free slots in one call
(skiplock.record_claim; when a kind's limit held due jobs back, the
call's wait hint says when to claim again instead of the idle poll),
renews the leases of held jobs every lease/3 (skiplock.heartbeat), and
gives back expired leases now and then
(skiplock.rescue), and fires the due schedules when the earliest is due
(skiplock.cron_tick; _cron.py), after applying those declared in code at
start (skiplock.schedules_declare; schedules.py).  Handlers run outside any
transaction (_slots.py: the held claims, the prefetched jobs waiting for a
handler, the handlers).
Connections: one for claims, outcomes and heartbeats whatever
the concurrency, plus one that only LISTENs when the database is known to
be direct; handlers use their own.

The policy (claim order, fencing, the retry decision) is the database's:
a failed attempt is sent as 'retry' or 'discard' and skiplock.record
decides when it runs again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import socket
import threading
import time
import uuid
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from ._cron import Cron, CronTick
from ._listen import Listener
from ._session import Outcome, Session
from ._slots import Handler, Slots, Stats
from .errors import SkiplockError, TransientError
from .job import Job
from .pooler import check_mode
from .schedules import DECLARE_SQL, check_bool, declared, schedules_json

log = logging.getLogger("skiplock")

# After the shutdown timeout, how long stop() still tries to record outcomes.
GIVE_UP_S = 10.0


def _seconds(value: float, name: str, low: float, high: float) -> float:
    if not isinstance(value, (int, float)) or not low <= value <= high:
        raise ValueError(f"{name} must be {low} to {high} seconds, got {value!r}")
    return float(value)


class Worker:
    """Runs handlers for the kinds in `handlers` ({kind: fn(job, ctx)}).

    concurrency: jobs at once (1 to 1000).  prefetch: claims held beyond
    the handlers (0 to 1000, default 0): up to concurrency + prefetch jobs
    are claimed, and those no handler runs yet wait in the worker, leased
    and heartbeated like running ones, until a handler is free; each round
    trip then carries more outcomes and claims, and handlers have work
    while the worker waits for the database (worth it for jobs much
    shorter than a round trip).  The price: a prefetched job is invisible
    to other workers, and its attempt and lease start at the claim.
    lease: seconds a claim lasts
    without a heartbeat (0.3 s to 1 day; heartbeats every lease/3).
    queues: the queues to claim from (None: all).  poll_interval: the idle
    poll, jittered down to half of it.  rescue_interval: how often expired
    leases are given back.  shutdown_timeout: how long stop() waits for
    running handlers.  pooler: 'auto' (the C worker's rule), 'none' (direct:
    LISTEN), 'transaction' or 'session' (never LISTEN on this URL).
    direct_url: a direct endpoint for LISTEN when `conninfo` is a pooler
    (default $DIRECT_DATABASE_URL).  connect_kwargs: passed to psycopg.
    cron: fire the due schedules (default True; docs/cron.md): each fire
    time becomes one job for the fleet, whichever worker's tick fires it.
    schedules: schedules declared in code (a list of mappings {name,
    expression, kind, zone, queue, payload, priority, max_attempts,
    catch_up}), applied by start(); schedules_force: apply them even when
    the database saw a newer definition since (a deliberate rollback).
    """

    def __init__(self, conninfo: str, handlers: Dict[str, Handler], *, concurrency: int = 10,
                 queues: Optional[Iterable[str]] = None, lease: float = 30.0,
                 owner: Optional[str] = None, poll_interval: float = 1.0,
                 rescue_interval: float = 5.0, shutdown_timeout: float = 30.0,
                 prefetch: int = 0, pooler: str = "auto", direct_url: Optional[str] = None,
                 listen: bool = True,
                 connect_kwargs: Optional[Dict[str, Any]] = None, cron: bool = True,
                 schedules: Optional[Sequence[Mapping[str, Any]]] = None,
                 schedules_force: bool = False):
        if not handlers or not all(isinstance(k, str) and k and callable(f)
                                   for k, f in handlers.items()):
            raise ValueError("handlers must map at least one kind (a non-empty str) to a callable")
        if not isinstance(concurrency, int) or not 1 <= concurrency <= 1000:
            raise ValueError(f"concurrency must be 1 to 1000, got {concurrency!r}")
        if not isinstance(prefetch, int) or not 0 <= prefetch <= 1000:
            raise ValueError(f"prefetch must be 0 to 1000, got {prefetch!r}")
        self.conninfo = conninfo
        self.handlers = dict(handlers)
        self.concurrency = concurrency
        self.prefetch = prefetch
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
        self._cron = Cron(log) if check_bool(cron, "cron") else None
        self._schedules = None if schedules is None else schedules_json(schedules)
        self.schedules_force = check_bool(schedules_force, "schedules_force")
        self.last_tick: Optional[CronTick] = None  # the last successful cron tick's answer
        self._listens = 0  # LISTENs that came up
        self.stats = Stats()
        self._session = Session(conninfo, self.pooler, self.connect_kwargs)
        self._slots = Slots(self.handlers, concurrency, prefetch, self.stats, self._poke)
        self._task: Optional["asyncio.Task[None]"] = None
        self._listener: Optional[Listener] = None
        self._listen_task: Optional["asyncio.Task[None]"] = None
        self._thread: Optional[threading.Thread] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stopping = False
        self._stop_deadline = 0.0
        self._failures = 0
        self._wakes = 0  # notifications seen
        # The last claim got jobs: more may be due, so the call that records
        # their outcomes claims too (a limit that this claim filled says
        # when it has room again only to the next claim: its wait hint).
        self._got_jobs = False

    # ---- public: asyncio ----

    async def start(self) -> None:
        """Connects (raising TransientError / PermanentError if it cannot)
        and starts the loop as a task of the running event loop."""
        if self._task is not None:
            raise RuntimeError("the worker was started already")
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        await self._session.connect()
        try:
            await self._session.check_schema()
            if self._schedules is not None:
                declared(await self._session.rows(DECLARE_SQL,
                                                  [self._schedules, self.schedules_force]))
        except BaseException:
            await self._session.close()
            raise
        self._slots.open()
        self._start_listener()
        now = time.monotonic()
        self._next_claim = self._next_rescue = now
        self._next_heartbeat = now + self.lease_ms / 3000
        self._task = asyncio.create_task(self._run(), name="skiplock-worker")

    async def stop(self, timeout: Optional[float] = None) -> None:
        """Claims nothing more, waits up to `timeout` (shutdown_timeout) for
        running handlers, runs the prefetched jobs, records their outcomes,
        then closes.  Past the timeout, handlers still running are cancelled
        and their attempts failed; prefetched jobs never started are given
        back, due again at once (their attempts spent)."""
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
        return self._slots.active

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

    def _drained(self) -> bool:
        return self._stopping and not self._slots.held and not self._slots.outcomes

    async def _run(self) -> None:
        try:
            while not self._drained():
                if self._stopping and time.monotonic() >= self._stop_deadline:
                    self._slots.abandon("shutdown")
                    if time.monotonic() >= self._stop_deadline + GIVE_UP_S:
                        log.error("skiplock worker: cannot record %d outcomes; leaving the "
                                  "jobs to lease expiry", len(self._slots.outcomes))
                        return
                # once the turn recorded the last outcome of a stop, close at
                # once, not at the next heartbeat or the stop's deadline
                if await self._turn_safely() or self._drained():
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
            self._slots.abandon("error")
            self._slots.clear()
            raise

    async def _turn(self) -> None:
        await self._maybe_tick()
        now = time.monotonic()
        if self._slots.outcomes or self._claim_due(now):
            await self._exchange(now)
        if time.monotonic() >= self._next_heartbeat:
            await self._heartbeat()
        if time.monotonic() >= self._next_rescue and not self._stopping:
            self._next_rescue = time.monotonic() + self.rescue_interval
            if await self._session.rescue() > 0:
                self._next_claim = time.monotonic()

    async def _maybe_tick(self) -> None:
        """Fires the due schedules when the next tick is due; a failed tick
        is logged by Cron and never ends the turn (the connection, if it
        broke, is reopened by the next call)."""
        if self._cron is None or self._stopping or time.monotonic() < self._cron.next_at:
            return
        tick = await self._cron.tick(self._session.rows, bool(self._slots.held))
        if tick is None:
            self.stats.cron_failures += 1
            return
        self.last_tick = tick
        self.stats.cron_ticks += 1
        self.stats.cron_enqueued += tick.enqueued
        if tick.enqueued:
            self._next_claim = time.monotonic()  # its jobs are due

    def _free(self) -> int:
        return self._slots.free()

    def _claim_due(self, now: float, outcomes: bool = False) -> bool:
        return not self._stopping and self._free() > 0 and (
            now >= self._next_claim or outcomes and self._got_jobs)

    async def _exchange(self, now: float) -> None:
        """Records the queued outcomes, and claims when due, in one call."""
        outs, self._slots.outcomes = self._slots.outcomes, []
        try:
            if self._claim_due(now, bool(outs)):
                n, wakes = self._free(), self._wakes
                recorded, jobs, wait_ms = await self._session.record_claim(
                    outs, self.owner, list(self.handlers), self.queues, n, self.lease_ms)
                self._recorded(outs, recorded)
                self._claimed(jobs, n, wakes, wait_ms)
            else:
                self._recorded(outs, await self._session.record(outs))
        except BaseException:
            for o in outs:
                o.resent = True
            self._slots.outcomes = outs + self._slots.outcomes
            raise

    def _recorded(self, outs: List[Outcome], recorded: List[int]) -> None:
        accepted = set(recorded)
        for o in outs:
            self._slots.forget(o.id, o.fencing)
            if o.id in accepted:
                if o.outcome == "ok":
                    self.stats.completed += 1
                else:
                    self.stats.failed += 1
            elif o.in_tx:  # refused: the handler's transaction completed the job
                self.stats.completed += 1
            elif not o.resent:
                self.stats.fenced += 1
                log.warning("skiplock worker: the outcome of job %d (token %d) was refused: "
                            "its claim had been lost", o.id, o.fencing)

    def _claimed(self, jobs: List[Job], asked: int, wakes: int, wait_ms: Optional[int]) -> None:
        """wait_ms: the claim's wait hint (a limit held due jobs back and may
        have room again then): claim again at that time, not the idle poll's."""
        now = time.monotonic()
        self._got_jobs = bool(jobs)
        if jobs and self._cron is not None:
            self._cron.busy()
        if len(jobs) < asked and wakes == self._wakes:  # no NOTIFY came meanwhile
            poll = self.poll_interval * random.uniform(0.5, 1.0)
            if wait_ms is not None:
                poll = min(poll, wait_ms / 1000 + random.uniform(0, 0.02))
            self._next_claim = now + poll
        else:
            self._next_claim = now
        for job in jobs:
            self.stats.claimed += 1
            self._slots.launch(job)

    async def _heartbeat(self) -> None:
        self._next_heartbeat = time.monotonic() + self.lease_ms / 3000
        held = list(self._slots.held.values())
        if not held:
            return
        rows = await self._session.heartbeat([h.job.id for h in held],
                                             [h.job.fencing for h in held], self.lease_ms,
                                             [h.job.queue for h in held])
        for (job_id, extended), h in zip(rows, held):
            # A job its handler completed in its own transaction is gone: not lost.
            if (not extended and self._slots.held.get(job_id) is h
                    and not h.ctx.completed_in_tx):
                self._slots.lose(h)

    def _poke(self) -> None:
        self._wake.set()

    # ---- waiting ----

    def _notified(self, notification: bool) -> None:
        """A notification, or a (re)LISTEN (whatever changed meanwhile sent
        nothing we saw; the first one at start follows the start's tick)."""
        if self._cron is not None and (notification or self._listens > 0):
            self._cron.hint()  # a schedule may have changed
        if not notification:
            self._listens += 1
        self._wakes += 1
        self._next_claim = time.monotonic()
        self._wake.set()

    def _next_deadline(self) -> float:
        t = min(self._next_heartbeat, self._next_rescue if not self._stopping else float("inf"))
        if not self._stopping and self._free() > 0:
            t = min(t, self._next_claim)
        if not self._stopping and self._cron is not None:
            t = min(t, self._cron.next_at)
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
        self._slots.close()
        await self._session.close()
