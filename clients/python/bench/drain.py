"""Drain and latency bench of the Python worker.

    DATABASE_URL=... N=100000 CONCURRENCY=64 PREFETCH=PF python3 bench/drain.py
    DATABASE_URL=... LATENCY=1 python3 bench/drain.py

Drain: deletes the bench's kind, enqueues N no-op jobs (one INSERT ... SELECT
through skiplock.enqueue per 5,000), then runs a Worker of CONCURRENCY (and prefetch PREFETCH) with a
no-op handler (HANDLER=async, the default, or sync: the thread pool) until
all N are completed, checked in SQL.  Prints one JSON line: jobs_per_s (N over
the time from just before start() to the last completion), rss_kib (the
process's peak RSS, VmHWM), concurrency.

Latency: the worker idles; another process enqueues 500 jobs/s for 10 s, each
with its enqueue time; the handler notes when it starts.  Prints p50 and p99
of enqueue -> handler start in ms.  Direct URLs wake the worker with NOTIFY;
through a pooler (without DIRECT_DATABASE_URL) it is the idle poll.
"""

import asyncio
import json
import os
import sys
import subprocess
import time

import psycopg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))
import skiplock  # noqa: E402

URL = os.environ["DATABASE_URL"]
KIND = "bench.noop"
PREFETCH = 64


def rss_kib(field="VmHWM"):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def enqueue_bulk(n, batch=5000):
    with psycopg.connect(URL, autocommit=True, prepare_threshold=None) as conn:
        conn.execute("DELETE FROM skiplock.jobs WHERE kind = %s", [KIND])
        left = n
        while left > 0:
            k = min(batch, left)
            conn.execute("SELECT count(skiplock.enqueue(%s::text)) FROM generate_series(1, %s)",
                         [KIND, k])
            left -= k
        conn.execute("VACUUM ANALYZE skiplock.jobs")
        conn.execute("CHECKPOINT")  # as bench/drain.c: every drain starts alike


def completed(n):
    with psycopg.connect(URL, autocommit=True, prepare_threshold=None) as conn:
        return conn.execute("SELECT count(*) FROM skiplock.all_jobs WHERE kind = %s AND "
                            "state = 'completed'", [KIND]).fetchone()[0] == n


async def drain(n, concurrency, prefetch, sync):
    if sync:
        def handler(job, ctx):
            return None
    else:
        async def handler(job, ctx):
            return None
    w = skiplock.Worker(URL, {KIND: handler}, concurrency=concurrency,
                        prefetch=prefetch, poll_interval=0.05)
    t0 = time.monotonic()
    await w.start()
    while w.stats.completed < n:
        await asyncio.sleep(0.01)
    seconds = time.monotonic() - t0
    await w.stop()
    return n / seconds


def run_drain():
    n = int(os.environ.get("N", "100000"))
    concurrency = int(os.environ.get("CONCURRENCY", "64"))
    prefetch = int(os.environ.get("PREFETCH", str(PREFETCH)))
    sync = os.environ.get("HANDLER", "async") == "sync"
    enqueue_bulk(n)
    rate = asyncio.run(drain(n, concurrency, prefetch, sync))
    if not completed(n):
        raise SystemExit("drain: not every job was completed")
    print(json.dumps({"jobs_per_s": round(rate), "rss_kib": rss_kib(),
                      "concurrency": concurrency, "prefetch": prefetch, "n": n,
                      "handler": "sync" if sync else "async"}))


def producer(rate, seconds):
    """Enqueues `rate` jobs a second for `seconds` (its own process, so that
    it does not compete with the worker for the interpreter)."""
    with psycopg.connect(URL, autocommit=True, prepare_threshold=None) as conn:
        t0 = time.monotonic()
        for i in range(int(rate * seconds)):
            delay = t0 + i / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            skiplock.enqueue(conn, KIND, {"t": time.time()})


async def latency(rate=500, seconds=10):
    samples = []

    async def handler(job, ctx):
        samples.append((time.time() - job.payload["t"]) * 1000)

    enqueue_bulk(0)
    w = skiplock.Worker(URL, {KIND: handler}, concurrency=64)
    await w.start()
    await asyncio.sleep(0.5)  # LISTEN is up
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__)],
                             env={**os.environ, "LATENCY": "producer"})
    while child.poll() is None or len(samples) < int(rate * seconds):
        if child.poll() not in (None, 0):
            raise SystemExit("latency: the producer failed")
        await asyncio.sleep(0.05)
    await w.stop()
    samples.sort()
    pick = lambda q: round(samples[min(len(samples) - 1, int(q * len(samples)))], 2)  # noqa: E731
    return {"latency_p50_ms": pick(0.50), "latency_p99_ms": pick(0.99), "jobs": len(samples),
            "listening": w._listener is not None}


if __name__ == "__main__":
    if os.environ.get("LATENCY") == "producer":
        producer(500, 10)
    elif os.environ.get("LATENCY") == "1":
        print(json.dumps(asyncio.run(latency())))
    else:
        run_drain()
