"""Wake-ups from NOTIFY on channel skiplock_jobs, on a direct connection only.

A connection of its own carries the LISTEN and nothing else: to the worker's
URL when that one is known to be direct, else to the direct endpoint
(`direct_url`, $DIRECT_DATABASE_URL) when one is given and checks out as
direct too.  Every (re)LISTEN wakes the worker once, since whatever was
enqueued while it was down sent no notification we saw: wake(False), and
wake(True) for each notification.  When the listener
is down the worker polls; it tries again every RETRY_S seconds.  Polling
always works: notifications only lower the latency.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Dict

import psycopg

from .pooler import is_direct

CHANNEL = "skiplock_jobs"
RETRY_S = 30.0


class Listener:
    def __init__(self, url: str, pooler: str, connect_kwargs: Dict[str, Any],
                 wake: Callable[[bool], None], log: logging.Logger):
        self.url = url
        self.pooler = pooler
        self.connect_kwargs = connect_kwargs
        self.wake = wake
        self.log = log
        self.listening = False
        self.given_up = False

    async def run(self) -> None:
        """Until cancelled, or until the endpoint proves not to be direct."""
        while True:
            try:
                await self._listen_once()
            except asyncio.CancelledError:
                raise
            except psycopg.Error as e:
                self.log.warning("LISTEN connection: %s; polling (next try in %d s)",
                                 str(e).strip().splitlines()[0] if str(e).strip() else e,
                                 RETRY_S)
            self.listening = False
            if self.given_up:
                return
            await asyncio.sleep(RETRY_S)

    async def _listen_once(self) -> None:
        conn = await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, prepare_threshold=None, **self.connect_kwargs)
        try:
            if not await is_direct(conn, self.url, self.pooler):
                self.log.info("the server's port is not the URL's (a pooler or a port "
                              "mapping): polling without LISTEN; pooler='none' to listen anyway")
                self.given_up = True
                return
            await conn.execute("LISTEN " + CHANNEL)
            self.listening = True
            self.log.debug("listening on channel %s", CHANNEL)
            self.wake(False)
            async for _ in conn.notifies():
                self.wake(True)
        finally:
            self.listening = False
            await conn.close()
