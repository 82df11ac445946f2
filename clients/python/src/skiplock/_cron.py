"""Periodic jobs: the worker's share of firing the fleet's schedules
(docs/cron.md; schema step 0024).

One autocommit statement, skiplock.cron_tick(), fires every due schedule
once for the fleet (each due row locked SKIP LOCKED, moved on, its jobs
enqueued under the unique key cron:NAME:<fire time>), so any number of
workers may tick at once.  The database decides the fire times and
answers when the earliest schedule is next due (next_due) on its own clock
(db_now): the wait is next_due - db_now, never judged by the local clock.

When the next tick comes, as the C worker (worker_loop.c, cron_tick):
  - at least MIN_S after the last one;
  - a busy worker (jobs in hand): when the earliest schedule is due, at
    most BUSY_MAX_S later (a schedule added meanwhile is seen within it);
  - an idle one: when the earliest schedule is due, at most IDLE_MAX_S
    later (12 ticks an hour when nothing is due), or earlier when a
    notification on skiplock_jobs says a schedule (or a job) changed;
  - plus a little jitter, so a fleet started at once spreads out;
  - after a failure: 1 s doubling to 5 s.  A failed tick, or a tick whose
    answer names schedules it could not evaluate, is logged at most once a
    minute and never stops the worker.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
from typing import Any, Awaitable, Callable, List, NamedTuple, Optional, Sequence, Tuple

from .errors import SkiplockError

MIN_S = 1.0
BUSY_MAX_S = 5.0
IDLE_MAX_S = 300.0
JITTER_S = 0.25
FAIL_MAX_S = 5.0
WARN_EVERY_S = 60.0

TICK_SQL = ("SELECT due, fired, behind, enqueued, failed, failure, next_due, db_now "
            "FROM skiplock.cron_tick()")

# A statement run on the worker's connection: its rows (errors typed).
Rows = Callable[[str, Sequence[Any]], Awaitable[List[Tuple[Any, ...]]]]


class CronTick(NamedTuple):
    """One tick's answer: schedules due, fired and behind, jobs enqueued,
    schedules that could not be evaluated (failed, and the first failure),
    the earliest next fire time (None: none) and the database's now."""

    due: int
    fired: int
    behind: int
    enqueued: int
    failed: int
    failure: Optional[str]
    next_due: Optional[dt.datetime]
    db_now: dt.datetime

    @property
    def due_in(self) -> Optional[float]:
        """Seconds until the earliest schedule is due, by the database's clock."""
        if self.next_due is None:
            return None
        return (self.next_due - self.db_now).total_seconds()


def tick_delay(due_in: Optional[float], busy: bool,
               rand: Callable[[], float] = random.random) -> float:
    """Seconds from one tick to the next: due_in (None: no schedule fires
    again) clamped to [MIN_S, cap] (cap: BUSY_MAX_S when busy, else
    IDLE_MAX_S), plus up to JITTER_S (a quarter of it at most) when it waits
    for a fire time, or up to a tenth more when it waits for the cap, never
    less: a re-check is never more frequent than the cap says."""
    cap = BUSY_MAX_S if busy else IDLE_MAX_S
    if due_in is None or due_in >= cap:
        return cap * (1 + rand() / 10)
    base = max(due_in, MIN_S)
    return base + rand() * min(JITTER_S, base / 4)


class Cron:
    """When a worker ticks next, and what it logs.  Times are on
    time.monotonic(); next_at 0 ticks at once."""

    def __init__(self, log: logging.Logger):
        self.log = log
        self.next_at = 0.0
        self._last_at = -float("inf")
        self._failures = 0
        self._warned_at = -float("inf")

    def hint(self) -> None:
        """A notification: a schedule (or a job) changed; tick soon."""
        at = max(time.monotonic(), self._last_at + MIN_S) + random.random() * JITTER_S
        self.next_at = min(self.next_at, at)

    def busy(self) -> None:
        """Jobs are in hand: tick within BUSY_MAX_S of the last tick."""
        self.next_at = min(self.next_at, self._last_at + BUSY_MAX_S)

    async def tick(self, rows: Rows, busy: bool) -> Optional[CronTick]:
        """Fires the due schedules; the answer, or None when the tick failed
        (logged at most once a minute, retried 1 s doubling to 5 s later)."""
        self._last_at = time.monotonic()
        try:
            r = CronTick(*(await rows(TICK_SQL, ()))[0])
        except SkiplockError as e:
            self._failures += 1
            self.next_at = self._last_at + min(MIN_S * 2 ** min(self._failures - 1, 10),
                                               FAIL_MAX_S)
            self._warn("the tick failed: %s", e)
            return None
        self._failures = 0
        self.next_at = self._last_at + tick_delay(r.due_in, busy)
        if r.failed > 0:
            self._warn("%d schedule(s) could not be evaluated; %s", r.failed, r.failure)
        return r

    def _warn(self, fmt: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._warned_at < WARN_EVERY_S:
            return
        self._warned_at = now
        self.log.warning("skiplock worker: cron: " + fmt, *args)
