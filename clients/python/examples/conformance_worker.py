"""The worker of the conformance suite (tests/conformance/README.md): the six
conf.* kinds, sync handlers for the outcome kinds and async ones for the
sleeping kinds, so both paths are checked.  Configured by the suite's
CONFORMANCE_* variables (PREFETCH, default 0, sets the worker's prefetch,
to run the suite with prefetched jobs); runs until SIGTERM, then drains.

    DATABASE_URL=... CONFORMANCE_OWNER=w1 python3 conformance_worker.py
"""

import asyncio
import logging
import os
import re

import psycopg
from psycopg.types.json import Jsonb

import skiplock

URL = os.environ["DATABASE_URL"]
OWNER = os.environ["CONFORMANCE_OWNER"]
EFFECT = "SELECT conformance.effect(%s, %s, %s, %s)"


def result(job):
    return {"kind": job.kind, "attempt": job.attempt}


def effect(job):
    """The fenced effect on a connection of its own; SK001 fails the attempt."""
    with psycopg.connect(URL, prepare_threshold=None) as conn:
        conn.execute(EFFECT, [job.id, job.fencing, OWNER, Jsonb(job.payload)])
    return result(job)


async def effect_async(job):
    async with await psycopg.AsyncConnection.connect(URL, prepare_threshold=None) as conn:
        await conn.execute(EFFECT, [job.id, job.fencing, OWNER, Jsonb(job.payload)])
    return result(job)


def ok(job, ctx):
    return effect(job)


def retry(job, ctx):
    if job.attempt >= int(job.payload["until"]):
        return effect(job)
    raise skiplock.Retry(f"conf.retry attempt {job.attempt}")


def fail(job, ctx):
    raise RuntimeError(f"conf.fail attempt {job.attempt}")


def discard(job, ctx):
    raise skiplock.Discard(f"conf.discard attempt {job.attempt}")


async def sleep(job, ctx):
    await asyncio.sleep(int(job.payload["ms"]) / 1000)
    return await effect_async(job)


async def hang(job, ctx):
    """Attempt 1 is always overtaken in the suite: it must change nothing."""
    if job.attempt > 1:
        return await effect_async(job)
    await asyncio.sleep(int(job.payload["ms"]) / 1000)
    return result(job)


def seconds(text):
    """'2s', '500ms' or '2' as seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)?", text)
    if not m:
        raise SystemExit(f"conformance_worker: bad duration {text!r}")
    return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    worker = skiplock.Worker(
        URL,
        {"conf.ok": ok, "conf.retry": retry, "conf.fail": fail, "conf.discard": discard,
         "conf.sleep": sleep, "conf.hang": hang},
        owner=OWNER,
        concurrency=int(os.environ.get("CONFORMANCE_CONCURRENCY", "4")),
        prefetch=int(os.environ.get("PREFETCH", "0")),
        lease=seconds(os.environ.get("CONFORMANCE_LEASE", "2s")),
        poll_interval=0.2, rescue_interval=0.25, shutdown_timeout=20,
        # as the C adapters: no cron unless cron_languages.sh asks (CONFORMANCE_CRON=1)
        cron=os.environ.get("CONFORMANCE_CRON") == "1")
    worker.run_forever()
    logging.info("stopped: %s", worker.stats)


if __name__ == "__main__":
    main()
