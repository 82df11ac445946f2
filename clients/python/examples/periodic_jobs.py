"""Periodic jobs (docs/clients/python.md, "Periodic jobs"): run this on
every replica.  The schedules are declared in code and applied when the
worker starts; every replica's worker fires them, and each fire time
becomes exactly one job, however many replicas are up (the database
decides the fire times).

    DATABASE_URL=... python3 periodic_jobs.py     (SIGTERM or SIGINT stops it)

Its table comes from the application's migrations (the test that runs it
creates it):

    CREATE TABLE sessions (id bigserial PRIMARY KEY, expires_at timestamptz NOT NULL);
"""

import asyncio
import os
import signal

import psycopg

import skiplock

DATABASE_URL = os.environ["DATABASE_URL"]

SCHEDULES: "list[skiplock.Schedule]" = [
    # 02:30 in Berlin, whatever the servers' zone; once a day across DST changes
    {"name": "sessions-cleanup", "expression": "30 2 * * *", "zone": "Europe/Berlin",
     "kind": "sessions.cleanup", "payload": {"grace_days": 7}},
    # every 2 s; after an outage, no catch-up of the missed ones
    {"name": "heartbeat", "expression": "@every 2s", "kind": "heartbeat", "catch_up": "none"},
]


async def cleanup_sessions(job, ctx):
    async with await psycopg.AsyncConnection.connect(DATABASE_URL, prepare_threshold=None) as c:
        cur = await c.execute("DELETE FROM sessions WHERE expires_at < now() - make_interval("
                              "days => %s)", [job.payload["grace_days"]])
        return {"deleted": cur.rowcount}


def heartbeat(job, ctx):
    # job.run_at is the fire time
    print(f"heartbeat for {job.run_at.isoformat()} by {os.getpid()}", flush=True)


async def main():
    worker = skiplock.Worker(DATABASE_URL, {"sessions.cleanup": cleanup_sessions,
                                            "heartbeat": heartbeat},
                             schedules=SCHEDULES)
    await worker.start()  # a bad schedule raises here, with the database's message
    print("up: firing sessions-cleanup and heartbeat", flush=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await worker.stop()  # waits for running handlers


if __name__ == "__main__":
    asyncio.run(main())
