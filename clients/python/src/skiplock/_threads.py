"""Daemon threads: a fixed pool for sync handlers, and an event loop of its
own for a sync caller's background work (a sync lease's renewals).

concurrent.futures.ThreadPoolExecutor joins its threads at interpreter
exit, so one handler that ignores its cancellation would keep the process
alive after the worker stopped; these threads are daemons and the worker
alone decides how long to wait for them.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, Callable, Coroutine, List, Optional, Tuple, TypeVar

T = TypeVar("T")

_Item = Optional[Tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]]]


class DaemonPool:
    def __init__(self, size: int, name: str):
        self._q: "queue.SimpleQueue[_Item]" = queue.SimpleQueue()
        self._threads: List[threading.Thread] = []
        for i in range(size):
            t = threading.Thread(target=self._run, name=f"{name}-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def submit(self, fn: Callable[[], Any]) -> "asyncio.Future[Any]":
        """Run fn() on a pool thread; a future of the running loop."""
        loop = asyncio.get_running_loop()
        fut: "asyncio.Future[Any]" = loop.create_future()
        self._q.put((loop, fut, fn))
        return fut

    def close(self) -> None:
        """Threads exit once their current call returns."""
        for _ in self._threads:
            self._q.put(None)

    def _run(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            loop, fut, fn = item
            try:
                res, exc = fn(), None
            except BaseException as e:  # noqa: B902 - handed to the loop as is
                res, exc = None, e
            try:
                loop.call_soon_threadsafe(_settle, fut, res, exc)
            except RuntimeError:
                pass  # the loop is closed: nobody waits for this result


def _settle(fut: "asyncio.Future[Any]", res: Any, exc: Optional[BaseException]) -> None:
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(res)


class LoopThread:
    """An event loop running in a daemon thread until close()."""

    def __init__(self, name: str):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs coro on the loop; blocks for its result (or raises its error)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()
