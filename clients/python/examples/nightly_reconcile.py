"""The nightly reconcile, started from cron on every replica: one of them
runs it, the others return at once (docs/clients/python.md, "Leases and
singletons").  Every write is fenced with the lease's token, so a replica
that lost the lease (paused past its ttl, cut off) writes nothing.

    DATABASE_URL=... python3 nightly_reconcile.py [--wait]

With --wait a replica that finds the lease held keeps polling and takes
over when the holder dies before finishing: the work picks up where the
dead one stopped, and the day's run is marked done once, at the end.
It works on these tables (the test that runs it creates them):

    CREATE TABLE refunds (id bigint PRIMARY KEY, amount bigint NOT NULL,
                          processed_at timestamptz, processed_by bigint);
    CREATE TABLE reconcile_runs (day date PRIMARY KEY, fencing bigint NOT NULL,
                                 refunds int NOT NULL);
"""

import asyncio
import os
import sys

import psycopg

import skiplock

URL = os.environ["DATABASE_URL"]
BATCH = 50


async def reconcile(lease: skiplock.Lease) -> int:
    """Processes the day's refunds in fenced batches; how many it processed
    (-1: the day's run was done already)."""
    async with await psycopg.AsyncConnection.connect(URL, prepare_threshold=None) as conn:
        cur = await conn.execute("SELECT 1 FROM reconcile_runs WHERE day = current_date")
        if await cur.fetchone():
            await conn.rollback()
            return -1
        await conn.rollback()
        done = 0
        while True:
            async with conn.transaction():
                await lease.fence(conn)  # SK001, and nothing below commits, once it is not ours
                cur = await conn.execute(
                    "UPDATE refunds SET processed_at = now(), processed_by = %s "
                    "WHERE id IN (SELECT id FROM refunds WHERE processed_at IS NULL "
                    "             ORDER BY id LIMIT %s FOR UPDATE) RETURNING id",
                    [lease.fencing, BATCH])
                n = len(await cur.fetchall())
                if n == 0:
                    await conn.execute("INSERT INTO reconcile_runs (day, fencing, refunds) "
                                       "VALUES (current_date, %s, %s)", [lease.fencing, done])
                    return done
            done += n


async def main() -> int:
    result = await skiplock.run_singleton(URL, "nightly-reconcile", reconcile, ttl=30,
                                          wait="--wait" in sys.argv[1:])
    if result.ran and result.value == -1:
        print("skipped: today's run is done", flush=True)
    elif result.ran:
        print(f"reconciled {result.value} refunds under token {result.fencing}", flush=True)
    else:
        print(f"skipped: held by {result.holder}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
