"""One worker process of the fault tests (test_exactly_once_faults.py).

    python3 fault_worker.py URL KIND PATTERN OWNER [crash]

Runs a skiplock.Worker for KIND until SIGTERM.  Its handler applies the
job's effect (one more application of the job in public.ledger) on a
connection of its own thread, with PATTERN:

  in_tx   the effect and ctx.complete(conn) in one transaction: the worker
          records nothing more (exactly one effect)
  fence   ctx.fence(conn) first in the effect's transaction, the outcome
          recorded by the worker afterwards (at most one effect per claim)

With "crash", the first attempt of each job kills this process (SIGKILL)
right after its effect's COMMIT, before anything else happens.
"""

import signal

# A SIGTERM before the worker runs (the test may stop it at once) stops it
# as soon as it does.
EARLY_STOP = []
signal.signal(signal.SIGTERM, lambda *_: EARLY_STOP.append(True))

import asyncio  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402

import psycopg  # noqa: E402

import skiplock  # noqa: E402

URL, KIND, PATTERN, OWNER = sys.argv[1:5]
CRASH = sys.argv[5:] == ["crash"]
EFFECT = ("INSERT INTO public.ledger (job_id, n) VALUES (%s, 1) "
          "ON CONFLICT (job_id) DO UPDATE SET n = ledger.n + 1")
_local = threading.local()


def conn():
    c = getattr(_local, "conn", None)
    if c is None or c.closed or c.broken:
        c = _local.conn = psycopg.connect(URL, prepare_threshold=None, connect_timeout=5)
    return c


def handler(job, ctx):
    c = conn()
    try:
        with c.transaction():
            if PATTERN == "fence":
                ctx.fence(c)
            c.execute(EFFECT, [job.id])
            if PATTERN == "in_tx":
                ctx.complete(c, {"owner": OWNER})
    except BaseException:
        if c.broken or c.closed:
            _local.conn = None
        raise
    if CRASH and job.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"owner": OWNER}


def main():
    logging.basicConfig(level=logging.WARNING, format=f"{OWNER} %(levelname)s %(message)s")
    w = skiplock.Worker(URL, {KIND: handler}, concurrency=8, lease=2.0, owner=OWNER,
                        poll_interval=0.1, rescue_interval=0.3, shutdown_timeout=10)

    async def body():
        for attempt in range(50):  # its connection may be terminated while it starts
            try:
                await w.start()
                break
            except skiplock.TransientError as e:
                logging.warning("start: %s; again", e)
                await asyncio.sleep(0.2)
        print(f"{OWNER} ready", flush=True)
        asyncio.get_running_loop().add_signal_handler(
            signal.SIGTERM, lambda: asyncio.ensure_future(w.stop()))
        if EARLY_STOP:
            await w.stop()
        await w.wait()

    asyncio.run(body())
    print(f"{OWNER}: {w.stats}", flush=True)


if __name__ == "__main__":
    main()
