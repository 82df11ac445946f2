"""One replica of the singleton tests (test_singleton.py): waits for the
lease NAME and, while it holds it, writes a fenced tick every 0.1 s into
public.t_ticks until the lease is lost or the process is killed.

    python3 singleton_replica.py URL NAME TTL

Prints "running TOKEN" when it starts, "fenced" when a tick was refused,
"lost: REASON" when the lease was lost; exits 3 then.
"""

import asyncio
import os
import sys

import psycopg

import skiplock

URL, NAME, TTL = sys.argv[1], sys.argv[2], float(sys.argv[3])


async def ticks(lease: skiplock.Lease) -> None:
    print(f"running {lease.fencing}", flush=True)
    async with await psycopg.AsyncConnection.connect(URL, prepare_threshold=None) as conn:
        while True:
            try:
                async with conn.transaction():
                    await lease.fence(conn)
                    await conn.execute("INSERT INTO public.t_ticks (fencing, pid, at) "
                                       "VALUES (%s, %s, clock_timestamp())",
                                       [lease.fencing, os.getpid()])
            except skiplock.FencedError:
                print("fenced", flush=True)
                raise
            await asyncio.sleep(0.1)


async def main() -> int:
    try:
        await skiplock.run_singleton(URL, NAME, ticks, ttl=TTL, wait=True)
    except (skiplock.LeaseLostError, skiplock.FencedError) as e:
        print(f"lost: {e}", flush=True)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
