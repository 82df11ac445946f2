"""A first job: enqueued in the app's transaction, completed by a worker."""
import os
import sys
import threading
from typing import Any, Dict

import psycopg

import skiplock

URL = os.environ["DATABASE_URL"]
handled = threading.Event()


def greet(job: skiplock.Job, ctx: skiplock.JobContext) -> Dict[str, Any]:
    handled.set()
    return {"greeted": job.payload["name"]}


with psycopg.connect(URL, prepare_threshold=None) as conn:
    with conn.transaction():
        job_id = skiplock.enqueue(conn, "greet", {"name": "a new user"})

worker = skiplock.Worker(URL, {"greet": greet}, concurrency=1, poll_interval=0.1)
worker.start_thread()
ran = handled.wait(30)
worker.stop_thread(timeout=10)
print(f"job {job_id} {'handled' if ran else 'not handled'}")
sys.exit(0 if ran else 1)
